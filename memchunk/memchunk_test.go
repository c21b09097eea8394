package memchunk

import (
	"errors"
	"slices"
	"testing"
)

func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		label, cube, id string
		ok              bool
	}{
		{Label("lily", "m-01"), "lily", "m-01", true},
		{"lily", "", "", false},
		{"conv:lily", "", "", false},
		{"chunk:lily", "", "", false},
	} {
		cube, id, ok := Of(tc.label)
		if cube != tc.cube || id != tc.id || ok != tc.ok {
			t.Errorf("Of(%q) = %q %q %v", tc.label, cube, id, ok)
		}
	}
	a, b := ID("k", "c", []int32{1, 2, 3}), ID("k", "c", []int32{1, 2, 4})
	if a == b || a != ID("k", "c", []int32{1, 2, 3}) || a == ID("k", "d", []int32{1, 2, 3}) || a == ID("k2", "c", []int32{1, 2, 3}) {
		t.Errorf("ids are not content addresses of key, cube and tokens")
	}
}

func TestCounter(t *testing.T) {
	var c Counter
	c.Add("c", []string{"a", "b"})
	c.Add("c", []string{"a"})
	c.Add("d", []string{"a"})
	if got := c.Take(2); !slices.Equal(got, [][2]string{{"c", "a"}}) {
		t.Fatalf("Take(2) = %v", got)
	}
	if got := c.Take(2); len(got) != 0 {
		t.Fatalf("Take(2) again = %v, want none (taken counts are forgotten)", got)
	}
	if got := c.Take(1); len(got) != 2 {
		t.Fatalf("Take(1) = %v, want c/b and d/a", got)
	}
}

func TestDecide(t *testing.T) {
	hook := func(key string) (float64, bool) { return 0.3, key == "calibrated" }
	guard := errors.New("runtime: KV shift not allowed: quantized K type q8_0")
	for _, tc := range []struct {
		name    string
		compose float64
		hook    func(string) (float64, bool)
		key     string
		guard   error
		want    float64
	}{
		{"off", 0, nil, "m", nil, 0},
		{"flag", 0.15, nil, "m", nil, 0.15},
		{"hook answers", 0.15, hook, "calibrated", nil, 0.3},
		{"hook silent", 0.15, hook, "other", nil, 0.15},
		{"guarded", 0.15, hook, "calibrated", guard, 0},
		{"clamped", 2, nil, "m", nil, 1},
	} {
		if got := Decide(tc.compose, tc.hook, tc.key, tc.guard); got != tc.want {
			t.Errorf("%s: Decide = %g, want %g", tc.name, got, tc.want)
		}
	}
}
