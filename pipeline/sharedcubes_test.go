package pipeline

import (
	"testing"

	"github.com/memosrt/memosrt/pipeline/convpack"
)

func TestScopeReads(t *testing.T) {
	scope := scopeOf("alice", 2, "") + "\x00" + convpack.SharedScope([]string{"shop", "assistant-x"}, []uint64{0, 3})
	for _, c := range []struct {
		cube string
		want bool
	}{{"shop", true}, {"assistant-x", true}, {"alice", false}, {"sho", false}, {"assistant", false}} {
		if got := convpack.ScopeReads(scope, c.cube); got != c.want {
			t.Errorf("convpack.ScopeReads(%q, %q) = %v", scope, c.cube, got)
		}
	}
	if convpack.ScopeReads("shop", "shop") || convpack.ScopeReads(scopeOf("shop", 1, "a"), "shop") {
		t.Error("a scope without read cubes reads none")
	}
	if got, want := convpack.SharedScope([]string{"shop", "assistant-x"}, []uint64{0, 3}), "shared:shop@0+assistant-x@3"; got != want {
		t.Errorf("sharedScope %q, want %q", got, want)
	}
}
