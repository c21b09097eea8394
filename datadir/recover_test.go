package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
)

// TestOpenAfterCrashLeftEmptyLogs: a SIGKILL between Badger creating a value
// log or memtable file and writing its header leaves a 0-byte file, which
// Badger v4.9.6 cannot open past (dgraph-io/badger#2207; the crash harness
// hit it at cycle 73 of 100). Open removes such files and the data stays.
func TestOpenAfterCrashLeftEmptyLogs(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	writeSecret(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"000099.vlog", "00099.mem"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("open after a crash left empty log files: %v", err)
	}
	defer db.Close()
	err = db.Badger().View(func(txn *bg.Txn) error {
		it, err := txn.Get([]byte("large"))
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		if err == nil && string(v) != strings.Repeat(secret+" ", 200) {
			t.Errorf("value changed: %.40q", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// a directory another process holds is left alone: Badger's own lock
	// error is returned and its files are untouched
	empty := filepath.Join(dir, "000123.vlog")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); err == nil {
		t.Fatal("second open of a held directory succeeded")
	}
	if _, err := os.Stat(empty); err != nil {
		t.Fatalf("file of a held directory removed: %v", err)
	}
	os.Remove(empty)
}
