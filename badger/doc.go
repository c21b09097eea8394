// Package badger opens the one Badger v4 database that a memosrt data
// directory holds and fixes its key layout, so that every tier stores into
// the same transactional store.
//
// Key layout (byte prefixes, one per owner package):
//
//	t/<cube>/...   text tier (package textmem)
//	k/...          activation tier: KV pack blobs and their index (package kvcache)
//	s/...          scheduler state (package scheduler)
//	l/...          LoRA registry (package lora)
//	m/...          database metadata (format version)
//
// Values of ValueThreshold (1 MiB) or more go to the value log, smaller
// ones stay in the LSM tree, so that damage in the value log costs KV
// pack chunks only. Reads verify Badger's value and block checksums;
// Badger itself hides a failed read (an empty value, a skipped block), so
// ValueCopy and CheckValue turn the first into ErrDamaged, and Open
// verifies every table (VerifyTables, TableDamage) before it compacts.
// ScanValueLog checks value-log files without opening them (memosrt
// check).
//
// A *DB is safe for concurrent use, as Badger's own DB is.
package badger
