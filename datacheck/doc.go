// Package datacheck is memosrt check: it verifies every SST block,
// value-log entry, memory record and KV pack of a data directory that no
// process has open, reports damage by cube (naming the file, the offset
// or key range, and what was lost), and with Options.Repair deletes what
// is recomputed (damaged packs; a damaged cube's postings, doc records and
// statistics, rebuilt from its texts) and lists the memories that cannot
// be saved. docs/data-directory.md describes the report.
//
// Run is safe to call from one goroutine at a time per directory (it
// opens the directory's Badger database, which locks it).
package datacheck
