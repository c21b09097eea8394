package modelsched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DefaultMaxLoaded is how many models stay loaded at once when
// Options.MaxLoaded is 0: Ollama's OLLAMA_MAX_LOADED_MODELS default for a
// machine without GPUs (envconfig.MaxRunners, server/sched.go).
const DefaultMaxLoaded = 3

var (
	// ErrFull is returned by Use when loading a model needs room and the
	// loaded models that would make it are in use.
	ErrFull = errors.New("modelsched: the loaded models are in use")
	// ErrClosed is returned by a Use waiting for a load or unload when
	// Release is called.
	ErrClosed = errors.New("modelsched: closed")
)

// Spec is a model to serve.
type Spec struct {
	Name    string // what clients call it; unique in a Set
	Path    string // the GGUF file
	Primary bool   // the model the tiers are built for (memosrt's Options.Model)
	Size    int64  // bytes counted against Options.MaxBytes (the file's size)
}

// Options configure a Set. The function fields are hooks the owner sets;
// none is called with the Set's lock held.
type Options[L any] struct {
	// MaxLoaded bounds the models loaded at once; 0: DefaultMaxLoaded.
	MaxLoaded int
	// MaxBytes bounds the sum of the loaded models' Size; 0: no bound. A
	// model larger than MaxBytes by itself loads alone, as Ollama's
	// scheduler loads a model that fits no budget once the others are gone.
	MaxBytes int64
	// Check refuses a model file before any idle model is unloaded for it
	// (a truncated, vocab-only or missing file). Nil: none.
	Check func(path string) error
	// Load loads m and returns its loaded value. Required.
	Load func(ctx context.Context, m *Model[L]) (L, error)
	// Unload releases a loaded value of m: m is idle and marked in
	// transition until it returns. Required.
	Unload func(m *Model[L], l L)
	// Loaded is told of each load by Use, after it, before the value is
	// handed out (memosrt attaches the tier scheduler to the primary).
	Loaded func(m *Model[L], l L)
}

// Model is one served model. Its load state is guarded by the Set's lock.
type Model[L any] struct {
	Spec

	l      L
	loaded bool
	// trans is closed when a load or unload in progress ends (nil: none);
	// a user waits for it and looks again.
	trans chan struct{}
	refs  int           // uses and holds
	used  time.Time     // last release of a use
	keep  time.Duration // keep-alive after the last use; <0: forever, 0: unload at once
	// expires is when the idle model unloads (zero: never, or in use).
	expires time.Time
	timer   *time.Timer
}

// State is a model's load state at one moment.
type State[L any] struct {
	Spec
	Loaded bool // loaded and not in transition
	L      L    // the loaded value, when Loaded
	Busy   int  // uses and holds now
	// ExpiresAt is when the idle loaded model unloads (while in use: its
	// keep-alive from now); zero: never.
	ExpiresAt time.Time
}

// Set is the served models. Safe for concurrent use.
type Set[L any] struct {
	opts   Options[L]
	models []*Model[L] // fixed at New; the primary, if any, first
	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Release
}

// New returns a Set serving specs, none loaded, each with keep-alive
// forever until a use sets another. Errors: a spec without a name or
// path, or a name twice.
func New[L any](specs []Spec, o Options[L]) (*Set[L], error) {
	if o.MaxLoaded <= 0 {
		o.MaxLoaded = DefaultMaxLoaded
	}
	s := &Set[L]{opts: o, done: make(chan struct{})}
	seen := map[string]bool{}
	for i, sp := range specs {
		switch {
		case sp.Name == "" || sp.Path == "":
			return nil, fmt.Errorf("models[%d] needs a Name and a Path (got %q, %q)", i, sp.Name, sp.Path)
		case seen[sp.Name]:
			return nil, fmt.Errorf("models[%d]: model name %q twice", i, sp.Name)
		}
		seen[sp.Name] = true
		s.models = append(s.models, &Model[L]{Spec: sp, keep: -1})
	}
	return s, nil
}

// Len is the number of served models; 0 for a nil Set.
func (s *Set[L]) Len() int {
	if s == nil {
		return 0
	}
	return len(s.models)
}

// Models returns the served models, in New's order.
func (s *Set[L]) Models() []*Model[L] { return s.models }

// Find returns the model named name; "" is the first (the primary). False
// when none is.
func (s *Set[L]) Find(name string) (*Model[L], bool) {
	if len(s.models) == 0 {
		return nil, false
	}
	if name == "" {
		return s.models[0], true
	}
	for _, m := range s.models {
		if m.Name == name {
			return m, true
		}
	}
	return nil, false
}

// Adopt makes l m's loaded value without calling Load (a model loaded
// before the Set could, as memosrt's Open loads the primary), with
// keep-alive keep from now.
func (s *Set[L]) Adopt(m *Model[L], l L, keep time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.l, m.loaded, m.keep = l, true, keep
	s.arm(m)
}

// Use returns m's loaded value, loading it first if needed (and
// unloading least recently used idle models for room), with a reference
// the caller gives back with release. keep is m's keep-alive after this
// use. Errors: ErrFull, ErrClosed, Check's and Load's errors, ctx's error.
func (s *Set[L]) Use(ctx context.Context, m *Model[L], keep time.Duration) (l L, release func(), err error) {
	if l, err = s.acquire(ctx, m); err != nil {
		return l, nil, err
	}
	s.mu.Lock()
	m.keep = keep
	s.mu.Unlock()
	return l, func() { s.release(m, true) }, nil
}

// Hold returns m's loaded value with a reference that leaves keep-alive
// alone (background work, inspection); false when m is not loaded now.
func (s *Set[L]) Hold(m *Model[L]) (l L, release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !m.loaded || m.trans != nil {
		return l, func() {}, false
	}
	m.refs++
	return m.l, func() { s.release(m, false) }, true
}

// Each calls f with every loaded model, each under a reference that
// leaves keep-alive alone.
func (s *Set[L]) Each(f func(m *Model[L], l L)) {
	s.mu.Lock()
	var ms []*Model[L]
	var ls []L
	for _, m := range s.models {
		if m.loaded && m.trans == nil {
			m.refs++
			ms, ls = append(ms, m), append(ls, m.l)
		}
	}
	s.mu.Unlock()
	for i, m := range ms {
		f(m, ls[i])
		s.release(m, false)
	}
}

// acquire takes a reference on m's loaded value, loading it or waiting
// for a load or unload in progress.
func (s *Set[L]) acquire(ctx context.Context, m *Model[L]) (L, error) {
	var zero L
	checked := s.opts.Check == nil
	for {
		s.mu.Lock()
		if m.loaded && m.trans == nil {
			m.refs++
			if m.timer != nil {
				m.timer.Stop()
				m.timer = nil
			}
			m.expires = time.Time{}
			l := m.l
			s.mu.Unlock()
			return l, nil
		}
		if t := m.trans; t != nil {
			s.mu.Unlock()
			select {
			case <-t:
				continue
			case <-ctx.Done():
				return zero, ctx.Err()
			case <-s.done:
				return zero, ErrClosed
			}
		}
		if !checked {
			// a file that cannot load fails before any idle model is
			// unloaded for it
			s.mu.Unlock()
			if err := s.opts.Check(m.Path); err != nil {
				return zero, err
			}
			checked = true
			continue
		}
		// make room, then load: m.trans keeps others waiting meanwhile
		victims, err := s.room(m)
		if err != nil {
			s.mu.Unlock()
			return zero, err
		}
		done := make(chan struct{})
		m.trans = done
		s.mu.Unlock()
		for _, v := range victims {
			s.unload(v)
		}
		l, err := s.opts.Load(ctx, m)
		s.mu.Lock()
		m.trans = nil
		close(done)
		if err != nil {
			s.mu.Unlock()
			return zero, err
		}
		m.l, m.loaded = l, true
		m.refs++
		s.mu.Unlock()
		if s.opts.Loaded != nil {
			s.opts.Loaded(m, l)
		}
		return l, nil
	}
}

// room returns the idle models to unload so that m fits MaxLoaded and
// MaxBytes, least recently used first, each marked in transition. Called
// with mu held. ErrFull when the models in use leave no room.
func (s *Set[L]) room(m *Model[L]) ([]*Model[L], error) {
	var live []*Model[L]
	n, bytes := 0, m.Size
	for _, x := range s.models {
		if x != m && (x.loaded || x.trans != nil) {
			live = append(live, x)
			n++
			bytes += x.Size
		}
	}
	fits := func() bool {
		return n == 0 || n+1 <= s.opts.MaxLoaded && (s.opts.MaxBytes <= 0 || bytes <= s.opts.MaxBytes)
	}
	slices.SortFunc(live, func(a, b *Model[L]) int { return a.used.Compare(b.used) })
	var out []*Model[L]
	for _, x := range live {
		if fits() {
			break
		}
		if x.refs > 0 || x.trans != nil || !x.loaded {
			continue
		}
		s.markUnload(x)
		out = append(out, x)
		n--
		bytes -= x.Size
	}
	if !fits() {
		for _, x := range out { // give them back: nothing is unloaded for nothing
			s.unmarkUnload(x)
		}
		budget := ""
		if s.opts.MaxBytes > 0 {
			budget = fmt.Sprintf(", %d bytes", s.opts.MaxBytes)
		}
		return nil, fmt.Errorf("%w: loading %s needs room and %d loaded models are in use (at most %d models%s)",
			ErrFull, m.Name, n, s.opts.MaxLoaded, budget)
	}
	return out, nil
}

// markUnload sets idle x in transition and stops its timer. Called with
// mu held.
func (s *Set[L]) markUnload(x *Model[L]) {
	x.trans = make(chan struct{})
	if x.timer != nil {
		x.timer.Stop()
		x.timer = nil
	}
}

func (s *Set[L]) unmarkUnload(x *Model[L]) {
	close(x.trans)
	x.trans = nil
	s.arm(x)
}

// unloadNow marks idle m in transition and unloads it. Called with mu
// held; returns with it released.
func (s *Set[L]) unloadNow(m *Model[L]) {
	s.markUnload(m)
	s.mu.Unlock()
	s.unload(m)
}

// release gives back a reference; the last one of an expired model
// (keep-alive 0, or its time passed) unloads it. touch: a use's release
// (keep-alive starts again).
func (s *Set[L]) release(m *Model[L], touch bool) {
	s.mu.Lock()
	m.refs--
	now := time.Now()
	if touch {
		m.used = now
	}
	if m.refs > 0 || !m.loaded || m.trans != nil {
		s.mu.Unlock()
		return
	}
	if touch || !m.expires.IsZero() {
		s.arm(m)
	}
	if m.keep == 0 || !m.expires.IsZero() && !now.Before(m.expires) {
		if s.closed {
			s.mu.Unlock()
			return // the owner's Close unloads everything
		}
		s.unloadNow(m)
		return
	}
	s.mu.Unlock()
}

// arm sets an idle model's expiry from its keep-alive, and its timer.
// Called with mu held.
func (s *Set[L]) arm(m *Model[L]) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.expires = time.Time{}
	if m.keep < 0 {
		return
	}
	base := m.used
	if base.IsZero() {
		base = time.Now()
	}
	m.expires = base.Add(m.keep)
	if m.keep == 0 {
		return
	}
	m.timer = time.AfterFunc(time.Until(m.expires), func() { s.expire(m) })
}

// expire unloads m if it is still idle and past its expiry.
func (s *Set[L]) expire(m *Model[L]) {
	s.mu.Lock()
	if m.refs > 0 || !m.loaded || m.trans != nil || m.expires.IsZero() || time.Now().Before(m.expires) || s.closed {
		s.mu.Unlock()
		return
	}
	s.unloadNow(m)
}

// unload calls the Unload hook for m, which is marked in transition and
// idle, and ends the transition.
func (s *Set[L]) unload(m *Model[L]) {
	s.mu.Lock()
	l, ok := m.l, m.loaded
	s.mu.Unlock()
	if ok {
		s.opts.Unload(m, l)
	}
	var zero L
	s.mu.Lock()
	m.l, m.loaded = zero, false
	m.expires = time.Time{}
	close(m.trans)
	m.trans = nil
	s.mu.Unlock()
}

// Unload unloads m once its uses end (keep-alive 0 from now on); a model
// not loaded, or in transition, is left as it is.
func (s *Set[L]) Unload(m *Model[L]) {
	s.mu.Lock()
	m.keep = 0
	if !m.loaded || m.trans != nil {
		s.mu.Unlock()
		return
	}
	if m.refs > 0 {
		m.expires = time.Now() // the last release unloads it
		s.mu.Unlock()
		return
	}
	s.unloadNow(m)
}

// States returns every model's state, in New's order.
func (s *Set[L]) States() []State[L] {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]State[L], len(s.models))
	for i, m := range s.models {
		st := State[L]{Spec: m.Spec, Loaded: m.loaded && m.trans == nil, Busy: m.refs}
		if st.Loaded {
			st.L = m.l
			switch {
			case !m.expires.IsZero():
				st.ExpiresAt = m.expires
			case m.keep >= 0: // in use: keep-alive starts at its end
				st.ExpiresAt = time.Now().Add(m.keep)
			}
		}
		out[i] = st
	}
	return out
}

// Close stops keep-alive unloads (releases and timers no longer unload;
// uses still load, for the requests the owner lets finish) and returns
// the loaded values (for the owner to drain) and the transitions in
// progress (for the owner to wait for). Idempotent.
func (s *Set[L]) Close() (loaded []L, trans []chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, m := range s.models {
		if m.loaded {
			loaded = append(loaded, m.l)
		}
		if m.trans != nil {
			trans = append(trans, m.trans)
		}
	}
	return loaded, trans
}

// Release stops every timer, makes a Use waiting for a transition return
// ErrClosed, and forgets every loaded value, returning them for the owner
// to free: the end of the owner's Close. Idempotent.
func (s *Set[L]) Release() []L {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	var out []L
	var zero L
	for _, m := range s.models {
		if m.timer != nil {
			m.timer.Stop()
			m.timer = nil
		}
		if m.loaded {
			out = append(out, m.l)
			m.l, m.loaded = zero, false
		}
	}
	return out
}
