package badger

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"
)

// Open gives back the value-log space of deleted values (reclaim): 25 MiB
// written in 4 MiB value-log files and deleted leave at most two files
// after a reopen, and the value kept reads back byte for byte.
func TestReclaimOnOpen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, NoSync: true, ValueLogFileSize: 4 << 20}
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("memosrt!"), (MaxValueThreshold+256<<10)/8) // 1.25 MiB: in the value log
	for i := range 20 {
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "k%d", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 19 { // k19 stays
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Delete(fmt.Appendf(nil, "k%d", i)) }); err != nil {
			t.Fatal(err)
		}
	}
	vlogs := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
		return len(m)
	}
	before := vlogs()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if after := vlogs(); before < 6 || after > 2 {
		t.Fatalf("value-log files: %d before the reopen, %d after (want >= 6, then <= 2)", before, after)
	}
	checkKept(t, d, val)
	if _, err := d.Badger().NewTransaction(false).Get([]byte("k0")); err != bg.ErrKeyNotFound {
		t.Fatalf("k0: %v, want deleted", err)
	}
}

// Reclaim gives the space back while the directory stays open. 25 MiB
// written and compacted (a reopen), then deleted, and small values (kept
// in the LSM tree) written until the memtable holding the deletes is
// flushed, as a serving directory's is: GC alone rewrites nothing (no
// compaction counted the deletes), Reclaim (which flattens the tree
// first) leaves at most three value-log files, and the kept value reads
// back byte for byte.
func TestReclaimWhileOpen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, NoSync: true, ValueLogFileSize: 4 << 20}
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("memosrt!"), (MaxValueThreshold+256<<10)/8)
	for i := range 20 {
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "k%d", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	if d, err = Open(opts); err != nil { // the values now sit below L0
		t.Fatal(err)
	}
	defer d.Close()
	for i := range 19 {
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Delete(fmt.Appendf(nil, "k%d", i)) }); err != nil {
			t.Fatal(err)
		}
	}
	small := bytes.Repeat([]byte("x"), 512) // under the value threshold: in the LSM tree
	wb := d.Badger().NewWriteBatch()
	for i := range 48 << 10 { // 24 MiB: more than the 16 MiB memtable
		if err := wb.Set(fmt.Appendf(nil, "s%d", i), small); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		l0 := 0
		for _, ti := range d.Badger().Tables() {
			if ti.Level == 0 {
				l0++
			}
		}
		if l0 > 0 {
			break // the deletes are flushed
		}
		if time.Now().After(deadline) {
			t.Fatal("the memtable was never flushed")
		}
	}
	vlogs := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
		return len(m)
	}
	before := vlogs()
	if n, err := d.GC(); err != nil || n != 0 {
		t.Fatalf("GC alone: %d rewritten, %v (want 0: nothing counted yet)", n, err)
	}
	n, err := d.Reclaim()
	if err != nil {
		t.Fatal(err)
	}
	if after := vlogs(); before < 6 || n == 0 || after > 3 {
		t.Fatalf("value-log files: %d before, %d after Reclaim (%d rewritten); want >= 6, then <= 3", before, after, n)
	}
	checkKept(t, d, val)
}

// checkKept fails t unless k19, the value the reclaim tests keep, reads
// back as val byte for byte.
func checkKept(t *testing.T, d *DB, val []byte) {
	t.Helper()
	err := d.Badger().View(func(tx *bg.Txn) error {
		it, err := tx.Get([]byte("k19"))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if !bytes.Equal(v, val) {
				return fmt.Errorf("k19 changed: %d bytes", len(v))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
