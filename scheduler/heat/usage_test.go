package heat

import (
	"testing"
	"time"
)

func TestUsageBufferSums(t *testing.T) {
	b := NewUsageBuffer()
	t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Minute)
	if n := b.Add([]Use{{Cube: "c", ID: "a", Visits: 1}, {Cube: "c", ID: "b", Visits: 1, Interactions: 1}}, t1); n != 2 {
		t.Fatalf("since %d, want 2", n)
	}
	if n := b.Add([]Use{{Cube: "c", ID: "a", Visits: 2, Interactions: 1}}, t2); n != 3 {
		t.Fatalf("since %d, want 3", n)
	}
	b.ResetSince()
	if n := b.Add(nil, t2); n != 0 {
		t.Fatalf("since %d after ResetSince, want 0", n)
	}
	a := b.uses[[2]string{"c", "a"}]
	if a.Visits != 3 || a.Interactions != 1 || !a.At.Equal(t2) {
		t.Fatalf("a: %+v", a)
	}
	// a failed flush gives them back, keeping the later stamp
	b.addBack([]Use{{Cube: "c", ID: "a", Visits: 1, At: t1}})
	if a := b.uses[[2]string{"c", "a"}]; a.Visits != 4 || !a.At.Equal(t2) {
		t.Fatalf("a after addBack: %+v", a)
	}
}
