package server

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server/memory"
	"github.com/memosrt/memosrt/textmem"
)

func TestMemoryAPI(t *testing.T) {
	e := newEnv(t, envConfig{})
	u := e.url() + "/v1/cubes"
	var cv memory.CubeView
	if code := do(t, "POST", u, map[string]any{"name": "work", "description": "notes"}, &cv); code != http.StatusCreated || cv.Name != "work" || cv.Description != "notes" {
		t.Fatalf("create: %d %+v", code, cv)
	}
	var oe oaiError
	cases := []struct {
		name, method, path string
		body               any
		code               int
		param              string
	}{
		{"duplicate cube", "POST", "", map[string]any{"name": "work"}, http.StatusConflict, ""},
		{"bad cube name", "POST", "", map[string]any{"name": "a/b"}, http.StatusBadRequest, "name"},
		{"unknown cube", "GET", "/nope", nil, http.StatusNotFound, ""},
		{"unknown cube memories", "GET", "/nope/memories", nil, http.StatusNotFound, ""},
		{"empty text", "POST", "/work/memories", map[string]any{"text": "  "}, http.StatusBadRequest, "text"},
		{"wrong type", "POST", "/work/memories", map[string]any{"text": 3}, http.StatusBadRequest, "text"},
		{"bad json", "POST", "/work/memories", "{", http.StatusBadRequest, "body"},
		{"unknown memory", "GET", "/work/memories/000000000000000000000000", nil, http.StatusNotFound, ""},
		{"empty query", "POST", "/work/search", map[string]any{"query": ""}, http.StatusBadRequest, "query"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			oe = oaiError{}
			code := do(t, c.method, u+c.path, c.body, &oe)
			if code != c.code {
				t.Fatalf("status %d, want %d (%s)", code, c.code, oe.Error.Message)
			}
			if c.param != "" && (oe.Error.Param == nil || *oe.Error.Param != c.param) {
				t.Fatalf("param %v, want %q (%s)", oe.Error.Param, c.param, oe.Error.Message)
			}
		})
	}
	// a body of the wrong JSON type names what is wanted, not a Go type
	oe = oaiError{}
	if code := do(t, "POST", u+"/work/memories", []int{1, 2, 3}, &oe); code != http.StatusBadRequest ||
		!strings.Contains(oe.Error.Message, "want a JSON object, got JSON array") || strings.Contains(oe.Error.Message, "server.") {
		t.Fatalf("array body: %d %q", code, oe.Error.Message)
	}
	// adding a memory creates its cube, as `memosrt mem add` and Mem0 do
	if code := do(t, "POST", u+"/fresh/memories", map[string]any{"text": "A new cube."}, nil); code != http.StatusCreated {
		t.Fatalf("add to a new cube: %d", code)
	}
	if code := do(t, "DELETE", u+"/fresh", nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete the new cube: %d", code)
	}
	var m textmem.Memory
	if code := do(t, "POST", u+"/work/memories", map[string]any{"text": "The launch is on Friday.", "kind": "fact", "tags": []string{"launch"}}, &m); code != http.StatusCreated || m.ID == "" || m.Kind != "fact" {
		t.Fatalf("add: %d %+v", code, m)
	}
	var batch struct{ Memories []textmem.Memory }
	if code := do(t, "POST", u+"/work/memories", map[string]any{"memories": []map[string]any{{"text": "Bob owns the budget."}, {"text": "The office is in Lyon."}}}, &batch); code != http.StatusCreated || len(batch.Memories) != 2 {
		t.Fatalf("batch add: %d %+v", code, batch)
	}
	var got textmem.Memory
	if code := do(t, "GET", u+"/work/memories/"+m.ID, nil, &got); code != http.StatusOK || got.Text != m.Text {
		t.Fatalf("get: %d %+v", code, got)
	}
	if code := do(t, "PUT", u+"/work/memories/"+m.ID, map[string]any{"text": "The launch moved to Monday."}, &got); code != http.StatusOK || got.Version != 2 {
		t.Fatalf("update: %d %+v", code, got)
	}
	var hits struct{ Hits []textmem.Hit }
	if code := do(t, "POST", u+"/work/search", map[string]any{"query": "when is the launch", "k": 2}, &hits); code != http.StatusOK || len(hits.Hits) == 0 || hits.Hits[0].Memory.ID != m.ID {
		t.Fatalf("search: %d %+v", code, hits)
	}
	if code := do(t, "GET", u+"/work/search?q=budget", nil, &hits); code != http.StatusOK || len(hits.Hits) == 0 || hits.Hits[0].Memory.Text != "Bob owns the budget." {
		t.Fatalf("search GET: %d %+v", code, hits)
	}
	var list struct{ Memories []textmem.Memory }
	if code := do(t, "GET", u+"/work/memories", nil, &list); code != http.StatusOK || len(list.Memories) != 3 {
		t.Fatalf("list: %d %d", code, len(list.Memories))
	}
	if code := do(t, "DELETE", u+"/work/memories/"+batch.Memories[1].ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if code := do(t, "DELETE", u+"/work/memories/"+batch.Memories[1].ID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("second delete: %d", code)
	}

	// pack warm and status
	var ps memosrt.PackStatus
	if code := do(t, "POST", u+"/work/pack", nil, &ps); code != http.StatusOK || len(ps.Packs) != 1 || ps.Packs[0].NTokens == 0 || ps.Memories != 2 {
		t.Fatalf("warm: %d %+v", code, ps)
	}
	if code := do(t, "GET", u+"/work/pack", nil, &ps); code != http.StatusOK || len(ps.Packs) != 1 || ps.NCtx != 2048 {
		t.Fatalf("status: %d %+v", code, ps)
	}
	var rs memosrt.PackStatus
	if code := do(t, "POST", u+"/work/pack", map[string]any{"resident": true}, &rs); code != http.StatusOK || rs.Resident == nil || rs.Resident.PackID != ps.Packs[0].ID {
		t.Fatalf("resident: %d %+v", code, rs)
	}
	nores := newEnv(t, envConfig{mo: memosrt.Options{ResidentSeqs: -1}})
	do(t, "POST", nores.url()+"/v1/cubes/work/memories", map[string]any{"text": "x y z"}, nil)
	if code := do(t, "POST", nores.url()+"/v1/cubes/work/pack", map[string]any{"resident": true}, &oe); code != http.StatusBadRequest || *oe.Error.Param != "resident" {
		t.Fatalf("resident without resident sequences: %d %+v", code, oe)
	}

	// export, then import under another name: same memories, same pack
	resp, err := http.Get(u + "/work/export")
	if err != nil {
		t.Fatal(err)
	}
	archive, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d", resp.StatusCode)
	}
	names := tarNames(t, archive)
	if len(names) != 3 || names[0] != "manifest.json" || names[1] != "memories.jsonl" {
		t.Fatalf("archive entries %v", names)
	}
	var ir memosrt.ImportResult
	if code := do(t, "POST", u+"/import?cube=work2", archive, &ir); code != http.StatusCreated || ir.Memories != 2 || ir.Packs != 1 {
		t.Fatalf("import: %d %+v", code, ir)
	}
	for _, tc := range []struct{ query, want string }{
		{"?cube=work2", `cube "work2" exists: import with ?replace=true, or under another name with ?cube=NAME`},
		{"", `cube "work" exists: import with ?replace=true, or under another name with ?cube=NAME`},
	} {
		if code := do(t, "POST", u+"/import"+tc.query, archive, &oe); code != http.StatusConflict || oe.Error.Message != tc.want {
			t.Fatalf("import%s again: %d %q, want 409 %q", tc.query, code, oe.Error.Message, tc.want)
		}
	}
	if code := do(t, "POST", u+"/import?cube=work2&replace=true", archive, &ir); code != http.StatusCreated {
		t.Fatalf("import replace: %d", code)
	}
	var l2 struct{ Memories []textmem.Memory }
	do(t, "GET", u+"/work2/memories", nil, &l2)
	if len(l2.Memories) != 2 || l2.Memories[0].Text != "The launch moved to Monday." || l2.Memories[1].Text != "Bob owns the budget." || l2.Memories[0].Kind != "fact" {
		t.Fatalf("imported %+v", l2.Memories)
	}
	// the imported pack serves the imported cube: its prompt restores it
	var p2 memosrt.PackStatus
	do(t, "GET", u+"/work2/pack", nil, &p2)
	if len(p2.Packs) != 1 || p2.Packs[0].NTokens != ps.Packs[0].NTokens || p2.Packs[0].ID == ps.Packs[0].ID {
		t.Fatalf("imported packs %+v, original %+v (same tokens, scoped to the new cube)", p2.Packs, ps.Packs)
	}
	var tiers scheduler.CubeTiers
	if do(t, "GET", u+"/work2/tiers", nil, &tiers); tiers.PackID != p2.Packs[0].ID || tiers.Transitions[len(tiers.Transitions)-1].Decoded != 0 {
		t.Fatalf("the imported pack is not the tier's (nothing decoded again): %+v", tiers)
	}
	var gen map[string]any
	do(t, "POST", e.url()+"/api/generate", map[string]any{"model": testModel, "prompt": "When?", "stream": false,
		"options": map[string]any{"cube": "work2", "num_predict": 4, "temperature": 0}}, &gen)
	if n := gen["prompt_eval_count"].(float64) - gen["prompt_cached_count"].(float64); n >= float64(ps.Packs[0].NTokens) {
		t.Fatalf("work2's prompt prefilled %v tokens: its imported pack of %d was not restored", n, ps.Packs[0].NTokens)
	}
	if code := do(t, "POST", u+"/import", []byte("not a tar"), &oe); code != http.StatusBadRequest {
		t.Fatalf("bad archive: %d %s", code, oe.Error.Message)
	}
	var cubes struct{ Cubes []memory.CubeView }
	if code := do(t, "GET", u, nil, &cubes); code != http.StatusOK || len(cubes.Cubes) != 2 || cubes.Cubes[1].Memories != 2 {
		t.Fatalf("cubes: %d %+v", code, cubes)
	}
	if code := do(t, "DELETE", u+"/work2", nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete cube: %d", code)
	}
	if code := do(t, "GET", u+"/work2", nil, nil); code != http.StatusNotFound {
		t.Fatalf("deleted cube: %d", code)
	}
	if n := len(e.kv.List("work2")); n != 0 {
		t.Fatalf("%d packs left after cube delete", n)
	}
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name)
	}
}
