package server

import (
	"net/http"
	"testing"
)

// An access key for cube a is refused (403) on every route that touches
// cube b or more than one cube, sees only cube a in the list, and works in
// cube a (its requests default to it); a wrong key is a 401, and deleting
// the cube revokes its keys.
func TestAccessKeys(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512, opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"a", "b"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c+"/memories", map[string]any{"text": "Lily has a dog named Max."}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("add to %s: %d", c, code)
		}
	}
	var k struct{ ID, Cube, Token string }
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": "a"}, &k, admin...); code != http.StatusCreated || k.Token == "" || k.Cube != "a" {
		t.Fatalf("create key: %d %+v", code, k)
	}
	key := []string{"Authorization", "Bearer " + k.Token}
	chat := func(extra map[string]any) map[string]any {
		m := map[string]any{"model": testModel, "messages": []map[string]any{{"role": "user", "content": "Hi"}}, "stream": false,
			"options": map[string]any{"num_predict": 2}}
		for kk, v := range extra {
			m[kk] = v
		}
		return m
	}
	refused := []struct {
		method, path string
		body         any
		hdr          []string
	}{
		{"GET", "/v1/cubes/b", nil, nil},
		{"GET", "/v1/cubes/b/memories", nil, nil},
		{"POST", "/v1/cubes/b/memories", map[string]any{"text": "x"}, nil},
		{"POST", "/v1/cubes/b/search", map[string]any{"query": "dog"}, nil},
		{"GET", "/v1/cubes/b/export", nil, nil},
		{"POST", "/v1/cubes/b/pack", map[string]any{}, nil},
		{"GET", "/v1/cubes/b/tiers", nil, nil},
		{"DELETE", "/v1/cubes/b", nil, nil},
		{"POST", "/api/chat", chat(nil), []string{CubeHeader, "b"}},
		{"POST", "/api/chat", chat(map[string]any{"options": map[string]any{"cube": "b", "num_predict": 2}}), nil},
		{"POST", "/api/generate", map[string]any{"model": testModel, "prompt": "x", "stream": false, "options": map[string]any{"cube": "b"}}, nil},
		{"POST", "/v1/chat/completions", chat(nil), []string{CubeHeader, "b"}},
		{"POST", "/v1/generate", map[string]any{"cube": "b", "prompt": "x", "num_predict": 2}, nil},
		{"POST", "/v1/cubes", map[string]any{"name": "c"}, nil},
		{"POST", "/v1/cubes/import", []byte("{}"), nil},
		{"GET", "/v1/packs", nil, nil},
		{"POST", "/v1/tiers/tick", nil, nil},
		{"POST", "/v1/keys", map[string]any{"cube": "a"}, nil},
		{"GET", "/metrics", nil, nil},
	}
	for _, c := range refused {
		if code := do(t, c.method, e.url()+c.path, c.body, nil, append(append([]string{}, key...), c.hdr...)...); code != http.StatusForbidden {
			t.Errorf("%s %s %v with cube a's key: %d, want 403", c.method, c.path, c.hdr, code)
		}
	}
	var list struct{ Cubes []struct{ Name string } }
	if code := do(t, "GET", e.url()+"/v1/cubes", nil, &list, key...); code != http.StatusOK || len(list.Cubes) != 1 || list.Cubes[0].Name != "a" {
		t.Fatalf("cube list with cube a's key: %d %+v", code, list)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/cubes/a/memories", nil},
		{"POST", "/v1/cubes/a/search", map[string]any{"query": "dog"}},
		{"POST", "/api/chat", chat(nil)},
		{"POST", "/v1/chat/completions", chat(map[string]any{"max_tokens": 2})},
	} {
		if code := do(t, c.method, e.url()+c.path, c.body, nil, key...); code != http.StatusOK {
			t.Errorf("%s %s with cube a's key: %d", c.method, c.path, code)
		}
	}
	// its requests are in its cube: the prompt carries cube a's memory
	var gen struct {
		Retrieved int `json:"retrieved_memories"`
		Pack      int `json:"pack_memories"`
	}
	if code := do(t, "POST", e.url()+"/v1/generate", map[string]any{"prompt": "Where is the dog Max?", "num_predict": 2}, &gen, key...); code != http.StatusOK || gen.Retrieved+gen.Pack == 0 {
		t.Fatalf("generate with cube a's key: %d %+v", code, gen)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/a/memories", nil, nil, "Authorization", "Bearer msk_0000"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %d", code)
	}
	if code := do(t, "DELETE", e.url()+"/v1/cubes/a", nil, nil, admin...); code != http.StatusNoContent {
		t.Fatalf("delete a: %d", code)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes", nil, nil, key...); code != http.StatusUnauthorized {
		t.Fatalf("a deleted cube's key: %d, want 401", code)
	}
}

// The memory API refuses fields it does not have, naming them (its fields
// are all memosrt's; the Ollama and OpenAI routes accept unknown ones, as
// those servers do).
func TestMemoryAPIUnknownFields(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "c"}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	for _, c := range []struct {
		method, path string
		body         map[string]any
		field        string
	}{
		{"POST", "/v1/cubes", map[string]any{"name": "d", "colour": "red"}, "colour"},
		{"POST", "/v1/cubes/c/memories", map[string]any{"text": "x", "user_id": "u1"}, "user_id"},
		{"POST", "/v1/cubes/c/search", map[string]any{"query": "x", "limit": 3}, "limit"},
		// memosrt's own generate route too: Ollama's "options" are not its fields
		{"POST", "/v1/generate", map[string]any{"prompt": "x", "options": map[string]any{"num_predict": 3}}, "options"},
	} {
		var body struct {
			Error struct{ Message, Param string }
		}
		code := do(t, c.method, e.url()+c.path, c.body, &body)
		if code != http.StatusBadRequest || body.Error.Param != c.field || body.Error.Message != c.field+": unknown field" {
			t.Errorf("%s %s %v: %d %v", c.method, c.path, c.body, code, body)
		}
	}
	var list struct{ Cubes []any }
	if do(t, "GET", e.url()+"/v1/cubes", nil, &list); len(list.Cubes) != 1 {
		t.Fatalf("refused requests created cubes: %v", list.Cubes)
	}
	var mems struct{ Memories []any }
	if do(t, "GET", e.url()+"/v1/cubes/c/memories", nil, &mems); len(mems.Memories) != 0 {
		t.Fatalf("a refused add stored %v", mems.Memories)
	}
}

// PATCH changes only the fields it is given (tags alone keep the text and
// make the memory findable by the tag); PUT replaces the text only.
func TestMemoryPatch(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	var m struct {
		ID, Text, Kind string
		Tags           []string
		Version        int
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/c/memories", map[string]any{"text": "Lily has a dog named Max.", "kind": "fact"}, &m); code != http.StatusCreated {
		t.Fatalf("add: %d", code)
	}
	u := e.url() + "/v1/cubes/c/memories/" + m.ID
	var got struct {
		Text, Kind string
		Tags       []string
		Version    int
	}
	if code := do(t, "PATCH", u, map[string]any{"tags": []string{"pets"}}, &got); code != http.StatusOK ||
		got.Text != "Lily has a dog named Max." || got.Kind != "fact" || len(got.Tags) != 1 || got.Tags[0] != "pets" || got.Version != m.Version+1 {
		t.Fatalf("PATCH tags: %d %+v", code, got)
	}
	var hits struct {
		Hits []struct{ Memory struct{ ID string } }
	}
	if do(t, "POST", e.url()+"/v1/cubes/c/search", map[string]any{"query": "dog", "tags": []string{"pets"}}, &hits); len(hits.Hits) != 1 || hits.Hits[0].Memory.ID != m.ID {
		t.Fatalf("search by the patched tag: %+v", hits)
	}
	if code := do(t, "PATCH", u, map[string]any{"kind": "preference", "text": "Lily has a dog named Rex."}, &got); code != http.StatusOK ||
		got.Text != "Lily has a dog named Rex." || got.Kind != "preference" || len(got.Tags) != 1 {
		t.Fatalf("PATCH kind and text: %d %+v", code, got)
	}
	for _, c := range []struct {
		method string
		body   map[string]any
	}{{"PATCH", map[string]any{}}, {"PUT", map[string]any{"tags": []string{"x"}}}, {"PATCH", map[string]any{"text": " "}}} {
		if code := do(t, c.method, u, c.body, nil); code != http.StatusBadRequest {
			t.Errorf("%s %v: %d, want 400", c.method, c.body, code)
		}
	}
}
