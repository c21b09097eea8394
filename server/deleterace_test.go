package server

import (
	"fmt"
	"sync"
	"testing"
)

// A cube deleted while its pack is being warmed: the warm answers 200
// (it finished first) or 404 (the cube is gone), never a 500 or a 499 (a
// client that gave up) for what the delete did, nor the 400 of a cube
// without memories when it lists the cube between the delete of its
// memories and the rest (memosrt.TestWarmInCubeDeleteWindow hits that
// window every time).
func TestWarmWhileCubeDeleted(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	bad := map[string]int{}
	for i := range 40 {
		cube := fmt.Sprintf("race%d", i)
		if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": cube}, nil); code != 201 {
			t.Fatalf("create %s: %d", cube, code)
		}
		for j := range 4 {
			if code := do(t, "POST", e.url()+"/v1/cubes/"+cube+"/memories", map[string]any{"text": fmt.Sprintf("memory %d of %s: the lighthouse keeper counts ships", j, cube)}, nil); code != 201 {
				t.Fatalf("add: %d", code)
			}
		}
		var wg sync.WaitGroup
		var warm, del int
		var out map[string]any
		wg.Add(2)
		go func() { defer wg.Done(); warm = do(t, "POST", e.url()+"/v1/cubes/"+cube+"/pack", nil, &out) }()
		go func() { defer wg.Done(); del = do(t, "DELETE", e.url()+"/v1/cubes/"+cube, nil, nil) }()
		wg.Wait()
		if del != 204 {
			t.Fatalf("delete %s: %d", cube, del)
		}
		if warm != 200 && warm != 404 {
			bad[fmt.Sprintf("%d %s", warm, errMessage(out))]++
		}
	}
	if len(bad) > 0 {
		t.Fatalf("warms answered, besides 200 and 404: %v", bad)
	}
}
