// Package datacheck is memosrt check: it verifies every SST block,
// value-log entry, memory record and KV pack of a data directory that no
// process has open, reports damage by cube (naming the file, the offset
// or key range, the damaged SST block's range from the table's index, and
// what was lost, or would be cut off with the newest value-log file at
// the next open to write), and with Options.Repair deletes what
// is recomputed (damaged packs; a damaged cube's postings, doc records and
// statistics, rebuilt from its texts) and lists the memories that cannot
// be saved. docs/data-directory.md describes the report.
//
// Run is safe to call from one goroutine at a time per directory (it
// opens the directory's Badger database, which locks it).
package datacheck
