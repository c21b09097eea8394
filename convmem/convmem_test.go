package convmem

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/textmem"
)

// t0 is the start of every test clock.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a test clock moved by hand (Options.Now).
type clock struct {
	// mu guards t.
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// openStore opens a Store over a real Badger database in t.TempDir()
// (textmem.NewBadgerBackend) and checks the database's Close at the end.
func openStore(t *testing.T, opts Options) *Store {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("db close: %v", err)
		}
	})
	s, err := Open(textmem.NewBadgerBackend(db), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// turnID is the id of test turn i (1-based): textmem's shape, 24 hex
// digits, increasing with i.
func turnID(i int) string { return fmt.Sprintf("%016x%08x", uint64(t0.UnixNano())+uint64(i), i) }

func ids(is ...int) []string {
	out := make([]string, len(is))
	for k, i := range is {
		out[k] = turnID(i)
	}
	return out
}

func turnIDs(ts []Turn) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// topicTurns are 11 turns: 1-2 and 5-6 on cooking, 3-4 and 7-8 on
// football, 9-11 on neither. With ShortTermLen 4 and MoveLen 2, turns
// 1-2, 3-4, 5-6 and 7-8 move, in that order, at turns 5, 7, 9 and 11.
var topicTurns = []string{
	1:  "I cook pasta with tomato sauce and garlic tonight.",
	2:  "The pasta sauce needs more garlic and fresh basil.",
	3:  "Our football team won the match with a late goal.",
	4:  "The striker scored a great goal in the football match.",
	5:  "Next time I will cook the tomato pasta sauce with extra garlic.",
	6:  "Fresh basil makes the garlic pasta sauce better.",
	7:  "The football match ended with a goal from our striker.",
	8:  "Our team lost the football match without a single goal.",
	9:  "What is the weather like tomorrow?",
	10: "Remind me to call my sister.",
	11: "I need new running shoes.",
}

// recordTopics records topicTurns one at a time, checking each call.
func recordTopics(t *testing.T, s *Store, cube string) (cooking, football string) {
	t.Helper()
	ctx := context.Background()
	// wantQueue is the queue after turn i; wantMoves the moves turn i makes.
	wantQueue := map[int][]string{
		1: ids(1), 2: ids(1, 2), 3: ids(1, 2, 3), 4: ids(1, 2, 3, 4),
		5: ids(3, 4, 5), 6: ids(3, 4, 5, 6), 7: ids(5, 6, 7), 8: ids(5, 6, 7, 8),
		9: ids(7, 8, 9), 10: ids(7, 8, 9, 10), 11: ids(9, 10, 11),
	}
	type move struct {
		turns  []string
		joined bool
	}
	wantMoves := map[int]move{
		5:  {ids(1, 2), false},
		7:  {ids(3, 4), false},
		9:  {ids(5, 6), true},
		11: {ids(7, 8), true},
	}
	for i := 1; i <= 11; i++ {
		m, err := s.Record(ctx, cube, Turn{ID: turnID(i), User: topicTurns[i], Assistant: "Noted."})
		if err != nil {
			t.Fatalf("record turn %d: %v", i, err)
		}
		want, ok := wantMoves[i]
		switch {
		case !ok && len(m) != 0:
			t.Fatalf("turn %d: moves %+v, want none", i, m)
		case ok && (len(m) != 1 || !slices.Equal(m[0].Turns, want.turns) || m[0].Joined != want.joined):
			t.Fatalf("turn %d: moves %+v, want turns %v joined %v", i, m, want.turns, want.joined)
		}
		switch i {
		case 5:
			cooking = m[0].Session
		case 7:
			football = m[0].Session
			if football == cooking {
				t.Fatalf("football turns joined the cooking session %s", cooking)
			}
		case 9:
			if m[0].Session != cooking {
				t.Fatalf("cooking turns 5-6 went to %s, want cooking session %s", m[0].Session, cooking)
			}
		case 11:
			if m[0].Session != football {
				t.Fatalf("football turns 7-8 went to %s, want football session %s", m[0].Session, football)
			}
		}
		q, err := s.ShortTerm(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		if len(q) > 4 || !slices.Equal(turnIDs(q), wantQueue[i]) {
			t.Fatalf("after turn %d: queue %v, want %v", i, turnIDs(q), wantQueue[i])
		}
	}
	return cooking, football
}

func TestRecord(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{ShortTermLen: 4, MoveLen: 2, Now: newClock().Now})
	cooking, football := recordTopics(t, s, "alice")

	// Every turn is in exactly one place: the queue or one session.
	q, err := s.ShortTerm(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ses, err := s.Sessions(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(ses) != 2 {
		t.Fatalf("%d sessions, want 2", len(ses))
	}
	place := map[string]string{}
	for _, tu := range q {
		place[tu.ID] = "queue"
	}
	total := len(q)
	for _, x := range ses {
		total += len(x.Turns)
		for _, id := range x.Turns {
			if p, ok := place[id]; ok {
				t.Errorf("turn %s in %s and session %s", id, p, x.ID)
			}
			place[id] = x.ID
		}
	}
	if total != 11 || len(place) != 11 {
		t.Errorf("%d turns placed, %d distinct, want 11 and 11", total, len(place))
	}
	for i := 1; i <= 11; i++ {
		if _, ok := place[turnID(i)]; !ok {
			t.Errorf("turn %d is nowhere", i)
		}
	}

	tests := []struct {
		name      string
		session   string
		turns     []string
		keywords4 []string
	}{
		{"cooking", cooking, ids(1, 2, 5, 6), []string{"garlic", "note", "pasta", "sauc"}},
		{"football", football, ids(3, 4, 7, 8), []string{"footbal", "goal", "match", "note"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := s.Session(ctx, "alice", tc.session)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(x.Turns, tc.turns) {
				t.Errorf("turns %v, want %v", x.Turns, tc.turns)
			}
			if x.Interactions != 4 || x.Visits != 0 {
				t.Errorf("interactions %d visits %d, want 4 and 0", x.Interactions, x.Visits)
			}
			if len(x.Keywords) != 8 || !slices.Equal(x.Keywords[:4], tc.keywords4) {
				t.Errorf("keywords %v, want 8 starting %v", x.Keywords, tc.keywords4)
			}
			if x.Summary == "" || len(x.Summary) > maxSummary {
				t.Errorf("summary %q: want 1 to %d bytes", x.Summary, maxSummary)
			}
			for _, id := range tc.turns {
				tu, err := s.Turn(ctx, "alice", id)
				if err != nil {
					t.Fatal(err)
				}
				if tu.Session != tc.session {
					t.Errorf("turn %s says session %q, want %q", id, tu.Session, tc.session)
				}
			}
		})
	}

	// Recording a turn id again is a no-op, queued or moved.
	for _, i := range []int{3, 10} {
		m, err := s.Record(ctx, "alice", Turn{ID: turnID(i), User: "changed"})
		if err != nil || len(m) != 0 {
			t.Fatalf("re-record turn %d: moves %v, err %v", i, m, err)
		}
		tu, err := s.Turn(ctx, "alice", turnID(i))
		if err != nil || tu.User != topicTurns[i] {
			t.Errorf("turn %d after re-record: %q, %v; want %q", i, tu.User, err, topicTurns[i])
		}
	}
	q, _ = s.ShortTerm(ctx, "alice")
	if !slices.Equal(turnIDs(q), ids(9, 10, 11)) {
		t.Errorf("queue after re-records %v, want turns 9-11", turnIDs(q))
	}
	all, err := s.Turns(ctx, "alice")
	if err != nil || len(all) != 11 {
		t.Errorf("Turns: %d, %v; want 11", len(all), err)
	}
	of, err := s.SessionsOf(ctx, "alice", ids(1, 3, 9, 12))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{turnID(1): cooking, turnID(3): football}; fmt.Sprint(of) != fmt.Sprint(want) {
		t.Errorf("SessionsOf = %v, want %v", of, want)
	}
	noID := []Turn{{User: "no id"}}
	if _, err := s.Record(ctx, "alice", noID...); err != nil || len(noID[0].ID) != 24 {
		t.Errorf("a turn without an id: %v, id %q", err, noID[0].ID)
	}
	if err := s.DropTurn(ctx, "alice", noID[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Turn(ctx, "alice", turnID(12)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Turn(12) = %v, want ErrNotFound", err)
	}

	// DropTurn takes a turn out of its session or the queue.
	for _, i := range []int{1, 9} {
		if err := s.DropTurn(ctx, "alice", turnID(i)); err != nil {
			t.Fatal(err)
		}
	}
	if x, _ := s.Session(ctx, "alice", cooking); !slices.Equal(x.Turns, ids(2, 5, 6)) {
		t.Errorf("cooking turns after drop %v, want 2, 5, 6", x.Turns)
	}
	if q, _ := s.ShortTerm(ctx, "alice"); !slices.Equal(turnIDs(q), ids(10, 11)) {
		t.Errorf("queue after drop %v, want 10, 11", turnIDs(q))
	}
}

// TestPending: recorded and moved turns await their memory until
// SetMemory, which maps the memory back to its turn for SessionsOf and
// DropTurn; a move marks a linked turn pending again (its memory's Source
// changes).
func TestPending(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{ShortTermLen: 2, MoveLen: 1, Now: newClock().Now})
	for i := 1; i <= 4; i++ {
		if _, err := s.Record(ctx, "p", Turn{ID: turnID(i), User: topicTurns[0]}); err != nil {
			t.Fatal(err)
		}
	}
	pend, err := s.Pending(ctx, "p")
	if err != nil || !slices.Equal(turnIDs(pend), ids(1, 2, 3, 4)) {
		t.Fatalf("Pending = %v, %v; want 1, 2, 3, 4", turnIDs(pend), err)
	}
	for _, i := range []int{2, 3, 4} {
		if err := s.SetMemory(ctx, "p", pend[i-1], fmt.Sprintf("bbbbbbbbbbbbbbbbbbbbbbb%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// turn 3 leaves the queue: its memory needs its session as Source
	if _, err := s.Record(ctx, "p", Turn{ID: turnID(5), User: topicTurns[0]}); err != nil {
		t.Fatal(err)
	}
	moved, _ := s.Pending(ctx, "p")
	if !slices.Equal(turnIDs(moved), ids(1, 3, 5)) {
		t.Fatalf("Pending after a move = %v, want 1, 3, 5", turnIDs(moved))
	}
	// turn 3 as read before its move (in the queue): a memory written for
	// that has a stale Source, so linking it keeps the turn pending
	if stale := pend[2]; stale.Session != "" || moved[1].Session == "" {
		t.Fatalf("turn 3 read in session %q, now in %q; want the queue, then a session", stale.Session, moved[1].Session)
	} else if err := s.SetMemory(ctx, "p", stale, "bbbbbbbbbbbbbbbbbbbbbbb3"); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Pending(ctx, "p"); !slices.Equal(turnIDs(p), ids(1, 3, 5)) {
		t.Fatalf("Pending after linking turn 3 as read before its move = %v, want 1, 3, 5", turnIDs(p))
	}
	for _, tr := range moved[1:] {
		if err := s.SetMemory(ctx, "p", tr, "bbbbbbbbbbbbbbbbbbbbbbb"+tr.ID[len(tr.ID)-1:]); err != nil {
			t.Fatal(err)
		}
	}
	if cs, _ := s.PendingCubes(ctx); !slices.Equal(cs, []string{"p"}) {
		t.Errorf("PendingCubes = %v", cs)
	}
	mem := "aaaaaaaaaaaaaaaaaaaaaaaa"
	if err := s.SetMemory(ctx, "p", moved[0], mem); err != nil {
		t.Fatal(err)
	}
	if pend, _ := s.Pending(ctx, "p"); len(pend) != 0 {
		t.Errorf("Pending after SetMemory = %v, want none", turnIDs(pend))
	}
	if tr, _ := s.Turn(ctx, "p", turnID(1)); tr.Memory != mem {
		t.Errorf("Turn.Memory = %q", tr.Memory)
	}
	of, _ := s.SessionsOf(ctx, "p", []string{mem})
	if of[mem] == "" {
		t.Errorf("SessionsOf(memory) = %v", of)
	}
	if err := s.DropTurn(ctx, "p", mem); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Turn(ctx, "p", turnID(1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("turn of a dropped memory: %v", err)
	}
	if err := s.SetMemory(ctx, "p", moved[0], mem); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetMemory of a dropped turn: %v", err)
	}
}

// TestRecordBatch records more turns in one call than the queue holds:
// the whole overflow moves at once, so nothing is dropped.
func TestRecordBatch(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{ShortTermLen: 4, MoveLen: 2, Now: newClock().Now})
	var batch []Turn
	for i := 1; i <= 7; i++ {
		batch = append(batch, Turn{ID: turnID(i), User: topicTurns[1]})
	}
	m, err := s.Record(ctx, "bob", batch...)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].Turns, ids(1, 2, 3)) || m[0].Joined {
		t.Fatalf("moves %+v, want turns 1-3 to a new session", m)
	}
	q, _ := s.ShortTerm(ctx, "bob")
	if !slices.Equal(turnIDs(q), ids(4, 5, 6, 7)) {
		t.Errorf("queue %v, want 4-7", turnIDs(q))
	}
	if q[0].Time != t0 {
		t.Errorf("turn time %v, want the clock's %v", q[0].Time, t0)
	}
}

func TestHeat(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	const tau = 100 * time.Second
	s := openStore(t, Options{ShortTermLen: 2, MoveLen: 2, HeatAt: 5, Tau: tau, Now: clk.Now})
	record := func(is ...int) {
		for _, i := range is {
			if _, err := s.Record(ctx, "c", Turn{ID: turnID(i), User: topicTurns[1]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	record(1, 2, 3) // turns 1-2 move to a new session: interactions 2
	ses, err := s.Sessions(ctx, "c")
	if err != nil || len(ses) != 1 {
		t.Fatalf("sessions %v, %v; want 1", ses, err)
	}
	id := ses[0].ID

	steps := []struct {
		name        string
		advance     time.Duration
		do          func() error
		wantVisits  int
		wantInter   int
		wantHeat    float64
		wantDue     bool
		wantConsols int
	}{
		{"created", 0, nil, 0, 2, 2 + 1, false, 0},
		{"one tau later", tau, nil, 0, 2, 2 + math.Exp(-1), false, 0},
		{"visit", 0, func() error { return s.Visit(ctx, "c", []string{id, "nosuchsession"}) }, 1, 2, 1 + 2 + 1, false, 0},
		{"half tau later", tau / 2, nil, 1, 2, 1 + 2 + math.Exp(-0.5), false, 0},
		{"second visit reaches HeatAt", 0, func() error { return s.Visit(ctx, "c", []string{id}) }, 2, 2, 2 + 2 + 1, true, 0},
		{"consolidated", 0, func() error { return s.Consolidated(ctx, "c", id) }, 2, 0, 2 + 0 + 1, false, 1},
		{"hot without interactions", 0, func() error { return s.Visit(ctx, "c", []string{id, id, id}) }, 5, 0, 5 + 0 + 1, false, 1},
		{"new turns join", 0, func() error { record(4, 5); return nil }, 5, 2, 5 + 2 + 1, true, 1},
		{"two tau later", 2 * tau, nil, 5, 2, 5 + 2 + math.Exp(-2), true, 1},
	}
	for _, st := range steps {
		clk.Add(st.advance)
		if st.do != nil {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		x, err := s.Session(ctx, "c", id)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if x.Visits != st.wantVisits || x.Interactions != st.wantInter || x.Consolidated != st.wantConsols {
			t.Errorf("%s: visits %d interactions %d consolidated %d, want %d %d %d", st.name,
				x.Visits, x.Interactions, x.Consolidated, st.wantVisits, st.wantInter, st.wantConsols)
		}
		if math.Abs(x.Heat-st.wantHeat) > 1e-9 {
			t.Errorf("%s: heat %v, want %v", st.name, x.Heat, st.wantHeat)
		}
		due, err := s.Due(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		if got := len(due) == 1 && due[0].ID == id; got != st.wantDue || len(due) > 1 {
			t.Errorf("%s: due %d sessions, want due %v", st.name, len(due), st.wantDue)
		}
	}
	if err := s.Consolidated(ctx, "c", "nosuchsession"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Consolidated(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.Session(ctx, "c", "nosuchsession"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session(unknown) = %v, want ErrNotFound", err)
	}
}

// TestDueOrder: Due lists only sessions at or above HeatAt, hottest first.
func TestDueOrder(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{ShortTermLen: 4, MoveLen: 2, HeatAt: 3, Now: newClock().Now})
	cooking, football := recordTopics(t, s, "c")
	if err := s.Visit(ctx, "c", []string{football}); err != nil {
		t.Fatal(err)
	}
	due, err := s.Due(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	// The clock stands still: football 1 + 4 + 1, cooking 0 + 4 + 1.
	if len(due) != 2 || due[0].ID != football || due[1].ID != cooking || due[0].Heat != 6 || due[1].Heat != 5 {
		t.Errorf("due %v, want football (heat 6) then cooking", due)
	}
}

func TestSearchSessions(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{ShortTermLen: 4, MoveLen: 2, Now: newClock().Now})
	cooking, football := recordTopics(t, s, "alice")
	tests := []struct {
		query string
		k     int
		want  []string
	}{
		{"How much garlic goes in the pasta sauce?", 5, []string{cooking}},
		{"Who scored the goal in the football match?", 5, []string{football}},
		{"pasta with garlic sauce, then football", 5, []string{cooking, football}},
		{"football goal striker, and some pasta", 1, []string{football}},
		{"weather tomorrow", 5, nil},
		{"pasta", 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			hits, err := s.SearchSessions(ctx, "alice", tc.query, tc.k)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hits {
				got = append(got, h.Session.ID)
				if h.Score <= 0 || h.Score > 1+1e-9 {
					t.Errorf("score %v outside (0, 1]", h.Score)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("hits %v, want %v (cooking %s, football %s)", got, tc.want, cooking, football)
			}
		})
	}
	if hits, err := s.SearchSessions(ctx, "empty", "pasta", 5); err != nil || hits != nil {
		t.Errorf("search of an empty cube: %v, %v", hits, err)
	}
}

func TestProfile(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, Options{MaxProfileItems: 3, Now: clk.Now})
	item := func(id, typ, text string) ProfileItem {
		return ProfileItem{MemoryID: id, Type: typ, Text: text, Confidence: 0.5}
	}
	type entry struct{ id, text string }
	steps := []struct {
		name          string
		update        []ProfileItem
		forget        *entry
		wantFacts     []entry
		wantPrefs     []entry
		wantKnowledge []entry
	}{
		{"split by type", []ProfileItem{
			item("m1", TypeFact, "I live in Paris"),
			item("m2", TypePreference, "I love hiking"),
			item("m3", TypeEvent, "I went to Rome"),
			item("m4", TypeOpinion, "I think tea beats coffee"),
		}, nil,
			[]entry{{"m1", "I live in Paris"}},
			[]entry{{"m2", "I love hiking"}},
			[]entry{{"m3", "I went to Rome"}, {"m4", "I think tea beats coffee"}}},
		{"preferences apart", []ProfileItem{item("m10", TypePreference, "I hate rain")}, nil,
			[]entry{{"m1", "I live in Paris"}},
			[]entry{{"m2", "I love hiking"}, {"m10", "I hate rain"}},
			[]entry{{"m3", "I went to Rome"}, {"m4", "I think tea beats coffee"}}},
		{"bounded, oldest out", []ProfileItem{
			item("m5", TypeFact, "My sister is Ann"),
			item("m6", TypeFact, "I work as a nurse"),
			item("m9", TypeFact, "I own a cat"),
		}, nil,
			[]entry{{"m5", "My sister is Ann"}, {"m6", "I work as a nurse"}, {"m9", "I own a cat"}},
			[]entry{{"m2", "I love hiking"}, {"m10", "I hate rain"}},
			[]entry{{"m3", "I went to Rome"}, {"m4", "I think tea beats coffee"}}},
		{"replace moves list", []ProfileItem{item("m2", TypeProcedure, "First boil water, then add tea")}, nil,
			[]entry{{"m5", "My sister is Ann"}, {"m6", "I work as a nurse"}, {"m9", "I own a cat"}},
			[]entry{{"m10", "I hate rain"}},
			[]entry{{"m3", "I went to Rome"}, {"m4", "I think tea beats coffee"}, {"m2", "First boil water, then add tea"}}},
		{"replace goes last", []ProfileItem{item("m5", TypeFact, "My sister is Anna")}, nil,
			[]entry{{"m6", "I work as a nurse"}, {"m9", "I own a cat"}, {"m5", "My sister is Anna"}},
			[]entry{{"m10", "I hate rain"}},
			[]entry{{"m3", "I went to Rome"}, {"m4", "I think tea beats coffee"}, {"m2", "First boil water, then add tea"}}},
		{"knowledge bounded", []ProfileItem{item("m7", TypeEvent, "I met Bob")}, nil,
			[]entry{{"m6", "I work as a nurse"}, {"m9", "I own a cat"}, {"m5", "My sister is Anna"}},
			[]entry{{"m10", "I hate rain"}},
			[]entry{{"m4", "I think tea beats coffee"}, {"m2", "First boil water, then add tea"}, {"m7", "I met Bob"}}},
		{"forget with text updates", nil, &entry{"m6", "I work as a doctor"},
			[]entry{{"m6", "I work as a doctor"}, {"m9", "I own a cat"}, {"m5", "My sister is Anna"}},
			[]entry{{"m10", "I hate rain"}},
			[]entry{{"m4", "I think tea beats coffee"}, {"m2", "First boil water, then add tea"}, {"m7", "I met Bob"}}},
		{"forget without text removes", nil, &entry{"m2", ""},
			[]entry{{"m6", "I work as a doctor"}, {"m9", "I own a cat"}, {"m5", "My sister is Anna"}},
			[]entry{{"m10", "I hate rain"}},
			[]entry{{"m4", "I think tea beats coffee"}, {"m7", "I met Bob"}}},
		{"forget a preference", nil, &entry{"m10", ""},
			[]entry{{"m6", "I work as a doctor"}, {"m9", "I own a cat"}, {"m5", "My sister is Anna"}},
			nil,
			[]entry{{"m4", "I think tea beats coffee"}, {"m7", "I met Bob"}}},
		{"forget unknown", nil, &entry{"m99", ""},
			[]entry{{"m6", "I work as a doctor"}, {"m9", "I own a cat"}, {"m5", "My sister is Anna"}},
			nil,
			[]entry{{"m4", "I think tea beats coffee"}, {"m7", "I met Bob"}}},
	}
	entries := func(l []ProfileItem) []entry {
		var out []entry
		for _, x := range l {
			out = append(out, entry{x.MemoryID, x.Text})
		}
		return out
	}
	if p, err := s.Profile(ctx, "u"); err != nil || len(p.Facts)+len(p.Knowledge) != 0 || !p.Updated.IsZero() {
		t.Fatalf("empty profile %+v, %v", p, err)
	}
	if err := s.ProfileForget(ctx, "u", "m1", ""); err != nil {
		t.Fatalf("forget in an empty profile: %v", err)
	}
	for _, st := range steps {
		clk.Add(time.Minute)
		if st.update != nil {
			p, err := s.UpdateProfile(ctx, "u", st.update)
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if !p.Updated.Equal(clk.Now()) || !p.Facts[len(p.Facts)-1].Updated.Equal(clk.Now()) && st.update[0].Type == TypeFact {
				t.Errorf("%s: updated %v, want %v", st.name, p.Updated, clk.Now())
			}
		}
		if st.forget != nil {
			if err := s.ProfileForget(ctx, "u", st.forget.id, st.forget.text); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		p, err := s.Profile(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		if got := entries(p.Facts); !slices.Equal(got, st.wantFacts) {
			t.Errorf("%s: facts %v, want %v", st.name, got, st.wantFacts)
		}
		if got := entries(p.Preferences); !slices.Equal(got, st.wantPrefs) {
			t.Errorf("%s: preferences %v, want %v", st.name, got, st.wantPrefs)
		}
		if got := entries(p.Knowledge); !slices.Equal(got, st.wantKnowledge) {
			t.Errorf("%s: knowledge %v, want %v", st.name, got, st.wantKnowledge)
		}
	}
}

func TestJobs(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, Options{Now: clk.Now})
	mk := func(cube, state string, turns ...int) Job {
		clk.Add(time.Second)
		j := s.NewJob(cube, ids(turns...), "")
		if j.State != JobQueued || j.Cube != cube || !j.Created.Equal(clk.Now()) || len(j.ID) != 24 {
			t.Fatalf("NewJob = %+v", j)
		}
		j.State = state
		if err := s.PutJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	a1 := mk("a", JobQueued, 1)
	a2 := mk("a", JobDone, 2)
	b1 := mk("b", JobFailed, 3)
	b2 := mk("b", JobRunning, 4, 5)
	a3 := mk("a", JobUndone, 6)
	a4 := mk("a", JobRunning, 7)

	tests := []struct {
		name string
		get  func() ([]Job, error)
		want []string
	}{
		{"jobs of a", func() ([]Job, error) { return s.Jobs(ctx, "a") }, []string{a1.ID, a2.ID, a3.ID, a4.ID}},
		{"jobs of b", func() ([]Job, error) { return s.Jobs(ctx, "b") }, []string{b1.ID, b2.ID}},
		{"jobs of c", func() ([]Job, error) { return s.Jobs(ctx, "c") }, nil},
		{"unfinished", func() ([]Job, error) { return s.Unfinished(ctx) }, []string{a1.ID, a4.ID, b2.ID}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js, err := tc.get()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, j := range js {
				got = append(got, j.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}

	j, err := s.Job(ctx, "b", b2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != JobRunning || !slices.Equal(j.Turns, ids(4, 5)) || !j.Created.Equal(b2.Created) {
		t.Errorf("Job = %+v", j)
	}
	// A job finishes: it leaves Unfinished; a long output is cut to 4 KiB.
	j.State, j.Output = JobFailed, strings.Repeat("é", 3000)
	if err := s.PutJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if j, _ = s.Job(ctx, "b", b2.ID); j.State != JobFailed || len(j.Output) != 4096 || !strings.HasSuffix(j.Output, "é") {
		t.Errorf("finished job: state %s, output %d bytes", j.State, len(j.Output))
	}
	if un, _ := s.Unfinished(ctx); len(un) != 2 {
		t.Errorf("unfinished after b2 failed: %d, want 2", len(un))
	}
	if _, err := s.Job(ctx, "a", b2.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("job of another cube: %v, want ErrNotFound", err)
	}
	if err := s.PutJob(ctx, Job{Cube: "a"}); err == nil {
		t.Error("a job without an id stored")
	}
	if err := s.PutJob(ctx, Job{ID: "x"}); err == nil {
		t.Error("a job without a cube stored")
	}
}

func TestChanges(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, Options{Now: clk.Now})
	clk.Add(time.Second)
	logs := []struct {
		id string
		c  Change
	}{
		{"m1", Change{Time: t0.Add(2 * time.Second), Op: "update", By: "api", Text: "v2", Version: 2}},
		{"m1", Change{Time: t0, Op: "add", By: "extract:j1", Text: "v1", Version: 1}},
		{"m10", Change{Op: "add", By: "api"}},
		{"m1", Change{Op: "same", By: "extract:j2", Why: "an identical memory exists"}}, // clock: t0+1s
		{"m1", Change{Time: t0.Add(2 * time.Second), Op: "expire", By: "expiry"}},
	}
	for _, l := range logs {
		if err := s.Log(ctx, "c", l.id, l.c); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		id      string
		wantOps []string
	}{
		{"m1", []string{"add", "same", "update", "expire"}},
		{"m10", []string{"add"}},
		{"m2", nil},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			cs, err := s.Changes(ctx, "c", tc.id)
			if err != nil {
				t.Fatal(err)
			}
			var ops []string
			for _, c := range cs {
				ops = append(ops, c.Op)
			}
			if !slices.Equal(ops, tc.wantOps) {
				t.Errorf("ops %v, want %v", ops, tc.wantOps)
			}
		})
	}
	cs, _ := s.Changes(ctx, "c", "m1")
	if !cs[1].Time.Equal(t0.Add(time.Second)) || cs[1].Why != "an identical memory exists" || cs[2].Text != "v2" || cs[2].Version != 2 {
		t.Errorf("changes of m1: %+v", cs)
	}
}

func TestExpiry(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{Now: newClock().Now})
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	steps := []struct {
		name    string
		do      func() error
		now     int
		want    []string
		expiry1 time.Time // of m1
	}{
		{"set", func() error {
			for _, e := range []struct {
				id  string
				sec int
			}{{"m1", 10}, {"m2", 5}, {"m3", 20}} {
				if err := s.SetExpiry(ctx, "a", e.id, at(e.sec)); err != nil {
					return err
				}
			}
			return nil
		}, 10, []string{"m2", "m1"}, at(10)},
		{"before all", nil, 4, nil, at(10)},
		{"at the first", nil, 5, []string{"m2"}, at(10)},
		{"move m1 later", func() error { return s.SetExpiry(ctx, "a", "m1", at(30)) }, 10, []string{"m2"}, at(30)},
		{"move m1 earlier", func() error { return s.SetExpiry(ctx, "a", "m1", at(1)) }, 10, []string{"m1", "m2"}, at(1)},
		{"clear m2", func() error { return s.ClearExpiry(ctx, "a", "m2") }, 100, []string{"m1", "m3"}, at(1)},
		{"zero clears m1", func() error { return s.SetExpiry(ctx, "a", "m1", time.Time{}) }, 100, []string{"m3"}, time.Time{}},
		{"clear unknown", func() error { return s.ClearExpiry(ctx, "a", "m9") }, 100, []string{"m3"}, time.Time{}},
	}
	for _, st := range steps {
		if st.do != nil {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		got, err := s.Expired(ctx, "a", at(st.now))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: expired at +%ds %v, want %v", st.name, st.now, got, st.want)
		}
		if e, err := s.Expiry(ctx, "a", "m1"); err != nil || !e.Equal(st.expiry1) {
			t.Errorf("%s: expiry of m1 %v, %v; want %v", st.name, e, err, st.expiry1)
		}
	}

	// ExpiringCubes: a has m3; b one; c had one, cleared; d none.
	for _, e := range []struct {
		cube string
		at   time.Time
	}{{"b", at(7)}, {"c", at(7)}} {
		if err := s.SetExpiry(ctx, e.cube, "m1", e.at); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ClearExpiry(ctx, "c", "m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Log(ctx, "d", "m1", Change{Op: "add"}); err != nil {
		t.Fatal(err)
	}
	cubes, err := s.ExpiringCubes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(cubes)
	if !slices.Equal(cubes, []string{"a", "b"}) {
		t.Errorf("expiring cubes %v, want [a b]", cubes)
	}
}

func TestExtractGrammar(t *testing.T) {
	g, err := ExtractGrammar()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"root ::=", `char{1,160}`, `char{1,24}`, `"\"procedure\""`, `"1.0"`} {
		if !strings.Contains(g, want) {
			t.Errorf("grammar lacks %s:\n%s", want, g)
		}
	}
}

func TestParseExtraction(t *testing.T) {
	sources := []string{"I love hiking in the Alps.\nThat sounds fun!", "My sister lives in Paris."}
	an := textmem.EnglishAnalyzer{}
	mem := func(text, typ string, conf string) string {
		return fmt.Sprintf(`{"text":%q,"type":%q,"tags":["x"],"confidence":%s}`, text, typ, conf)
	}
	doc := func(ms ...string) string { return `{"memories":[` + strings.Join(ms, ",") + `]}` }
	valid := doc(
		mem("I love hiking in the Alps", "preference", "0.9"),
		`{"text":" My sister lives in Paris ","type":"fact","tags":[],"confidence":0.8}`,
		mem("The user owns a yacht in Monaco", "fact", "0.5"),
		mem("i love hiking in the alps", "preference", "0.5"),
		mem("   ", "event", "0.1"),
	)
	tests := []struct {
		name     string
		out      string
		wantKeep []Extracted
		wantDrop []Dropped
		wantErr  bool
	}{
		{"valid", valid,
			[]Extracted{
				{Text: "I love hiking in the Alps", Type: "preference", Tags: []string{"x"}, Confidence: 0.9},
				{Text: "My sister lives in Paris", Type: "fact", Tags: []string{}, Confidence: 0.8},
			},
			[]Dropped{
				{Text: "The user owns a yacht in Monaco", Why: "not grounded in the turns: 0 of 4 terms found there"},
				{Text: "i love hiking in the alps", Why: "repeated in the output"},
				{Text: "", Why: "no words"},
			}, false},
		{"grounded by a third", doc(mem("Paris trains are slow", "opinion", "0.3")),
			[]Extracted{{Text: "Paris trains are slow", Type: "opinion", Tags: []string{"x"}, Confidence: 0.3}}, nil, false},
		{"under a third", doc(mem("Paris trains are slow and loud", "opinion", "0.3")),
			nil, []Dropped{{Text: "Paris trains are slow and loud", Why: "not grounded in the turns: 1 of 4 terms found there"}}, false},
		{"empty", `{"memories":[]}`, nil, nil, false},
		{"whitespace after", "{\"memories\":[]}\n \n", nil, nil, false},
		{"invalid json", `{"memories":[`, nil, nil, true},
		{"not json", `I love hiking`, nil, nil, true},
		{"unknown field", `{"memories":[],"note":"x"}`, nil, nil, true},
		{"unknown memory field", doc(`{"text":"I love hiking","type":"fact","tags":[],"confidence":0.5,"why":"x"}`), nil, nil, true},
		{"wrong type", doc(mem("I love hiking", "hobby", "0.5")), nil, nil, true},
		{"type not a string", doc(`{"text":"I love hiking","type":3,"tags":[],"confidence":0.5}`), nil, nil, true},
		{"missing tags", doc(`{"text":"I love hiking","type":"fact","confidence":0.5}`), nil, nil, true},
		{"missing memories", `{}`, nil, nil, true},
		{"null memories", `{"memories":null}`, nil, nil, true},
		{"trailing object", `{"memories":[]}{}`, nil, nil, true},
		{"trailing word", `{"memories":[]} and more`, nil, nil, true},
		{"trailing bracket", `{"memories":[]}]`, nil, nil, true},
		{"confidence 1.5", doc(mem("I love hiking", "preference", "1.5")), nil, nil, true},
		{"confidence negative", doc(mem("I love hiking", "preference", "-0.1")), nil, nil, true},
		{"confidence a string", doc(`{"text":"I love hiking","type":"fact","tags":[],"confidence":"high"}`), nil, nil, true},
		{"too many memories", doc(slices.Repeat([]string{mem("I love hiking", "preference", "0.5")}, MaxExtracted+1)...), nil, nil, true},
		{"text over 160", doc(mem("I love hiking "+strings.Repeat("a", MaxMemoryChars-13), "preference", "0.5")), nil, nil, true},
		{"too many tags", doc(`{"text":"I love hiking","type":"fact","tags":["a","b","c","d","e"],"confidence":0.5}`), nil, nil, true},
		{"empty tag", doc(`{"text":"I love hiking","type":"fact","tags":[""],"confidence":0.5}`), nil, nil, true},
		{"tag over 24", doc(`{"text":"I love hiking","type":"fact","tags":["` + strings.Repeat("t", MaxTagChars+1) + `"],"confidence":0.5}`), nil, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keep, drop, err := ParseExtraction(tc.out, sources, an)
			if tc.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err %v, want ErrMalformed", err)
				}
				if keep != nil || drop != nil {
					t.Errorf("malformed output returned %v, %v", keep, drop)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", keep) != fmt.Sprintf("%+v", tc.wantKeep) {
				t.Errorf("kept %+v\nwant %+v", keep, tc.wantKeep)
			}
			if fmt.Sprintf("%+v", drop) != fmt.Sprintf("%+v", tc.wantDrop) {
				t.Errorf("dropped %+v\nwant %+v", drop, tc.wantDrop)
			}
		})
	}
	// The bound is in characters, not bytes: 160 two-byte runes fit.
	long := "Paris " + strings.Repeat("é", MaxMemoryChars-6)
	if _, _, err := ParseExtraction(doc(mem(long, "fact", "0.5")), sources, an); err != nil {
		t.Errorf("160 characters (%d bytes): %v", len(long), err)
	}
}

func TestExtractive(t *testing.T) {
	an := textmem.EnglishAnalyzer{}
	tests := []struct {
		name  string
		turns []Turn
		want  []Extracted
	}{
		{"first person only", []Turn{{User: "I love hiking. What time is it? My sister lives in Paris.",
			Assistant: "I like that you hike."}},
			[]Extracted{
				{Text: "I love hiking.", Type: TypePreference, Tags: []string{"hike", "love"}, Confidence: 0.5},
				{Text: "My sister lives in Paris.", Type: TypeFact, Tags: []string{"live", "pari"}, Confidence: 0.5},
			}},
		{"types", []Turn{
			{User: "The weather is nice. Yesterday I went to the market."},
			{User: "I think tea is better than coffee!\nFirst I boil water, then I add the tea leaves."},
			{User: "Do I like tea? I don't like coffee."},
		},
			[]Extracted{
				{Text: "Yesterday I went to the market.", Type: TypeEvent, Tags: []string{"market", "went"}, Confidence: 0.5},
				{Text: "I think tea is better than coffee!", Type: TypeOpinion, Tags: []string{"better", "coffe"}, Confidence: 0.5},
				{Text: "First I boil water, then I add the tea leaves.", Type: TypeProcedure, Tags: []string{"add", "boil"}, Confidence: 0.5},
				{Text: "I don't like coffee.", Type: TypePreference, Tags: []string{"coffe", "like"}, Confidence: 0.5},
			}},
		{"repeats once, at most five", []Turn{
			{User: "I love tea. i love tea. I own a cat. My cat is Tom. I run daily."},
			{User: "I swim on Sundays. I sing in a choir."},
		},
			[]Extracted{
				{Text: "I love tea.", Type: TypePreference, Tags: []string{"love", "tea"}, Confidence: 0.5},
				{Text: "I own a cat.", Type: TypeFact, Tags: []string{"cat"}, Confidence: 0.5},
				{Text: "My cat is Tom.", Type: TypeFact, Tags: []string{"cat", "tom"}, Confidence: 0.5},
				{Text: "I run daily.", Type: TypeFact, Tags: []string{"daili", "run"}, Confidence: 0.5},
				{Text: "I swim on Sundays.", Type: TypeFact, Tags: []string{"sunday", "swim"}, Confidence: 0.5},
			}},
		{"none", []Turn{{User: "What time is it?"}, {User: "Tell me a joke?"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Extractive(tc.turns, an)
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestContradicts(t *testing.T) {
	an := textmem.EnglishAnalyzer{}
	tests := []struct {
		a, b string
		want bool
	}{
		{"I love Chinese food", "I hate Chinese food", true},
		{"I love Chinese food", "I don't like Chinese food", true},
		{"I love Chinese food", "I no longer like Chinese food", true},
		{"I no longer hate Chinese food", "I hate Chinese food", true},
		{"I like longer hikes", "I hate longer hikes", true},
		{"I hate Chinese food", "I love Chinese food", true},
		{"I love Chinese food", "I hate Italian food", false},
		{"I love Chinese food", "I really love Chinese food", false},
		{"I love Chinese food", "I don't hate Chinese food", false},
		{"I hate Chinese food", "I don't like Chinese food", false},
		{"My dog is Max", "My dog is Rex", false},
		{"I love it", "I hate it", false},
	}
	for _, tc := range tests {
		t.Run(tc.a+" / "+tc.b, func(t *testing.T) {
			if got := Contradicts(tc.a, tc.b, an); got != tc.want {
				t.Errorf("Contradicts = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct{ s, want string }{
		{"I love hiking", TypePreference},
		{"I no longer like coffee", TypePreference},
		{"I believe in ghosts", TypeOpinion},
		{"First mix the flour, then add eggs", TypeProcedure},
		{"I visited Rome last year", TypeEvent},
		{"My sister lives in Paris", TypeFact},
	}
	for _, tc := range tests {
		if got := Classify(tc.s); got != tc.want {
			t.Errorf("Classify(%q) = %s, want %s", tc.s, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		bad  []string // parts of the error; none: valid
	}{
		{"zero", Options{}, nil},
		{"set", Options{ShortTermLen: 4, MoveLen: 2, JoinAt: 1, HeatAt: 3, Tau: time.Hour, MaxProfileItems: 1}, nil},
		{"move all", Options{ShortTermLen: 4, MoveLen: 4}, nil},
		{"move default queue", Options{MoveLen: 10}, nil},
		{"negative short term", Options{ShortTermLen: -1}, []string{"ShortTermLen, MoveLen and MaxProfileItems must be >= 0"}},
		{"negative move", Options{MoveLen: -2}, []string{">= 0"}},
		{"negative profile", Options{MaxProfileItems: -1}, []string{">= 0"}},
		{"move above queue", Options{ShortTermLen: 4, MoveLen: 5}, []string{"MoveLen 5 above ShortTermLen 4"}},
		{"move above default queue", Options{MoveLen: 11}, []string{"MoveLen 11 above ShortTermLen 10"}},
		{"join 2", Options{JoinAt: 2}, []string{"JoinAt 2 outside [0, 1]"}},
		{"join negative", Options{JoinAt: -0.5}, []string{"JoinAt -0.5 outside [0, 1]"}},
		{"join NaN", Options{JoinAt: math.NaN()}, []string{"JoinAt NaN outside [0, 1]"}},
		{"heat negative", Options{HeatAt: -1}, []string{"HeatAt and Tau must be >= 0"}},
		{"tau negative", Options{Tau: -time.Second}, []string{"HeatAt and Tau must be >= 0"}},
		{"all at once", Options{ShortTermLen: -1, JoinAt: 2, Tau: -1}, []string{">= 0", "JoinAt 2", "Tau"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if len(tc.bad) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadOptions) {
				t.Fatalf("Validate = %v, want ErrBadOptions", err)
			}
			for _, b := range tc.bad {
				if !strings.Contains(err.Error(), b) {
					t.Errorf("error %q lacks %q", err, b)
				}
			}
			if _, err := Open(nil, tc.opts); !errors.Is(err, ErrBadOptions) {
				t.Errorf("Open = %v, want ErrBadOptions", err)
			}
		})
	}

	s := openStore(t, Options{})
	o := s.Options()
	if o.ShortTermLen != 10 || o.MoveLen != 5 || o.JoinAt != 0.3 || o.HeatAt != 5 || o.Tau != 1e7*time.Second ||
		o.MaxProfileItems != 64 || o.Analyzer == nil || o.Now == nil || o.Logger == nil {
		t.Errorf("defaults %+v", o)
	}
}

func TestSentences(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"I love hiking. What time is it? My sister lives in Paris.", []string{"I love hiking.", "What time is it?", "My sister lives in Paris."}},
		{"Version 1.5 is out!Great\nnext line", []string{"Version 1.5 is out!Great", "next line"}},
		{"  \n ", nil},
	}
	for _, tc := range tests {
		if got := Sentences(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Sentences(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSessionGap: turns of one topic but two conversations hours apart go
// to two sessions, and a batch that spans the pause is split at it.
func TestSessionGap(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Options{ShortTermLen: 2, MoveLen: 2, Now: newClock().Now})
	var batch []Turn
	for i := 1; i <= 6; i++ {
		at := t0.Add(time.Duration(i) * time.Minute)
		if i > 3 {
			at = at.Add(3 * time.Hour) // the second conversation
		}
		batch = append(batch, Turn{ID: turnID(i), User: topicTurns[0], Time: at})
	}
	if _, err := s.Record(ctx, "g", batch...); err != nil {
		t.Fatal(err)
	}
	ses, err := s.Sessions(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, x := range ses {
		got = append(got, x.Turns)
	}
	if want := [][]string{ids(1, 2, 3), ids(4)}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sessions %v, want %v", got, want)
	}
	// each turn names its dialog's first turn; a turn recorded later,
	// within the gap, continues the second dialog, one after it starts a
	// third
	more := []Turn{{ID: turnID(7), User: "x", Time: t0.Add(3*time.Hour + 50*time.Minute)},
		{ID: turnID(8), User: "y", Time: t0.Add(5 * time.Hour)}}
	if _, err := s.Record(ctx, "g", more[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, "g", more[1]); err != nil {
		t.Fatal(err)
	}
	var dialogs []string
	for i := 1; i <= 8; i++ {
		tr, err := s.Turn(ctx, "g", turnID(i))
		if err != nil {
			t.Fatal(err)
		}
		dialogs = append(dialogs, tr.Dialog)
	}
	d1, d2, d3 := turnID(1), turnID(4), turnID(8)
	if want := []string{d1, d1, d1, d2, d2, d2, d2, d3}; !slices.Equal(dialogs, want) {
		t.Errorf("dialogs %v, want %v", dialogs, want)
	}
}
