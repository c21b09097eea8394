package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server/wire"
	textpg "github.com/memosrt/memosrt/textmem/postgres"
)

// keyOut is the answer to POST /v1/keys.
type keyOut struct {
	ID      string
	Name    string
	Grants  []memosrt.KeyGrant
	Expires string
	Token   string
}

// makeKey creates a key with the admin token "admin" from body and returns
// it.
func makeKey(t *testing.T, e *env, body any) keyOut {
	t.Helper()
	var k keyOut
	if code := do(t, "POST", e.url()+"/v1/keys", body, &k, "Authorization", "Bearer admin"); code != http.StatusCreated || k.Token == "" {
		t.Fatalf("create key %v: %d %+v", body, code, k)
	}
	return k
}

// errorOf sends a request and returns its status and error message (the
// OpenAI shape, or Ollama's on /api/ paths; "" for an answer that is not
// a JSON error).
func errorOf(t *testing.T, method, u string, body any, hdr ...string) (int, string) {
	t.Helper()
	status, raw := send(t, method, u, body, hdr...)
	var o oaiError
	if json.Unmarshal(raw, &o) == nil && o.Error.Message != "" {
		return status, o.Error.Message
	}
	var ol struct{ Error string }
	json.Unmarshal(raw, &ol)
	return status, ol.Error
}

// An access key for cube a (the older request form: write on one cube) is
// refused (403) on every route that touches cube b or more than one cube,
// sees only cube a in the list, and works in cube a (its requests default
// to it); a wrong key is a 401, and deleting the cube revokes its keys.
func TestAccessKeys(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512, opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"a", "b"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c+"/memories", map[string]any{"text": "Lily has a dog named Max."}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("add to %s: %d", c, code)
		}
	}
	k := makeKey(t, e, map[string]any{"cube": "a"})
	if len(k.Grants) != 1 || k.Grants[0].Cube != "a" || k.Grants[0].Right != memosrt.KeyWrite {
		t.Fatalf("the older form's key: %+v", k)
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
		{"GET", "/v1/keys", nil, nil},
		{"POST", "/v1/cubes/a/share", map[string]any{"key_id": k.ID, "right": "write"}, nil},
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

// A read-only key for cube shop searches and chats (the chats record
// nothing in shop) but gets 403 on every route that adds, edits or deletes
// memories, deletes the cube or warms its pack, with a message naming the
// key, the cube and the right; listing keys never shows a token; at its
// expiry (the server's debug clock) the key is a 401.
func TestReadOnlyKey(t *testing.T) {
	clock := &scheduler.OffsetClock{}
	e := newEnv(t, envConfig{nctx: 1024, opts: Options{Token: "admin", DebugClock: clock}, mo: memosrt.Options{Clock: clock, NoScheduler: true}})
	admin := []string{"Authorization", "Bearer admin"}
	var ids []string
	for _, m := range []string{"The shop sells red bikes.", "The shop opens at nine."} {
		var out struct{ ID string }
		if code := do(t, "POST", e.url()+"/v1/cubes/shop/memories", map[string]any{"text": m}, &out, admin...); code != http.StatusCreated {
			t.Fatalf("add: %d", code)
		}
		ids = append(ids, out.ID)
	}
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "blog"}, nil, admin...); code != http.StatusCreated {
		t.Fatalf("create blog: %d", code)
	}
	k := makeKey(t, e, map[string]any{"name": "shop reader", "cubes": []map[string]string{{"cube": "shop", "right": "read"}}, "expires_in": 3600})
	if k.Name != "shop reader" || len(k.Grants) != 1 || k.Grants[0].Right != memosrt.KeyRead || k.Expires == "" {
		t.Fatalf("key %+v", k)
	}
	key := []string{"Authorization", "Bearer " + k.Token}
	mems := func() string {
		t.Helper()
		var raw json.RawMessage
		if code := do(t, "GET", e.url()+"/v1/cubes/shop/memories", nil, &raw, admin...); code != http.StatusOK {
			t.Fatalf("list: %d", code)
		}
		return string(raw)
	}
	before := mems()

	// search and chat
	var hits struct {
		Hits []struct{ Memory struct{ ID string } }
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/shop/search", map[string]any{"query": "bikes"}, &hits, key...); code != http.StatusOK ||
		len(hits.Hits) == 0 || hits.Hits[0].Memory.ID != ids[0] {
		t.Fatalf("search with the read key: %d %+v", code, hits)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/shop/search?q=nine", nil, &hits, key...); code != http.StatusOK || len(hits.Hits) == 0 || hits.Hits[0].Memory.ID != ids[1] {
		t.Fatalf("GET search with the read key: %d %+v", code, hits)
	}
	msgs := []map[string]string{{"role": "user", "content": "What does the shop sell?"}}
	var oll struct{ Message struct{ Content string } }
	if code := do(t, "POST", e.url()+"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false,
		"options": map[string]any{"num_predict": 8}}, &oll, key...); code != http.StatusOK || oll.Message.Content == "" {
		t.Fatalf("Ollama chat with the read key: %d %+v", code, oll)
	}
	var gen memosrt.Response
	if code := do(t, "POST", e.url()+"/v1/generate", map[string]any{"messages": msgs, "num_predict": 8, "cube": "shop"}, &gen, key...); code != http.StatusOK ||
		gen.Text == "" || gen.Retrieved+gen.PackMemories == 0 {
		t.Fatalf("chat in shop with the read key: %d %+v", code, gen)
	}
	if code := do(t, "POST", e.url()+"/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 8,
		"metadata": map[string]any{"cube": "shop"}}, nil, key...); code != http.StatusOK {
		t.Fatalf("OpenAI chat with the read key: %d", code)
	}
	convPacks := func() int {
		testutil.WaitFor(t, "conversation packs written", func() bool { return e.os.Stats().PendingWrites == 0 })
		n := 0
		for _, p := range e.kv.List("") {
			if p.Label == "conv:shop" {
				n++
			}
		}
		return n
	}
	if n := len(turnsOf(t, e, "shop", admin...)); n != 0 {
		t.Fatalf("the read key's chats recorded %d turns in shop", n)
	}
	if n := convPacks(); n != 0 {
		t.Fatalf("the read key's chats stored %d conversation packs of shop", n)
	}
	// a writer's chat does record (what the read key's did not)
	if code := do(t, "POST", e.url()+"/v1/generate", map[string]any{"messages": msgs, "num_predict": 8, "cube": "shop"}, nil, admin...); code != http.StatusOK {
		t.Fatalf("admin chat: %d", code)
	}
	testutil.WaitFor(t, "the admin's turn", func() bool { return len(turnsOf(t, e, "shop", admin...)) == 1 })
	if n := convPacks(); n != 1 {
		t.Fatalf("the admin's chat stored %d conversation packs of shop, want 1", n)
	}
	before = mems() // with the admin's turn

	// every change of shop: 403 naming the key, the cube and the right
	denied := `accesskey: access denied: key ` + k.ID + ` has no write right on cube "shop" (only read)`
	m := "/v1/cubes/shop/memories/" + ids[0]
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/cubes/shop/memories", map[string]any{"text": "The shop closed."}},
		{"PUT", m, map[string]any{"text": "The shop sells blue bikes."}},
		{"PATCH", m, map[string]any{"tags": []string{"x"}}},
		{"DELETE", m, nil},
		{"DELETE", "/v1/cubes/shop", nil},
		{"POST", "/v1/cubes/shop/pack", map[string]any{}},
		{"POST", "/v1/cubes/shop/messages", map[string]any{"messages": msgs}},
		{"POST", "/v1/cubes/shop/jobs/x/undo", nil},
	} {
		code, msg := errorOf(t, c.method, e.url()+c.path, c.body, key...)
		if code != http.StatusForbidden || msg != denied {
			t.Errorf("%s %s with the read key: %d %q, want 403 %q", c.method, c.path, code, msg, denied)
		}
	}
	if after := mems(); after != before {
		t.Fatalf("shop changed through its read key:\n%s\n%s", before, after)
	}
	// another cube, and the admin's routes
	if code, msg := errorOf(t, "GET", e.url()+"/v1/cubes/blog/search?q=x", nil, key...); code != http.StatusForbidden ||
		msg != `accesskey: access denied: key `+k.ID+` has no read right on cube "blog" (no right there)` {
		t.Errorf("blog with the read key: %d %q", code, msg)
	}
	if code, msg := errorOf(t, "GET", e.url()+"/v1/keys", nil, key...); code != http.StatusForbidden ||
		msg != "server: this access key may not use that: GET /v1/keys needs the admin token (key "+k.ID+")" {
		t.Errorf("GET /v1/keys with the read key: %d %q", code, msg)
	}

	// listing keys never shows a token
	w := makeKey(t, e, map[string]any{"cubes": []map[string]string{{"cube": "shop", "right": "write"}, {"cube": "blog"}}})
	for _, path := range []string{"/v1/keys", "/v1/keys/" + k.ID, "/v1/keys/" + w.ID} {
		var raw json.RawMessage
		if code := do(t, "GET", e.url()+path, nil, &raw, admin...); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		for _, tok := range []string{k.Token, w.Token, k.Token[len("msk_"):], w.Token[len("msk_"):]} {
			if strings.Contains(string(raw), tok) {
				t.Fatalf("GET %s shows a token: %s", path, raw)
			}
		}
		if !strings.Contains(string(raw), k.ID) && path != "/v1/keys/"+w.ID {
			t.Fatalf("GET %s lacks key %s: %s", path, k.ID, raw)
		}
	}
	var list struct {
		Keys []struct {
			ID, Name  string
			CreatedBy string `json:"created_by"`
			Grants    []memosrt.KeyGrant
		}
	}
	if do(t, "GET", e.url()+"/v1/keys", nil, &list, admin...); len(list.Keys) != 2 || list.Keys[0].ID != k.ID || list.Keys[1].ID != w.ID ||
		list.Keys[0].Name != "shop reader" || list.Keys[0].CreatedBy != "admin" || len(list.Keys[1].Grants) != 2 ||
		list.Keys[1].Grants[1] != (memosrt.KeyGrant{Cube: "blog", Right: memosrt.KeyRead, CubeCreated: list.Keys[1].Grants[1].CubeCreated}) {
		t.Fatalf("GET /v1/keys: %+v", list)
	}

	// expiry by the server's clock: 401 once it is reached
	if code := do(t, "GET", e.url()+"/v1/cubes/shop/search?q=bikes", nil, nil, key...); code != http.StatusOK {
		t.Fatalf("before expiry: %d", code)
	}
	if code := do(t, "POST", e.url()+"/v1/debug/clock", map[string]any{"advance_s": 3600}, nil, admin...); code != http.StatusNoContent {
		t.Fatalf("advance the clock: %d", code)
	}
	code, msg := errorOf(t, "GET", e.url()+"/v1/cubes/shop/search?q=bikes", nil, key...)
	if code != http.StatusUnauthorized || !strings.Contains(msg, "access key expired: key "+k.ID+" expired at ") {
		t.Fatalf("after expiry: %d %q", code, msg)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/shop/search?q=bikes", nil, nil, "Authorization", "Bearer "+w.Token); code != http.StatusOK {
		t.Fatalf("a key without expiry: %d", code)
	}
	// bad requests name their field
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{}, "cubes"},
		{map[string]any{"cubes": []map[string]string{{"cube": "shop", "right": "admin"}}}, "cubes[0].right"},
		{map[string]any{"cubes": []map[string]string{{"cube": "a/b"}}}, "cubes[0].cube"},
		{map[string]any{"cube": "shop", "cubes": []map[string]string{{"cube": "shop"}}}, "cube"},
		{map[string]any{"cube": "shop", "expires_in": 0}, "expires_in"},
		{map[string]any{"cube": "shop", "expires_in": 60, "expires_at": "2030-01-01T00:00:00Z"}, "expires_in"},
	} {
		var o oaiError
		if code := do(t, "POST", e.url()+"/v1/keys", c.body, &o, admin...); code != http.StatusBadRequest || o.Error.Param == nil || *o.Error.Param != c.field {
			t.Errorf("POST /v1/keys %v: %d %+v, want 400 on %s", c.body, code, o.Error, c.field)
		}
	}
	if code, msg := errorOf(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": "shop", "expires_at": "2020-01-01T00:00:00Z"}, admin...); code != http.StatusBadRequest ||
		!strings.Contains(msg, "expires 2020-01-01T00:00:00Z: not after now") {
		t.Errorf("a past expiry: %d %q", code, msg)
	}
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cubes": []map[string]string{{"cube": "nosuch"}}}, nil, admin...); code != http.StatusNotFound {
		t.Errorf("a key of an unknown cube: %d, want 404", code)
	}
}

// A key of several cubes reaches exactly its cubes with its rights there;
// sharing a cube with it grants read (or the right given), unsharing takes
// it, its last cube cannot be unshared, and revoking it is a 401 at once.
func TestMultiCubeKey(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true, opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"a", "b", "c"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c+"/memories", map[string]any{"text": "Lily has a dog named Max."}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("add to %s: %d", c, code)
		}
	}
	k := makeKey(t, e, map[string]any{"cubes": []map[string]string{{"cube": "a", "right": "write"}, {"cube": "b", "right": "read"}}})
	key := []string{"Authorization", "Bearer " + k.Token}
	reach := func(want map[string]string) {
		t.Helper()
		for _, c := range []string{"a", "b", "c"} {
			rcode := do(t, "POST", e.url()+"/v1/cubes/"+c+"/search", map[string]any{"query": "dog"}, nil, key...)
			wcode := do(t, "POST", e.url()+"/v1/cubes/"+c+"/memories", map[string]any{"text": "Max is brown."}, nil, key...)
			got := map[[2]int]string{{403, 403}: "", {200, 403}: "read", {200, 201}: "write"}[[2]int{rcode, wcode}]
			if got != want[c] || (rcode != 403 && rcode != 200) {
				t.Errorf("cube %s: search %d, add %d: right %q, want %q", c, rcode, wcode, got, want[c])
			}
		}
		var list struct{ Cubes []struct{ Name string } }
		do(t, "GET", e.url()+"/v1/cubes", nil, &list, key...)
		var names []string
		for _, c := range list.Cubes {
			names = append(names, c.Name)
		}
		var wantNames []string
		for _, c := range []string{"a", "b", "c"} {
			if want[c] != "" {
				wantNames = append(wantNames, c)
			}
		}
		if !slices.Equal(names, wantNames) {
			t.Errorf("cube list: %q, want %q", names, wantNames)
		}
	}
	reach(map[string]string{"a": "write", "b": "read"})
	var shared keyOut
	if code := do(t, "POST", e.url()+"/v1/cubes/c/share", map[string]any{"key_id": k.ID}, &shared, admin...); code != http.StatusOK ||
		len(shared.Grants) != 3 || shared.Grants[2].Cube != "c" || shared.Grants[2].Right != memosrt.KeyRead || shared.Token != "" {
		t.Fatalf("share c: %d %+v", code, shared)
	}
	reach(map[string]string{"a": "write", "b": "read", "c": "read"})
	if code := do(t, "POST", e.url()+"/v1/cubes/b/share", map[string]any{"key_id": k.ID, "right": "write"}, nil, admin...); code != http.StatusOK {
		t.Fatalf("share b for write: %d", code)
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/a/share", map[string]any{"key_id": k.ID, "right": "read"}, nil, admin...); code != http.StatusOK {
		t.Fatalf("share a for read: %d", code)
	}
	reach(map[string]string{"a": "read", "b": "write", "c": "read"})
	for _, c := range []string{"a", "c"} {
		if code := do(t, "DELETE", e.url()+"/v1/cubes/"+c+"/share/"+k.ID, nil, nil, admin...); code != http.StatusOK {
			t.Fatalf("unshare %s: %d", c, code)
		}
	}
	reach(map[string]string{"b": "write"})
	if code, msg := errorOf(t, "DELETE", e.url()+"/v1/cubes/b/share/"+k.ID, nil, admin...); code != http.StatusConflict || !strings.Contains(msg, "revoke the key instead") {
		t.Fatalf("unshare the last cube: %d %q", code, msg)
	}
	for _, c := range []struct {
		method, path string
		body         any
		code         int
	}{
		{"POST", "/v1/cubes/c/share", map[string]any{"key_id": "key_000000000000"}, http.StatusNotFound},
		{"POST", "/v1/cubes/nosuch/share", map[string]any{"key_id": k.ID}, http.StatusNotFound},
		{"POST", "/v1/cubes/c/share", map[string]any{"key_id": k.ID, "right": "owner"}, http.StatusBadRequest},
		{"POST", "/v1/cubes/c/share", map[string]any{}, http.StatusBadRequest},
		{"DELETE", "/v1/cubes/c/share/" + k.ID, nil, http.StatusNotFound},
		{"DELETE", "/v1/keys/key_000000000000", nil, http.StatusNotFound},
	} {
		if code := do(t, c.method, e.url()+c.path, c.body, nil, admin...); code != c.code {
			t.Errorf("%s %s %v: %d, want %d", c.method, c.path, c.body, code, c.code)
		}
	}
	if code := do(t, "DELETE", e.url()+"/v1/keys/"+k.ID, nil, nil, admin...); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/b/search", map[string]any{"query": "dog"}, nil, key...); code != http.StatusUnauthorized {
		t.Fatalf("a revoked key: %d, want 401", code)
	}
}

// wantNeeds is what every route needs. A route added without a line here
// fails TestRouteNeeds: decide what it needs of an access key first.
var wantNeeds = map[string]wire.Need{
	"GET /{$}":                               wire.NeedPublic,
	"HEAD /{$}":                              wire.NeedPublic,
	"GET /api/version":                       wire.NeedPublic,
	"GET /ui":                                wire.NeedPublic,
	"GET /ui/":                               wire.NeedPublic,
	"POST /api/chat":                         wire.NeedKey,
	"POST /api/generate":                     wire.NeedKey,
	"POST /api/embed":                        wire.NeedKey,
	"POST /api/embeddings":                   wire.NeedKey,
	"GET /api/tags":                          wire.NeedKey,
	"POST /api/show":                         wire.NeedKey,
	"GET /api/ps":                            wire.NeedKey,
	"POST /v1/chat/completions":              wire.NeedKey,
	"POST /v1/completions":                   wire.NeedKey,
	"POST /v1/embeddings":                    wire.NeedKey,
	"GET /v1/models":                         wire.NeedKey,
	"GET /v1/models/{model...}":              wire.NeedKey,
	"POST /v1/generate":                      wire.NeedKey,
	"GET /v1/server":                         wire.NeedKey,
	"GET /v1/cubes":                          wire.NeedKey,
	"/mcp":                                   wire.NeedKey,
	"/":                                      wire.NeedKey,
	"GET /v1/cubes/{cube}":                   wire.NeedRead,
	"GET /v1/cubes/{cube}/memories":          wire.NeedRead,
	"GET /v1/cubes/{cube}/memories/{id}":     wire.NeedRead,
	"POST /v1/cubes/{cube}/search":           wire.NeedRead,
	"GET /v1/cubes/{cube}/search":            wire.NeedRead,
	"GET /v1/cubes/{cube}/pack":              wire.NeedRead,
	"GET /v1/cubes/{cube}/export":            wire.NeedRead,
	"GET /v1/cubes/{cube}/tiers":             wire.NeedRead,
	"GET /v1/cubes/{cube}/adapters":          wire.NeedRead,
	"GET /v1/cubes/{cube}/jobs":              wire.NeedRead,
	"GET /v1/cubes/{cube}/jobs/{id}":         wire.NeedRead,
	"GET /v1/cubes/{cube}/profile":           wire.NeedRead,
	"GET /v1/cubes/{cube}/turns":             wire.NeedRead,
	"GET /v1/cubes/{cube}/sessions":          wire.NeedRead,
	"GET /v1/cubes/{cube}/memories/{id}/log": wire.NeedRead,
	"DELETE /v1/cubes/{cube}":                wire.NeedWrite,
	"POST /v1/cubes/{cube}/memories":         wire.NeedWrite,
	"PUT /v1/cubes/{cube}/memories/{id}":     wire.NeedWrite,
	"PATCH /v1/cubes/{cube}/memories/{id}":   wire.NeedWrite,
	"DELETE /v1/cubes/{cube}/memories/{id}":  wire.NeedWrite,
	"POST /v1/cubes/{cube}/pack":             wire.NeedWrite,
	"POST /v1/cubes/{cube}/chunks":           wire.NeedWrite,
	"POST /v1/cubes/{cube}/messages":         wire.NeedWrite,
	"POST /v1/cubes/{cube}/jobs/{id}/undo":   wire.NeedWrite,
	"POST /v1/cubes/{cube}/feedback":         wire.NeedWrite,
	"GET /v1/cubes/{cube}/responses":         wire.NeedRead,
	"POST /v1/cubes":                         wire.NeedAdmin,
	"POST /v1/cubes/import":                  wire.NeedAdmin,
	"GET /v1/packs":                          wire.NeedAdmin,
	"POST /v1/tiers/tick":                    wire.NeedAdmin,
	"GET /v1/backup":                         wire.NeedAdmin,
	"POST /v1/keys":                          wire.NeedAdmin,
	"GET /v1/keys":                           wire.NeedAdmin,
	"GET /v1/keys/{id}":                      wire.NeedAdmin,
	"DELETE /v1/keys/{id}":                   wire.NeedAdmin,
	"POST /v1/cubes/{cube}/share":            wire.NeedAdmin,
	"DELETE /v1/cubes/{cube}/share/{id}":     wire.NeedAdmin,
	"GET /v1/stats":                          wire.NeedAdmin,
	"POST /v1/debug/clock":                   wire.NeedAdmin,
	"GET /metrics":                           wire.NeedAdmin,
	"POST /api/pull":                         wire.NeedAdmin,
	"POST /api/push":                         wire.NeedAdmin,
	"POST /api/copy":                         wire.NeedAdmin,
	"DELETE /api/delete":                     wire.NeedAdmin,
	"POST /api/create":                       wire.NeedAdmin,
	"POST /api/blobs/{digest}":               wire.NeedAdmin,
	"HEAD /api/blobs/{digest}":               wire.NeedAdmin,
}

// Every registered route (the server's route table, which is how routes
// are added) needs what wantNeeds says, and is checked so: without a token
// only public routes answer; a read key for shop is refused every write
// and admin route with 403 naming the right, and no read route; a key for
// another cube is refused shop's cube routes naming the read or write
// right; the admin token is refused no route.
func TestRouteNeeds(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true, opts: Options{Token: "admin", DebugClock: &scheduler.OffsetClock{}}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"shop", "blog"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c+"/memories", map[string]any{"text": "Lily has a dog named Max."}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("add to %s: %d", c, code)
		}
	}
	reader := makeKey(t, e, map[string]any{"cubes": []map[string]string{{"cube": "shop", "right": "read"}}})
	other := makeKey(t, e, map[string]any{"cubes": []map[string]string{{"cube": "blog", "right": "write"}}})

	seen := map[string]bool{}
	for _, r := range e.srv.table {
		seen[r.pattern] = true
		want, ok := wantNeeds[r.pattern]
		if !ok {
			t.Errorf("route %q (%s) is not in wantNeeds: say what it needs", r.pattern, r.need)
			continue
		}
		if r.need != want {
			t.Errorf("route %q needs %s, want %s", r.pattern, r.need, want)
		}
	}
	for p := range wantNeeds {
		if !seen[p] {
			t.Errorf("wantNeeds has %q, the server no such route", p)
		}
	}

	for _, r := range e.srv.table {
		method, path, ok := strings.Cut(r.pattern, " ")
		if !ok {
			method, path = "POST", r.pattern
		}
		path = strings.NewReplacer("{$}", "", "{cube}", "shop", "{id}", "x", "{digest}", "sha256-00", "{model...}", testModel).Replace(path)
		if path == "/" && r.pattern == "/" {
			method, path = "GET", "/nosuch"
		}
		u := e.url() + path
		t.Run(r.pattern, func(t *testing.T) {
			code, msg := errorOf(t, method, u, nil)
			if (code == http.StatusUnauthorized) == (r.need == wire.NeedPublic) {
				t.Errorf("no token: %d %q", code, msg)
			}
			if method != http.MethodGet && method != http.MethodHead || r.need == wire.NeedPublic {
				// the admin's call would run a change; the right is checked before it
			} else if code, msg := errorOf(t, method, u, nil, admin...); code == http.StatusUnauthorized || code == http.StatusForbidden {
				t.Errorf("admin: %d %q", code, msg)
			}
			code, msg = errorOf(t, method, u, nil, "Authorization", "Bearer "+reader.Token)
			var want string
			switch r.need {
			case wire.NeedWrite:
				want = `accesskey: access denied: key ` + reader.ID + ` has no write right on cube "shop" (only read)`
			case wire.NeedAdmin:
				want = fmt.Sprintf("server: this access key may not use that: %s %s needs the admin token (key %s)", method, path, reader.ID)
			}
			if method == http.MethodHead {
				msg = want // a HEAD answer has no body: its status alone
			}
			if want != "" && (code != http.StatusForbidden || msg != want) || want == "" && (code == http.StatusForbidden || code == http.StatusUnauthorized) {
				t.Errorf("shop's read key: %d %q, want %q", code, msg, want)
			}
			if r.need == wire.NeedRead || r.need == wire.NeedWrite {
				code, msg = errorOf(t, method, u, nil, "Authorization", "Bearer "+other.Token)
				want := fmt.Sprintf(`accesskey: access denied: key %s has no %s right on cube "shop" (no right there)`, other.ID, r.need)
				if code != http.StatusForbidden || msg != want {
					t.Errorf("blog's key: %d %q, want %q", code, msg, want)
				}
			}
		})
	}
}

// Two nodes over one PostgreSQL text store share their keys: a key made on
// node A works on node B, is listed there (without its token), and once
// revoked on A is a 401 on B at the very next request; a cube shared on B
// opens on A at once.
func TestKeysTwoNodes(t *testing.T) {
	pg := testutil.StartPostgres(t)
	url := pg.CreateDB()
	node := func() *env {
		st, err := textpg.Open(context.Background(), url, textpg.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envConfig{noEngine: true, opts: Options{Token: "admin"}, mo: memosrt.Options{TextStore: st}})
		t.Cleanup(func() { e.close(t); st.Close() })
		return e
	}
	a, b := node(), node()
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"shop", "blog"} {
		if code := do(t, "POST", a.url()+"/v1/cubes/"+c+"/memories", map[string]any{"text": "The shop sells red bikes."}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("add to %s on A: %d", c, code)
		}
	}
	k := makeKey(t, a, map[string]any{"cubes": []map[string]string{{"cube": "shop", "right": "read"}}})
	key := []string{"Authorization", "Bearer " + k.Token}
	search := func(e *env, cube string) int {
		return do(t, "POST", e.url()+"/v1/cubes/"+cube+"/search", map[string]any{"query": "bikes"}, nil, key...)
	}
	if code := search(b, "shop"); code != http.StatusOK {
		t.Fatalf("A's key on B: %d", code)
	}
	if code := do(t, "POST", b.url()+"/v1/cubes/shop/memories", map[string]any{"text": "x"}, nil, key...); code != http.StatusForbidden {
		t.Fatalf("A's read key adding on B: %d, want 403", code)
	}
	var raw json.RawMessage
	if code := do(t, "GET", b.url()+"/v1/keys", nil, &raw, admin...); code != http.StatusOK || !strings.Contains(string(raw), k.ID) ||
		strings.Contains(string(raw), k.Token[len("msk_"):]) {
		t.Fatalf("B's key list: %d %s", code, raw)
	}
	if code := search(a, "blog"); code != http.StatusForbidden {
		t.Fatalf("blog before sharing: %d", code)
	}
	if code := do(t, "POST", b.url()+"/v1/cubes/blog/share", map[string]any{"key_id": k.ID}, nil, admin...); code != http.StatusOK {
		t.Fatalf("share blog on B: %d", code)
	}
	if code := search(a, "blog"); code != http.StatusOK {
		t.Fatalf("blog on A, shared on B: %d", code)
	}
	if code := do(t, "DELETE", a.url()+"/v1/keys/"+k.ID, nil, nil, admin...); code != http.StatusNoContent {
		t.Fatalf("revoke on A: %d", code)
	}
	if code := search(b, "shop"); code != http.StatusUnauthorized {
		t.Fatalf("the revoked key on B, the next request: %d, want 401", code)
	}
	if code := search(a, "shop"); code != http.StatusUnauthorized {
		t.Fatalf("the revoked key on A: %d, want 401", code)
	}
}

// BenchmarkKeyAuth times one read request (GET /v1/cubes/shop/memories/ID)
// made with the admin token and with an access key (which costs a lookup of
// the key and of the cube's record in the text store on every request,
// nothing cached), over Badger and over PostgreSQL:
//
//	go test -run '^$' -bench KeyAuth -benchtime 2000x ./server/
func BenchmarkKeyAuth(b *testing.B) {
	stores := map[string]func(b *testing.B) memosrt.Options{
		"badger": func(*testing.B) memosrt.Options { return memosrt.Options{} },
		"postgres": func(b *testing.B) memosrt.Options {
			st, err := textpg.Open(context.Background(), testutil.StartPostgres(b).CreateDB(), textpg.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return memosrt.Options{TextStore: st}
		},
	}
	for _, name := range []string{"badger", "postgres"} {
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, envConfig{noEngine: true, opts: Options{Token: "admin"}, mo: stores[name](b)})
			var m struct{ ID string }
			if code := do(b, "POST", e.url()+"/v1/cubes/shop/memories", map[string]any{"text": "The shop sells red bikes."}, &m, "Authorization", "Bearer admin"); code != http.StatusCreated {
				b.Fatalf("add: %d", code)
			}
			var k keyOut
			if code := do(b, "POST", e.url()+"/v1/keys", map[string]any{"cubes": []map[string]string{{"cube": "shop", "right": "read"}}}, &k,
				"Authorization", "Bearer admin"); code != http.StatusCreated {
				b.Fatalf("key: %d", code)
			}
			for _, who := range []struct{ name, tok string }{{"admin", "admin"}, {"key", k.Token}} {
				b.Run(who.name, func(b *testing.B) {
					req, _ := http.NewRequest("GET", e.url()+"/v1/cubes/shop/memories/"+m.ID, nil)
					req.Header.Set("Authorization", "Bearer "+who.tok)
					for b.Loop() {
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							b.Fatalf("%d", resp.StatusCode)
						}
					}
				})
			}
		})
	}
}
