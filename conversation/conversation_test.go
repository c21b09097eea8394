package conversation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/textmem"
)

// openText opens a text tier in a real Badger database in t.TempDir(),
// closed at the end of the test.
func openText(t *testing.T) *textmem.Store {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := textmem.OpenBackend(textmem.NewBadgerBackend(db), textmem.Options{})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(mem.Close(), db.Close()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return mem
}

// openManager opens a Manager over openText's text tier, with hooks h,
// and closes it all at the end.
func openManager(t *testing.T, h Hooks) (*Manager, *textmem.Store) {
	t.Helper()
	mem := openText(t)
	m, err := Open(context.Background(), mem, Options{Hooks: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, mem
}

// waitDone waits for job id of cube to leave queued and running.
func waitDone(t *testing.T, m *Manager, cube, id string) convmem.Job {
	t.Helper()
	var j convmem.Job
	testutil.WaitFor(t, "job "+id, func() bool {
		var err error
		j, err = m.Store().Job(context.Background(), cube, id)
		return err == nil && j.State != convmem.JobQueued && j.State != convmem.JobRunning
	})
	return j
}

// extractChunks keeps each chunk within its byte limit, cutting a longer
// turn, and keeps the turns' order.
func TestExtractChunks(t *testing.T) {
	tr := func(u, a string) convmem.Turn { return convmem.Turn{User: u, Assistant: a} }
	got := extractChunks([]convmem.Turn{tr("aaaa", ""), tr("bbb", "cc"), tr(strings.Repeat("x", 30), "yy"), tr("d", "")}, 10)
	var shape [][]string
	for _, ch := range got {
		var c []string
		for _, t := range ch {
			c = append(c, t.User+"|"+t.Assistant)
		}
		shape = append(shape, c)
	}
	want := [][]string{{"aaaa|", "bbb|cc"}, {"xxxxxxxxxx|"}, {"d|"}}
	if fmt.Sprint(shape) != fmt.Sprint(want) {
		t.Errorf("chunks %q, want %q", shape, want)
	}
}

// A job extracts through Hooks.Generate: a generation that did not run
// (ErrRetryLater) queues the job again without counting an attempt; the
// memory is stored through Hooks.AddMemory with the job as its source;
// UndoJob deletes it and a second undo is refused with ErrJobState.
func TestJobThroughHooks(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var gens []Generation
	var added []string
	var m *Manager
	m, mem := openManager(t, Hooks{
		Generate: func(ctx context.Context, g Generation) (*Generated, error) {
			mu.Lock()
			defer mu.Unlock()
			gens = append(gens, g)
			if len(gens) == 1 {
				return nil, fmt.Errorf("%w: every slot busy", ErrRetryLater)
			}
			return &Generated{Text: `{"memories":[{"text":"My brother plays the violin.","type":"fact","tags":["brother"],"confidence":0.9}]}`, Tokens: 30}, nil
		},
		AddMemory: func(ctx context.Context, cube string, mm textmem.Memory) (textmem.Memory, textmem.AddOutcome, error) {
			mu.Lock()
			added = append(added, cube+": "+mm.Text)
			mu.Unlock()
			return m.mem.AddOutcome(ctx, cube, mm)
		},
	})
	j, turns, err := m.AddTurns(ctx, "r", []convmem.Turn{{User: "My brother plays the violin.", Assistant: "Nice."}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || j.State != convmem.JobQueued || len(j.Turns) != 1 || j.Turns[0] != turns[0].ID {
		t.Fatalf("job %+v over turns %+v", j, turns)
	}
	j = waitDone(t, m, "r", j.ID)
	if j.State != convmem.JobDone || j.By != "model" || j.Attempts != 1 || len(j.Results) != 1 || j.Results[0].Op != convmem.OpAdd {
		t.Fatalf("job after a retry: %+v", j)
	}
	mu.Lock()
	if len(gens) != 2 || gens[1].MaxTokens != convmem.MaxExtractTokens || string(gens[1].Format) != convmem.ExtractSchema ||
		!strings.Contains(gens[1].Prompt, "User: My brother plays the violin.\nAssistant: Nice.\n") {
		t.Errorf("generations %+v", gens)
	}
	if len(added) != 1 || added[0] != "r: My brother plays the violin." {
		t.Errorf("added through the hook: %q", added)
	}
	mu.Unlock()
	got, err := mem.Get(ctx, "r", j.Results[0].MemoryID)
	if err != nil || got.Source != "extract:"+j.ID || got.Kind != convmem.TypeFact {
		t.Fatalf("stored memory %+v, %v", got, err)
	}
	u, err := m.UndoJob(ctx, "r", j.ID)
	if err != nil || u.State != convmem.JobUndone {
		t.Fatalf("undo: %+v, %v", u, err)
	}
	if _, err := mem.Get(ctx, "r", got.ID); !errors.Is(err, textmem.ErrNotFound) {
		t.Errorf("memory after undo: %v", err)
	}
	log, err := m.Store().Changes(ctx, "r", got.ID)
	if err != nil || len(log) != 2 || log[0].Op != convmem.OpAdd || log[1].Op != "delete" || log[1].By != "undo:"+j.ID {
		t.Errorf("change log %+v, %v", log, err)
	}
	if _, err := m.UndoJob(ctx, "r", j.ID); !errors.Is(err, ErrJobState) {
		t.Errorf("second undo: %v, want ErrJobState", err)
	}
}

// A restart forgot which sessions had a consolidation job queued, so with
// every slot busy each restart queued another job per session. The next
// Open merges a session's unfinished jobs into its newest (their turns,
// each once; the older stored as merged, naming it), and RecordTurns
// queues no second job for a session whose job was resumed.
func TestSessionJobsMergedAtOpen(t *testing.T) {
	ctx := context.Background()
	mem := openText(t)
	var mu sync.Mutex
	gens := 0
	open := func() *Manager {
		t.Helper()
		m, err := Open(ctx, mem, Options{Store: convmem.Options{ShortTermLen: 2, MoveLen: 2, HeatAt: 0.5},
			Hooks: Hooks{Generate: func(ctx context.Context, g Generation) (*Generated, error) {
				mu.Lock()
				gens++
				mu.Unlock()
				return nil, fmt.Errorf("%w: every slot busy", ErrRetryLater)
			}}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	turn := func(s string) convmem.Turn {
		return convmem.Turn{User: "I like " + s + ".", Assistant: "Noted: " + s + "."}
	}
	m := open()
	if _, err := m.RecordTurns(ctx, "c", []convmem.Turn{turn("tea"), turn("green tea"), turn("black tea"), turn("iced tea")}); err != nil {
		t.Fatal(err)
	}
	js, err := m.Store().Jobs(ctx, "c")
	if err != nil || len(js) != 1 || js[0].Session == "" || len(js[0].Turns) != 2 {
		t.Fatalf("jobs after the first record: %+v, %v; want one session job over 2 turns", js, err)
	}
	a := js[0]
	testutil.WaitFor(t, "a generation refused", func() bool { mu.Lock(); defer mu.Unlock(); return gens > 0 })
	m.Close()
	// what a restart of the earlier code left: a second job for the session
	b := m.Store().NewJob("c", []string{a.Turns[1], "18eef40c262de1f2833aaee2"}, a.Session)
	if err := m.Store().PutJob(ctx, b); err != nil {
		t.Fatal(err)
	}
	m = open()
	defer m.Close()
	gotA, err := m.Store().Job(ctx, "c", a.ID)
	if err != nil || gotA.State != convmem.JobMerged || gotA.MergedInto != b.ID {
		t.Fatalf("older job after Open: %+v, %v; want merged into %s", gotA, err, b.ID)
	}
	gotB, err := m.Store().Job(ctx, "c", b.ID)
	if want := []string{a.Turns[0], a.Turns[1], "18eef40c262de1f2833aaee2"}; err != nil || (gotB.State != convmem.JobQueued && gotB.State != convmem.JobRunning) || !slices.Equal(gotB.Turns, want) {
		t.Fatalf("newest job after Open: %+v, %v; want unfinished over %q", gotB, err, want)
	}
	// more turns into the same session: no second job for it
	for _, s := range []string{"tea with milk", "tea with lemon", "mint tea", "tea again"} {
		if _, err := m.RecordTurns(ctx, "c", []convmem.Turn{turn(s)}); err != nil {
			t.Fatal(err)
		}
	}
	js, err = m.Store().Jobs(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	unfinished := map[string][]string{}
	for _, j := range js {
		if j.State == convmem.JobQueued || j.State == convmem.JobRunning {
			unfinished[j.Session] = append(unfinished[j.Session], j.ID)
		}
	}
	if len(unfinished[a.Session]) != 1 || unfinished[a.Session][0] != b.ID {
		t.Fatalf("unfinished jobs by session %v; want only %s for %s (jobs %d)", unfinished, b.ID, a.Session, len(js))
	}
	for s, ids := range unfinished {
		if len(ids) != 1 {
			t.Errorf("session %s has %d unfinished jobs", s, len(ids))
		}
	}
}
