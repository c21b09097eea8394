//go:build linux

package server

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chromium returns the headless browser the inspector test drives. It
// skips the test when none is installed, unless CI is set: CI installs
// Debian's chromium (.ci/run) and must run the test.
func chromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("chromium not installed (apt-get install chromium); CI runs this test")
		}
		t.Fatalf("CI is set but chromium is not installed: %v", err)
	}
	return p
}

// runChromium runs headless chromium once with a fresh profile (so
// localStorage starts empty) and returns its stdout. The browser runs in
// its own process group, killed as a whole when it returns, when 60 s pass
// or when the test binary dies: no renderer or zygote is left behind.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(),
		"--window-size=1280,800", "--virtual-time-budget=5000"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the helpers it forked, if any outlived it
	}
	if err != nil {
		// dbus and GPU warnings on stderr are normal; only the exit counts
		t.Fatalf("chromium %v: %v (ctx %v)\n%s", args, err, ctx.Err(), stderr.String())
	}
	return stdout.String()
}

// The inspector page (/ui) through a real browser: with --token it is
// public, takes the token from #token=, and shows the cube's memories
// with their tier, its packs with their level, and the budgets; an access
// key's page shows its own cube only. Writes a screenshot to
// $MEMOSRT_UI_SCREENSHOT (docs/ui.png is made that way) or a temp dir.
func TestInspectorUI(t *testing.T) {
	bin := chromium(t)
	const admin = "T0ken"
	e := newEnv(t, envConfig{opts: Options{Token: admin}})
	auth := []string{"Authorization", "Bearer " + admin}
	u := e.url()
	for _, m := range lilyMemories {
		if code := do(t, "POST", u+"/v1/cubes/lily/memories", map[string]string{"text": m}, nil, auth...); code != http.StatusCreated {
			t.Fatalf("add memory: %d", code)
		}
	}
	if code := do(t, "POST", u+"/v1/cubes/tom/memories", map[string]string{"text": "Tom flies a blue kite."}, nil, auth...); code != http.StatusCreated {
		t.Fatalf("add memory: %d", code)
	}
	var warm map[string]any
	if code := do(t, "POST", u+"/v1/cubes/lily/pack", map[string]bool{"resident": true}, &warm, auth...); code != http.StatusOK {
		t.Fatalf("warm: %d %v", code, warm)
	}
	// a chat turn: heat for the memories it retrieves, a conversation pack
	chat := map[string]any{"model": testModel, "stream": false, "options": map[string]any{"num_predict": 8},
		"messages": []map[string]string{{"role": "user", "content": "What is the name of Lily's dog?"}}}
	if code := do(t, "POST", u+"/api/chat", chat, nil, append(auth, CubeHeader, "lily")...); code != http.StatusOK {
		t.Fatalf("chat: %d", code)
	}
	var key map[string]any
	if code := do(t, "POST", u+"/v1/keys", map[string]string{"cube": "tom"}, &key, auth...); code != http.StatusCreated {
		t.Fatalf("key: %d", code)
	}
	tomKey := key["token"].(string)

	t.Run("routes", func(t *testing.T) {
		for _, c := range []struct {
			path string
			hdr  []string
			want int
		}{
			{"/ui", nil, http.StatusOK},
			{"/ui/", nil, http.StatusOK},
			{"/ui/app.js", nil, http.StatusOK},
			{"/ui/style.css", nil, http.StatusOK},
			{"/ui/nope.js", nil, http.StatusUnauthorized},                                      // not a page file: not public
			{"/ui/nope.js", auth, http.StatusNotFound},                                         // and not there
			{"/v1/stats", nil, http.StatusUnauthorized},                                        // the data needs the token
			{"/v1/stats", auth, http.StatusOK},                                                 // admin: budgets
			{"/v1/stats", []string{"Authorization", "Bearer " + tomKey}, http.StatusForbidden}, // server-wide
			{"/v1/cubes/tom/adapters", []string{"Authorization", "Bearer " + tomKey}, http.StatusOK},
			{"/v1/cubes/lily/adapters", []string{"Authorization", "Bearer " + tomKey}, http.StatusForbidden},
		} {
			if code := do(t, "GET", u+c.path, nil, nil, c.hdr...); code != c.want {
				t.Errorf("GET %s (%d header fields): %d, want %d", c.path, len(c.hdr), code, c.want)
			}
		}
		var st struct {
			Model   struct{ Name string }
			Budgets map[string]float64
		}
		do(t, "GET", u+"/v1/stats", nil, &st, auth...)
		if st.Model.Name != testModel || st.Budgets["tier_kv_budget"] <= 0 || st.Budgets["resident_cells"] <= 0 {
			t.Errorf("stats: %+v", st)
		}
		var ps struct{ Levels map[string]string }
		do(t, "GET", u+"/v1/cubes/lily/pack", nil, &ps, auth...)
		if !strings.Contains(strings.Join(mapValues(ps.Levels), " "), "resident") {
			t.Errorf("pack levels after a resident warm: %v", ps.Levels)
		}
	})

	t.Run("admin", func(t *testing.T) {
		dom := runChromium(t, bin, "--dump-dom", u+"/ui?cube=lily#token="+admin)
		for _, want := range []string{`data-ready="true"`, "Lily has a dog named Max.", `class="badge activation"`,
			`class="badge resident"`, "Cube lily", testModel, "Tier KV", "tom"} {
			if !strings.Contains(dom, want) {
				t.Errorf("DOM lacks %q:\n%s", want, dom)
			}
		}
		shot := os.Getenv("MEMOSRT_UI_SCREENSHOT")
		if shot == "" {
			shot = filepath.Join(t.TempDir(), "ui.png")
		} else if shot, _ = filepath.Abs(shot); shot == "" {
			t.Fatal("bad MEMOSRT_UI_SCREENSHOT")
		}
		runChromium(t, bin, "--hide-scrollbars", "--screenshot="+shot, u+"/ui?cube=lily#token="+admin)
		st, err := os.Stat(shot)
		if err != nil || st.Size() == 0 {
			t.Fatalf("screenshot %s: %v", shot, err)
		}
		t.Logf("screenshot: %s (%d bytes)", shot, st.Size())
	})

	t.Run("access key", func(t *testing.T) {
		dom := runChromium(t, bin, "--dump-dom", u+"/ui#token="+tomKey)
		for _, want := range []string{`data-ready="true"`, "Cube tom", "Tom flies a blue kite.", `class="badge text"`} {
			if !strings.Contains(dom, want) {
				t.Errorf("DOM lacks %q:\n%s", want, dom)
			}
		}
		if strings.Contains(dom, "lily") || strings.Contains(dom, "Lily") {
			t.Errorf("an access key for tom sees cube lily:\n%s", dom)
		}
	})

	t.Run("no token", func(t *testing.T) {
		dom := runChromium(t, bin, "--dump-dom", u+"/ui?cube=lily")
		if !strings.Contains(dom, "token needed") || strings.Contains(dom, "Lily has a dog") {
			t.Errorf("without a token the page shows data or no prompt:\n%s", dom)
		}
	})
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
