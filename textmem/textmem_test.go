package textmem

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
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// clock returns a Now that starts at t0 and advances one second per call.
func clock() func() time.Time {
	var mu sync.Mutex
	n := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return t0.Add(time.Duration(n-1) * time.Second)
	}
}

// openStore opens a Store over a real Badger database in dir (with
// MEMOSRT_TEST_TEXT_STORE=postgres or postgres-sealed, over a PostgreSQL
// database of its own for dir, see TestMain) and closes
// both at the end of the test, checking Close.
func openStore(t testing.TB, dir string, opts Options) (*Store, *datadir.DB) {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Now == nil {
		opts.Now = clock()
	}
	var be Backend = NewBadgerBackend(db)
	if pgServer != nil {
		be = openPostgresFor(t, dir)
	}
	s, err := OpenBackend(be, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("db close: %v", err)
		}
	})
	return s, db
}

func mustAdd(t testing.TB, s *Store, cube string, m Memory) Memory {
	t.Helper()
	got, err := s.Add(context.Background(), cube, m)
	if err != nil {
		t.Fatalf("add %q: %v", m.Text, err)
	}
	return got
}

func texts(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Memory.Text
	}
	return out
}

func TestAddGet(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	ev := time.Date(2023, 5, 8, 13, 56, 0, 0, time.FixedZone("CEST", 2*3600))
	m := mustAdd(t, s, "alice", Memory{Text: "likes green tea", Kind: "preference",
		Tags: []string{"drink"}, Source: "chat", EventTime: ev, ID: "ignored", Version: 7})
	if !validID(m.ID) {
		t.Fatalf("id %q is not 24 hex digits", m.ID)
	}
	want := Memory{ID: m.ID, Cube: "alice", Text: "likes green tea", Kind: "preference",
		Tags: []string{"drink"}, Source: "chat", Created: t0, Updated: t0,
		EventTime: time.Date(2023, 5, 8, 11, 56, 0, 0, time.UTC), Version: 1}
	got, err := s.Get(ctx, "alice", m.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []Memory{m, got} {
		if fmt.Sprint(g) != fmt.Sprint(want) {
			t.Errorf("got  %+v\nwant %+v", g, want)
		}
		if g.EventTime.Location() != time.UTC || g.Created.Location() != time.UTC {
			t.Errorf("times not UTC: %v %v", g.EventTime.Location(), g.Created.Location())
		}
	}
	if _, err := s.Get(ctx, "alice", "0123456789abcdef01234567"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get unknown id: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "alice", "../x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get malformed id: %v, want ErrNotFound", err)
	}
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{MaxTextBytes: 100})
	cases := []struct {
		name string
		cube string
		text string
		want error
	}{
		{"empty text", "c", "", ErrEmptyText},
		{"whitespace text", "c", " \t\n ", ErrEmptyText},
		{"invalid utf8", "c", "ab\xffcd", ErrInvalidUTF8},
		{"too large", "c", strings.Repeat("x", 101), ErrTooLarge},
		{"empty cube", "", "x", ErrBadCube},
		{"slash cube", "a/b", "x", ErrBadCube},
		{"space cube", "a b", "x", ErrBadCube},
		{"long cube", strings.Repeat("c", 65), "x", ErrBadCube},
		{"unicode cube", "café", "x", ErrBadCube},
		{"max cube", strings.Repeat("c", 64), "ok", nil},
		{"punct cube", "A-z_0.9", "ok", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Add(ctx, tc.cube, Memory{Text: tc.text})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	list, err := s.List(ctx, "c")
	if err != nil || len(list) != 0 {
		t.Fatalf("refused adds stored %d memories (err %v)", len(list), err)
	}
	if _, err := s.Add(ctx, "c", Memory{Text: "ok", Tags: []string{"\xff"}}); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("bad tag: %v", err)
	}
	if _, err := s.Search(ctx, "c", "\xff", 5); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("bad query: %v", err)
	}
}

func TestListUpdateHistory(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	empty, err := s.List(ctx, "nobody")
	if err != nil || empty == nil || len(empty) != 0 {
		t.Fatalf("empty cube: %v %v", empty, err)
	}
	a := mustAdd(t, s, "c", Memory{Text: "first"})
	b := mustAdd(t, s, "c", Memory{Text: "second"})
	c := mustAdd(t, s, "c", Memory{Text: "third"})
	u, err := s.Update(ctx, "c", a.ID, "first, revised")
	if err != nil {
		t.Fatal(err)
	}
	if u.Version != 2 || u.Text != "first, revised" || !u.Created.Equal(t0) || !u.Updated.Equal(t0.Add(3*time.Second)) {
		t.Errorf("updated = %+v", u)
	}
	list, err := s.List(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{a.ID, b.ID, c.ID}) {
		t.Errorf("list order %v, want %v", ids, []string{a.ID, b.ID, c.ID})
	}
	if _, err := s.Update(ctx, "c", a.ID, "third, redone"); err != nil {
		t.Fatal(err)
	}
	h, err := s.History(ctx, "c", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range h {
		got = append(got, fmt.Sprintf("v%d %s", m.Version, m.Text))
	}
	want := []string{"v1 first", "v2 first, revised", "v3 third, redone"}
	if !slices.Equal(got, want) {
		t.Errorf("history %q, want %q", got, want)
	}
	hits, err := s.Search(ctx, "c", "revised", 5)
	if err != nil || len(hits) != 0 {
		t.Errorf("old text still indexed: %v %v", texts(hits), err)
	}
	hits, err = s.Search(ctx, "c", "redone", 5)
	if err != nil || !slices.Equal(texts(hits), []string{"third, redone"}) {
		t.Errorf("new text not indexed: %v %v", texts(hits), err)
	}
	if _, err := s.Update(ctx, "c", a.ID, " "); !errors.Is(err, ErrEmptyText) {
		t.Errorf("empty update: %v", err)
	}
	if _, err := s.Update(ctx, "c", "0123456789abcdef01234567", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("update unknown: %v", err)
	}
}

// bm25 recomputes one term's BM25 contribution independently of index.go.
func bm25(tf, dl, avgdl, N, n float64) float64 {
	idf := math.Log(1 + (N-n+0.5)/(n+0.5))
	return idf * tf * 2.2 / (tf + 1.2*(0.25+0.75*dl/avgdl))
}

func TestSearchBM25(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	for _, text := range []string{
		"Caroline went hiking in the mountains",        // hike, mountain (+caroline, went): 4 terms
		"Melanie paints sunsets; painting relaxes her", // melani, paint, sunset, paint, relax: 5
		"the weather", // weather: 1
	} {
		mustAdd(t, s, "c", Memory{Text: text})
	}
	hits, err := s.SearchWith(ctx, "c", Query{Text: "Paintings of mountains", K: 10})
	if err != nil {
		t.Fatal(err)
	}
	avg := 10.0 / 3
	want := []struct {
		text  string
		score float64
	}{
		{"Melanie paints sunsets; painting relaxes her", bm25(2, 5, avg, 3, 1)},
		{"Caroline went hiking in the mountains", bm25(1, 4, avg, 3, 1)},
	}
	if len(hits) != len(want) {
		t.Fatalf("hits %v, want %d", texts(hits), len(want))
	}
	for i, w := range want {
		if hits[i].Memory.Text != w.text || math.Abs(hits[i].Score-w.score) > 1e-12 {
			t.Errorf("hit %d = %q %.15f, want %q %.15f", i, hits[i].Memory.Text, hits[i].Score, w.text, w.score)
		}
	}
	for _, q := range []string{"", "the of and", "   "} {
		hits, err := s.Search(ctx, "c", q, 10)
		if err != nil || len(hits) != 0 {
			t.Errorf("query %q: %v %v", q, texts(hits), err)
		}
	}
	hits, err = s.Search(ctx, "c", "weather", 0)
	if err != nil || len(hits) != 1 {
		t.Errorf("k=0: %v %v", texts(hits), err)
	}
}

func TestIsolation(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	ids := map[string]string{}
	for _, c := range []string{"a", "ab", "a-b", "a.b", "b"} {
		ids[c] = mustAdd(t, s, c, Memory{Text: "shared words in cube " + c}).ID
	}
	for _, c := range []string{"a", "ab", "a-b", "a.b", "b"} {
		t.Run(c, func(t *testing.T) {
			hits, err := s.Search(ctx, c, "shared words", 10)
			if err != nil || len(hits) != 1 || hits[0].Memory.ID != ids[c] || hits[0].Memory.Cube != c {
				t.Errorf("search: %v %v", texts(hits), err)
			}
			list, err := s.List(ctx, c)
			if err != nil || len(list) != 1 || list[0].ID != ids[c] {
				t.Errorf("list: %v %v", list, err)
			}
			for other, id := range ids {
				if other == c {
					continue
				}
				if _, err := s.Get(ctx, c, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("get %s's memory from %s: %v", other, c, err)
				}
				if err := s.Delete(ctx, c, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("delete %s's memory from %s: %v", other, c, err)
				}
			}
		})
	}
	cubes, err := s.Cubes(ctx)
	if err != nil || !slices.Equal(cubes, []string{"a", "a-b", "a.b", "ab", "b"}) {
		t.Errorf("cubes %v %v", cubes, err)
	}
	if err := s.DeleteCube(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	cubes, err = s.Cubes(ctx)
	if err != nil || !slices.Equal(cubes, []string{"a-b", "a.b", "ab", "b"}) {
		t.Errorf("cubes after delete %v %v", cubes, err)
	}
	if hits, _ := s.Search(ctx, "ab", "shared", 10); len(hits) != 1 {
		t.Errorf("delete of cube a touched ab: %v", texts(hits))
	}
	if list, _ := s.List(ctx, "a"); len(list) != 0 {
		t.Errorf("cube a not empty: %v", list)
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	corpus := []string{
		"Caroline went to the LGBTQ support group yesterday",
		"Melanie painted a sunrise over the lake",
		"Caroline is researching adoption agencies",
		"The support group was powerful and inspiring",
		"我喜欢喝绿茶",
	}
	queries := []string{"support group", "adoption research", "sunrise painting", "绿茶"}
	var before [][]Hit
	{
		db, err := datadir.Open(datadir.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenBackend(backendFor(t, db, dir), Options{Now: clock()})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range corpus {
			mustAdd(t, s, "c", Memory{Text: c})
		}
		del := mustAdd(t, s, "c", Memory{Text: "support group to be deleted"})
		if err := s.Delete(ctx, "c", del.ID); err != nil {
			t.Fatal(err)
		}
		for _, q := range queries {
			h, err := s.Search(ctx, "c", q, 3)
			if err != nil {
				t.Fatal(err)
			}
			before = append(before, h)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Search(ctx, "c", "x", 1); !errors.Is(err, ErrClosed) {
			t.Errorf("search after close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := openStore(t, dir, Options{})
	for i, q := range queries {
		h, err := s.Search(ctx, "c", q, 3)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(h) != fmt.Sprint(before[i]) {
			t.Errorf("query %q after reopen:\n got %v\nwant %v", q, h, before[i])
		}
	}
	// The clock restarted at t0, yet new ids sort after the old ones.
	m := mustAdd(t, s, "c", Memory{Text: "added after reopen"})
	list, _ := s.List(ctx, "c")
	if len(list) != len(corpus)+1 {
		t.Fatalf("list has %d", len(list))
	}
	for _, o := range list {
		if o.ID != m.ID && o.ID >= m.ID {
			t.Errorf("old id %s >= new id %s", o.ID, m.ID)
		}
	}
	if got := texts(before[0]); !slices.Equal(got, []string{corpus[3], corpus[0]}) {
		t.Errorf("support group hits %q", got)
	}
	if got := texts(before[3]); !slices.Equal(got, []string{corpus[4]}) {
		t.Errorf("cjk hits %q", got)
	}
}

func TestAnalyzerChangeRebuilds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := OpenBackend(backendFor(t, db, dir), Options{Analyzer: PlainAnalyzer{}})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, plain, "c", Memory{Text: "she was painting"})
	if h, _ := plain.Search(ctx, "c", "paint", 5); len(h) != 0 {
		t.Errorf("plain analyzer stemmed: %v", texts(h))
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, dir, Options{})
	h, err := s.Search(ctx, "c", "paint", 5)
	if err != nil || !slices.Equal(texts(h), []string{"she was painting"}) {
		t.Errorf("after rebuild: %v %v", texts(h), err)
	}
}

func TestDuplicates(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	const n = 16
	var wg sync.WaitGroup
	got := make([]Memory, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			text := "Likes  GREEN tea"
			if i%2 == 1 {
				text = "likes green tea "
			}
			got[i], errs[i] = s.Add(ctx, "c", Memory{Text: text})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i].ID != got[0].ID {
			t.Errorf("add %d: %v id %s, want %s", i, errs[i], got[i].ID, got[0].ID)
		}
	}
	list, _ := s.List(ctx, "c")
	if len(list) != 1 {
		t.Errorf("%d memories stored, want 1", len(list))
	}
	// Same words on another day are another memory.
	other := mustAdd(t, s, "c", Memory{Text: "likes green tea", EventTime: t0})
	if other.ID == got[0].ID {
		t.Error("event time ignored by duplicate detection")
	}
	// After delete the content can be added again.
	if err := s.Delete(ctx, "c", got[0].ID); err != nil {
		t.Fatal(err)
	}
	again := mustAdd(t, s, "c", Memory{Text: "likes green tea"})
	if again.ID == got[0].ID {
		t.Error("deleted memory returned as duplicate")
	}
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var deleted []string
	s, _ := openStore(t, t.TempDir(), Options{OnDelete: func(cube, id string) {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, cube+"/"+id)
	}})
	a := mustAdd(t, s, "c", Memory{Text: "apples are red"})
	b := mustAdd(t, s, "c", Memory{Text: "bananas are yellow"})
	if _, err := s.Update(ctx, "c", a.ID, "apples are green"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "c", a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "c", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, err := s.History(ctx, "c", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("history of deleted: %v", err)
	}
	if h, _ := s.Search(ctx, "c", "apples", 5); len(h) != 0 {
		t.Errorf("deleted memory found: %v", texts(h))
	}
	if err := s.DeleteCube(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	want := []string{"c/" + a.ID, "c/" + b.ID}
	if !slices.Equal(deleted, want) {
		t.Errorf("OnDelete calls %v, want %v", deleted, want)
	}
	// Nothing of the cube is left in the backend.
	n := 0
	err := s.be.View(ctx, "c", func(txn Txn) error {
		return txn.Iterate(nil, true, func(k, _ []byte) error {
			n++
			return nil
		})
	})
	if err != nil || n != 0 {
		t.Errorf("%d keys of cube c left (%v)", n, err)
	}
}

func TestAnalyzer(t *testing.T) {
	cases := []struct {
		name string
		a    Analyzer
		in   string
		want []string
	}{
		{"stem and stop", EnglishAnalyzer{}, "Caroline's painting of the sunsets", []string{"carolin", "paint", "sunset"}},
		{"digits kept", EnglishAnalyzer{}, "7 May 2023, I'm 5", []string{"7", "may", "2023", "5"}},
		{"punctuation", EnglishAnalyzer{}, "LGBTQ+ support-group!!", []string{"lgbtq", "support", "group"}},
		{"chinese bigrams", EnglishAnalyzer{}, "我喜欢绿茶", []string{"我喜", "喜欢", "欢绿", "绿茶"}},
		{"mixed scripts", EnglishAnalyzer{}, "東京tower 行く", []string{"東京", "tower", "行く"}},
		{"korean", EnglishAnalyzer{}, "기억 메모리", []string{"기억", "메모", "모리"}},
		{"single cjk", EnglishAnalyzer{}, "茶", []string{"茶"}},
		{"non-ascii word", EnglishAnalyzer{}, "Café CRÈME", []string{"café", "crème"}},
		{"plain", PlainAnalyzer{}, "Caroline's painting of the sunsets", []string{"caroline", "s", "painting", "of", "the", "sunsets"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			tc.a.Terms(tc.in, func(s string) { got = append(got, s) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("Terms(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	err := Options{K1: -1, B: 2, MaxTextBytes: -3}.Validate()
	want := "textmem: K1 is -1, want > 0\ntextmem: B is 2, want in (0, 1]\ntextmem: MaxTextBytes is -3, want > 0"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
