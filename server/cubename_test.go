package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/scheduler"
)

// A cube named "." or ".." is refused with a 400 on every route that takes
// a cube name (in the body, the path, percent-encoded, a header or a
// request's options), and with the parametric tier on, deleting cubes
// never removes anything outside the cube's own folders: sentinel files in
// the data directory, in adapters/ and beside the data directory survive.
func TestCubeNameDots(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "db")
	var mo memosrt.Options
	mo.Tiers.Parametric = scheduler.ParametricOptions{Enabled: true, For: 48 * time.Hour,
		Distill: lora.DistillOptions{Threads: 1}}
	e := newEnv(t, envConfig{dir: dir, nctx: 512, mo: mo})
	sentinels := []string{
		filepath.Join(parent, "outside.txt"),
		filepath.Join(dir, "sentinel.txt"),
		filepath.Join(dir, "adapters", "sentinel.txt"),
		filepath.Join(dir, "adapters", "alice", "keep.txt"),
	}
	for _, p := range sentinels {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("sentinel"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "alice"}, nil); code != 201 {
		t.Fatalf("create alice: %d", code)
	}
	for _, name := range []string{".", ".."} {
		var out map[string]any
		if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": name}, &out); code != 400 ||
			!strings.Contains(fmt.Sprint(out["error"]), "not a cube name") {
			t.Errorf("create %q: %d %v, want 400", name, code, out)
		}
	}
	for _, name := range []string{"%2E", "%2E%2E"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/import?cube="+name, "x", nil); code != 400 {
			t.Errorf("import as %q: %d, want 400", name, code)
		}
	}
	for _, name := range []string{".", ".."} {
		if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": name}, nil); code != 400 {
			t.Errorf("key for %q: %d, want 400", name, code)
		}
	}
	msgs := []map[string]any{{"role": "user", "content": "Hi"}}
	for _, enc := range []string{"%2E", "%2E%2E", "%2e%2e", ".%2E"} {
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/cubes/{c}", nil},
			{"DELETE", "/v1/cubes/{c}", nil},
			{"POST", "/v1/cubes/{c}/memories", map[string]any{"text": "x"}},
			{"GET", "/v1/cubes/{c}/memories", nil},
			{"GET", "/v1/cubes/{c}/memories/0123456789abcdef01234567", nil},
			{"PUT", "/v1/cubes/{c}/memories/0123456789abcdef01234567", map[string]any{"text": "y"}},
			{"DELETE", "/v1/cubes/{c}/memories/0123456789abcdef01234567", nil},
			{"POST", "/v1/cubes/{c}/search", map[string]any{"query": "x"}},
			{"GET", "/v1/cubes/{c}/search?q=x", nil},
			{"POST", "/v1/cubes/{c}/pack", map[string]any{}},
			{"GET", "/v1/cubes/{c}/pack", nil},
			{"GET", "/v1/cubes/{c}/export", nil},
			{"GET", "/v1/cubes/{c}/tiers", nil},
			{"GET", "/v1/cubes/{c}/adapters", nil},
			{"POST", "/v1/cubes/{c}/messages", map[string]any{"messages": msgs}},
			{"GET", "/v1/cubes/{c}/jobs", nil},
			{"GET", "/v1/cubes/{c}/profile", nil},
			{"GET", "/v1/cubes/{c}/turns", nil},
			{"GET", "/v1/cubes/{c}/sessions", nil},
		} {
			u := e.url() + strings.ReplaceAll(c.path, "{c}", enc)
			if code := do(t, c.method, u, c.body, nil); code != 400 {
				t.Errorf("%s %s: %d, want 400", c.method, u, code)
			}
		}
	}
	for _, name := range []string{".", ".."} {
		for _, c := range []struct {
			path string
			body map[string]any
			hdr  []string
		}{
			{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 1}}, []string{"X-Memosrt-Cube", name}},
			{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 1, "cube": name}}, nil},
			{"/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 1, "metadata": map[string]any{"cube": name}}, nil},
			{"/v1/generate", map[string]any{"model": testModel, "prompt": "Hi", "num_predict": 1, "cube": name}, nil},
		} {
			if code := do(t, "POST", e.url()+c.path, c.body, nil, c.hdr...); code != 400 {
				t.Errorf("%s cube %q (%v): %d, want 400", c.path, name, c.hdr, code)
			}
		}
	}
	if code := do(t, "DELETE", e.url()+"/v1/cubes/alice", nil, nil); code != 200 && code != 204 {
		t.Fatalf("delete alice: %d", code)
	}
	for _, p := range sentinels[:3] {
		if b, err := os.ReadFile(p); err != nil || string(b) != "sentinel" {
			t.Errorf("%s: %q, %v after the deletes", p, b, err)
		}
	}
	if _, err := os.Stat(filepath.Dir(sentinels[3])); !os.IsNotExist(err) {
		t.Errorf("alice's adapter folder after deleting alice: %v", err)
	}
}
