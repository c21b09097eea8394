package server

import (
	"net/http"
	"testing"

	"github.com/memosrt/memosrt/scheduler"
)

// Search hits count as visits: heat shows in GET /v1/cubes/{cube}/tiers.
func TestTiersRoute(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	base := e.url() + "/v1/cubes"
	if code := do(t, "POST", base, map[string]any{"name": "c"}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	var dog, kite map[string]any
	do(t, "POST", base+"/c/memories", map[string]any{"text": "Lily has a dog named Max."}, &dog)
	do(t, "POST", base+"/c/memories", map[string]any{"text": "Tom flies a blue kite."}, &kite)
	for i := 0; i < 3; i++ {
		if code := do(t, "POST", base+"/c/search", map[string]any{"query": "dog Max", "k": 1}, nil); code != http.StatusOK {
			t.Fatalf("search: %d", code)
		}
	}
	var st scheduler.CubeTiers
	if code := do(t, "GET", base+"/c/tiers", nil, &st); code != http.StatusOK {
		t.Fatalf("tiers: %d", code)
	}
	visits := map[string]float64{}
	for _, m := range st.Memories {
		visits[m.ID] = m.Usage.Visits
	}
	if len(st.Memories) != 2 || visits[dog["id"].(string)] < 2.99 || visits[kite["id"].(string)] != 0 {
		t.Fatalf("visits %v (dog %v, kite %v)", visits, dog["id"], kite["id"])
	}
	if code := do(t, "GET", base+"/c/tiers?limit=x", nil, nil); code != http.StatusBadRequest {
		t.Fatalf("bad limit: %d", code)
	}
	if code := do(t, "GET", base+"/nope/tiers", nil, nil); code != http.StatusNotFound {
		t.Fatalf("unknown cube: %d", code)
	}
	// ticks need a model
	if code := do(t, "POST", e.url()+"/v1/tiers/tick", nil, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("tick without a model: %d", code)
	}
}
