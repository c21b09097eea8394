package badger

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

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
	val := bytes.Repeat([]byte("memosrt!"), 8<<10) // 64 KiB: in the value log
	for i := range 400 {
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "k%d", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 399 { // k399 stays
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
	err = d.Badger().View(func(tx *bg.Txn) error {
		it, err := tx.Get([]byte("k399"))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if !bytes.Equal(v, val) {
				return fmt.Errorf("k399 changed: %d bytes", len(v))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Badger().NewTransaction(false).Get([]byte("k0")); err != bg.ErrKeyNotFound {
		t.Fatalf("k0: %v, want deleted", err)
	}
}
