package convpack

import "testing"

func TestLabels(t *testing.T) {
	for _, c := range []struct{ label, cube, kind string }{
		{Label("alice"), "alice", "conversation"},
		{Label(""), "", "conversation"},
		{SharedLabel([]string{"shop", "assistant-x"}), "shop+assistant-x", "shared"},
		{"chunk:alice:m1", "alice", "chunk"},
		{"alice", "alice", "memories"},
	} {
		if cube, kind := PackCube(c.label); cube != c.cube || kind != c.kind {
			t.Errorf("PackCube(%q) = %q, %q; want %q, %q", c.label, cube, kind, c.cube, c.kind)
		}
	}
	if got := SharedScope(nil, nil); got != "" {
		t.Errorf("SharedScope of no cubes %q", got)
	}
	for _, c := range []struct {
		n, total int
		want     bool
	}{{3, 4, true}, {2, 4, false}, {4, 4, true}, {0, 0, false}} {
		if got := Continues(c.n, c.total); got != c.want {
			t.Errorf("Continues(%d, %d) = %v", c.n, c.total, got)
		}
	}
}
