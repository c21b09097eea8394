package textmem

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/embed"
)

func ids(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Memory.ID
	}
	return out
}

func TestSearchWithFilters(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	day := func(d int) time.Time { return time.Date(2023, 5, d, 0, 0, 0, 0, time.UTC) }
	a := mustAdd(t, s, "c", Memory{Text: "tea with Alice", Kind: "fact", Tags: []string{"drink", "alice"}, Source: "chat", EventTime: day(1)})
	b := mustAdd(t, s, "c", Memory{Text: "tea with Bob", Kind: "preference", Tags: []string{"drink"}, EventTime: day(5)})
	c := mustAdd(t, s, "c", Memory{Text: "tea with Carol", Kind: "fact", Tags: []string{"alice"}}) // no event: Created (2025) counts
	cases := []struct {
		name string
		q    Query
		want []string
	}{
		{"none", Query{}, []string{a.ID, b.ID, c.ID}},
		{"kind", Query{Kinds: []string{"fact"}}, []string{a.ID, c.ID}},
		{"kinds", Query{Kinds: []string{"fact", "preference"}}, []string{a.ID, b.ID, c.ID}},
		{"tag", Query{Tags: []string{"drink"}}, []string{a.ID, b.ID}},
		{"all tags", Query{Tags: []string{"drink", "alice"}}, []string{a.ID}},
		{"since", Query{Since: day(5)}, []string{b.ID, c.ID}},
		{"until is open", Query{Until: day(5)}, []string{a.ID}},
		{"window", Query{Since: day(1), Until: day(6)}, []string{a.ID, b.ID}},
		{"created window", Query{Since: t0, Until: t0.Add(time.Hour)}, []string{c.ID}},
		{"kind and window", Query{Kinds: []string{"fact"}, Since: day(2)}, []string{c.ID}},
		{"not source", Query{NotSources: []string{"chat"}}, []string{b.ID, c.ID}},
		{"not sources", Query{NotSources: []string{"other", "chat"}, Kinds: []string{"fact"}}, []string{c.ID}},
		{"not kind", Query{NotKinds: []string{"fact"}}, []string{b.ID}},
		{"not kinds", Query{NotKinds: []string{"other", "preference"}, Tags: []string{"alice"}}, []string{a.ID, c.ID}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Text = "tea"
			hits, err := s.SearchWith(ctx, "c", q)
			if err != nil {
				t.Fatal(err)
			}
			// All three have the same BM25 score: ties go to the older id.
			if got := ids(hits); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", texts(hits), tc.want)
			}
		})
	}
	_, err := s.SearchWith(ctx, "c", Query{Text: "tea", Since: day(5), Until: day(1)})
	if !errors.Is(err, ErrBadQuery) {
		t.Errorf("inverted window: %v", err)
	}
	_, err = s.SearchWith(ctx, "c", Query{Text: "tea", ContextWeight: -1})
	if !errors.Is(err, ErrBadQuery) {
		t.Errorf("negative weight: %v", err)
	}
}

func TestNeighbors(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	var turns []Memory
	for _, text := range []string{
		"hi there", "where did you travel?", "we went to Lisbon in spring", "sounds lovely", // session 1
	} {
		turns = append(turns, mustAdd(t, s, "c", Memory{Text: text, Source: "s1", Kind: "dialog"}))
	}
	other := mustAdd(t, s, "c", Memory{Text: "unrelated other session", Source: "s2", Kind: "dialog"})
	q := Query{Text: "travel", K: 5}
	plain, err := s.SearchWith(ctx, "c", q)
	if err != nil || len(plain) != 1 || plain[0].Memory.ID != turns[1].ID {
		t.Fatalf("plain: %v %v", texts(plain), err)
	}
	q.Neighbors, q.NeighborDecay = 1, 0.5
	hits, err := s.SearchWith(ctx, "c", q)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{turns[1].ID, turns[0].ID, turns[2].ID}
	if !slices.Equal(ids(hits), want) {
		t.Fatalf("got %v", texts(hits))
	}
	top := plain[0].Score
	for i, w := range []float64{top, top * 0.5, top * 0.5} {
		if hits[i].Score != w {
			t.Errorf("hit %d score %v, want %v", i, hits[i].Score, w)
		}
	}
	// Two steps reach turn 3 but never the other session.
	q.Neighbors = 3
	hits, _ = s.SearchWith(ctx, "c", q)
	if got := ids(hits); !slices.Equal(got, []string{turns[1].ID, turns[0].ID, turns[2].ID, turns[3].ID}) || slices.Contains(got, other.ID) {
		t.Errorf("3 neighbours: %v", texts(hits))
	}
	// Context smoothing: "Lisbon" turn gains half its neighbours' mean score.
	q = Query{Text: "Lisbon travel", K: 5, ContextWeight: 0.5}
	hits, _ = s.SearchWith(ctx, "c", q)
	base, _ := s.SearchWith(ctx, "c", Query{Text: "Lisbon travel", K: 5})
	if len(hits) != 2 || len(base) != 2 {
		t.Fatalf("context: %v base %v", texts(hits), texts(base))
	}
	// turns[1] ("travel") and turns[2] ("Lisbon") are neighbours; each has
	// one other neighbour scoring 0.
	for i := range 2 {
		var self, nb float64
		for _, h := range base {
			if h.Memory.ID == hits[i].Memory.ID {
				self = h.Score
			} else {
				nb = h.Score
			}
		}
		if want := self + 0.5*nb/2; math.Abs(hits[i].Score-want) > 1e-12 {
			t.Errorf("context score %v, want %v", hits[i].Score, want)
		}
	}
}

// TestLastKinds: memories of a kind in LastKinds (the OS's recorded chat
// turns) come after every hit of another kind, however much better they
// match; within each tier the order is by score, and K cuts the second tier
// first. Without LastKinds the turns' better BM25 scores win.
func TestLastKinds(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	// three turns that say "dog" more often, in shorter texts, than the fact
	t1 := mustAdd(t, s, "c", Memory{Text: "my dog barked", Kind: "turn", Source: "dialog:1"})
	t2 := mustAdd(t, s, "c", Memory{Text: "a dog ran off", Kind: "turn", Source: "dialog:1"})
	t3 := mustAdd(t, s, "c", Memory{Text: "dog, good dog", Kind: "turn", Source: "dialog:1"})
	fact := mustAdd(t, s, "c", Memory{Text: "Lily has a dog named Max who is brown.", Source: "cli"})
	park := mustAdd(t, s, "c", Memory{Text: "Max likes to run in the park.", Source: "cli"})
	mustAdd(t, s, "c", Memory{Text: "Lily loves apple pie."})
	cases := []struct {
		name string
		q    Query
		want []string
	}{
		{"no tiers", Query{}, []string{t3.ID, t1.ID, t2.ID, fact.ID}},
		{"turns last", Query{LastKinds: []string{"turn"}}, []string{fact.ID, t3.ID, t1.ID, t2.ID}},
		{"turns last, k 2", Query{K: 2, LastKinds: []string{"turn"}}, []string{fact.ID, t3.ID}},
		{"turns last, k 1", Query{K: 1, LastKinds: []string{"turn"}}, []string{fact.ID}},
		{"turns dropped", Query{NotKinds: []string{"turn"}}, []string{fact.ID}},
		// the fact's neighbour (same Source) joins the first tier, the
		// turns' neighbours are turns
		{"neighbours", Query{Neighbors: 1, NeighborDecay: 0.7, LastKinds: []string{"turn"}}, []string{fact.ID, park.ID, t3.ID, t1.ID, t2.ID}},
		// context smoothing lifts the middle turn, between two matches
		{"default query", withLast(DefaultQuery("", 0), "turn"), []string{fact.ID, park.ID, t3.ID, t2.ID, t1.ID}},
		{"both kinds last", Query{LastKinds: []string{"turn", ""}}, []string{t3.ID, t1.ID, t2.ID, fact.ID}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Text = "dog"
			hits, err := s.SearchWith(ctx, "c", q)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(hits); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %v", texts(hits), tc.want)
			}
		})
	}
}

// withLast returns q with LastKinds kinds.
func withLast(q Query, kinds ...string) Query {
	q.LastKinds = kinds
	return q
}

func TestRecency(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2024, 1, 31, 0, 0, 0, 0, time.UTC)
	s, _ := openStore(t, t.TempDir(), Options{Now: func() time.Time { return now }})
	old := mustAdd(t, s, "c", Memory{Text: "ran a marathon", EventTime: now.AddDate(0, 0, -60)})
	recent := mustAdd(t, s, "c", Memory{Text: "ran a marathon", EventTime: now.AddDate(0, 0, -30)})
	base, _ := s.SearchWith(ctx, "c", Query{Text: "marathon"})
	if !slices.Equal(ids(base), []string{old.ID, recent.ID}) {
		t.Fatalf("base order %v", ids(base))
	}
	hits, err := s.SearchWith(ctx, "c", Query{Text: "marathon", RecencyWeight: 1, RecencyHalfLife: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(hits), []string{recent.ID, old.ID}) {
		t.Fatalf("recency order %v", ids(hits))
	}
	if want := base[0].Score * 1.5; math.Abs(hits[0].Score-want) > 1e-12 {
		t.Errorf("recent score %v, want %v", hits[0].Score, want)
	}
	if want := base[0].Score * 1.25; math.Abs(hits[1].Score-want) > 1e-12 {
		t.Errorf("old score %v, want %v", hits[1].Score, want)
	}
}

func TestTemporalCues(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	a := mustAdd(t, s, "c", Memory{Text: "Caroline joined the support group"})
	b := mustAdd(t, s, "c", Memory{Text: "Caroline went to the support group yesterday"})
	q := Query{Text: "When did Caroline go to the support group?", K: 2}
	plain, _ := s.SearchWith(ctx, "c", q)
	q.TemporalCues = 0.3
	cued, _ := s.SearchWith(ctx, "c", q)
	if !slices.Equal(ids(cued), []string{b.ID, a.ID}) {
		t.Errorf("cued order %v", texts(cued))
	}
	if cued[0].Score <= plain[0].Score {
		t.Errorf("cue did not raise %v vs %v", cued[0].Score, plain[0].Score)
	}
	for q, want := range map[string]bool{
		"When did she go?": true, "what year was it": true, "How long ago did he move?": true,
		"What did she paint?": false, "whenever": false,
	} {
		if got := isTemporalQuestion(q); got != want {
			t.Errorf("isTemporalQuestion(%q) = %v", q, got)
		}
	}
}

func TestFeedback(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	mustAdd(t, s, "c", Memory{Text: "Melanie paints landscapes with watercolor"})
	w := mustAdd(t, s, "c", Memory{Text: "watercolor brushes are expensive"})
	q := Query{Text: "what does Melanie paint", K: 5}
	plain, _ := s.SearchWith(ctx, "c", q)
	if slices.Contains(ids(plain), w.ID) {
		t.Fatalf("plain found %v", texts(plain))
	}
	q.Feedback, q.FeedbackTerms, q.FeedbackWeight = 1, 2, 0.5
	fb, err := s.SearchWith(ctx, "c", q)
	if err != nil || !slices.Contains(ids(fb), w.ID) {
		t.Errorf("feedback: %v %v", texts(fb), err)
	}
}

func TestNearDuplicate(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	a := mustAdd(t, s, "c", Memory{Text: "Alice likes green tea in the morning", Kind: "preference", Tags: []string{"x"}})
	m := mustAdd(t, s, "c", Memory{Text: "Alice likes green tea, in the morning!", Kind: "preference", Tags: []string{"y"}})
	if m.ID != a.ID || m.Version != 2 || m.Text != "Alice likes green tea, in the morning!" || !slices.Equal(m.Tags, []string{"x", "y"}) {
		t.Errorf("merged = %+v", m)
	}
	h, err := s.History(ctx, "c", a.ID)
	if err != nil || len(h) != 2 || h[0].Text != a.Text {
		t.Errorf("history %v %v", h, err)
	}
	// Another kind, or a less similar text, is a new memory.
	k := mustAdd(t, s, "c", Memory{Text: "Alice likes green tea in the morning", Kind: "fact"})
	d := mustAdd(t, s, "c", Memory{Text: "Alice likes green tea in the evening", Kind: "preference"})
	if k.ID == a.ID || d.ID == a.ID {
		t.Errorf("merged too eagerly: %s %s", k.ID, d.ID)
	}
	off, _ := openStore(t, t.TempDir(), Options{NearDuplicate: -1})
	x := mustAdd(t, off, "c", Memory{Text: "Alice likes green tea"})
	y := mustAdd(t, off, "c", Memory{Text: "Alice likes green tea!"})
	if x.ID == y.ID {
		t.Error("merged with NearDuplicate off")
	}
}

func TestDense(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, err := embed.NewHash(256)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Embedder: h, NearDuplicate: -1}
	var pup Memory
	func() {
		db := openDB(t, dir)
		defer db.Close()
		s, err := OpenBackend(backendFor(t, db, dir), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		pup = mustAdd(t, s, "c", Memory{Text: "Caroline adopted a puppy"})
		mustAdd(t, s, "c", Memory{Text: "Melanie ran a charity race"})
		doomed := mustAdd(t, s, "c", Memory{Text: "a puppy to delete"})
		if err := s.Delete(ctx, "c", doomed.ID); err != nil {
			t.Fatal(err)
		}
	}()
	s, _ := openStore(t, dir, opts)
	hits, err := s.SearchWith(ctx, "c", Query{Text: "puppy adopted", DenseWeight: 1})
	if err != nil {
		t.Fatal(err)
	}
	// First on both lists: 1/61 + 1/61.
	if len(hits) == 0 || hits[0].Memory.ID != pup.ID || hits[0].Score != 2.0/61 {
		t.Fatalf("fused: %v", hits)
	}
	// A typo has no lexical match; the hashed trigrams still find it.
	hits, err = s.SearchWith(ctx, "c", Query{Text: "pupy adoptd", DenseWeight: 1, K: 1})
	if err != nil || len(hits) != 1 || hits[0].Memory.ID != pup.ID || hits[0].Score != 1.0/61 {
		t.Fatalf("dense only: %v %v", hits, err)
	}
	ix, _ := s.index(ctx, "c")
	if n := ix.vec.Len(); n != 2 {
		t.Errorf("%d vectors loaded, want 2", n)
	}
	// stored: one per live memory (the deleted one's went with it)
	if n, err := s.Vectors(ctx, "c"); n != 2 || err != nil {
		t.Errorf("Vectors = %d, %v; want 2", n, err)
	}
	if n, err := s.Vectors(ctx, "empty"); n != 0 || err != nil {
		t.Errorf("unknown cube: Vectors = %d, %v; want 0", n, err)
	}
}

func openDB(t *testing.T, dir string) *badgerDB {
	t.Helper()
	db, err := openBadger(dir)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestFlatIndex(t *testing.T) {
	f := NewFlatIndex(2)
	f.Add(1, []float32{1, 0})
	f.Add(2, []float32{0, 1})
	f.Add(3, []float32{0.6, 0.8})
	got := f.Search([]float32{1, 0}, 2, nil)
	want := []VectorHit{{1, 1}, {3, 0.6}}
	if !slices.Equal(got, want) {
		t.Errorf("search %v, want %v", got, want)
	}
	f.Remove(1)
	f.Add(3, []float32{0.8, 0.6})
	got = f.Search([]float32{1, 0}, 5, func(s uint32) bool { return s != 2 })
	if want := []VectorHit{{3, 0.8}}; !slices.Equal(got, want) || f.Len() != 2 {
		t.Errorf("after remove %v (len %d), want %v", got, f.Len(), want)
	}
}

// badEmbedder returns the vector v for every text.
type badEmbedder struct{ v []float32 }

func (b badEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = slices.Clone(b.v)
	}
	return out, nil
}
func (b badEmbedder) Dim() int     { return len(b.v) }
func (b badEmbedder) Name() string { return "bad" }

// A memory is never stored without its vector: an embedder that answers
// NaN, Inf or all zeros fails the add (and the update), and the store
// holds nothing of it.
func TestUnusableVectorsAreRefused(t *testing.T) {
	ctx := context.Background()
	for _, v := range [][]float32{{0, 0, 0}, {1, float32(math.NaN()), 0}, {float32(math.Inf(1)), 0, 0}} {
		s, _ := openStore(t, t.TempDir(), Options{Embedder: badEmbedder{v}})
		if _, err := s.Add(ctx, "c", Memory{Text: "Lily has a dog."}); !errors.Is(err, embed.ErrBadVector) {
			t.Fatalf("vector %v: Add = %v, want ErrBadVector", v, err)
		}
		if ms, err := s.List(ctx, "c"); err != nil || len(ms) != 0 {
			t.Fatalf("vector %v: %d memories stored (%v)", v, len(ms), err)
		}
	}
}
