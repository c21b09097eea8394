package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/datadir"
)

// TestBackupRoute: GET /v1/backup needs the admin token (none: 401, a
// cube's access key: 403); the admin's download restores into a new
// directory that memosrt.Open serves with the same memories, text for
// text.
func TestBackupRoute(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true, opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	want := map[string]map[string]string{"a": {}, "b": {}} // cube -> id -> text
	for i := range 20 {
		cube := []string{"a", "b"}[i%2]
		text := fmt.Sprintf("Memory %d of cube %s: café ☕ %d.", i, cube, i*i)
		var m struct{ ID string }
		if code := do(t, "POST", e.url()+"/v1/cubes/"+cube+"/memories", map[string]any{"text": text}, &m, admin...); code != http.StatusCreated {
			t.Fatalf("add: %d", code)
		}
		want[cube][m.ID] = text
	}
	var k struct{ Token string }
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": "a"}, &k, admin...); code != http.StatusCreated {
		t.Fatalf("key: %d", code)
	}
	get := func(hdr ...string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", e.url()+"/v1/backup", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	if resp, _ := get(); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	if resp, _ := get("Authorization", "Bearer "+k.Token); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cube key: %d", resp.StatusCode)
	}
	resp, body := get(admin...)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("admin: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	file := filepath.Join(t.TempDir(), "b.backup")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	ctx := context.Background()
	if _, err := datadir.RestoreBackup(ctx, file, datadir.Options{Dir: dst}); err != nil {
		t.Fatal(err)
	}
	o, err := memosrt.Open(ctx, memosrt.Options{Dir: dst, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := o.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	for cube, ms := range want {
		got, err := o.Memories(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ms) {
			t.Fatalf("cube %s: %d memories restored, want %d", cube, len(got), len(ms))
		}
		for _, m := range got {
			if m.Text != ms[m.ID] {
				t.Errorf("cube %s memory %s: %q, want %q", cube, m.ID, m.Text, ms[m.ID])
			}
		}
	}
	if _, err := o.Key(ctx, k.Token); err != nil {
		t.Errorf("the access key did not survive: %v", err)
	}
}
