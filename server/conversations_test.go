package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/server/mcp"
	"github.com/memosrt/memosrt/textmem"
)

// messagesOut is the answer of POST /v1/cubes/{cube}/messages.
type messagesOut struct {
	Job   *convmem.Job   `json:"job"`
	Turns []convmem.Turn `json:"turns"`
}

// getJob returns job id of cube (GET .../jobs/{id}), which must exist.
func getJob(t *testing.T, e *env, cube, id string) convmem.Job {
	t.Helper()
	var j convmem.Job
	if code := do(t, "GET", e.url()+"/v1/cubes/"+cube+"/jobs/"+id, nil, &j); code != http.StatusOK {
		t.Fatalf("GET job %s: %d", id, code)
	}
	return j
}

// finished waits until job id of cube is done or failed and returns it.
func finished(t *testing.T, e *env, cube, id string) convmem.Job {
	t.Helper()
	var j convmem.Job
	testutil.WaitFor(t, "job "+id+" done or failed", func() bool {
		j = getJob(t, e, cube, id)
		return j.State == convmem.JobDone || j.State == convmem.JobFailed
	})
	return j
}

// turnsOf returns cube's short-term queue (GET .../turns, with the
// headers hdr).
func turnsOf(t *testing.T, e *env, cube string, hdr ...string) []convmem.Turn {
	t.Helper()
	var out struct{ Turns []convmem.Turn }
	if code := do(t, "GET", e.url()+"/v1/cubes/"+cube+"/turns", nil, &out, hdr...); code != http.StatusOK {
		t.Fatalf("GET turns of %s: %d", cube, code)
	}
	return out.Turns
}

// Messages recorded over HTTP on the served model: 202 with a queued job
// that ends done or failed (the model's output held to the schema, or its
// failure recorded); the turns, jobs, profile and sessions can be read; bad
// input is a 400 that stores nothing.
func TestMessagesAPI(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024})
	var out messagesOut
	msgs := []map[string]string{{"role": "user", "content": "I love apple pie."}, {"role": "assistant", "content": "Apple pie is nice."},
		{"role": "user", "content": "My dog is named Max."}}
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/messages", map[string]any{"messages": msgs}, &out); code != http.StatusAccepted {
		t.Fatalf("POST messages: %d", code)
	}
	if out.Job == nil || out.Job.ID == "" || out.Job.State != convmem.JobQueued || out.Job.Cube != "lily" || len(out.Turns) != 2 {
		t.Fatalf("POST messages: %+v", out)
	}
	if out.Turns[0].User != msgs[0]["content"] || out.Turns[0].Assistant != msgs[1]["content"] || out.Turns[1].User != msgs[2]["content"] ||
		!slices.Equal(out.Job.Turns, []string{out.Turns[0].ID, out.Turns[1].ID}) {
		t.Fatalf("turns %+v of job %+v", out.Turns, out.Job)
	}
	j := finished(t, e, "lily", out.Job.ID)
	t.Logf("job %s by %s: %d results, error %q", j.State, j.By, len(j.Results), j.Error)
	if j.By != "model" || j.Attempts != 1 || j.Finished.IsZero() || (j.State == convmem.JobFailed) != (j.Error != "") {
		t.Fatalf("finished job %+v", j)
	}

	var jobs struct{ Jobs []convmem.Job }
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/jobs", nil, &jobs); code != http.StatusOK || len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != j.ID {
		t.Fatalf("GET jobs: %d %+v", code, jobs)
	}
	if got := turnsOf(t, e, "lily"); len(got) != 2 || got[0].ID != out.Turns[0].ID || got[1].User != msgs[2]["content"] {
		t.Fatalf("GET turns: %+v", got)
	}
	var prof map[string]any
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/profile", nil, &prof); code != http.StatusOK || prof["facts"] == nil || prof["knowledge"] == nil {
		t.Fatalf("GET profile: %d %v", code, prof)
	}
	var ses map[string][]convmem.Session
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/sessions", nil, &ses); code != http.StatusOK || ses["sessions"] == nil {
		t.Fatalf("GET sessions: %d %v", code, ses)
	}

	// infer false: the turns alone, no job
	out = messagesOut{}
	in := map[string]any{"messages": []map[string]string{{"role": "user", "content": "I live in Paris."}}, "infer": false}
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/messages", in, &out); code != http.StatusOK || out.Job != nil || len(out.Turns) != 1 {
		t.Fatalf("infer false: %d %+v", code, out)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/jobs", nil, &jobs); code != http.StatusOK || len(jobs.Jobs) != 1 {
		t.Fatalf("jobs after infer false: %+v", jobs)
	}

	// refusals: 400 naming the field, and nothing stored
	addCube(t, e, "empty")
	for _, c := range []struct {
		name, body, param string
	}{
		{"no messages", `{"messages": []}`, "messages"},
		{"messages absent", `{}`, "messages"},
		{"whitespace only", `{"messages": [{"role": "user", "content": "  \n\t"}, {"role": "assistant", "content": " "}]}`, "messages"},
		{"system only", `{"messages": [{"role": "system", "content": "Be brief."}]}`, "messages"},
		{"bad role", `{"messages": [{"role": "robot", "content": "hi"}]}`, "messages[0].role"},
		{"unknown field", `{"messages": [{"role": "user", "content": "hi"}], "extract": true}`, "extract"},
		{"infer type", `{"messages": [{"role": "user", "content": "hi"}], "infer": "no"}`, "infer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cube := range []string{"empty", "nosuch"} {
				var oe oaiError
				if code := do(t, "POST", e.url()+"/v1/cubes/"+cube+"/messages", c.body, &oe); code != http.StatusBadRequest ||
					oe.Error.Param == nil || *oe.Error.Param != c.param {
					t.Fatalf("%s: %d %+v", cube, code, oe.Error)
				}
			}
			if got := turnsOf(t, e, "empty"); len(got) != 0 {
				t.Fatalf("a refused request stored %+v", got)
			}
			if code := do(t, "GET", e.url()+"/v1/cubes/nosuch", nil, nil); code != http.StatusNotFound {
				t.Fatalf("a refused request made its cube: %d", code)
			}
		})
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/bad%20name/messages", `{"messages": [{"role": "user", "content": "hi"}]}`, nil); code != http.StatusBadRequest {
		t.Fatalf("bad cube name: %d", code)
	}

	// unknown jobs and cubes
	const nojob = "000000000000000000000000"
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/cubes/lily/jobs/" + nojob},
		{"POST", "/v1/cubes/lily/jobs/" + nojob + "/undo"},
		{"GET", "/v1/cubes/nosuch/jobs"},
		{"GET", "/v1/cubes/nosuch/profile"},
		{"GET", "/v1/cubes/nosuch/turns"},
		{"GET", "/v1/cubes/nosuch/sessions"},
	} {
		var oe oaiError
		if code := do(t, c.method, e.url()+c.path, nil, &oe); code != http.StatusNotFound || oe.Error.Type != "not_found_error" {
			t.Errorf("%s %s: %d %+v", c.method, c.path, code, oe.Error)
		}
	}
}

// Without a model, jobs extract first-person sentences: a done job's
// memories carry its confidence and turns and a change log; undo deletes
// them (200, state undone) and a second undo is a 409.
func TestMessagesExtractiveUndo(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	var out messagesOut
	in := map[string]any{"messages": []map[string]string{{"role": "user", "content": "I love apple pie. Where is the park?"}}}
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/messages", in, &out); code != http.StatusAccepted || out.Job == nil {
		t.Fatalf("POST messages: %d %+v", code, out)
	}
	j := finished(t, e, "lily", out.Job.ID)
	if j.State != convmem.JobDone || j.By != "extractive" || len(j.Results) != 1 || j.Results[0].Op != convmem.OpAdd ||
		j.Results[0].Text != "I love apple pie." {
		t.Fatalf("job %+v", j)
	}
	id := j.Results[0].MemoryID
	var m textmem.Memory
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/memories/"+id, nil, &m); code != http.StatusOK || m.Confidence != 0.5 ||
		!slices.Equal(m.Turns, []string{out.Turns[0].ID}) || m.Source != "extract:"+j.ID {
		t.Fatalf("extracted memory: %d %+v", code, m)
	}
	if ops := logOps(t, e, "lily", id); !slices.Equal(ops, []string{"add"}) {
		t.Fatalf("log of the extracted memory: %v", ops)
	}

	var u convmem.Job
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/jobs/"+j.ID+"/undo", nil, &u); code != http.StatusOK || u.State != convmem.JobUndone || u.ID != j.ID {
		t.Fatalf("undo: %d %+v", code, u)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/memories/"+id, nil, nil); code != http.StatusNotFound {
		t.Fatalf("the undone job's memory: %d", code)
	}
	if ops := logOps(t, e, "lily", id); !slices.Equal(ops, []string{"add", "delete"}) {
		t.Fatalf("log after undo: %v", ops)
	}
	var oe oaiError
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/jobs/"+j.ID+"/undo", nil, &oe); code != http.StatusConflict || !strings.Contains(oe.Error.Message, "undone") {
		t.Fatalf("second undo: %d %+v", code, oe.Error)
	}
	if got := getJob(t, e, "lily", j.ID); got.State != convmem.JobUndone {
		t.Fatalf("job after undo: %+v", got)
	}
}

// logOps returns the ops of memory id's change log (GET .../log).
func logOps(t *testing.T, e *env, cube, id string) []string {
	t.Helper()
	var out struct{ Changes []convmem.Change }
	if code := do(t, "GET", e.url()+"/v1/cubes/"+cube+"/memories/"+id+"/log", nil, &out); code != http.StatusOK {
		t.Fatalf("GET log of %s: %d", id, code)
	}
	ops := []string{}
	for _, c := range out.Changes {
		ops = append(ops, c.Op)
	}
	return ops
}

// A job the runner has not finished cannot be undone: 409 for the running
// job (its extraction held at the upstream) and for the one queued behind
// it; once released both end.
func TestUndoUnfinishedJob(t *testing.T) {
	up := newEnv(t, envConfig{nctx: 1024})
	target, err := url.Parse(up.url())
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/generate" || r.URL.Path == "/api/chat" {
			select { // an extraction waits until the test lets it go
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close) // after e's cleanup: e's Close cancels the held request
	e := newEnv(t, envConfig{noEngine: true, mo: memosrt.Options{Upstream: &memosrt.UpstreamOptions{URL: proxy.URL, Model: testModel}}})

	add := func(text string) convmem.Job {
		t.Helper()
		var out messagesOut
		in := map[string]any{"messages": []map[string]string{{"role": "user", "content": text}}}
		if code := do(t, "POST", e.url()+"/v1/cubes/lily/messages", in, &out); code != http.StatusAccepted || out.Job == nil {
			t.Fatalf("POST messages: %d %+v", code, out)
		}
		return *out.Job
	}
	a := add("I love apple pie.")
	testutil.WaitFor(t, "job a running", func() bool { return getJob(t, e, "lily", a.ID).State == convmem.JobRunning })
	b := add("My dog is named Max.")
	if got := getJob(t, e, "lily", b.ID); got.State != convmem.JobQueued {
		t.Fatalf("job b behind a running job: %+v", got)
	}
	for _, c := range []struct {
		id, state string
	}{{a.ID, convmem.JobRunning}, {b.ID, convmem.JobQueued}} {
		var oe oaiError
		if code := do(t, "POST", e.url()+"/v1/cubes/lily/jobs/"+c.id+"/undo", nil, &oe); code != http.StatusConflict ||
			!strings.Contains(oe.Error.Message, c.state) {
			t.Fatalf("undo of a %s job: %d %+v", c.state, code, oe.Error)
		}
		if got := getJob(t, e, "lily", c.id); got.State != c.state {
			t.Fatalf("a refused undo changed the job: %+v", got)
		}
	}
	close(gate)
	for _, id := range []string{a.ID, b.ID} {
		j := finished(t, e, "lily", id)
		t.Logf("job %s: %s by %s (%d results, error %q)", id, j.State, j.By, len(j.Results), j.Error)
	}
}

// Chats in a cube record their turn unless "record" says otherwise, on
// each wire: a default chat one turn with the message and the answer,
// "user" the message alone, "none" nothing, as a cube made with no_record;
// any other value is a 400 that records nothing.
func TestChatRecord(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024})
	addCube(t, e, "lily", lilyMemories...)
	const msg = "Where does Max run?"
	msgs := []map[string]string{{"role": "user", "content": msg}}
	ollama := func(cube string, extra map[string]any) map[string]any {
		b := map[string]any{"model": testModel, "stream": false, "options": map[string]any{"cube": cube, "temperature": 0, "num_predict": 8}, "messages": msgs}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	openai := func(cube string, extra map[string]any) map[string]any {
		b := map[string]any{"model": testModel, "cube": cube, "temperature": 0, "max_tokens": 8, "messages": msgs}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	native := func(cube string, extra map[string]any) map[string]any {
		b := map[string]any{"cube": cube, "num_predict": 8, "messages": msgs}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}

	// the default: one turn, the message and the answer
	var r struct{ Message struct{ Content string } }
	if code := do(t, "POST", e.url()+"/api/chat", ollama("lily", nil), &r); code != http.StatusOK || r.Message.Content == "" {
		t.Fatalf("chat: %d %+v", code, r)
	}
	got := turnsOf(t, e, "lily")
	if len(got) != 1 || got[0].User != msg || got[0].Assistant != r.Message.Content || got[0].ID == "" ||
		got[0].Text() != msg+"\n"+r.Message.Content {
		t.Fatalf("turns after a chat answering %q: %+v", r.Message.Content, got)
	}
	var mems struct{ Memories []textmem.Memory }
	do(t, "GET", e.url()+"/v1/cubes/lily/memories", nil, &mems)
	// the turn is a memory of Kind turn at once, Source short-term (search
	// finds it; prompts do not hold it while it is short-term)
	if n := len(mems.Memories); n != len(lilyMemories)+1 || mems.Memories[n-1].Kind != memosrt.KindTurn ||
		mems.Memories[n-1].Source != memosrt.SourceShortTerm || mems.Memories[n-1].Text != got[0].Text() {
		t.Fatalf("memories after a chat: %+v", mems.Memories)
	}

	// record none and bad values, on each wire, leave the queue as it was
	for _, c := range []struct {
		name, path string
		body       func(string, map[string]any) map[string]any
		extra      map[string]any
		code       int
		param      string
	}{
		{"ollama none", "/api/chat", ollama, map[string]any{"record": "none"}, 200, ""},
		{"ollama options none", "/api/chat", ollama, nil, 200, ""},
		{"openai none", "/v1/chat/completions", openai, map[string]any{"record": "none"}, 200, ""},
		{"openai metadata none", "/v1/chat/completions", openai, map[string]any{"metadata": map[string]any{"record": "none"}}, 200, ""},
		{"native none", "/v1/generate", native, map[string]any{"record": "none"}, 200, ""},
		{"ollama bad", "/api/chat", ollama, map[string]any{"record": "all"}, 400, "record"},
		{"ollama bad type", "/api/chat", ollama, map[string]any{"record": true}, 400, "record"},
		{"openai bad", "/v1/chat/completions", openai, map[string]any{"record": "turn"}, 400, "record"},
		{"openai metadata bad", "/v1/chat/completions", openai, map[string]any{"metadata": map[string]any{"record": "NONE"}}, 400, "metadata.record"},
		{"native bad", "/v1/generate", native, map[string]any{"record": "always"}, 400, "record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := c.body("lily", c.extra)
			if c.name == "ollama options none" {
				body["options"].(map[string]any)["record"] = "none"
			}
			var res map[string]any
			code := do(t, "POST", e.url()+c.path, body, &res)
			if code != c.code {
				t.Fatalf("status %d, want %d: %v", code, c.code, res)
			}
			if c.param != "" {
				switch msg := res["error"].(type) {
				case string: // Ollama's error
					if !strings.HasPrefix(msg, c.param) {
						t.Fatalf("error %q does not name %s", msg, c.param)
					}
				case map[string]any:
					if msg["param"] != c.param {
						t.Fatalf("error %v does not name %s", msg, c.param)
					}
				}
			}
			if got := turnsOf(t, e, "lily"); len(got) != 1 {
				t.Fatalf("turns: %+v", got)
			}
		})
	}

	// record user: the message alone
	if code := do(t, "POST", e.url()+"/v1/chat/completions", openai("lily", map[string]any{"record": "user"}), nil); code != http.StatusOK {
		t.Fatalf("record user: %d", code)
	}
	if got := turnsOf(t, e, "lily"); len(got) != 2 || got[1].User != msg || got[1].Assistant != "" {
		t.Fatalf("turns after record user: %+v", got)
	}

	// a cube made with no_record records nothing
	var cv map[string]any
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "quiet", "no_record": true}, &cv); code != http.StatusCreated || cv["no_record"] != true {
		t.Fatalf("create a no_record cube: %d %v", code, cv)
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/quiet", nil, &cv); code != http.StatusOK || cv["no_record"] != true {
		t.Fatalf("GET a no_record cube: %d %v", code, cv)
	}
	if code := do(t, "POST", e.url()+"/v1/generate", native("quiet", nil), nil); code != http.StatusOK {
		t.Fatalf("chat in quiet: %d", code)
	}
	if got := turnsOf(t, e, "quiet"); len(got) != 0 {
		t.Fatalf("no_record cube recorded %+v", got)
	}
}

// The memory API takes and returns confidence and expires (RFC 3339), and
// every change of a memory is in its log.
func TestMemoryFieldsAndLog(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	exp := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	var m textmem.Memory
	in := map[string]any{"text": "Lily is at camp this week.", "confidence": 0.75, "expires": exp.Format(time.RFC3339)}
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/memories", in, &m); code != http.StatusCreated || m.Confidence != 0.75 || !m.Expires.Equal(exp) {
		t.Fatalf("add: %d %+v", code, m)
	}
	var got textmem.Memory
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/memories/"+m.ID, nil, &got); code != http.StatusOK || got.Confidence != 0.75 || !got.Expires.Equal(exp) {
		t.Fatalf("get: %d %+v", code, got)
	}
	for _, c := range []struct {
		name  string
		body  any
		param string
	}{
		{"confidence above 1", map[string]any{"text": "x y", "confidence": 1.5}, ""},
		{"confidence below 0", map[string]any{"text": "x y", "confidence": -0.1}, ""},
		{"expires not RFC 3339", map[string]any{"text": "x y", "expires": "tomorrow"}, ""},
		{"batch confidence", map[string]any{"memories": []map[string]any{{"text": "x y", "confidence": 2}}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var oe oaiError
			if code := do(t, "POST", e.url()+"/v1/cubes/lily/memories", c.body, &oe); code != http.StatusBadRequest {
				t.Fatalf("status %d: %+v", code, oe.Error)
			}
		})
	}
	var mems struct{ Memories []textmem.Memory }
	if do(t, "GET", e.url()+"/v1/cubes/lily/memories", nil, &mems); len(mems.Memories) != 1 {
		t.Fatalf("refused adds stored memories: %+v", mems.Memories)
	}

	if code := do(t, "PUT", e.url()+"/v1/cubes/lily/memories/"+m.ID, map[string]any{"text": "Lily is at camp until Sunday."}, nil); code != http.StatusOK {
		t.Fatalf("update: %d", code)
	}
	var log struct{ Changes []convmem.Change }
	if code := do(t, "GET", e.url()+"/v1/cubes/lily/memories/"+m.ID+"/log", nil, &log); code != http.StatusOK || len(log.Changes) != 2 ||
		log.Changes[0].Op != "add" || log.Changes[1].Op != "update" || log.Changes[1].Version != 2 || log.Changes[1].Text != "Lily is at camp until Sunday." {
		t.Fatalf("log: %d %+v", code, log.Changes)
	}
	if ops := logOps(t, e, "lily", "000000000000000000000000"); len(ops) != 0 {
		t.Fatalf("log of an unknown memory: %v", ops)
	}
}

// An access key reaches the conversation routes of its own cube only.
func TestConversationAccessKeys(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true, opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"a", "b"} {
		if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": c}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("create %s: %d", c, code)
		}
	}
	var k struct{ Token string }
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": "a"}, &k, admin...); code != http.StatusCreated {
		t.Fatalf("create key: %d", code)
	}
	key := []string{"Authorization", "Bearer " + k.Token}
	msgs := map[string]any{"messages": []map[string]string{{"role": "user", "content": "I love kites."}}}
	var out messagesOut
	if code := do(t, "POST", e.url()+"/v1/cubes/a/messages", msgs, &out, key...); code != http.StatusAccepted || out.Job == nil {
		t.Fatalf("messages with the key in its cube: %d", code)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/messages", msgs},
		{"GET", "/jobs", nil},
		{"GET", "/jobs/" + out.Job.ID, nil},
		{"POST", "/jobs/" + out.Job.ID + "/undo", nil},
		{"GET", "/profile", nil},
		{"GET", "/turns", nil},
		{"GET", "/sessions", nil},
		{"GET", "/memories/000000000000000000000000/log", nil},
	} {
		if code := do(t, c.method, e.url()+"/v1/cubes/b"+c.path, c.body, nil, key...); code != http.StatusForbidden {
			t.Errorf("%s b%s with a's key: %d, want 403", c.method, c.path, code)
		}
		if code := do(t, c.method, e.url()+"/v1/cubes/a"+c.path, c.body, nil); code != http.StatusUnauthorized {
			t.Errorf("%s a%s without a token: %d, want 401", c.method, c.path, code)
		}
	}
	if got := turnsOf(t, e, "b", admin...); len(got) != 0 {
		t.Fatalf("a's key recorded in b: %+v", got)
	}
	var jobs struct{ Jobs []convmem.Job }
	if code := do(t, "GET", e.url()+"/v1/cubes/a/jobs", nil, &jobs, key...); code != http.StatusOK || len(jobs.Jobs) != 1 {
		t.Fatalf("jobs with the key: %d %+v", code, jobs)
	}
}

// The MCP tools add_messages (a queued job) and get_profile (the long-term
// profile with the hot memories), and chat's record argument.
func TestMCPConversations(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024})
	cs := mcpSession(t, e)
	var out mcp.MessagesOut
	mustTool(t, cs, "add_messages", map[string]any{"cube": "lily", "messages": []map[string]string{
		{"role": "user", "content": "I love apple pie."}, {"role": "assistant", "content": "Noted."}}}, &out)
	if out.Job == nil || out.Job.ID == "" || out.Job.State != convmem.JobQueued || len(out.Turns) != 1 || out.Turns[0].Assistant != "Noted." {
		t.Fatalf("add_messages: %+v", out)
	}
	j := finished(t, e, "lily", out.Job.ID)
	t.Logf("job %s by %s", j.State, j.By)
	out = mcp.MessagesOut{}
	mustTool(t, cs, "add_messages", map[string]any{"cube": "lily", "infer": false,
		"messages": []map[string]string{{"role": "user", "content": "My dog is Max."}}}, &out)
	if out.Job != nil || len(out.Turns) != 1 {
		t.Fatalf("add_messages infer false: %+v", out)
	}
	if got := turnsOf(t, e, "lily"); len(got) != 2 {
		t.Fatalf("turns after add_messages: %+v", got)
	}
	failTool(t, cs, "add_messages", map[string]any{"cube": "lily", "messages": []map[string]string{}}, "messages")
	failTool(t, cs, "add_messages", map[string]any{"cube": "lily", "messages": []map[string]string{{"role": "user", "content": " "}}}, "messages")
	failTool(t, cs, "add_messages", map[string]any{"cube": "bad/name", "messages": []map[string]string{{"role": "user", "content": "hi"}}}, "not a cube name")

	var prof mcp.ProfileOut
	mustTool(t, cs, "get_profile", map[string]any{"cube": "lily"}, &prof)
	if prof.Cube != "lily" || prof.Facts == nil || prof.Knowledge == nil {
		t.Fatalf("get_profile: %+v", prof)
	}
	want, err := e.os.Profile(context.Background(), "lily")
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Facts) != len(want.Facts) || len(prof.Knowledge) != len(want.Knowledge) {
		t.Fatalf("get_profile %+v, OS.Profile %+v", prof, want)
	}
	failTool(t, cs, "get_profile", map[string]any{"cube": "nosuch"}, "nosuch")

	var reply mcp.ChatOut
	mustTool(t, cs, "chat", map[string]any{"cube": "lily", "message": "Where is Max?", "num_predict": 4, "record": "none"}, &reply)
	failTool(t, cs, "chat", map[string]any{"cube": "lily", "message": "Where is Max?", "record": "all"}, "record")
	if got := turnsOf(t, e, "lily"); len(got) != 2 {
		t.Fatalf("chat with record none recorded: %+v", got)
	}
	mustTool(t, cs, "chat", map[string]any{"cube": "lily", "message": "Where is Max?", "num_predict": 4}, &reply)
	if got := turnsOf(t, e, "lily"); len(got) != 3 || got[2].User != "Where is Max?" || got[2].Assistant != reply.Reply {
		t.Fatalf("turns after a chat: %+v", got)
	}
}
