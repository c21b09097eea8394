package textmem

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testfs"
)

// On a disk with no byte free, making the record of a cube that has one
// answers ErrRecordExists, as with room to spare, and a new cube's record
// is refused with ErrNoSpace: adding a memory to an existing cube makes
// the cube's record first, and must not be refused there after the
// memory was stored. Closing there is refused too (ErrNoSpace), not a
// SIGBUS in Badger's flush, and loses nothing.
func TestCreateRecordFullDisk(t *testing.T) {
	mnt := testfs.Tmpfs(t, "20m")
	db, err := datadir.Open(datadir.Options{Dir: filepath.Join(mnt, "data")})
	if err != nil {
		t.Fatal(err)
	}
	be := NewBadgerBackend(db)
	ctx := context.Background()
	if err := be.CreateRecord(ctx, "alice", []byte(`{"name":"alice"}`)); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	testfs.Fill(t, filler, 1<<30)
	if err := be.CreateRecord(ctx, "alice", []byte(`{"name":"alice"}`)); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("existing cube on a full disk: %v, want ErrRecordExists", err)
	}
	if err := be.CreateRecord(ctx, "bob", []byte(`{"name":"bob"}`)); !errors.Is(err, datadir.ErrNoSpace) {
		t.Fatalf("new cube on a full disk: %v, want ErrNoSpace", err)
	}
	// closing would flush the memtable into a new table: refused, Badger
	// stays open; once there is room it closes, and alice's record was
	// kept
	if err := db.Close(); !errors.Is(err, datadir.ErrNoSpace) {
		t.Fatalf("close on a full disk: %v, want ErrNoSpace", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = datadir.Open(datadir.Options{Dir: filepath.Join(mnt, "data")}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := NewBadgerBackend(db).CreateRecord(ctx, "alice", []byte(`{"name":"alice"}`)); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("after reopening: %v, want ErrRecordExists", err)
	}
}
