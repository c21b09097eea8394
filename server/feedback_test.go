package server

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// feedbackAnswer is the part of a native answer feedback needs.
type feedbackAnswer struct {
	ID           string   `json:"id"`
	RetrievedIDs []string `json:"retrieved_memory_ids"`
	PackIDs      []string `json:"pack_memory_ids"`
}

// askDog asks cube c about the dog over /v1/generate (a chat turn).
func askDog(t *testing.T, u string) feedbackAnswer {
	t.Helper()
	var a feedbackAnswer
	body := map[string]any{"cube": "c", "num_predict": 4, "messages": []memosrt.Message{{Role: "user", Content: "What is my dog called?"}}}
	if code := do(t, "POST", u+"/v1/generate", body, &a); code != http.StatusOK {
		t.Fatalf("chat: %d", code)
	}
	if !strings.HasPrefix(a.ID, "resp_") || len(a.ID) != len("resp_")+24 {
		t.Fatalf("response id %q", a.ID)
	}
	return a
}

// renderedDog is the prompt a chat about the dog renders in cube c
// (Ollama's _debug_render_only).
func renderedDog(t *testing.T, u string) string {
	t.Helper()
	var r struct {
		Debug struct {
			Rendered string `json:"rendered_template"`
		} `json:"_debug_info"`
	}
	body := map[string]any{"model": testModel, "stream": false, "_debug_render_only": true, "options": map[string]any{"cube": "c"},
		"messages": []map[string]string{{"role": "user", "content": "What is my dog called?"}}}
	if code := do(t, "POST", u+"/api/chat", body, &r); code != http.StatusOK || r.Debug.Rendered == "" {
		t.Fatalf("render: %d %q", code, r.Debug.Rendered)
	}
	return r.Debug.Rendered
}

// "no, my dog is Rex" after an answer that used "my dog is Max": the
// memory's next version is the correction, Max its superseded version, the
// change log says so, undo brings Max back, feedback again gives Rex, and
// the next prompt carries Rex and not Max.
func TestFeedbackCorrects(t *testing.T) {
	e := newEnv(t, envConfig{})
	u, ctx := e.url(), context.Background()
	ids := addPlayMemories(t, u, "c", nil, "my dog is Max", "Tom flies a blue kite.")
	dog := ids[0]
	a := askDog(t, u)
	if !slices.Contains(a.RetrievedIDs, dog) {
		t.Fatalf("retrieved %q, want %s among them", a.RetrievedIDs, dog)
	}
	var log struct {
		Responses []convmem.ResponseRecord `json:"responses"`
	}
	if code := do(t, "GET", u+"/v1/cubes/c/responses", nil, &log); code != http.StatusOK || len(log.Responses) != 1 ||
		log.Responses[0].ID != a.ID || !slices.Equal(log.Responses[0].RetrievedIDs, a.RetrievedIDs) ||
		log.Responses[0].User != "What is my dog called?" || !log.Responses[0].Chat {
		t.Fatalf("response log: %d %+v", code, log.Responses)
	}

	var fb memosrt.FeedbackResult
	if code := do(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": a.ID, "correction": "no, my dog is Rex"}, &fb); code != http.StatusOK {
		t.Fatalf("feedback: %d", code)
	}
	if fb.Action != memosrt.FeedbackSuperseded || fb.MemoryID != dog || fb.Version != 2 || fb.PreviousVersion != 1 ||
		fb.PreviousText != "my dog is Max" || fb.Match != convmem.MatchSubject || fb.JobID == "" || fb.ResponseID != a.ID {
		t.Fatalf("feedback result %+v", fb)
	}
	var m textmem.Memory
	if code := do(t, "GET", u+"/v1/cubes/c/memories/"+dog, nil, &m); code != http.StatusOK || m.Text != "my dog is Rex" || m.Version != 2 {
		t.Fatalf("memory after feedback: %d %+v", code, m)
	}
	h, err := e.mem.History(ctx, "c", dog)
	if err != nil || len(h) != 2 || h[0].Text != "my dog is Max" || h[0].Version != 1 || h[1].Text != "my dog is Rex" {
		t.Fatalf("history %+v, %v", h, err)
	}
	var changes struct {
		Changes []convmem.Change `json:"changes"`
	}
	do(t, "GET", u+"/v1/cubes/c/memories/"+dog+"/log", nil, &changes)
	last := changes.Changes[len(changes.Changes)-1]
	if last.Op != convmem.OpSupersede || last.By != "feedback:"+fb.JobID || last.Text != "my dog is Rex" || last.Version != 2 ||
		last.Why != `feedback on response `+a.ID+` corrects version 1: "my dog is Max"` {
		t.Fatalf("change log's last entry %+v", last)
	}
	var job convmem.Job
	if code := do(t, "GET", u+"/v1/cubes/c/jobs/"+fb.JobID, nil, &job); code != http.StatusOK || job.By != "feedback" ||
		job.State != convmem.JobDone || job.Response != a.ID || len(job.Results) != 1 || job.Results[0].PrevText != "my dog is Max" {
		t.Fatalf("feedback job: %d %+v", code, job)
	}

	// undo: Max is current again, as a new version
	if code := do(t, "POST", u+"/v1/cubes/c/jobs/"+fb.JobID+"/undo", nil, &job); code != http.StatusOK || job.State != convmem.JobUndone {
		t.Fatalf("undo: %d %+v", code, job)
	}
	if do(t, "GET", u+"/v1/cubes/c/memories/"+dog, nil, &m); m.Text != "my dog is Max" || m.Version != 3 {
		t.Fatalf("memory after undo %+v", m)
	}
	do(t, "GET", u+"/v1/cubes/c/memories/"+dog+"/log", nil, &changes)
	if last := changes.Changes[len(changes.Changes)-1]; last.Op != "undo" || last.By != "undo:"+fb.JobID || last.Why != "undo of feedback job "+fb.JobID {
		t.Fatalf("change log's undo entry %+v", last)
	}
	if r := renderedDog(t, u); !strings.Contains(r, "my dog is Max") || strings.Contains(r, "Rex") {
		t.Fatalf("rendered after undo %q", r)
	}

	// the undo changed the memory after the answer used it: feedback on
	// that answer again is a 409 that writes nothing
	if code, msg := errorOf(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"correction": "Actually, my dog is Rex"}); code != http.StatusConflict ||
		msg != "memosrt: feedback conflict: memory "+dog+" changed since response "+a.ID+` used it (now version 3, "my dog is Max"): nothing written` {
		t.Fatalf("feedback on the old answer: %d %q", code, msg)
	}
	// feedback on a new answer, the cube's latest (no response id)
	a2 := askDog(t, u)
	if code := do(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"correction": "Actually, my dog is Rex"}, &fb); code != http.StatusOK ||
		fb.Action != memosrt.FeedbackSuperseded || fb.MemoryID != dog || fb.Version != 4 || fb.PreviousVersion != 3 || fb.ResponseID != a2.ID {
		t.Fatalf("feedback again: %d %+v", code, fb)
	}
	if r := renderedDog(t, u); !strings.Contains(r, "my dog is Rex") || strings.Contains(r, "Max") {
		t.Fatalf("rendered after feedback %q", r)
	}
	b := askDog(t, u)
	if !slices.Contains(b.RetrievedIDs, dog) {
		t.Fatalf("next answer retrieved %q, want %s", b.RetrievedIDs, dog)
	}
	if do(t, "GET", u+"/v1/cubes/c/memories/"+dog, nil, &m); m.Text != "my dog is Rex" {
		t.Fatalf("memory the next answer used %+v", m)
	}

	// a correction no used memory matches is a new memory; undo deletes it
	if code := do(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": b.ID, "correction": "No. I live in Oslo."}, &fb); code != http.StatusOK ||
		fb.Action != memosrt.FeedbackAdded || fb.MemoryID == dog || fb.JobID == "" {
		t.Fatalf("unmatched correction: %d %+v", code, fb)
	}
	if do(t, "GET", u+"/v1/cubes/c/memories/"+fb.MemoryID, nil, &m); m.Text != "I live in Oslo." {
		t.Fatalf("added memory %+v", m)
	}
	if code := do(t, "POST", u+"/v1/cubes/c/jobs/"+fb.JobID+"/undo", nil, nil); code != http.StatusOK {
		t.Fatalf("undo add: %d", code)
	}
	if code := do(t, "GET", u+"/v1/cubes/c/memories/"+fb.MemoryID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("added memory after undo: %d", code)
	}
}

// Feedback on an answer whose memory was edited since writes nothing (a
// 409 naming the memory); on a newer answer it supersedes the edit, stored
// as written but capitalised like the memory; an undo after a later edit
// of that memory is a 409 that leaves it and the job as they are.
func TestFeedbackAfterEdit(t *testing.T) {
	e := newEnv(t, envConfig{})
	u := e.url()
	dog := addPlayMemories(t, u, "c", nil, "My dog is Max.", "Tom flies a blue kite.")[0]
	a := askDog(t, u)
	if !slices.Contains(slices.Concat(a.RetrievedIDs, a.PackIDs), dog) {
		t.Fatalf("used %q %q, want %s", a.RetrievedIDs, a.PackIDs, dog)
	}
	patch := func(text string, version int) {
		t.Helper()
		var m textmem.Memory
		if code := do(t, "PATCH", u+"/v1/cubes/c/memories/"+dog, map[string]any{"text": text}, &m); code != http.StatusOK || m.Version != version {
			t.Fatalf("patch %q: %d %+v", text, code, m)
		}
	}
	memory := func() textmem.Memory {
		t.Helper()
		var m textmem.Memory
		if code := do(t, "GET", u+"/v1/cubes/c/memories/"+dog, nil, &m); code != http.StatusOK {
			t.Fatalf("get: %d", code)
		}
		return m
	}
	patch("My dog is Buddy and he is old.", 2)
	if code, msg := errorOf(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": a.ID, "correction": "no, my dog is Rex"}); code != http.StatusConflict ||
		msg != "memosrt: feedback conflict: memory "+dog+" changed since response "+a.ID+` used it (now version 2, "My dog is Buddy and he is old."): nothing written` {
		t.Fatalf("feedback on the old answer: %d %q", code, msg)
	}
	if m := memory(); m.Text != "My dog is Buddy and he is old." || m.Version != 2 {
		t.Fatalf("memory after the refused feedback %+v", m)
	}
	b := askDog(t, u)
	var fb memosrt.FeedbackResult
	if code := do(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": b.ID, "correction": "no, my dog is Rex"}, &fb); code != http.StatusOK ||
		fb.Action != memosrt.FeedbackSuperseded || fb.MemoryID != dog || fb.Version != 3 || fb.PreviousText != "My dog is Buddy and he is old." {
		t.Fatalf("feedback on the new answer: %d %+v", code, fb)
	}
	if m := memory(); m.Text != "My dog is Rex" || m.Version != 3 {
		t.Fatalf("memory after feedback %+v", m)
	}
	patch("My dog is Rex and he is young.", 4)
	if code, msg := errorOf(t, "POST", u+"/v1/cubes/c/jobs/"+fb.JobID+"/undo", nil); code != http.StatusConflict ||
		msg != "memosrt: nothing undone: job "+fb.JobID+": memory "+dog+" changed since (version 4, the job left 3)" {
		t.Fatalf("undo after an edit: %d %q", code, msg)
	}
	var job convmem.Job
	if code := do(t, "GET", u+"/v1/cubes/c/jobs/"+fb.JobID, nil, &job); code != http.StatusOK || job.State != convmem.JobDone {
		t.Fatalf("job after the refused undo: %d %+v", code, job)
	}
	if m := memory(); m.Text != "My dog is Rex and he is young." || m.Version != 4 {
		t.Fatalf("memory after the refused undo %+v", m)
	}
}

// A rating moves the heat of the memories the answer used by exactly one
// visit and one interaction each (raw counts: no decay); bad feedback is a
// 400, an unknown response or cube a 404.
func TestFeedbackRating(t *testing.T) {
	mo := memosrt.Options{}
	mo.Tiers.Heat.RawCounts = true
	e := newEnv(t, envConfig{mo: mo})
	u := e.url()
	ids := addPlayMemories(t, u, "c", nil, "my dog is Max", "Tom flies a blue kite.")
	a := askDog(t, u)
	used := slices.Concat(a.RetrievedIDs, a.PackIDs)
	if !slices.Contains(used, ids[0]) {
		t.Fatalf("used %q", used)
	}
	usage := func() map[string]scheduler.Usage {
		var st scheduler.CubeTiers
		if code := do(t, "GET", u+"/v1/cubes/c/tiers", nil, &st); code != http.StatusOK {
			t.Fatalf("tiers: %d", code)
		}
		out := map[string]scheduler.Usage{}
		for _, m := range st.Memories {
			out[m.ID] = m.Usage
		}
		return out
	}
	before := usage()
	var fb memosrt.FeedbackResult
	code, raw := send(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": a.ID, "rating": -1})
	if code != http.StatusOK || !strings.Contains(string(raw), `"heat_delta":-1,`) || strings.Contains(string(raw), `"heat"`) {
		t.Fatalf("rating: %d %s", code, raw)
	}
	if err := json.Unmarshal(raw, &fb); err != nil {
		t.Fatal(err)
	}
	slices.Sort(used)
	rated := slices.Sorted(slices.Values(fb.Rated))
	if fb.Action != memosrt.FeedbackRated || fb.HeatDelta != -1 || fb.JobID != "" || fb.MemoryID != "" || !slices.Equal(rated, used) {
		t.Fatalf("rating result %+v, want rated %q", fb, used)
	}
	after := usage()
	for _, id := range used {
		b, a := before[id], after[id]
		if b.Visits < 1 || b.Interactions < 1 || a.Visits != b.Visits-1 || a.Interactions != b.Interactions-1 || !a.Last.Equal(b.Last) {
			t.Fatalf("memory %s: usage %+v before, %+v after a rating of -1", id, b, a)
		}
	}
	// an answer is rated once: rating it again is a 409 that moves nothing
	for i := 0; i < 3; i++ {
		for _, body := range []map[string]any{{"response_id": a.ID, "rating": 1}, {"response_id": a.ID, "stars": 5}} {
			if code, msg := errorOf(t, "POST", u+"/v1/cubes/c/feedback", body); code != http.StatusConflict ||
				msg != "memosrt: feedback conflict: response "+a.ID+" is already rated (an answer is rated once)" {
				t.Fatalf("rating again %v: %d %q", body, code, msg)
			}
		}
	}
	if again := usage(); !maps.Equal(again, after) {
		t.Fatalf("usage after refused ratings %+v, want %+v", again, after)
	}
	// five stars on the next answer: one up
	b := askDog(t, u)
	mid := usage()
	if code := do(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": b.ID, "stars": 5}, &fb); code != http.StatusOK || fb.HeatDelta != 1 {
		t.Fatalf("stars: %d %+v", code, fb)
	}
	again := usage()
	for _, id := range slices.Concat(b.RetrievedIDs, b.PackIDs) {
		if again[id].Visits != mid[id].Visits+1 || again[id].Interactions != mid[id].Interactions+1 {
			t.Fatalf("memory %s: usage %+v before, %+v after +1", id, mid[id], again[id])
		}
	}

	for _, c := range []struct {
		body       map[string]any
		code       int
		param, msg string
	}{
		{map[string]any{}, http.StatusBadRequest, "correction", "memosrt: bad feedback: give a correction, a rating or stars"},
		{map[string]any{"rating": 2}, http.StatusBadRequest, "rating", "memosrt: bad feedback: rating 2: want -1 or 1"},
		{map[string]any{"rating": 0}, http.StatusBadRequest, "rating", "rating: 0: want -1 or 1 (leave rating out for none)"},
		{map[string]any{"stars": 6}, http.StatusBadRequest, "stars", "memosrt: bad feedback: stars 6: want 1 to 5"},
		{map[string]any{"stars": 0}, http.StatusBadRequest, "stars", "stars: 0: want 1 to 5 (leave stars out for none)"},
		{map[string]any{"rating": 1, "stars": 4}, http.StatusBadRequest, "stars", "memosrt: bad feedback: rating 1 and stars 4: give one"},
		{map[string]any{"correction": "no!"}, http.StatusBadRequest, "correction", `memosrt: bad feedback: correction "no!" states nothing after its leading words`},
		{map[string]any{"response_id": b.ID, "correction": "no, " + strings.Repeat("tea ", 20000)}, http.StatusRequestEntityTooLarge, "correction",
			"textmem: text too large: 79999 bytes, limit 65536"},
		{map[string]any{"response_id": "resp_nope", "rating": 1}, http.StatusNotFound, "",
			`convmem: not found: response "resp_nope" in cube "c" (the log keeps the last 256)`},
	} {
		status, raw := send(t, "POST", u+"/v1/cubes/c/feedback", c.body)
		var o oaiError
		json.Unmarshal(raw, &o)
		param := ""
		if o.Error.Param != nil {
			param = *o.Error.Param
		}
		if status != c.code || o.Error.Message != c.msg || param != c.param {
			t.Errorf("%.80v: %d %q param %q, want %d %q param %q", c.body, status, o.Error.Message, param, c.code, c.msg, c.param)
		}
	}
	if code, _ := errorOf(t, "POST", u+"/v1/cubes/nope/feedback", map[string]any{"rating": 1}); code != http.StatusNotFound {
		t.Errorf("unknown cube: %d", code)
	}
	// a cube without answers yet: nothing to give feedback on
	addPlayMemories(t, u, "d", nil, "my cat is Tom")
	if code, msg := errorOf(t, "POST", u+"/v1/cubes/d/feedback", map[string]any{"rating": 1}); code != http.StatusNotFound ||
		msg != `convmem: not found: cube "d" has no recorded response` {
		t.Errorf("no response yet: %d %q", code, msg)
	}
}

// Memories of kind preference get their own block in the prompt, ahead of
// the other retrieved memories, reported apart (preference_memory_ids) and
// kept in the response log; the profile (REST and MCP get_profile) lists
// them apart from the facts.
func TestPreferenceSlot(t *testing.T) {
	e := newEnv(t, envConfig{})
	u := e.url()
	dog := addPlayMemories(t, u, "c", nil, "my dog is Max")[0]
	var tea, rain textmem.Memory
	do(t, "POST", u+"/v1/cubes/c/memories", map[string]any{"text": "I love green tea", "kind": "preference"}, &tea)
	do(t, "POST", u+"/v1/cubes/c/memories", map[string]any{"text": "I hate rainy walks", "kind": "preference"}, &rain)
	const q = "Should my dog drink green tea?"

	var r struct {
		Debug struct {
			Rendered string `json:"rendered_template"`
		} `json:"_debug_info"`
	}
	body := map[string]any{"model": testModel, "stream": false, "_debug_render_only": true, "options": map[string]any{"cube": "c"},
		"messages": []map[string]string{{"role": "user", "content": q}}}
	do(t, "POST", u+"/api/chat", body, &r)
	// the hash embedder's dense list finds the other preference too, after
	// the match
	want := "User preferences:\n- I love green tea\n- I hate rainy walks\nAlso relevant:\n- my dog is Max\n" + q
	if !strings.Contains(r.Debug.Rendered, want) {
		t.Fatalf("rendered %q, want it to hold %q", r.Debug.Rendered, want)
	}

	var a struct {
		ID            string   `json:"id"`
		RetrievedIDs  []string `json:"retrieved_memory_ids"`
		PreferenceIDs []string `json:"preference_memory_ids"`
		Retrieved     int      `json:"retrieved_memories"`
	}
	gen := map[string]any{"cube": "c", "num_predict": 4, "messages": []memosrt.Message{{Role: "user", Content: q}}}
	if code := do(t, "POST", u+"/v1/generate", gen, &a); code != http.StatusOK || !slices.Equal(a.PreferenceIDs, []string{tea.ID, rain.ID}) ||
		!slices.Equal(a.RetrievedIDs, []string{dog}) || a.Retrieved != 1 {
		t.Fatalf("answer: %d %+v; want preferences [%s %s], retrieved [%s]", code, a, tea.ID, rain.ID, dog)
	}
	rec, err := e.os.Responses(context.Background(), "c")
	if err != nil || len(rec) != 1 || rec[0].ID != a.ID || !slices.Equal(rec[0].PreferenceIDs, []string{tea.ID, rain.ID}) {
		t.Fatalf("response log %+v, %v", rec, err)
	}

	var prof convmem.Profile
	if code := do(t, "GET", u+"/v1/cubes/c/profile", nil, &prof); code != http.StatusOK || len(prof.Facts) != 0 || len(prof.Preferences) != 2 ||
		prof.Preferences[0].MemoryID != tea.ID || prof.Preferences[1].Text != "I hate rainy walks" || prof.Preferences[1].Type != "preference" {
		t.Fatalf("profile: %d %+v", code, prof)
	}
	cs := mcpSession(t, e)
	var out struct {
		Facts       []convmem.ProfileItem `json:"facts"`
		Preferences []convmem.ProfileItem `json:"preferences"`
	}
	text := mustTool(t, cs, "get_profile", map[string]any{"cube": "c"}, &out)
	if len(out.Facts) != 0 || len(out.Preferences) != 2 || out.Preferences[1].MemoryID != rain.ID ||
		!strings.Contains(text, "The user's preferences (long-term profile):\n- I love green tea\n- I hate rainy walks") {
		t.Fatalf("get_profile %q: %+v", text, out)
	}
}

// The OpenAI and Ollama APIs answer with the response's own id: the one
// the cube's response log keeps, which feedback names; streamed OpenAI
// chunks all carry it.
func TestResponseIDsAcrossAPIs(t *testing.T) {
	e := newEnv(t, envConfig{})
	u, ctx := e.url(), context.Background()
	addPlayMemories(t, u, "c", nil, "my dog is Max")
	latest := func() string {
		t.Helper()
		rec, err := e.os.Responses(ctx, "c")
		if err != nil || len(rec) == 0 {
			t.Fatalf("response log %+v, %v", rec, err)
		}
		return rec[len(rec)-1].ID
	}
	c := openaiClient(u, option.WithHeader(CubeHeader, "c"))
	p := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(4), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is my dog called?")}}
	r, err := c.Chat.Completions.New(ctx, p)
	if err != nil || !strings.HasPrefix(r.ID, "resp_") || r.ID != latest() {
		t.Fatalf("OpenAI chat id %q, log %q, %v", r.ID, latest(), err)
	}
	st := c.Chat.Completions.NewStreaming(ctx, p)
	var ids []string
	for st.Next() {
		ids = append(ids, st.Current().ID)
	}
	if one := slices.Compact(slices.Clone(ids)); st.Err() != nil || len(ids) < 2 || len(one) != 1 || one[0] != latest() {
		t.Fatalf("streamed ids %q, log %q, %v", ids, latest(), st.Err())
	}
	cr, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: testModel, MaxTokens: openai.Int(4),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("My dog")}})
	if err != nil || cr.ID != latest() {
		t.Fatalf("OpenAI completion id %q, log %q, %v", cr.ID, latest(), err)
	}
	var o struct {
		ID string `json:"id"`
	}
	body := map[string]any{"model": testModel, "stream": false, "options": map[string]any{"cube": "c", "num_predict": 4},
		"messages": []map[string]string{{"role": "user", "content": "What is my dog called?"}}}
	if code := do(t, "POST", u+"/api/chat", body, &o); code != http.StatusOK || o.ID != latest() {
		t.Fatalf("Ollama chat: %d id %q, log %q", code, o.ID, latest())
	}
	gen := map[string]any{"model": testModel, "stream": false, "prompt": "My dog", "options": map[string]any{"cube": "c", "num_predict": 4}}
	if code := do(t, "POST", u+"/api/generate", gen, &o); code != http.StatusOK || o.ID != latest() {
		t.Fatalf("Ollama generate: %d id %q, log %q", code, o.ID, latest())
	}
	// feedback names the OpenAI answer's id
	var fb memosrt.FeedbackResult
	if code := do(t, "POST", u+"/v1/cubes/c/feedback", map[string]any{"response_id": r.ID, "rating": 1}, &fb); code != http.StatusOK ||
		fb.ResponseID != r.ID || fb.Action != memosrt.FeedbackRated {
		t.Fatalf("feedback on the OpenAI answer: %d %+v", code, fb)
	}
}
