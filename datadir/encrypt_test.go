package datadir

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
	"github.com/memosrt/memosrt/internal/testutil"
)

// secret is written in a small value (kept in the LSM tree and the
// write-ahead memtable file) and a large one (value log).
const secret = "Alice's locker code is 48151623"

func writeSecret(t *testing.T, db *DB) {
	t.Helper()
	err := db.Badger().Update(func(txn *bg.Txn) error {
		if err := txn.Set([]byte("small/"+secret), []byte(secret)); err != nil {
			return err
		}
		return txn.Set([]byte("large"), []byte(strings.Repeat(secret+" ", 200)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func key(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// TestEncryptionAtRest writes a secret with and without a key and greps
// every file of the directory, while open (write-ahead files) and after
// Close (tables, value log). The plain directory is the control showing
// that the grep finds what is there.
func TestEncryptionAtRest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       []byte
		plaintext bool
	}{
		{"plain", nil, true},
		{"aes-128", key(16, 1), false},
		{"aes-192", key(24, 2), false},
		{"aes-256", key(32, 3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := Open(Options{Dir: dir, EncryptionKey: tc.key})
			if err != nil {
				t.Fatal(err)
			}
			writeSecret(t, db)
			open := testutil.FilesContaining(t, dir, secret)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			closed := testutil.FilesContaining(t, dir, secret)
			if tc.plaintext {
				if len(open) == 0 || len(closed) == 0 {
					t.Fatalf("control: plaintext not found in a plain directory (open %v, closed %v)", open, closed)
				}
				return
			}
			if len(open) != 0 || len(closed) != 0 {
				t.Fatalf("plaintext in encrypted directory: open %v, closed %v", open, closed)
			}
			db, err = Open(Options{Dir: dir, EncryptionKey: tc.key})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Badger().View(func(txn *bg.Txn) error {
				item, err := txn.Get([]byte("small/" + secret))
				if err != nil {
					return err
				}
				v, err := item.ValueCopy(nil)
				if err != nil || string(v) != secret {
					t.Errorf("small value %q, %v", v, err)
				}
				item, err = txn.Get([]byte("large"))
				if err != nil {
					return err
				}
				v, err = item.ValueCopy(nil)
				if err != nil || string(v) != strings.Repeat(secret+" ", 200) {
					t.Errorf("large value: %d bytes, %v", len(v), err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEncryptionKeyErrors opens directories with the wrong key, no key, a
// key on a plain directory and a key of a bad length: each fails with a
// clear error before anything is read, and the right key still opens the
// directory afterwards (the failed Open released its lock).
func TestEncryptionKeyErrors(t *testing.T) {
	good := key(32, 7)
	encrypted := t.TempDir()
	plain := t.TempDir()
	for _, c := range []struct {
		dir string
		key []byte
	}{{encrypted, good}, {plain, nil}} {
		db, err := Open(Options{Dir: c.dir, EncryptionKey: c.key})
		if err != nil {
			t.Fatal(err)
		}
		writeSecret(t, db)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		dir  string
		key  []byte
		want error
		msg  string
	}{
		{"wrong-key", encrypted, key(32, 8), ErrEncryptionKey, "not the one it was created with"},
		{"wrong-length-key", encrypted, key(16, 7), ErrEncryptionKey, "16-byte key"},
		{"no-key", encrypted, nil, ErrEncryptionKey, "encrypted and no key was given"},
		{"key-on-plain", plain, good, ErrEncryptionKey, "or it is not encrypted"},
		{"bad-length", encrypted, key(20, 7), nil, "encryption key is 20 bytes, want 16, 24 or 32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(Options{Dir: tc.dir, EncryptionKey: tc.key})
			if err == nil {
				db.Close()
				t.Fatal("opened")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.msg)
			}
		})
	}
	for _, c := range []struct {
		dir string
		key []byte
	}{{encrypted, good}, {plain, nil}} {
		db, err := Open(Options{Dir: c.dir, EncryptionKey: c.key})
		if err != nil {
			t.Fatalf("reopen %s after failed opens: %v", filepath.Base(c.dir), err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
