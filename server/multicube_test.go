package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/testutil"
)

// threeCubes makes the cubes of the multi-cube tests: a user's, a shop's
// and an assistant's, one memory each (alice, bob: users).
func threeCubes(t *testing.T, e *env) {
	t.Helper()
	addCube(t, e, "alice", "Alice likes green tea.")
	addCube(t, e, "bob", "Bob likes black coffee.")
	addCube(t, e, "shop", "The tea shop opens at nine.")
	addCube(t, e, "assistant-x", "The assistant answers with short stories.")
}

// cubeCounts returns how many memories each cube holds.
func cubeCounts(t *testing.T, e *env, cubes ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, c := range cubes {
		ms, err := e.mem.List(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		out[c] = len(ms)
	}
	return out
}

func TestMultiCubeNative(t *testing.T) {
	e := newEnv(t, envConfig{})
	threeCubes(t, e)
	for _, c := range []string{"shop", "assistant-x"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c+"/pack", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("warm %s: %d", c, code)
		}
	}
	for _, u := range []string{"alice", "bob"} {
		var res memosrt.Response
		body := map[string]any{"cubes": []string{u, "shop", "assistant-x"}, "messages": []map[string]string{{"role": "user", "content": "Tell me about tea"}},
			"num_predict": 8}
		if code := do(t, "POST", e.url()+"/v1/generate", body, &res); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		testutil.WaitFor(t, "pack writes", func() bool { return e.os.Stats().PendingWrites == 0 })
		t.Logf("%+v", res)
	}
}
