//go:build linux

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/textmem"
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
// key's page shows its own cube only. TestPlayground drives the page's
// controls.
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
		shot := filepath.Join(t.TempDir(), "ui.png")
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

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// rowJS is the expression of the memory table's row of memory id (null
// when there is none).
func rowJS(id string) string {
	return `document.querySelector("#memories tbody tr[data-id=" + CSS.escape(` + jsString(id) + `) + "]")`
}

// The playground (/ui) driven through headless chromium over CDP, as a
// person would: add a memory with the form, edit it in its row, chat with
// the cube and see the answer with the memories its prompt carried (the
// same text and ids the native API answers), run a tick and see the
// table's use and heat follow the API's, run an extraction and see its
// job end as the API reports it, delete the memory (after confirming) and
// see it gone (404 through the API). Writes a screenshot to
// $MEMOSRT_UI_SCREENSHOT (docs/ui.png is made that way) or a temp dir.
func TestPlayground(t *testing.T) {
	bin := chromium(t)
	const admin = "T0ken"
	e := newEnv(t, envConfig{opts: Options{Token: admin}})
	auth := []string{"Authorization", "Bearer " + admin}
	u := e.url()
	packed := addPlayMemories(t, u, "lily", auth, lilyMemories...)
	if code := do(t, "POST", u+"/v1/cubes/lily/pack", nil, nil, auth...); code != http.StatusOK {
		t.Fatalf("warm: %d", code)
	}
	memText := func(id string) (string, int) {
		var m textmem.Memory
		code := do(t, "GET", u+"/v1/cubes/lily/memories/"+id, nil, &m, auth...)
		return m.Text, code
	}

	b := startBrowser(t, bin, 1280, 1280)
	// every Content-Security-Policy violation of the page, from its start
	b.do("Page.enable", nil, nil)
	b.do("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(e.violatedDirective + " " + e.blockedURI));`}, nil)
	b.navigate(u + "/ui?cube=lily#token=" + admin)
	var rows []string
	b.waitFor("the cube's three memories", `(() => { const r = [...document.querySelectorAll("#memories tbody tr[data-id]")].map((r) => r.dataset.id); return r.length === 3 && r; })()`, &rows)
	slices.Sort(rows)
	if want := slices.Sorted(slices.Values(packed)); !slices.Equal(rows, want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}

	// add: type into the form, Enter
	const kite = "Lily flies a red kite."
	b.eval(`document.getElementById("add-text").focus()`, nil)
	b.typeText(kite)
	b.press("Enter")
	var id string
	b.waitFor("the added memory's row", `[...document.querySelectorAll("#memories tbody tr[data-id]")].find((r) => r.querySelector(".mem-text").textContent === `+jsString(kite)+`)?.dataset.id`, &id)
	if text, code := memText(id); code != http.StatusOK || text != kite {
		t.Fatalf("the added memory through the API: %d %q, want %q", code, text, kite)
	}
	var logged string
	b.waitFor("the add in the actions", `document.querySelector("#actions li[data-action=add][data-state=ok] .result")?.textContent`, &logged)
	if want := id + ": " + kite; logged != want {
		t.Fatalf("actions say %q, want %q", logged, want)
	}

	// edit: the row's Edit button, select the text, type the new one, Enter
	const edited = "Lily flies a red and yellow kite."
	b.eval(rowJS(id)+`.querySelector("button[aria-label^=edit]").click()`, nil)
	b.waitFor("the editor's focus", `document.activeElement?.closest("tr")?.dataset.id === `+jsString(id), nil)
	b.eval(`document.activeElement.select()`, nil)
	b.typeText(edited)
	b.press("Enter")
	b.waitFor("the edited text in the row", rowJS(id)+`?.querySelector(".mem-text")?.textContent === `+jsString(edited), nil)
	if text, code := memText(id); code != http.StatusOK || text != edited {
		t.Fatalf("the edited memory through the API: %d %q, want %q", code, text, edited)
	}

	// chat: type the question, Enter; the answer lists its memories
	const question = "What colour is Lily's kite?"
	b.eval(`document.getElementById("chat-max").value = "8"; document.getElementById("chat-input").focus()`, nil)
	b.typeText(question)
	b.press("Enter")
	var ans struct {
		Done      string   `json:"done"`
		Text      string   `json:"text"`
		Pack      []string `json:"pack"`
		Retrieved []string `json:"retrieved"`
		Texts     []string `json:"texts"`
		Composed  string   `json:"composed"`
		Meta      string   `json:"meta"`
	}
	b.waitFor("the answer", `(() => {
  const a = document.querySelector("#chat-log li.msg.assistant[data-done]");
  if (!a) return null;
  const ids = (kind) => [...a.querySelectorAll("li[data-kind=" + kind + "]")].map((l) => l.dataset.id);
  return { done: a.dataset.done, text: a.querySelector(".text").textContent, pack: ids("pack"), retrieved: ids("retrieved"),
    texts: [...a.querySelectorAll("li[data-kind]")].map((l) => l.lastChild.textContent.trim()),
    composed: a.querySelector("li[data-none=composed]")?.textContent || "", meta: a.querySelector(".meta")?.textContent || "" };
})()`, &ans)
	if ans.Done != "true" {
		t.Fatalf("the answer failed: %q", ans.Text)
	}
	// the same conversation through the native API (greedy: the same text)
	var want memoryIDs
	if code := do(t, "POST", u+"/v1/generate", map[string]any{"cube": "lily", "num_predict": 8, "record": "none", "no_persist": true,
		"messages": []map[string]string{{"role": "user", "content": question}}}, &want, auth...); code != http.StatusOK {
		t.Fatalf("generate: %d", code)
	}
	if ans.Text != want.Response || ans.Text == "" {
		t.Errorf("page answer %q, API answer %q", ans.Text, want.Response)
	}
	if !slices.Equal(ans.Pack, want.PackIDs) || !slices.Equal(ans.Retrieved, want.RetrievedIDs) ||
		!slices.Equal(want.PackIDs, packed) || !slices.Equal(want.RetrievedIDs, []string{id}) {
		t.Errorf("page: pack %q retrieved %q; API: pack %q retrieved %q; want pack %q retrieved [%s]",
			ans.Pack, ans.Retrieved, want.PackIDs, want.RetrievedIDs, packed, id)
	}
	if wantTexts := append(slices.Clone(lilyMemories), edited); !slices.Equal(ans.Texts, wantTexts) {
		t.Errorf("the answer lists %q, want %q", ans.Texts, wantTexts)
	}
	if ans.Composed != "composed none: no memory chunk was composed into this turn" || !strings.Contains(ans.Meta, "TTFT ") || !strings.Contains(ans.Meta, " cached") {
		t.Errorf("the answer's facts: composed %q, meta %q", ans.Composed, ans.Meta)
	}
	var marks []string
	b.waitFor("the table marking the answer's memories", `(() => {
  const m = [...document.querySelectorAll("#memories tbody tr[data-id]")].filter((r) => r.querySelector("td.used").textContent).map((r) => r.dataset.id + "=" + r.querySelector("td.used").textContent);
  return m.length === 4 && m;
})()`, &marks)
	slices.Sort(marks)
	wantMarks := []string{id + "=retrieved"}
	for _, p := range packed {
		wantMarks = append(wantMarks, p+"=pack")
	}
	if slices.Sort(wantMarks); !slices.Equal(marks, wantMarks) {
		t.Errorf("table marks %q, want %q", marks, wantMarks)
	}

	// tick: its report, then the table's use and heat as the API has them
	b.eval(`document.getElementById("tick").click()`, nil)
	var tick string
	b.waitFor("the tick's report", `document.querySelector("#actions li[data-action=tick]:not([data-state=running]) .result")?.textContent`, &tick)
	if !regexp.MustCompile(`^planned \d+ · done \d+ · failed 0$`).MatchString(tick) {
		t.Fatalf("tick: %q", tick)
	}
	type tierRow struct {
		ID    string  `json:"id"`
		Heat  float64 `json:"heat"`
		Usage struct {
			V float64 `json:"v"`
			I float64 `json:"i"`
		} `json:"usage"`
	}
	var tiers struct{ Memories []tierRow }
	do(t, "GET", u+"/v1/cubes/lily/tiers", nil, &tiers, auth...)
	k := slices.IndexFunc(tiers.Memories, func(m tierRow) bool { return m.ID == id })
	if k < 0 || tiers.Memories[k].Usage.V < 1 || tiers.Memories[k].Heat <= 0 {
		t.Fatalf("after a tick the API's tiers give the retrieved memory no use: %+v", tiers.Memories)
	}
	km := tiers.Memories[k]
	b.waitFor("the table's use and heat", fmt.Sprintf(`(() => { const r = %s; return r && r.querySelector(".visits").textContent === %q &&
  r.querySelector(".turns").textContent === %q && Math.abs(parseFloat(r.querySelector(".heat").textContent) - %g) <= 0.011; })()`,
		rowJS(id), fmt.Sprintf("%.1f", km.Usage.V), fmt.Sprintf("%.1f", km.Usage.I), km.Heat), nil)

	// extraction: the text as a user turn, a job followed to its end
	b.eval(`document.getElementById("extract-text").focus()`, nil)
	b.typeText("I love green tea.")
	b.eval(`document.getElementById("extract").click()`, nil)
	var ex struct {
		State, Job, JobState, Text string
	}
	b.waitFor("the extraction's end", `(() => { const l = document.querySelector("#actions li[data-action=extract]:not([data-state=running])");
  return l && { state: l.dataset.state, job: l.dataset.job || "", jobState: l.dataset.jobState || "", text: l.querySelector(".result").textContent }; })()`, &ex)
	var job struct {
		State   string
		Results []struct{ Op, Text string }
	}
	if code := do(t, "GET", u+"/v1/cubes/lily/jobs/"+ex.Job, nil, &job, auth...); code != http.StatusOK || ex.State != "ok" {
		t.Fatalf("extraction %+v; the job through the API: %d", ex, code)
	}
	if job.State != "done" || ex.JobState != job.State || !strings.HasPrefix(ex.Text, fmt.Sprintf("job %s done · %d result", ex.Job, len(job.Results))) {
		t.Fatalf("page says %+v; the API's job: %+v", ex, job)
	}

	shot := os.Getenv("MEMOSRT_UI_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "playground.png")
	} else if shot, _ = filepath.Abs(shot); shot == "" {
		t.Fatal("bad MEMOSRT_UI_SCREENSHOT")
	}
	b.eval(`document.activeElement?.blur(); window.scrollTo(0, 0)`, nil)
	b.screenshot(shot)
	t.Logf("screenshot: %s", shot)

	// delete: the row's Delete, then Confirm delete (the focus is on Cancel)
	b.eval(rowJS(id)+`.querySelector("button[aria-label^=delete]").click()`, nil)
	b.waitFor("the confirmation", `document.activeElement?.textContent === "Cancel" && document.activeElement.closest("tr")?.dataset.id === `+jsString(id), nil)
	b.eval(`[...`+rowJS(id)+`.querySelectorAll("button")].find((x) => x.textContent === "Confirm delete").click()`, nil)
	b.waitFor("the row gone", `document.querySelector("#actions li[data-action=delete][data-state=ok]") && !`+rowJS(id), nil)
	if _, code := memText(id); code != http.StatusNotFound {
		t.Fatalf("the deleted memory through the API: %d, want 404", code)
	}
	for _, p := range packed {
		b.waitFor("a packed memory's row", rowJS(p), nil)
	}
	var csp []string
	b.eval(`window.cspViolations || ["no listener"]`, &csp)
	if len(csp) > 0 {
		t.Errorf("the page broke its Content-Security-Policy: %q", csp)
	}

	// an access key: its cube's memories, and a tick (server-wide) refused
	// in the actions list with the server's reason
	var key struct{ Token string }
	if code := do(t, "POST", u+"/v1/keys", map[string]string{"cube": "lily"}, &key, auth...); code != http.StatusCreated {
		t.Fatalf("key: %d", code)
	}
	b.navigate(u + "/ui#token=" + key.Token)
	b.waitFor("the key's cube", `document.getElementById("cube-title").textContent === "Cube lily" && `+rowJS(packed[0]), nil)
	b.eval(`document.getElementById("tick").click()`, nil)
	var refused string
	b.waitFor("the refused tick", `document.querySelector("#actions li[data-action=tick][data-state=error]")?.textContent`, &refused)
	if !strings.Contains(refused, "Tick failed: ") || !strings.Contains(refused, "needs the admin token") {
		t.Errorf("a key's tick: %q", refused)
	}
}

// TestPlaygroundComposed: with serve --compose and the cube's memory
// chunks made, a playground chat turn lists how many prompt tokens were
// placed from memory chunks, the number the server counted.
func TestPlaygroundComposed(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t, envConfig{mo: memosrt.Options{Compose: 0.15}, nseq: 1})
	u := e.url()
	addPlayMemories(t, u, "lily", nil, lilyMemories...)
	if code := do(t, "POST", u+"/v1/cubes/lily/chunks", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("chunks: %d", code)
	}
	b := startBrowser(t, bin, 1280, 1280)
	b.navigate(u + "/ui?cube=lily")
	b.waitFor("the cube's memories", `document.querySelectorAll("#memories tbody tr[data-id]").length === 3`, nil)
	b.eval(`document.getElementById("chat-max").value = "2"; document.getElementById("chat-input").focus()`, nil)
	b.typeText("What does Max like to do?")
	b.press("Enter")
	var composed string
	b.waitFor("the answer", `(() => {
  const a = document.querySelector("#chat-log li.msg.assistant[data-done]");
  return a && (a.querySelector("li[data-composed]") || a.querySelector("li[data-none=composed]"))?.textContent;
})()`, &composed)
	_, raw := send(t, "GET", u+"/metrics", nil)
	m := regexp.MustCompile(`memosrt_prompt_tokens_total\{kind="composed"\} (\d+)`).FindStringSubmatch(string(raw))
	if m == nil || m[1] == "0" {
		t.Fatalf("metrics: no composed tokens:\n%s", grepLines(string(raw), "compos"))
	}
	if want := regexp.MustCompile(`^composed ` + m[1] + ` prompt tokens placed from memory chunks, \d+ of them recomputed$`); !want.MatchString(composed) {
		t.Fatalf("the answer's composed line %q, want %s", composed, want)
	}
}
