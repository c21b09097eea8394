package convpack

import "testing"

func TestScopeReads(t *testing.T) {
	scope := SlotScope("alice", 2, "") + "\x00" + SharedScope([]string{"shop", "assistant-x"}, []uint64{0, 3})
	for _, c := range []struct {
		cube string
		want bool
	}{{"shop", true}, {"assistant-x", true}, {"alice", false}, {"sho", false}, {"assistant", false}} {
		if got := ScopeReads(scope, c.cube); got != c.want {
			t.Errorf("ScopeReads(%q, %q) = %v", scope, c.cube, got)
		}
	}
	if ScopeReads("shop", "shop") || ScopeReads(SlotScope("shop", 1, "a"), "shop") {
		t.Error("a scope without read cubes reads none")
	}
	if got, want := SharedScope([]string{"shop", "assistant-x"}, []uint64{0, 3}), "shared:shop@0+assistant-x@3"; got != want {
		t.Errorf("sharedScope %q, want %q", got, want)
	}
}
