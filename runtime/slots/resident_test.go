package slots

import (
	"slices"
	"testing"
	"time"
)

func TestResident(t *testing.T) {
	var cleared []int
	var evicted [][]string
	r := NewResident([]int{7, 8, 9}, func(seq int) { cleared = append(cleared, seq) }, func(c []string) { evicted = append(evicted, c) })
	put := func(cube string, n int, used time.Time) {
		seq, ok := r.Take()
		if !ok {
			t.Fatalf("no free sequence for %s", cube)
		}
		r.Set(cube, ResidentPack{Seq: seq, Adapters: "", Toks: make([]int32, n), PackID: "p-" + cube, Used: used})
	}
	t0 := time.Now().Add(-time.Hour)
	put("a", 10, t0)
	put("b", 20, t0.Add(time.Minute))
	put("c", 30, t0.Add(2*time.Minute))
	if _, ok := r.Take(); ok {
		t.Fatal("a fourth sequence from three")
	}
	if r.Cells() != 60 || r.Len() != 3 || r.NoEvict().Cells() != 60 || r.NoEvict().Evict(100) != 0 {
		t.Fatalf("cells %d len %d", r.Cells(), r.Len())
	}
	if _, ok := r.Use("a", "other adapters"); ok {
		t.Fatal("a pack of another adapter set was used")
	}
	p, ok := r.Use("a", "") // a is now the most recently used
	if !ok || p.PackID != "p-a" || len(p.Toks) != 10 {
		t.Fatalf("Use: %+v %v", p, ok)
	}
	// LRU: b (20) then c (30) go for 25 cells
	if freed := r.Evict(25); freed != 50 {
		t.Fatalf("Evict(25) freed %d, want 50", freed)
	}
	if !slices.Equal(evicted[0], []string{"b", "c"}) || r.Len() != 1 || r.Cells() != 10 {
		t.Fatalf("evicted %v, %d left (%d cells)", evicted, r.Len(), r.Cells())
	}
	put("d", 5, time.Now())
	gone := r.Leave(func(cube, id string) bool { return cube == "d" && id == "p-d" })
	if !slices.Equal(gone, []string{"a"}) {
		t.Fatalf("Leave: %v", gone)
	}
	if !r.Drop("d") || r.Drop("d") || r.Len() != 0 || r.Cells() != 0 {
		t.Fatal("Drop")
	}
	// Take hands out the last free sequence: a 9, b 8, c 7, d (after b
	// and c left) 7; cleared: b's and c's by Evict, a's by Leave, d's
	if !slices.Equal(cleared, []int{8, 7, 9, 7}) {
		t.Fatalf("cleared %v, want [8 7 9 7]", cleared)
	}
	for range 3 {
		if _, ok := r.Take(); !ok {
			t.Fatal("a sequence was not given back")
		}
	}
}
