package memosrt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/textmem"
)

// waitJob waits for job id of cube to leave queued and running.
func waitJob(t *testing.T, o *OS, cube, id string) convmem.Job {
	t.Helper()
	var j convmem.Job
	testutil.WaitFor(t, "job "+id, func() bool {
		var err error
		j, err = o.Job(context.Background(), cube, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State != convmem.JobQueued && j.State != convmem.JobRunning
	})
	return j
}

// nonTurn lists cube's memories that are not recorded turns.
func nonTurn(t *testing.T, o *OS, cube string) []textmem.Memory {
	t.Helper()
	ms, err := o.Memories(context.Background(), cube)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(ms, func(m textmem.Memory) bool { return m.Kind == KindTurn })
}

// Recorded turns are context, not facts: a prompt's retrieval and OS.Search
// rank a memory the user wrote above turns that match the query better
// (moved turns still reach the prompt, after it); SearchQuery leaves turns
// out unless asked.
func TestTurnsRankAfterMemories(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.NoExtract = true
	opts.Conversations.ShortTermLen, opts.Conversations.MoveLen = 3, 2
	o := openOS(t, opts)
	if _, err := o.CreateCube(ctx, Cube{Name: "lily"}); err != nil {
		t.Fatal(err)
	}
	// each says Max twice and run: BM25 ranks them above the fact
	said := []string{"Max runs, Max runs fast.", "Max can run far, Max.", "Run, Max, run to Max.", "Max and Max run home.", "Max, run! Max ran."}
	for _, text := range said {
		if _, err := o.Chat(ctx, Request{Cube: "lily", NumPredict: 2, Record: RecordUser, Messages: []Message{{Role: "user", Content: text}}}); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := o.ShortTerm(ctx, "lily"); len(st) != 3 || st[0].User != said[2] {
		t.Fatalf("short-term %+v, want the last 3 turns (the first 2 moved)", st)
	}
	// A recorded turn's memory, and its new Source once moved, are written
	// in the background; prompt retrieval does not wait for them, so a
	// prompt rendered now may still see a moved turn as short-term (hidden)
	// or not at all. Memories writes them first, as every read that must
	// see every turn does.
	ms, err := o.Memories(ctx, "lily")
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]string{}
	for _, m := range ms {
		src[m.Text] = m.Source
	}
	for i, text := range said {
		if moved := strings.HasPrefix(src[text], "dialog:"); moved != (i < 2) || !moved && src[text] != SourceShortTerm {
			t.Fatalf("turn %q: memory Source %q; want the first 2 moved (dialog:), the rest %q", text, src[text], SourceShortTerm)
		}
	}
	const fact = "Lily has a dog named Max."
	addMemories(t, o, "lily", fact)
	// the premise: without the tiers every turn outranks the fact
	flat, err := o.mem.SearchWith(ctx, "lily", textmem.DefaultQuery("Where does Max run?", 10))
	if err != nil {
		t.Fatal(err)
	}
	if len(flat) != 6 || flat[5].Memory.Text != fact {
		t.Fatalf("flat search: %d hits, want 6 with the fact last", len(flat))
	}

	res, err := o.Chat(ctx, Request{Cube: "lily", RenderOnly: true, Record: RecordNone,
		Messages: []Message{{Role: "user", Content: "Where does Max run?"}}})
	if err != nil {
		t.Fatal(err)
	}
	// then the two moved turns (the short-term ones never: HideSources)
	want := "Also relevant:\n- " + fact + "\n- " + said[0] + "\n- " + said[1] + "\n"
	if !strings.Contains(res.Rendered, want) || res.Retrieved != 3 {
		t.Errorf("prompt %q (%d retrieved): want the block %q", res.Rendered, res.Retrieved, want)
	}

	texts := func(hits []textmem.Hit) []string {
		var out []string
		for _, h := range hits {
			out = append(out, h.Memory.Kind+": "+h.Memory.Text)
		}
		return out
	}
	hits, err := o.Search(ctx, "lily", textmem.DefaultQuery("Where does Max run?", 10))
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 6 || hits[0].Memory.Text != fact || slices.ContainsFunc(hits[1:], func(h textmem.Hit) bool { return h.Memory.Kind != KindTurn }) {
		t.Errorf("search with turns: %q, want the fact, then the 5 turns", texts(hits))
	}
	hits, err = o.Search(ctx, "lily", SearchQuery("Where does Max run?", 10, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || hits[0].Memory.Text != fact {
		t.Errorf("search without turns: %q, want the fact alone", texts(hits))
	}
	hits, err = o.Search(ctx, "lily", SearchQuery("Where does Max run?", 2, true))
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].Memory.Text != fact || hits[1].Memory.Kind != KindTurn {
		t.Errorf("search with turns, k 2: %q, want the fact, then a turn", texts(hits))
	}
}

// Chat turns are recorded: the short-term queue stays bounded, overflow
// moves into sessions (and only then into prompts), every turn is
// in exactly one place; Record none, RecordUser and a NoRecord cube do as
// they say.
func TestTurnRecording(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.NoExtract = true
	opts.Conversations.ShortTermLen, opts.Conversations.MoveLen = 3, 2
	o := openOS(t, opts)
	if _, err := o.CreateCube(ctx, Cube{Name: "lily"}); err != nil {
		t.Fatal(err)
	}
	var answers []string
	for i := range 8 {
		res, err := o.Chat(ctx, Request{Cube: "lily", NumPredict: 6, Messages: []Message{
			{Role: "user", Content: fmt.Sprintf("Lily went to the park on day %d.", i)}}})
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, res.Text)
		st, err := o.ShortTerm(ctx, "lily")
		if err != nil {
			t.Fatal(err)
		}
		if len(st) > 3 {
			t.Fatalf("after chat %d the short-term queue holds %d turns, at most 3", i, len(st))
		}
	}
	st, _ := o.ShortTerm(ctx, "lily")
	ses, err := o.Sessions(ctx, "lily")
	if err != nil {
		t.Fatal(err)
	}
	place := map[string]int{}
	for _, tr := range st {
		place[tr.ID]++
	}
	inSessions := 0
	for _, s := range ses {
		for _, id := range s.Turns {
			place[id]++
			inSessions++
		}
	}
	if len(st) != 2 || inSessions != 6 || len(place) != 8 {
		t.Fatalf("short-term %d, in sessions %d, distinct %d; want 2, 6, 8", len(st), inSessions, len(place))
	}
	for id, n := range place {
		if n != 1 {
			t.Errorf("turn %s is in %d places", id, n)
		}
	}
	if want := "Lily went to the park on day 7.\n" + answers[7]; st[1].Text() != want {
		t.Errorf("last turn %q, want %q", st[1].Text(), want)
	}
	// every turn is a memory of Kind turn: moved ones with their dialog
	// (here all 8: no pause) as Source, short-term ones with SourceShortTerm
	ms, _ := o.Memories(ctx, "lily")
	var turnMems []string
	for _, m := range ms {
		if m.Kind == KindTurn {
			turnMems = append(turnMems, m.Text)
		}
	}
	if len(turnMems) != 8 || turnMems[0] != "Lily went to the park on day 0.\n"+answers[0] {
		t.Errorf("turn memories %q", turnMems)
	}
	source := func(id string) string {
		tr, err := o.conv.Store().Turn(ctx, "lily", id)
		if err != nil {
			t.Fatal(err)
		}
		m, err := o.mem.Get(ctx, "lily", tr.Memory)
		if err != nil {
			t.Fatalf("turn %s's memory %q: %v", id, tr.Memory, err)
		}
		return m.Source
	}
	for _, tr := range st {
		if src := source(tr.ID); src != SourceShortTerm {
			t.Errorf("short-term turn %s: memory Source %q, want %q", tr.ID, src, SourceShortTerm)
		}
	}
	first := ses[0].Turns[0]
	for _, se := range ses {
		for _, id := range se.Turns {
			if src := source(id); src != "dialog:"+first {
				t.Errorf("turn %s of session %s: memory Source %q, want dialog:%s", id, se.ID, src, first)
			}
		}
	}
	// the short-term turns are never retrieved into a prompt (the
	// conversation carries them); moved ones are
	res, err := o.Chat(ctx, Request{Cube: "lily", RenderOnly: true, Record: RecordNone,
		Messages: []Message{{Role: "user", Content: "Did Lily go to the park on day 7 or day 5?"}}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Rendered, "day 7.") || strings.Contains(res.Rendered, "day 6.") || !strings.Contains(res.Rendered, "day 5.") {
		t.Errorf("prompt %q: want day 5's moved turn retrieved, day 6 and 7 (short-term) not", res.Rendered)
	}
	// a search finds a short-term turn too, as a short-term hit
	hits, err := o.Search(ctx, "lily", textmem.DefaultQuery("park day 7", 10))
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) == 0 || !slices.ContainsFunc(hits, func(h textmem.Hit) bool {
		return h.Memory.Source == SourceShortTerm && strings.HasPrefix(h.Memory.Text, "Lily went to the park on day 7.")
	}) {
		t.Errorf("search hits %v lack the short-term turn of day 7", hits)
	}
	// a warm pins the cube's memories, never its recorded turns (the
	// model's answers among them)
	if _, err := o.Warm(ctx, "lily", WarmOptions{}); !errors.As(err, new(*FieldError)) {
		t.Errorf("warm of a cube holding only turns: %v, want a *FieldError", err)
	}
	addMemories(t, o, "lily", "Lily has a dog named Max.")
	if ps, err := o.Warm(ctx, "lily", WarmOptions{}); err != nil || ps.Memories != 1 {
		t.Errorf("warm: %d memories in the pack (%v), want 1: the memory, no turn", ps.Memories, err)
	}

	count := func(cube string) int {
		st, _ := o.ShortTerm(ctx, cube)
		ses, _ := o.Sessions(ctx, cube)
		n := len(st)
		for _, s := range ses {
			n += len(s.Turns)
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		cube   Cube
		record RecordMode
		turns  int
		text   string
	}{
		{"none", Cube{Name: "c-none"}, RecordNone, 0, ""},
		{"user", Cube{Name: "c-user"}, RecordUser, 1, "Sue has a red ball."},
		{"cube-off", Cube{Name: "c-off", NoRecord: true}, RecordTurn, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := o.CreateCube(ctx, tc.cube); err != nil {
				t.Fatal(err)
			}
			if _, err := o.Chat(ctx, Request{Cube: tc.cube.Name, NumPredict: 4, Record: tc.record,
				Messages: []Message{{Role: "user", Content: "Sue has a red ball."}}}); err != nil {
				t.Fatal(err)
			}
			if n := count(tc.cube.Name); n != tc.turns {
				t.Fatalf("%d turns recorded, want %d", n, tc.turns)
			}
			if tc.turns > 0 {
				st, _ := o.ShortTerm(ctx, tc.cube.Name)
				if st[0].Text() != tc.text {
					t.Errorf("turn %q, want %q", st[0].Text(), tc.text)
				}
			}
		})
	}
	var fe *FieldError
	if _, err := o.Chat(ctx, Request{Cube: "lily", Record: "bogus", Messages: []Message{{Role: "user", Content: "Hi"}}}); !errors.As(err, &fe) || fe.Field != "record" {
		t.Errorf("record bogus: %v", err)
	}
	// a chat without a cube records nothing anywhere
	if _, err := o.Chat(ctx, Request{NumPredict: 4, Messages: []Message{{Role: "user", Content: "Hi"}}}); err != nil {
		t.Fatal(err)
	}
}

// An identical add is a no-op that returns the same memory; the change
// log says so.
func TestIdenticalAdd(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, Options{Dir: t.TempDir(), NoSync: true})
	a, err := o.AddMemory(ctx, "u", textmem.Memory{Text: "Max is a brown dog."})
	if err != nil {
		t.Fatal(err)
	}
	b, err := o.AddMemory(ctx, "u", textmem.Memory{Text: "  max is a BROWN dog. "})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID || b.Version != 1 || b.Text != "Max is a brown dog." {
		t.Fatalf("identical add gave %+v, first %+v", b, a)
	}
	if ms := nonTurn(t, o, "u"); len(ms) != 1 {
		t.Fatalf("%d memories, want 1", len(ms))
	}
	log, err := o.MemoryLog(ctx, "u", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ops := opsOf(log); !slices.Equal(ops, []string{"add", "same"}) {
		t.Errorf("change log %v, want add, same", ops)
	}
}

func opsOf(log []convmem.Change) []string {
	var ops []string
	for _, c := range log {
		ops = append(ops, c.Op)
	}
	return ops
}

// A contradicting fact supersedes the old one: one memory, the new text
// as its next version, the old in its history, the change log linking
// them; the store never holds neither; the rendered prompt carries the new
// text, not the old, once the pack is recomputed.
func TestContradictingFact(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.NoRecord = true
	o := openOS(t, opts)
	love, err := o.AddMemory(ctx, "ann", textmem.Memory{Text: "I love Chinese food."})
	if err != nil {
		t.Fatal(err)
	}
	addMemories(t, o, "ann", "Ann has a cat named Tom.")
	if _, err := o.Warm(ctx, "ann", WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	render := func() string {
		res, err := o.Chat(ctx, Request{Cube: "ann", RenderOnly: true, Messages: []Message{{Role: "user", Content: "What food?"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Rendered
	}
	if r := render(); !strings.Contains(r, "I love Chinese food.") {
		t.Fatalf("prompt before lacks the liking:\n%s", r)
	}
	hate, err := o.AddMemory(ctx, "ann", textmem.Memory{Text: "I hate Chinese food.", Source: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if hate.ID != love.ID || hate.Version != 2 || hate.Text != "I hate Chinese food." {
		t.Fatalf("superseding add gave %+v", hate)
	}
	hist, err := o.mem.History(ctx, "ann", love.ID)
	if err != nil || len(hist) != 2 || hist[0].Text != "I love Chinese food." {
		t.Fatalf("history %+v, %v", hist, err)
	}
	ms := nonTurn(t, o, "ann")
	if len(ms) != 2 {
		t.Fatalf("%d memories after the contradiction, want 2", len(ms))
	}
	log, _ := o.MemoryLog(ctx, "ann", love.ID)
	if ops := opsOf(log); !slices.Equal(ops, []string{"add", "supersede"}) || !strings.Contains(log[1].Why, "I love Chinese food.") {
		t.Errorf("change log %+v", log)
	}
	// a liking of something else is no contradiction
	other, err := o.AddMemory(ctx, "ann", textmem.Memory{Text: "I hate Italian food."})
	if err != nil || other.ID == love.ID {
		t.Fatalf("unrelated add %+v, %v", other, err)
	}
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	r := render()
	if strings.Contains(r, "I love Chinese food.") || !strings.Contains(r, "I hate Chinese food.") {
		t.Errorf("prompt after the supersede:\n%s", r)
	}
}

// A memory with an expiry is deleted by the first tick after it, logged.
func TestExpiry(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: epoch}
	o := openOS(t, Options{Dir: t.TempDir(), NoSync: true, Clock: clock})
	keep, _ := o.AddMemory(ctx, "e", textmem.Memory{Text: "Tom likes milk."})
	gone, err := o.AddMemory(ctx, "e", textmem.Memory{Text: "The party is at noon today.", Expires: epoch.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Tick(ctx); err != nil && !errors.Is(err, ErrNoModel) {
		t.Fatal(err)
	}
	if ms := nonTurn(t, o, "e"); len(ms) != 2 {
		t.Fatalf("%d memories before the expiry", len(ms))
	}
	clock.Advance(2 * time.Hour)
	hits, err := o.Search(ctx, "e", textmem.DefaultQuery("party noon", 5))
	if err != nil || len(hits) != 0 {
		t.Fatalf("expired memory found by search: %v, %v", hits, err)
	}
	if _, err := o.Tick(ctx); err != nil && !errors.Is(err, ErrNoModel) {
		t.Fatal(err)
	}
	ms := nonTurn(t, o, "e")
	if len(ms) != 1 || ms[0].ID != keep.ID {
		t.Fatalf("memories after the expiry: %+v", ms)
	}
	log, _ := o.MemoryLog(ctx, "e", gone.ID)
	if ops := opsOf(log); !slices.Equal(ops, []string{"add", "delete"}) || log[1].By != "expiry" {
		t.Errorf("change log %+v", log)
	}
	// an expiry given to an identical or a superseding add is kept too
	same, err := o.AddMemory(ctx, "e", textmem.Memory{Text: "Tom likes milk.", Expires: clock.Now().Add(time.Hour)})
	if err != nil || same.ID != keep.ID || same.Expires.IsZero() {
		t.Fatalf("identical add with an expiry: %+v, %v", same, err)
	}
	sup, err := o.AddMemory(ctx, "e", textmem.Memory{Text: "I love rainy days."})
	if err != nil {
		t.Fatal(err)
	}
	if sup, err = o.AddMemory(ctx, "e", textmem.Memory{Text: "I hate rainy days.", Expires: clock.Now().Add(time.Hour)}); err != nil || sup.Version != 2 || sup.Expires.IsZero() {
		t.Fatalf("superseding add with an expiry: %+v, %v", sup, err)
	}
	clock.Advance(2 * time.Hour)
	if _, err := o.Tick(ctx); err != nil && !errors.Is(err, ErrNoModel) {
		t.Fatal(err)
	}
	if ms := nonTurn(t, o, "e"); len(ms) != 0 {
		t.Errorf("memories left after their expiry: %+v", ms)
	}
}

// AddMessages refuses empty and whitespace-only lists (no turn, no job);
// without a model the extraction is extractive; undo removes what a job
// added and gives a superseded memory its text back.
func TestAddMessagesExtractiveAndUndo(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, Options{Dir: t.TempDir(), NoSync: true})
	for _, msgs := range [][]Message{nil, {}, {{Role: "user", Content: "  \n\t"}}, {{Role: "user", Content: ""}, {Role: "assistant", Content: " "}}} {
		_, _, err := o.AddMessages(ctx, "x", msgs, MessagesOptions{})
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("AddMessages(%q) = %v, want a FieldError", msgs, err)
		}
	}
	if _, _, err := o.AddMessages(ctx, "x", []Message{{Role: "robot", Content: "hi"}}, MessagesOptions{}); err == nil {
		t.Error("a bad role was accepted")
	}
	if st, _ := o.ShortTerm(ctx, "x"); len(st) != 0 {
		t.Fatalf("refused lists recorded %d turns", len(st))
	}
	j1, turns, err := o.AddMessages(ctx, "x", []Message{
		{Role: "user", Content: "I love hiking. What time is it? My sister lives in Paris."},
		{Role: "assistant", Content: "It is noon."}}, MessagesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j1.State != convmem.JobQueued || len(turns) != 1 || turns[0].Assistant != "It is noon." {
		t.Fatalf("job %+v, turns %+v", j1, turns)
	}
	j1 = waitJob(t, o, "x", j1.ID)
	if j1.State != convmem.JobDone || j1.By != "extractive" || len(j1.Results) != 2 {
		t.Fatalf("job 1: %+v", j1)
	}
	got := map[string]string{}
	for _, m := range nonTurn(t, o, "x") {
		got[m.Text] = m.Kind
		if m.Source != "extract:"+j1.ID || !slices.Equal(m.Turns, []string{turns[0].ID}) || m.Confidence != 0.5 {
			t.Errorf("memory %+v lacks its source, turns or confidence", m)
		}
	}
	if want := map[string]string{"I love hiking.": "preference", "My sister lives in Paris.": "fact"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("extracted %v, want %v", got, want)
	}
	j2, _, err := o.AddMessages(ctx, "x", []Message{{Role: "user", Content: "I hate hiking."}}, MessagesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j2 = waitJob(t, o, "x", j2.ID)
	if len(j2.Results) != 1 || j2.Results[0].Op != convmem.OpSupersede || j2.Results[0].PrevText != "I love hiking." {
		t.Fatalf("job 2: %+v", j2)
	}
	if _, err := o.UndoJob(ctx, "x", "000000000000000000000000"); !errors.Is(err, convmem.ErrNotFound) {
		t.Errorf("undo of no job: %v", err)
	}
	if _, err := o.UndoJob(ctx, "x", j2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := o.UndoJob(ctx, "x", j2.ID); !errors.Is(err, ErrJobState) {
		t.Errorf("second undo: %v", err)
	}
	m, _ := o.Memory(ctx, "x", j2.Results[0].MemoryID)
	if m.Text != "I love hiking." || m.Version != 3 || m.Kind != "preference" || m.Source != "extract:"+j1.ID {
		t.Errorf("after undo of job 2 (text, kind and source back): %+v", m)
	}
	log, _ := o.MemoryLog(ctx, "x", m.ID)
	if ops := opsOf(log); !slices.Equal(ops, []string{"add", "supersede", "undo"}) {
		t.Errorf("change log %v", ops)
	}
	// job 1's hiking memory changed since (versions 2, 3): undo keeps it
	if _, err := o.UndoJob(ctx, "x", j1.ID); err != nil {
		t.Fatal(err)
	}
	left := nonTurn(t, o, "x")
	if len(left) != 1 || left[0].Text != "I love hiking." {
		t.Errorf("after undo of job 1: %+v", left)
	}
	j1, _ = o.Job(ctx, "x", j1.ID)
	if j1.State != convmem.JobUndone || len(j1.Dropped) != 1 || !strings.Contains(j1.Dropped[0].Why, "changed since") {
		t.Errorf("job 1 after undo: %+v", j1)
	}
}

// Extraction by the served model (stories260K): every job ends with
// schema-valid output or a recorded failure, and nothing malformed is
// stored: every memory a job stored is one of its parsed results.
func TestModelExtraction(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.NoRecord = true
	o := openOS(t, opts)
	convs := [][]Message{
		{{Role: "user", Content: "I love my dog Max. He runs in the park."}},
		{{Role: "user", Content: "My name is Lily and I like red balls."}, {Role: "assistant", Content: "Nice!"}},
		{{Role: "user", Content: "Yesterday I went to the big park with Tom."}},
		{{Role: "user", Content: "I think the sun is warm."}},
		{{Role: "user", Content: "Once upon a time there was a little girl."}},
	}
	done, failed := 0, 0
	for i, msgs := range convs {
		cube := fmt.Sprintf("m%d", i)
		j, _, err := o.AddMessages(ctx, cube, msgs, MessagesOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j = waitJob(t, o, cube, j.ID)
		stored := nonTurn(t, o, cube)
		switch j.State {
		case convmem.JobDone:
			done++
			if j.By != "model" {
				t.Errorf("job by %q", j.By)
			}
			if _, _, err := convmem.ParseExtraction(j.Output, []string{msgs[0].Content}, textmem.EnglishAnalyzer{}); err != nil {
				t.Errorf("done job's output does not parse: %v\n%s", err, j.Output)
			}
			if len(stored) != len(j.Results) {
				t.Errorf("cube %s stores %d memories, the job reports %d", cube, len(stored), len(j.Results))
			}
		case convmem.JobFailed:
			failed++
			if j.Error == "" || len(stored) != 0 {
				t.Errorf("failed job without a recorded error, or with %d memories stored: %+v", len(stored), j)
			}
		default:
			t.Fatalf("job state %s", j.State)
		}
		t.Logf("job %d: %s, %d stored, %d dropped; output %.200q", i, j.State, len(j.Results), len(j.Dropped), j.Output)
	}
	t.Logf("extraction on stories260K: %d of %d jobs schema-valid, %d recorded failures", done, len(convs), failed)
}

// A job cut short by Close (a restart) stays running in the store and is
// resumed by the next Open.
func TestExtractionResumes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o, err := Open(ctx, Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	o.jobStarted = func(ctx context.Context, j convmem.Job) {
		close(started)
		<-ctx.Done() // the restart comes mid-job
	}
	j, _, err := o.AddMessages(ctx, "r", []Message{{Role: "user", Content: "My brother plays the violin."}}, MessagesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	o = openOS(t, Options{Dir: dir, NoSync: true})
	j = waitJob(t, o, "r", j.ID)
	if j.State != convmem.JobDone || j.Attempts != 2 || len(j.Results) != 1 || j.Results[0].Text != "My brother plays the violin." {
		t.Fatalf("resumed job: %+v", j)
	}
}

// Short → mid → long: turns that overflow the queue form a session; once
// its heat reaches HeatAt a consolidation job extracts its memories into
// the cube's profile (facts and preferences) and knowledge, and the
// session's interactions start again from 0.
func TestConsolidation(t *testing.T) {
	ctx := context.Background()
	opts := Options{Dir: t.TempDir(), NoSync: true}
	opts.Conversations.ShortTermLen, opts.Conversations.MoveLen, opts.Conversations.HeatAt = 2, 2, 2.5
	o := openOS(t, opts)
	msgs := []Message{
		{Role: "user", Content: "I love green tea."},
		{Role: "user", Content: "My cat is called Tom."},
		{Role: "user", Content: "Yesterday I visited my aunt."},
		{Role: "user", Content: "What is the weather?"},
	}
	if _, _, err := o.AddMessages(ctx, "p", msgs, MessagesOptions{NoExtract: true}); err != nil {
		t.Fatal(err)
	}
	ses, err := o.Sessions(ctx, "p")
	if err != nil || len(ses) != 1 || len(ses[0].Turns) != 2 {
		t.Fatalf("sessions %+v, %v", ses, err)
	}
	var js []convmem.Job
	testutil.WaitFor(t, "the consolidation job", func() bool {
		js, err = o.Jobs(ctx, "p")
		return err == nil && len(js) == 1 && js[0].State == convmem.JobDone
	})
	if js[0].Session != ses[0].ID {
		t.Fatalf("job %+v is not the session's", js[0])
	}
	p, err := o.Profile(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var facts, prefs, knowledge []string
	for _, it := range p.Facts {
		facts = append(facts, it.Type+": "+it.Text)
	}
	for _, it := range p.Preferences {
		prefs = append(prefs, it.Type+": "+it.Text)
	}
	for _, it := range p.Knowledge {
		knowledge = append(knowledge, it.Type+": "+it.Text)
	}
	if !slices.Equal(facts, []string{"fact: My cat is called Tom."}) || !slices.Equal(prefs, []string{"preference: I love green tea."}) || len(knowledge) != 0 {
		t.Fatalf("profile facts %q, preferences %q, knowledge %q", facts, prefs, knowledge)
	}
	s, _ := o.conv.Store().Session(ctx, "p", ses[0].ID)
	if s.Interactions != 0 || s.Consolidated != 1 {
		t.Errorf("session after consolidation: %+v", s)
	}
	// a memory deleted leaves the profile; a changed one changes there
	if err := o.DeleteMemory(ctx, "p", p.Facts[0].MemoryID); err != nil {
		t.Fatal(err)
	}
	if _, err := o.UpdateMemory(ctx, "p", p.Preferences[0].MemoryID, "I love black tea."); err != nil {
		t.Fatal(err)
	}
	p, _ = o.Profile(ctx, "p")
	if len(p.Facts) != 0 || len(p.Preferences) != 1 || p.Preferences[0].Text != "I love black tea." {
		t.Errorf("profile after delete and update: facts %+v, preferences %+v", p.Facts, p.Preferences)
	}
}
