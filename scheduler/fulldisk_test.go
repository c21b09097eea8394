package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testfs"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// The scheduler's own writes (usage here; heat, jobs and transitions go
// through the same datadir.DB.Update) ask for room like the tiers' writes:
// on a 20 MiB tmpfs whose last byte another file took, recording 16
// batches of 500 uses (about 80 KB each, many pages of Badger's mapped
// memtable) answers ErrNoSpace every time and writes nothing. Before,
// RecordUse wrote without asking, and the first write into an
// unallocated page of the memtable ended the process by SIGBUS (seen in
// make soak's long mode). Once the space is back the same batch is
// recorded and reads back.
func TestRecordUseFullDisk(t *testing.T) {
	mnt := testfs.Tmpfs(t, "20m")
	db, err := datadir.Open(datadir.Options{Dir: filepath.Join(mnt, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := kvcache.Open(db, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tiers, err := NewTiers(Deps{DB: db, Mem: mem, KV: kv}, TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tiers.Close()
	ctx := context.Background()
	uses := make([]Use, 500)
	for i := range uses {
		uses[i] = Use{Cube: "c", ID: fmt.Sprintf("memory-%04d-%s", i, "0123456789abcdef"), Visits: 1, Interactions: 1}
	}
	filler := filepath.Join(mnt, "filler")
	testfs.Fill(t, filler, 1<<30)
	for i := range 16 {
		if err := tiers.RecordUse(ctx, uses); !errors.Is(err, datadir.ErrNoSpace) {
			t.Fatalf("batch %d on a full disk: %v, want ErrNoSpace", i, err)
		}
	}
	count := func() int {
		n := 0
		err := db.View(func(txn *bg.Txn) error {
			for _, u := range uses {
				var rec Usage
				ok, err := getJSON(txn, usageKey(u.Cube, u.ID), &rec)
				if err != nil {
					return err
				}
				if ok && rec.Visits > 0 {
					n++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("%d uses recorded on a full disk", n)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := tiers.RecordUse(ctx, uses); err != nil {
		t.Fatalf("after the space came back: %v", err)
	}
	if n := count(); n != len(uses) {
		t.Fatalf("%d of %d uses recorded after the space came back", n, len(uses))
	}
}
