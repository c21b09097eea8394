package stats

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	v := []float64{5, 1, 4, 2}
	if got := Median(v); got != 4 {
		t.Fatalf("median %v, want 4", got)
	}
	if v[0] != 5 || v[1] != 1 {
		t.Fatalf("input reordered: %v", v)
	}
	if got := Median([]time.Duration{3, 1, 2}); got != 2 {
		t.Fatalf("median %v, want 2", got)
	}
	if got := Median[float64](nil); got != 0 {
		t.Fatalf("empty: %v", got)
	}
}
