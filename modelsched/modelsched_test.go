package modelsched

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// val is a loaded model in these tests: its name and load number.
type val struct {
	name string
	n    int
}

type rec struct {
	mu      sync.Mutex
	loads   int
	events  []string
	checkOK bool
}

func (r *rec) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *rec) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func newSet(t *testing.T, o Options[*val], specs ...Spec) (*Set[*val], *rec) {
	t.Helper()
	r := &rec{checkOK: true}
	o.Check = func(path string) error {
		if path == "bad" {
			return errors.New("bad file")
		}
		return nil
	}
	o.Load = func(_ context.Context, m *Model[*val]) (*val, error) {
		r.mu.Lock()
		r.loads++
		n := r.loads
		r.mu.Unlock()
		r.add("load " + m.Name)
		return &val{m.Name, n}, nil
	}
	o.Unload = func(m *Model[*val], v *val) { r.add("unload " + v.name) }
	o.Loaded = func(m *Model[*val], v *val) { r.add("loaded " + v.name) }
	s, err := New(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

func find(t *testing.T, s *Set[*val], name string) *Model[*val] {
	t.Helper()
	m, ok := s.Find(name)
	if !ok {
		t.Fatalf("no model %q", name)
	}
	return m
}

// Loading past MaxLoaded unloads the least recently used idle model; with
// every loaded model in use it is refused with ErrFull and nothing is
// unloaded; a file Check refuses unloads nothing.
func TestRoomLRU(t *testing.T) {
	ctx := context.Background()
	s, r := newSet(t, Options[*val]{MaxLoaded: 2}, Spec{Name: "a", Path: "a", Primary: true}, Spec{Name: "b", Path: "b"}, Spec{Name: "c", Path: "c"}, Spec{Name: "x", Path: "bad"})
	if m, _ := s.Find(""); m.Name != "a" {
		t.Fatalf("Find(\"\") = %s, want the first", m.Name)
	}
	use := func(name string) func() {
		_, done, err := s.Use(ctx, find(t, s, name), -1)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	use("a")()
	use("b")()
	use("a")() // b is now the least recently used
	if _, _, err := s.Use(ctx, find(t, s, "x"), -1); err == nil || err.Error() != "bad file" {
		t.Fatalf("bad file: %v", err)
	}
	doneC := use("c")
	want := []string{"load a", "loaded a", "load b", "loaded b", "unload b", "load c", "loaded c"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	doneA := use("a")
	if _, _, err := s.Use(ctx, find(t, s, "b"), -1); !errors.Is(err, ErrFull) {
		t.Fatalf("b with a and c in use: %v, want ErrFull", err)
	}
	if got := r.got(); len(got) != len(want) {
		t.Fatalf("a refused load changed something: %q", got[len(want):])
	}
	sts := s.States()
	if !sts[0].Loaded || sts[0].Busy != 1 || sts[1].Loaded || !sts[2].Loaded || sts[2].L.name != "c" {
		t.Fatalf("states %+v", sts)
	}
	doneA()
	doneC()
}

// MaxBytes counts Size; a model larger than the budget loads alone.
func TestByteBudget(t *testing.T) {
	ctx := context.Background()
	s, r := newSet(t, Options[*val]{MaxBytes: 100}, Spec{Name: "a", Path: "a", Size: 60}, Spec{Name: "b", Path: "b", Size: 50}, Spec{Name: "big", Path: "big", Size: 500})
	for _, n := range []string{"a", "b", "big", "a"} {
		_, done, err := s.Use(ctx, find(t, s, n), -1)
		if err != nil {
			t.Fatal(err)
		}
		done()
	}
	want := []string{"load a", "loaded a", "unload a", "load b", "loaded b", "unload b", "load big", "loaded big", "unload big", "load a", "loaded a"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// Keep-alive 0 unloads at the last release; Unload while in use unloads
// at the last release; a positive keep-alive unloads when it passes.
func TestKeepAlive(t *testing.T) {
	ctx := context.Background()
	s, r := newSet(t, Options[*val]{}, Spec{Name: "a", Path: "a"}, Spec{Name: "b", Path: "b"})
	a, b := find(t, s, "a"), find(t, s, "b")
	_, done1, _ := s.Use(ctx, a, 0)
	_, done2, _ := s.Use(ctx, a, 0)
	done1()
	if s.States()[0].Loaded != true {
		t.Fatal("unloaded with a use left")
	}
	done2()
	if s.States()[0].Loaded {
		t.Fatal("keep-alive 0: still loaded after the last release")
	}
	_, done, _ := s.Use(ctx, b, -1)
	s.Unload(b)
	if !s.States()[1].Loaded {
		t.Fatal("Unload of a model in use unloaded it at once")
	}
	done()
	if s.States()[1].Loaded {
		t.Fatal("Unload: still loaded after the last release")
	}
	_, done, _ = s.Use(ctx, a, 20*time.Millisecond)
	done()
	st := s.States()[0]
	if !st.Loaded || st.ExpiresAt.IsZero() {
		t.Fatalf("idle with keep-alive: %+v", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.States()[0].Loaded {
		if time.Now().After(deadline) {
			t.Fatal("keep-alive passed, model still loaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := []string{"load a", "loaded a", "unload a", "load b", "loaded b", "unload b", "load a", "loaded a", "unload a"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// Uses racing for a model not loaded load it once; Hold and Each leave
// keep-alive alone; after Close releases do not unload; Release returns
// what is loaded.
func TestConcurrentUseAndClose(t *testing.T) {
	ctx := context.Background()
	s, r := newSet(t, Options[*val]{}, Spec{Name: "a", Path: "a"})
	a := find(t, s, "a")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, done, err := s.Use(ctx, a, -1)
			if err != nil || v.name != "a" {
				t.Errorf("use: %v %v", v, err)
				return
			}
			done()
		}()
	}
	wg.Wait()
	r.mu.Lock()
	loads := r.loads
	r.mu.Unlock()
	if loads != 1 {
		t.Fatalf("8 uses racing loaded the model %d times, want 1", loads)
	}
	if v, release, ok := s.Hold(a); !ok || v.n != 1 {
		t.Fatalf("Hold: %v %v", v, ok)
	} else {
		release()
	}
	_, done, _ := s.Use(ctx, a, 0)
	n := 0
	s.Each(func(m *Model[*val], v *val) { n++ })
	if n != 1 {
		t.Fatalf("Each saw %d loaded", n)
	}
	ls, trans := s.Close()
	if len(ls) != 1 || len(trans) != 0 {
		t.Fatalf("Close: %d loaded, %d in transition", len(ls), len(trans))
	}
	done() // keep-alive 0, but closed: the owner unloads
	if !s.States()[0].Loaded {
		t.Fatal("a release after Close unloaded the model")
	}
	if got := s.Release(); len(got) != 1 || got[0].name != "a" {
		t.Fatalf("Release: %v", got)
	}
	if s.States()[0].Loaded {
		t.Fatal("loaded after Release")
	}
}

func TestNewRefuses(t *testing.T) {
	for _, specs := range [][]Spec{{{Name: "", Path: "p"}}, {{Name: "a", Path: ""}}, {{Name: "a", Path: "p"}, {Name: "a", Path: "q"}}} {
		if _, err := New(specs, Options[*val]{}); err == nil {
			t.Fatalf("New(%v): nil error", specs)
		}
	}
}
