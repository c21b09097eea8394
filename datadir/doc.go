// Package datadir opens the one Badger v4 database that a memosrt data
// directory holds and fixes its key layout, so that every tier stores into
// the same transactional store.
//
// Key layout (byte prefixes, one per owner package):
//
//	t/<cube>/...   text tier (package textmem)
//	k/...          activation tier: KV pack blobs and their index (package kvcache)
//	g/...          calibration decisions of lossy settings (package kvgate)
//	s/...          scheduler state (package scheduler)
//	l/...          LoRA registry (package lora)
//	m/...          database metadata (format version)
//
// Free space: Badger writes its memtable log, value log and tables through
// mapped sparse files, and a write into an unallocated page on a full disk
// is a SIGBUS, not an error. So an owner package calls DB.Room before each
// commit it makes. Room refuses with ErrNoSpace unless the free space
// covers the commit plus what Badger may write after it without another
// check (its formula is on DB.need). Open refuses a disk too full to open,
// and GC and Reclaim skip their rewrites without room. A file written
// beside the directory on its filesystem (a backup) keeps out of that
// reserve through GuardWrites (Reserve). Small commits that
// skip Room (sequence leases, scheduler state, pack deletes) share the
// reserve's 1 MiB margin.
//
// Values of DB.ValueThreshold (32 KiB)
// or more go to the value log, smaller ones stay in the LSM tree, so that
// damage in the value log costs KV pack chunks, and memory records only
// where they are larger than the threshold. Reads verify Badger's value
// and block checksums; Badger itself hides a failed read (an empty value,
// a skipped block), so
// ValueCopy and CheckValue turn the first into ErrDamaged, and Open
// verifies every table (VerifyTables, TableDamage) before it compacts.
// ScanValueLog checks value-log files without opening them (memosrt
// check).
//
// Backup writes one snapshot of the database while writes go on, taken
// between the operations that commit in several transactions and mark
// themselves with HoldBackup (a cube delete), so that a backup holds each
// of them whole or not at all.
//
// A *DB is safe for concurrent use, as Badger's own DB is.
package datadir
