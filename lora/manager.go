package lora

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
)

// Options configure a Manager. Zero means the default given.
type Options struct {
	// MaxBytes bounds the tensor bytes of the loaded adapters (Record.Bytes
	// summed). Unleased adapters are freed least recently used first to make
	// room; Acquire fails with ErrBudget when leased ones alone would pass
	// it. Default 1 GiB.
	MaxBytes int64
	// MaxIdle frees an unleased adapter at the next Trim once it has not
	// been used for this long. Default 0: only the byte budget frees.
	MaxIdle time.Duration
	// Detach is called with an adapter just before it is freed and must
	// return only when no llama context references it any more (llama.cpp
	// keeps a raw pointer to every attached adapter). With an engine this is
	// the engine's detach call. Nil: the caller guarantees no context still
	// has the adapter attached when a Lease ends.
	Detach func(*llama.Adapter)
	// Now returns the current time (MaxIdle). Default time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger

	// load loads a checked adapter file (tests replace it). Default
	// llama.LoadAdapter.
	load func(m *llama.Model, path string) (*llama.Adapter, error)
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options { return Options{MaxBytes: 1 << 30, Now: time.Now} }

// Validate reports every invalid field at once.
func (o Options) Validate() error {
	var errs []error
	if o.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("lora: MaxBytes %d < 0", o.MaxBytes))
	}
	if o.MaxIdle < 0 {
		errs = append(errs, fmt.Errorf("lora: MaxIdle %v < 0", o.MaxIdle))
	}
	return errors.Join(errs...)
}

// Ref is one adapter attached to a request at a scale (runtime.AdapterRef).
// Its Name is the adapter's Record.RefName.
type Ref = runtime.AdapterRef

// Key returns runtime.AdapterKey(refs): the key KV states are stored under.
func Key(refs []Ref) string { return runtime.AdapterKey(refs) }

type entry struct {
	rec     Record
	a       *llama.Adapter
	refs    int       // leases holding it
	used    time.Time // last Acquire or Release
	loading chan struct{}
	err     error // load failure, set before loading is closed
	// file is the adapter file's stat when its content last matched
	// rec.SHA256 (at load, then at a lease that hashed it again), taken at
	// statAt; guarded by Manager.mu.
	file   os.FileInfo
	statAt time.Time
}

// racyWindow: a stat taken less than this after the file's modification
// time does not vouch for the content (a rewrite within the file system's
// timestamp granularity keeps the time), so verify hashes again; git's
// "racy git" rule (Documentation/technical/racy-git.txt).
const racyWindow = 2 * time.Second

// Manager loads the adapters of one base model and lends them to requests.
// Safe for concurrent use.
type Manager struct {
	model *llama.Model
	base  Base
	reg   *Registry
	opts  Options
	log   *slog.Logger

	// loadMu serializes loading and freeing, so that the bytes really
	// allocated never pass MaxBytes.
	loadMu sync.Mutex

	// mu guards loaded, bytes, closed.
	mu     sync.Mutex
	loaded map[string]*entry // by Record.RefName
	bytes  int64             // sum of rec.Bytes over loaded (loading included)
	closed bool

	// afterResolve, when set (tests), runs in Acquire between resolving
	// the records and leasing them
	afterResolve func()
}

// NewManager returns a Manager for model, whose GGUF file is at modelPath
// (read for the tensor shapes Check needs), over the registry reg.
func NewManager(model *llama.Model, modelPath string, reg *Registry, opts Options) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := DefaultOptions()
	if opts.MaxBytes == 0 {
		opts.MaxBytes = d.MaxBytes
	}
	if opts.Now == nil {
		opts.Now = d.Now
	}
	if opts.load == nil {
		opts.load = llama.LoadAdapter
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, err := ReadBase(modelPath)
	if err != nil {
		return nil, err
	}
	return &Manager{model: model, base: base, reg: reg, opts: opts, log: log.With("tier", "parametric"),
		loaded: map[string]*entry{}}, nil
}

// Base returns the base model's architecture and tensor shapes.
func (m *Manager) Base() Base { return m.base }

// Lease holds adapters for one request. Release it when the request ends.
type Lease struct {
	// Refs are the adapters to attach, in the order asked for.
	Refs []Ref
	m    *Manager
	ents []*entry
	once sync.Once
}

// Key returns Key(l.Refs).
func (l *Lease) Key() string { return Key(l.Refs) }

// Release returns the adapters; they stay loaded until evicted. Idempotent.
func (l *Lease) Release() {
	if l == nil || l.m == nil {
		return
	}
	l.once.Do(func() { l.m.release(l.ents) })
}

func (m *Manager) release(ents []*entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	for _, e := range ents {
		e.refs--
		e.used = now
	}
}

// Acquire resolves specs in cube (see Registry.Resolve), loads the adapters
// not loaded yet and returns them leased. specs == nil means the cube's
// default adapters (Registry.Defaults, scale 1); an empty non-nil specs
// means no adapter at all. Before loading, each file is checked against the
// base model (Inspect, Check) and against its registered SHA-256; llama.cpp
// never sees a refused file. Errors wrap ErrNotFound, ErrBadName,
// ErrBadAdapter, ErrChanged, ErrBudget or ErrClosed.
func (m *Manager) Acquire(ctx context.Context, cube string, specs []Spec) (*Lease, error) {
	// A record read just before the registry drops or replaces it (the
	// parametric tier retires an adapter: record removed, then its file)
	// fails to load or verify; when the registry no longer resolves the
	// same records, the lease is taken again on what it resolves now, so
	// a request racing a retirement runs without the retired adapter
	// rather than failing. A file changed under a record still registered
	// stays an error.
	recs, scales, err := m.resolve(ctx, cube, specs)
	for try := 0; ; try++ {
		if err != nil {
			return nil, err
		}
		if m.afterResolve != nil {
			m.afterResolve()
		}
		l, lerr := m.lease(ctx, recs, scales)
		if lerr == nil || try == 2 || errors.Is(lerr, ErrClosed) || ctx.Err() != nil {
			return l, lerr
		}
		now, nowScales, rerr := m.resolve(ctx, cube, specs)
		if rerr == nil && slices.EqualFunc(now, recs, func(a, b Record) bool { return a.RefName() == b.RefName() && a.Path == b.Path }) {
			return nil, lerr
		}
		m.log.Info("adapter registry changed while leasing: resolving again", "cube", cube, "err", lerr)
		recs, scales, err = now, nowScales, rerr
	}
}

// resolve returns the records and scales specs name in cube (see Acquire).
func (m *Manager) resolve(ctx context.Context, cube string, specs []Spec) ([]Record, []float32, error) {
	var recs []Record
	var scales []float32
	if specs == nil {
		defs, err := m.reg.Defaults(ctx, cube)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range defs {
			recs = append(recs, r)
			scales = append(scales, 1)
		}
		return recs, scales, nil
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.Name] {
			return nil, nil, fmt.Errorf("%w: adapter %q listed twice", ErrBadName, s.Name)
		}
		seen[s.Name] = true
		r, err := m.reg.Resolve(ctx, cube, s.Name)
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, r)
		scales = append(scales, s.Scale)
	}
	return recs, scales, nil
}

// lease loads recs where needed, verifies their files and lends them at
// scales.
func (m *Manager) lease(ctx context.Context, recs []Record, scales []float32) (*Lease, error) {
	l := &Lease{m: m, Refs: []Ref{}}
	if len(recs) == 0 {
		if err := m.checkOpen(); err != nil {
			return nil, err
		}
		return l, nil
	}
	ents, err := m.acquire(ctx, recs)
	if err != nil {
		return nil, err
	}
	if err := m.verify(ents); err != nil {
		return nil, err
	}
	l.ents = ents
	for i, e := range ents {
		l.Refs = append(l.Refs, Ref{Name: e.rec.RefName(), Adapter: e.a, Scale: scales[i]})
	}
	return l, nil
}

// verify checks, for each held entry, that its file is still the one
// loaded: a file whose stat (inode, size, modification and change time:
// a rewrite in place that puts the old modification time back, as cp -p
// does, still moves the change time) differs from
// the one taken when it last matched is hashed again, and a hash other
// than the registered SHA-256, or a file gone, is ErrChanged: the entries
// are given back and the adapter is not lent with weights that no longer
// match its file (nor a KV state keyed by the old digest reused). A
// stat taken within racyWindow of the file's modification time vouches
// for nothing, so a rewrite that keeps size and time is seen too; the
// cost is one stat per adapter and lease, and a hash while a file is
// younger than racyWindow or after it changed.
func (m *Manager) verify(ents []*entry) error {
	for _, e := range ents {
		m.mu.Lock()
		was, at := e.file, e.statAt
		m.mu.Unlock()
		statAt := time.Now()
		now, err := os.Stat(e.rec.Path)
		if err == nil && was != nil && os.SameFile(was, now) && was.Size() == now.Size() && was.ModTime().Equal(now.ModTime()) &&
			changeTime(was) == changeTime(now) && at.Sub(was.ModTime()) > racyWindow {
			continue
		}
		if err == nil {
			var sum string
			if sum, _, err = FileDigest(e.rec.Path); err == nil && sum != e.rec.SHA256 {
				err = fmt.Errorf("%w: %s: sha256 %.12s, registered %.12s", ErrChanged, e.rec.Path, sum, e.rec.SHA256)
			}
		} else {
			err = fmt.Errorf("%w: %s: %w", ErrChanged, e.rec.Path, err)
		}
		m.mu.Lock()
		if err != nil {
			m.drop(ents)
			m.mu.Unlock()
			m.log.Warn("adapter file changed while loaded: refused", "adapter", e.rec.RefName(), "err", err)
			return err
		}
		e.file, e.statAt = now, statAt
		m.mu.Unlock()
	}
	return nil
}

func (m *Manager) checkOpen() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// hold takes a reference on every loaded entry of recs and returns them
// (nil where not loaded). Caller holds mu.
func (m *Manager) hold(recs []Record) []*entry {
	out := make([]*entry, len(recs))
	now := m.opts.Now()
	for i, r := range recs {
		if e := m.loaded[r.RefName()]; e != nil {
			e.refs++
			e.used = now
			out[i] = e
		}
	}
	return out
}

func (m *Manager) drop(ents []*entry) {
	for _, e := range ents {
		if e != nil {
			e.refs--
		}
	}
}

func (m *Manager) acquire(ctx context.Context, recs []Record) ([]*entry, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	ents := m.hold(recs)
	missing := slices.Contains(ents, nil)
	m.mu.Unlock()
	if missing {
		// load under loadMu, then take the references again
		m.mu.Lock()
		m.drop(ents)
		m.mu.Unlock()
		if err := m.load(ctx, recs); err != nil {
			return nil, err
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		ents = m.hold(recs)
		if slices.Contains(ents, nil) {
			// evicted between load and hold by another Acquire: rare, retry once
			m.drop(ents)
			m.mu.Unlock()
			return m.acquireLocked(ctx, recs)
		}
		m.mu.Unlock()
	}
	return ents, nil
}

// acquireLocked loads and holds recs in one loadMu section (no eviction can
// come between).
func (m *Manager) acquireLocked(ctx context.Context, recs []Record) ([]*entry, error) {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	if err := m.loadHeld(ctx, recs); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ents := m.hold(recs)
	if slices.Contains(ents, nil) {
		m.drop(ents)
		return nil, fmt.Errorf("lora: adapters evicted while loading")
	}
	return ents, nil
}

// load makes every rec loaded, freeing unleased adapters as needed.
func (m *Manager) load(ctx context.Context, recs []Record) error {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	return m.loadHeld(ctx, recs)
}

// loadHeld is load with loadMu held.
func (m *Manager) loadHeld(ctx context.Context, recs []Record) error {
	m.mu.Lock()
	var need []Record
	var needBytes, keepBytes int64
	keep := map[string]bool{}
	for _, r := range recs {
		if e := m.loaded[r.RefName()]; e != nil {
			keep[r.RefName()] = true
			keepBytes += e.rec.Bytes
		} else if !keep[r.RefName()] {
			keep[r.RefName()] = true
			need = append(need, r)
			needBytes += r.Bytes
		}
	}
	if len(need) == 0 {
		m.mu.Unlock()
		return nil
	}
	// victims: unleased, not wanted here, least recently used first
	var cands []*entry
	var pinned int64
	for name, e := range m.loaded {
		if e.refs > 0 || keep[name] {
			pinned += e.rec.Bytes
		} else {
			cands = append(cands, e)
		}
	}
	if pinned+needBytes > m.opts.MaxBytes {
		m.mu.Unlock()
		return fmt.Errorf("%w: %d bytes to load, %d held by leases, budget %d", ErrBudget, needBytes, pinned, m.opts.MaxBytes)
	}
	slices.SortFunc(cands, func(a, b *entry) int { return a.used.Compare(b.used) })
	var victims []*entry
	total := m.bytes
	for _, e := range cands {
		if total+needBytes <= m.opts.MaxBytes {
			break
		}
		victims = append(victims, e)
		delete(m.loaded, e.rec.RefName())
		total -= e.rec.Bytes
	}
	m.mu.Unlock()
	for _, e := range victims {
		m.free(e, "budget")
	}
	for _, r := range need {
		if err := ctx.Err(); err != nil {
			return err
		}
		statAt := time.Now()
		a, fi, err := m.loadOne(r)
		if err != nil {
			return err
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			a.Close()
			return ErrClosed
		}
		m.loaded[r.RefName()] = &entry{rec: r, a: a, used: m.opts.Now(), file: fi, statAt: statAt}
		m.bytes += r.Bytes
		m.mu.Unlock()
		m.log.Info("adapter loaded", "adapter", r.RefName(), "bytes", r.Bytes, "loaded_bytes", total)
	}
	return nil
}

// loadOne checks the file against the base model and its digest, then loads it.
// It returns the file's stat taken before the hash (see verify).
func (m *Manager) loadOne(r Record) (*llama.Adapter, os.FileInfo, error) {
	fi, err := os.Stat(r.Path)
	if err != nil {
		return nil, nil, err
	}
	sum, _, err := FileDigest(r.Path)
	if err != nil {
		return nil, nil, err
	}
	if sum != r.SHA256 {
		return nil, nil, fmt.Errorf("%w: %s: sha256 %.12s, registered %.12s", ErrChanged, r.Path, sum, r.SHA256)
	}
	f, err := Inspect(r.Path)
	if err != nil {
		return nil, nil, err
	}
	info, err := Check(f, m.base)
	if err != nil {
		return nil, nil, err
	}
	if info.Bytes != r.Bytes {
		return nil, nil, fmt.Errorf("%w: %s: %d tensor bytes, registered %d", ErrChanged, r.Path, info.Bytes, r.Bytes)
	}
	a, err := m.opts.load(m.model, r.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadAdapter, r.Name, err)
	}
	return a, fi, nil
}

// free detaches and frees an entry already removed from loaded (and from
// bytes' count by the caller's bookkeeping below). Caller holds loadMu.
func (m *Manager) free(e *entry, reason string) {
	if m.opts.Detach != nil {
		m.opts.Detach(e.a)
	}
	e.a.Close()
	m.mu.Lock()
	m.bytes -= e.rec.Bytes
	m.mu.Unlock()
	m.log.Info("adapter unloaded", "adapter", e.rec.RefName(), "bytes", e.rec.Bytes, "reason", reason)
}

// Trim frees unleased adapters idle for longer than Options.MaxIdle (none if
// MaxIdle is 0) and returns their names.
func (m *Manager) Trim(ctx context.Context) []string {
	if m.opts.MaxIdle <= 0 {
		return nil
	}
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	m.mu.Lock()
	now := m.opts.Now()
	var victims []*entry
	for name, e := range m.loaded {
		if e.refs == 0 && now.Sub(e.used) > m.opts.MaxIdle {
			victims = append(victims, e)
			delete(m.loaded, name)
		}
	}
	m.mu.Unlock()
	var names []string
	for _, e := range victims {
		m.free(e, "idle")
		names = append(names, e.rec.RefName())
	}
	slices.Sort(names)
	return names
}

// Loaded describes a loaded adapter.
type Loaded struct {
	Name  string    `json:"name"` // RefName
	Bytes int64     `json:"bytes"`
	Refs  int       `json:"refs"`
	Used  time.Time `json:"used"`
}

// Loaded returns the loaded adapters sorted by name, and their total bytes.
func (m *Manager) Loaded() ([]Loaded, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Loaded
	for _, e := range m.loaded {
		out = append(out, Loaded{Name: e.rec.RefName(), Bytes: e.rec.Bytes, Refs: e.refs, Used: e.used})
	}
	slices.SortFunc(out, func(a, b Loaded) int { return strings.Compare(a.Name, b.Name) })
	return out, m.bytes
}

// Close frees every adapter, leased or not (the caller ends requests
// first). Later calls return ErrClosed. Idempotent.
func (m *Manager) Close() error {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	ents := make([]*entry, 0, len(m.loaded))
	for _, e := range m.loaded {
		ents = append(ents, e)
	}
	m.loaded = map[string]*entry{}
	m.mu.Unlock()
	for _, e := range ents {
		m.free(e, "close")
	}
	return nil
}
