package scheduler

import (
	"context"
	"slices"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// Each cube keeps its newest MaxTransitions transitions; older ones are
// deleted, other cubes' are untouched.
func TestTrimTransitions(t *testing.T) {
	ctx := context.Background()
	db, err := datadir.Open(datadir.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mem, _ := textmem.Open(db, textmem.Options{})
	kv, _ := kvcache.Open(db, kvcache.Options{})
	tr, err := NewTiers(Deps{DB: db, Mem: mem, KV: kv}, TierOptions{MaxTransitions: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	add := func(cube string, n int) []uint64 {
		var seqs []uint64
		for range n {
			x := Transition{Cube: cube, Memory: "m", From: TierText, To: TierActivation}
			if err := db.Badger().Update(func(txn *bg.Txn) error { return tr.addTransition(txn, &x) }); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, x.Seq)
		}
		return seqs
	}
	a, b := add("a", 12), add("ab", 3) // "ab": a cube whose name extends another's
	a = append(a, add("a", 1)...)
	n, err := tr.trimTransitions(ctx)
	if err != nil || n != 8 {
		t.Fatalf("trimmed %d (%v), want 8", n, err)
	}
	for cube, want := range map[string][]uint64{"a": a[8:], "ab": b} {
		got, err := tr.Transitions(ctx, cube, 0)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, x := range got {
			seqs = append(seqs, x.Seq)
		}
		slices.Sort(seqs)
		if !slices.Equal(seqs, want) {
			t.Fatalf("cube %s keeps %v, want %v", cube, seqs, want)
		}
	}
}
