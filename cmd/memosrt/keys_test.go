package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// keyJSON is `memosrt keys create --json`'s output.
type keyJSON struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Token  string `json:"token"`
	Grants []struct {
		Cube, Right string
	} `json:"grants"`
	CreatedBy string `json:"created_by"`
}

// `memosrt keys` on a data directory without a server: create (the token
// printed once), ls (never a token), share, unshare, revoke; bad cubes and
// rights are refused before anything is written.
func TestKeysCLI(t *testing.T) {
	db := t.TempDir()
	must(t, "mem", "add", "--db", db, "--cube", "shop", "The shop sells red bikes.")
	must(t, "mem", "add", "--db", db, "--cube", "blog", "The blog is about bikes.")
	var k keyJSON
	out := must(t, "keys", "create", "--db", db, "--cube", "shop:read", "--name", "shop reader", "--json")
	if err := json.Unmarshal([]byte(out), &k); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if !strings.HasPrefix(k.Token, "msk_") || !strings.HasPrefix(k.ID, "key_") || k.Name != "shop reader" || k.CreatedBy != "cli" ||
		len(k.Grants) != 1 || k.Grants[0].Cube != "shop" || k.Grants[0].Right != "read" {
		t.Fatalf("created %+v", k)
	}
	tok := strings.TrimSpace(must(t, "keys", "create", "--db", db, "--cube", "shop:write", "--cube", "blog", "--expires", "720h"))
	if !strings.HasPrefix(tok, "msk_") || len(tok) != 68 {
		t.Fatalf("plain create printed %q, want the token", tok)
	}
	ls := must(t, "keys", "ls", "--db", db)
	lsJSON := must(t, "keys", "ls", "--db", db, "--json")
	for _, o := range []string{ls, lsJSON} {
		if strings.Contains(o, k.Token[4:]) || strings.Contains(o, tok[4:]) {
			t.Fatalf("keys ls shows a token:\n%s", o)
		}
	}
	if !strings.Contains(ls, k.ID) || !strings.Contains(ls, "shop reader") || !strings.Contains(ls, "shop:write, blog:read") {
		t.Fatalf("keys ls:\n%s", ls)
	}
	if out := must(t, "keys", "share", "--db", db, "--cube", "blog", "--right", "write", k.ID); strings.TrimSpace(out) != "key "+k.ID+": shop:read, blog:write" {
		t.Fatalf("share: %q", out)
	}
	if out := must(t, "keys", "unshare", "--db", db, "--cube", "shop", k.ID); strings.TrimSpace(out) != "key "+k.ID+": blog:write" {
		t.Fatalf("unshare: %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--db", db}, "--cube is required"},
		{[]string{"keys", "create", "--db", db, "--cube", "shop:admin"}, `right "admin": want read or write`},
		{[]string{"keys", "create", "--db", db, "--cube", "a/b"}, "bad cube name"},
		{[]string{"keys", "create", "--db", db, "--cube", "nosuch"}, "unknown cube"},
		{[]string{"keys", "unshare", "--db", db, "--cube", "blog", k.ID}, "revoke the key instead"},
		{[]string{"keys", "revoke", "--db", db, "key_000000000000"}, "no such key"},
	} {
		out, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("memosrt %s: %v %q, want an error with %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
	must(t, "keys", "revoke", "--db", db, k.ID)
	if ls := must(t, "keys", "ls", "--db", db); strings.Contains(ls, k.ID) {
		t.Fatalf("a revoked key listed:\n%s", ls)
	}
}

// With `memosrt serve --token` running on the directory, `memosrt keys`
// goes through it: a key it creates is refused on changes at once and
// revoked at once (401 on the next request).
func TestKeysCLIThroughServe(t *testing.T) {
	db := t.TempDir()
	must(t, "mem", "add", "--db", db, "--cube", "shop", "The shop sells red bikes.")
	p := startServe(t, db, nil, "--token", "admin")
	var k keyJSON
	out := must(t, "keys", "create", "--db", db, "--cube", "shop:read", "--json")
	if err := json.Unmarshal([]byte(out), &k); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if k.CreatedBy != "local" {
		t.Fatalf("created through the server by %q, want local", k.CreatedBy)
	}
	call := func(method, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+k.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call("POST", "/v1/cubes/shop/search", `{"query":"bikes"}`); code != http.StatusOK {
		t.Fatalf("search with the new key: %d", code)
	}
	if code := call("POST", "/v1/cubes/shop/memories", `{"text":"closed"}`); code != http.StatusForbidden {
		t.Fatalf("add with the read key: %d, want 403", code)
	}
	if ls := must(t, "keys", "ls", "--db", db); !strings.Contains(ls, k.ID) || strings.Contains(ls, k.Token[4:]) {
		t.Fatalf("keys ls through serve:\n%s", ls)
	}
	must(t, "keys", "revoke", "--db", db, k.ID)
	if code := call("POST", "/v1/cubes/shop/search", `{"query":"bikes"}`); code != http.StatusUnauthorized {
		t.Fatalf("search with the revoked key: %d, want 401", code)
	}
	p.stop(t)
}
