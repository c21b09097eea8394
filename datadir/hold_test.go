package datadir

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
)

// pending reports whether a snapshot waits (or is being taken).
func (g *holdGate) isPending() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pending != nil
}

// waitPending yields until a Backup waits at the gate of db; it fails t
// if the Backup returns first (with err, sent on done) instead.
func waitPending(t *testing.T, db *DB, done chan error) {
	t.Helper()
	for !db.holds.isPending() {
		select {
		case err := <-done:
			t.Fatalf("Backup returned (%v) while an operation held", err)
		default:
			runtime.Gosched()
		}
	}
}

// set writes k (value "v:" and k) in a transaction of its own; safe on
// any goroutine.
func set(t *testing.T, db *DB, k string) {
	t.Helper()
	if err := db.Badger().Update(func(txn *bg.Txn) error { return txn.Set([]byte(k), []byte("v:"+k)) }); err != nil {
		t.Error(err)
	}
}

// restored restores the backup in b (made under key k, nil: none) into a
// new directory and returns its keys, sorted.
func restored(t *testing.T, b, k []byte) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.backup")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if _, err := RestoreBackup(context.Background(), path, Options{Dir: dst, NoSync: true, EncryptionKey: k}); err != nil {
		t.Fatal(err)
	}
	got := contents(t, openTest(t, Options{Dir: dst, NoSync: true, EncryptionKey: k}))
	for k, v := range got {
		if string(v) != "v:"+k {
			t.Errorf("restored %s = %q", k, v)
		}
	}
	return slices.Sorted(maps.Keys(got))
}

// TestBackupHold: a Backup called while an operation holds (HoldBackup)
// waits for it to be released and then holds all of it (both of its
// commits, the second made after Backup was called); an operation that
// begins to hold while the Backup waits is not in it at all (its commits
// come after the snapshot), although it began before the Backup returned.
// A Backup whose ctx ends while it waits returns ctx's error and leaves
// the gate as it was: the next hold and Backup go through. Releases are
// idempotent.
func TestBackupHold(t *testing.T) {
	for _, enc := range []bool{false, true} {
		name := "plain"
		o := Options{Dir: t.TempDir(), NoSync: true}
		if enc {
			name, o.EncryptionKey = "encrypted", key(32, 3)
		}
		t.Run(name, func(t *testing.T) {
			db := openTest(t, o)
			ctx := context.Background()
			set(t, db, "before")
			release := db.HoldBackup()
			set(t, db, "op1/a")
			var buf bytes.Buffer
			backupDone := make(chan error, 1)
			go func() {
				_, err := db.Backup(ctx, &buf, BackupOptions{Version: "test"})
				backupDone <- err
			}()
			waitPending(t, db, backupDone)
			op2Done := make(chan struct{})
			go func() {
				defer close(op2Done)
				r := db.HoldBackup()
				defer r()
				set(t, db, "op2/a")
				set(t, db, "op2/b")
			}()
			set(t, db, "op1/b")
			release()
			release() // idempotent: must not release op2's hold
			if err := <-backupDone; err != nil {
				t.Fatal(err)
			}
			<-op2Done
			if got, want := restored(t, buf.Bytes(), o.EncryptionKey), []string{"before", "op1/a", "op1/b"}; !slices.Equal(got, want) {
				t.Fatalf("backup holds %q, want %q", got, want)
			}

			// a Backup given up while it waits
			release = db.HoldBackup()
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				_, err := db.Backup(cctx, &bytes.Buffer{}, BackupOptions{})
				backupDone <- err
			}()
			waitPending(t, db, backupDone)
			cancel()
			if err := <-backupDone; !errors.Is(err, context.Canceled) {
				t.Fatalf("Backup with its ctx ended while waiting: %v", err)
			}
			release()
			r := db.HoldBackup() // not kept waiting by the Backup given up
			set(t, db, "op3")
			r()
			buf.Reset()
			if _, err := db.Backup(ctx, &buf, BackupOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, want := restored(t, buf.Bytes(), o.EncryptionKey), []string{"before", "op1/a", "op1/b", "op2/a", "op2/b", "op3"}; !slices.Equal(got, want) {
				t.Fatalf("backup holds %q, want %q", got, want)
			}
		})
	}
}
