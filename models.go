package memosrt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
)

// ModelSpec names a GGUF file the OS serves besides Options.Model: listed
// at once, loaded on its first request (Ollama's scheduler does the same).
type ModelSpec struct {
	// Name is what clients call it ("stories:latest", "tiny"). Required,
	// unique among the OS's models.
	Name string
	// Path is the GGUF file. Required.
	Path string
}

// ModelState is a model the OS serves and whether it is loaded now.
type ModelState struct {
	ModelInfo
	// Primary: Options.Model, the model the tier scheduler builds the
	// activation tier for (tier packs, resident packs). Other models
	// restore and store their own conversation packs only.
	Primary bool `json:"primary"`
	Loaded  bool `json:"loaded"`
	// Busy is the requests using it now.
	Busy int `json:"busy"`
	// ExpiresAt is when an idle loaded model is unloaded (keep-alive after
	// its last request); zero: never (keep-alive negative or unset).
	ExpiresAt time.Time `json:"expires_at"`
}

// model is one model the OS serves: the primary (Options.Model) or one of
// Options.Models. Its engine and everything bound to it (loaded) come and
// go with keep-alive and the RAM budget; the fields below are guarded by
// OS.modMu.
type model struct {
	name    string
	path    string
	primary bool
	info    ModelInfo // of the last load; before one, what the file says

	l *loaded // nil while not loaded
	// trans is closed when a load or unload in progress ends (nil: none);
	// a request waits for it and looks again.
	trans chan struct{}
	refs  int           // requests and holds using l
	used  time.Time     // last release
	keep  time.Duration // keep-alive after the last release; <0: forever, 0: unload at once
	// expires is when the idle model unloads (zero: never, or in use).
	expires time.Time
	timer   *time.Timer
}

// loaded is a model's engine and what is bound to it: request slots, the
// resident level, the adapter manager and the prompt layout. Immutable
// after load but for its own locks; used only under a model reference.
type loaded struct {
	o      *OS
	at     time.Time // when the load ended
	eng    *runtime.Engine
	man    *lora.Manager
	lay    *scheduler.Layout
	info   ModelInfo
	cfgKey string // kvcache.ConfigKey of the live KV config, no adapters

	pool    *slotPool
	jobSlot *slot // reserves the cells of tier jobs (never lent)
	resSlot *slot // reserves the cells of a pack being made resident
	seqs    []int // taken from the engine's pool at load, returned at unload
	nres    int   // resident sequences (primary only)

	// applyMu serialises resident level changes (applyResident, Warm).
	applyMu sync.Mutex
	// resMu guards res and resFree (the resident level).
	resMu   sync.Mutex
	res     map[string]*residentPack // by cube
	resFree []int                    // resident sequences holding no pack

	// unsaved are slots whose conversation state a busy writer skipped
	// (guarded by resMu): unload saves them first.
	unsaved map[*slot]convSave
}

// convSave is what persist needs to store a slot's state later.
type convSave struct {
	cube string
	gen  uint64
	prev string
	ad   adapterSet
}

// DefaultMaxModels is how many models stay loaded at once when
// Options.MaxModels is 0: Ollama's OLLAMA_MAX_LOADED_MODELS default for a
// machine without GPUs (envconfig.MaxRunners, server/sched.go).
const DefaultMaxModels = 3

// newModels builds the model list: the primary first, then specs.
// Errors: ErrBadOptions for a missing name or path, or a name twice.
func newModels(opts Options) ([]*model, error) {
	var out []*model
	seen := map[string]bool{}
	if opts.Model != "" {
		name := opts.PrimaryName()
		out = append(out, &model{name: name, path: opts.Model, primary: true, keep: -1})
		seen[name] = true
	}
	for i, sp := range opts.Models {
		switch {
		case sp.Name == "" || sp.Path == "":
			return nil, fmt.Errorf("%w: Models[%d] needs a Name and a Path (got %q, %q)", ErrBadOptions, i, sp.Name, sp.Path)
		case seen[sp.Name]:
			return nil, fmt.Errorf("%w: Models[%d]: model name %q twice", ErrBadOptions, i, sp.Name)
		}
		seen[sp.Name] = true
		m := &model{name: sp.Name, path: sp.Path, keep: -1}
		m.info = ModelInfo{Name: sp.Name, Path: sp.Path, Backend: "llama"}
		st, err := os.Stat(sp.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: Models[%d] (%s): %w", ErrBadOptions, i, sp.Name, err)
		}
		m.info.Size, m.info.Modified = st.Size(), st.ModTime().UTC()
		// what the KV config will carry once loaded (packs are keyed by it)
		if m.info.Digest, err = runtime.Fingerprint(sp.Path); err != nil {
			return nil, fmt.Errorf("%w: Models[%d] (%s): %w", ErrBadOptions, i, sp.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// defaultKeep is the keep-alive of a request that names none.
func (o *OS) defaultKeep() time.Duration {
	if o.opts.KeepAlive == nil {
		return -1
	}
	return *o.opts.KeepAlive
}

// findModel returns the model named name ("" is the primary), or an
// ErrModelNotFound error listing what is served.
func (o *OS) findModel(name string) (*model, error) {
	if len(o.models) == 0 {
		return nil, o.needEngine()
	}
	if name == "" {
		return o.models[0], nil
	}
	for _, m := range o.models {
		if m.name == name {
			return m, nil
		}
	}
	names := make([]string, len(o.models))
	for i, m := range o.models {
		names[i] = m.name
	}
	return nil, fmt.Errorf("%w: %q (served: %s)", ErrModelNotFound, name, strings.Join(names, ", "))
}

// use returns model name's loaded state, loading it first if needed (and
// unloading least recently used idle models for room), with a reference
// the caller gives back with done. keep is the keep-alive to apply after
// this use (nil: Options.KeepAlive). Errors: ErrModelNotFound, ErrBusy when
// every loaded model is in use and another would pass the budget, load
// errors, ctx's error.
func (o *OS) use(ctx context.Context, name string, keep *time.Duration) (*loaded, func(), error) {
	m, err := o.findModel(name)
	if err != nil {
		return nil, nil, err
	}
	k := o.defaultKeep()
	if keep != nil {
		k = *keep
	}
	l, err := o.acquire(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	o.modMu.Lock()
	m.keep = k
	o.modMu.Unlock()
	return l, func() { o.releaseModel(m, true) }, nil
}

// hold returns the primary's loaded state with a reference that leaves
// keep-alive alone (background work, inspection), or nil if it is not
// loaded now. The caller gives it back with done.
func (o *OS) hold() (*loaded, func()) {
	if len(o.models) == 0 {
		return nil, func() {}
	}
	m := o.models[0]
	o.modMu.Lock()
	defer o.modMu.Unlock()
	if m.l == nil || m.trans != nil {
		return nil, func() {}
	}
	m.refs++
	l := m.l
	return l, func() { o.releaseModel(m, false) }
}

// eachLoaded calls f with every loaded model, each under a reference that
// leaves keep-alive alone.
func (o *OS) eachLoaded(f func(l *loaded)) {
	o.modMu.Lock()
	var ms []*model
	var ls []*loaded
	for _, m := range o.models {
		if m.l != nil && m.trans == nil {
			m.refs++
			ms, ls = append(ms, m), append(ls, m.l)
		}
	}
	o.modMu.Unlock()
	for i, m := range ms {
		f(ls[i])
		o.releaseModel(m, false)
	}
}

// acquire takes a reference on m's loaded state, loading it or waiting
// for a load or unload in progress.
func (o *OS) acquire(ctx context.Context, m *model) (*loaded, error) {
	checked := false
	for {
		o.modMu.Lock()
		if m.l != nil && m.trans == nil {
			m.refs++
			if m.timer != nil {
				m.timer.Stop()
				m.timer = nil
			}
			m.expires = time.Time{}
			l := m.l
			o.modMu.Unlock()
			return l, nil
		}
		if t := m.trans; t != nil {
			o.modMu.Unlock()
			select {
			case <-t:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-o.base.Done():
				return nil, ErrClosed
			}
		}
		if !checked {
			// a file that cannot load (truncated, vocab-only, gone) fails
			// before any idle model is unloaded for it
			o.modMu.Unlock()
			if _, err := runtime.CheckModelFile(m.path); err != nil {
				return nil, err
			}
			checked = true
			continue
		}
		// make room, then load: m.trans keeps others waiting meanwhile
		victims, err := o.room(m)
		if err != nil {
			o.modMu.Unlock()
			return nil, err
		}
		done := make(chan struct{})
		m.trans = done
		o.modMu.Unlock()
		for _, v := range victims {
			o.unload(v)
		}
		l, err := o.loadModel(ctx, m)
		o.modMu.Lock()
		m.trans = nil
		close(done)
		if err != nil {
			o.modMu.Unlock()
			return nil, err
		}
		m.l, m.info = l, l.info
		m.refs++
		o.modMu.Unlock()
		if m.primary {
			o.attachScheduler(l)
		}
		return l, nil
	}
}

// room returns the idle models to unload so that m fits Options.MaxModels
// and Options.ModelBytes (file bytes of the loaded models), least recently
// used first, each marked as unloading. Called with modMu held. ErrBusy
// when the models in use leave no room.
func (o *OS) room(m *model) ([]*model, error) {
	maxN := o.opts.MaxModels
	if maxN <= 0 {
		maxN = DefaultMaxModels
	}
	// m.info is the loaded model's own while it is loaded (acquire, Open)
	var live []*model
	n, bytes := 0, m.info.Size
	for _, x := range o.models {
		if x != m && (x.l != nil || x.trans != nil) {
			live = append(live, x)
			n++
			bytes += x.info.Size
		}
	}
	// a model larger than ModelBytes by itself loads alone, as Ollama's
	// scheduler loads a model that fits no budget once the others are gone
	fits := func() bool {
		return n == 0 || n+1 <= maxN && (o.opts.ModelBytes <= 0 || bytes <= o.opts.ModelBytes)
	}
	slices.SortFunc(live, func(a, b *model) int { return a.used.Compare(b.used) })
	var out []*model
	for _, x := range live {
		if fits() {
			break
		}
		if x.refs > 0 || x.trans != nil || x.l == nil {
			continue
		}
		o.markUnload(x)
		out = append(out, x)
		n--
		bytes -= x.info.Size
	}
	if !fits() {
		for _, x := range out { // give them back: nothing is unloaded for nothing
			o.unmarkUnload(x)
		}
		budget := ""
		if o.opts.ModelBytes > 0 {
			budget = fmt.Sprintf(", %d bytes", o.opts.ModelBytes)
		}
		return nil, fmt.Errorf("%w: loading %s needs room and %d loaded models are in use (at most %d models%s)",
			ErrBusy, m.name, n, maxN, budget)
	}
	return out, nil
}

// markUnload sets x unloading (x.trans) and stops its timer. Called with
// modMu held, x idle.
func (o *OS) markUnload(x *model) {
	x.trans = make(chan struct{})
	if x.timer != nil {
		x.timer.Stop()
		x.timer = nil
	}
}

func (o *OS) unmarkUnload(x *model) {
	close(x.trans)
	x.trans = nil
	o.arm(x)
}

// unloadNow marks idle m unloading and unloads it. Called with modMu
// held; returns with it released.
func (o *OS) unloadNow(m *model) {
	o.markUnload(m)
	o.modMu.Unlock()
	o.unload(m)
}

// releaseModel gives back a reference; the last one of an expired model
// (keep-alive 0, or its time passed) unloads it. touch: a request's use
// (keep-alive starts again).
func (o *OS) releaseModel(m *model, touch bool) {
	o.modMu.Lock()
	m.refs--
	now := time.Now()
	if touch {
		m.used = now
	}
	if m.refs > 0 || m.l == nil || m.trans != nil {
		o.modMu.Unlock()
		return
	}
	if touch || !m.expires.IsZero() {
		o.arm(m)
	}
	if m.keep == 0 || !m.expires.IsZero() && !now.Before(m.expires) {
		if o.closedNow() {
			o.modMu.Unlock()
			return // Close unloads everything
		}
		o.unloadNow(m)
		return
	}
	o.modMu.Unlock()
}

// arm sets an idle model's expiry from its keep-alive and its timer.
// Called with modMu held.
func (o *OS) arm(m *model) {
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
	m.timer = time.AfterFunc(time.Until(m.expires), func() { o.expire(m) })
}

// expire unloads m if it is still idle and past its expiry.
func (o *OS) expire(m *model) {
	o.modMu.Lock()
	if m.refs > 0 || m.l == nil || m.trans != nil || m.expires.IsZero() || time.Now().Before(m.expires) || o.closedNow() {
		o.modMu.Unlock()
		return
	}
	o.unloadNow(m)
}

func (o *OS) closedNow() bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.closed
}

// unload saves the conversation states of m's slots, waits for its pack
// writes, detaches the scheduler (primary) and closes the engine. m is
// marked unloading (m.trans) and idle; unload ends the transition.
func (o *OS) unload(m *model) {
	o.modMu.Lock()
	l := m.l
	o.modMu.Unlock()
	if l != nil {
		if m.primary {
			o.detachScheduler()
		}
		l.saveUnsaved()
		o.writes.Wait() // conversation packs being stored
		if err := l.close(); err != nil {
			o.log.Warn("model unload", "model", m.name, "err", err)
		}
		o.log.Info("model unloaded", "model", m.name)
	}
	o.modMu.Lock()
	m.l = nil
	m.expires = time.Time{}
	close(m.trans)
	m.trans = nil
	o.modMu.Unlock()
}

// Load loads model name ("" the primary) now, as a request would, and
// sets its keep-alive (nil: Options.KeepAlive); an Ollama request without
// a prompt does this. Errors as use.
func (o *OS) Load(ctx context.Context, name string, keep *time.Duration) (ModelInfo, error) {
	if err := o.enter(); err != nil {
		return ModelInfo{}, err
	}
	defer o.leave()
	l, done, err := o.use(ctx, name, keep)
	if err != nil {
		return ModelInfo{}, err
	}
	info := l.info
	done()
	return info, nil
}

// Unload unloads model name ("" the primary) once its running requests
// end, after saving their conversation states (Ollama's keep_alive 0). A
// model not loaded is a no-op. Errors: ErrModelNotFound.
func (o *OS) Unload(ctx context.Context, name string) error {
	if err := o.enter(); err != nil {
		return err
	}
	defer o.leave()
	m, err := o.findModel(name)
	if err != nil {
		return err
	}
	o.modMu.Lock()
	m.keep = 0
	if m.l == nil || m.trans != nil {
		o.modMu.Unlock()
		return nil
	}
	if m.refs > 0 {
		m.expires = time.Now() // the last release unloads it
		o.modMu.Unlock()
		return nil
	}
	o.unloadNow(m)
	return nil
}

// Models lists the models the OS serves, the primary first. Without a
// model: the upstream's, or none.
func (o *OS) Models() []ModelState {
	if len(o.models) == 0 {
		if o.up != nil {
			return []ModelState{{ModelInfo: o.info, Primary: true, Loaded: true}}
		}
		return nil
	}
	o.modMu.Lock()
	defer o.modMu.Unlock()
	out := make([]ModelState, len(o.models))
	for i, m := range o.models {
		out[i] = ModelState{ModelInfo: m.info, Primary: m.primary, Loaded: m.l != nil && m.trans == nil, Busy: m.refs}
		if out[i].Loaded {
			switch {
			case !m.expires.IsZero():
				out[i].ExpiresAt = m.expires
			case m.keep >= 0: // in use: keep-alive starts at its end
				out[i].ExpiresAt = time.Now().Add(m.keep)
			}
		}
	}
	return out
}

// loadModel loads m's engine and splits its sequences: Parallel request
// slots, ResidentSeqs resident ones (primary only) and one for tier jobs.
func (o *OS) loadModel(ctx context.Context, m *model) (*loaded, error) {
	opts := o.opts
	lo := opts.Engine
	lo.ModelPath = m.path
	nres := 0
	if m.primary {
		nres = opts.ResidentSeqs
	}
	lo.NSeqMax = opts.Parallel + nres + 1
	lo.Logger = opts.Logger
	// adapters cost nothing until a request attaches one (graph reuse stays
	// on, see runtime.Options.LoRA): always allowed
	lo.LoRA = true
	start := time.Now()
	l := &loaded{o: o, res: map[string]*residentPack{}, nres: nres, unsaved: map[*slot]convSave{}}
	var err error
	if l.eng, err = runtime.Load(ctx, lo); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	name := m.name
	lay := opts.Layout
	if !m.primary {
		lay.ChatTemplate = "" // the override is the primary's; others use their own
	}
	l.info = engineModelInfo(l.eng, m.path, name, lay.ChatTemplate, time.Since(start))
	if l.man, err = lora.NewManager(l.eng.Model(), m.path, o.reg, lora.Options{MaxBytes: opts.AdapterBytes,
		Detach: l.eng.DetachAdapter, Logger: opts.Logger}); err != nil {
		return nil, err
	}
	l.lay = scheduler.NewLayout(l.eng, o.mem, lay)
	l.cfgKey = kvcache.ConfigKey(l.eng.KVConfig(), "")
	// request and resident sequences are held until unload; the rest of
	// the pool (one sequence) serves tier jobs (Engine.AcquireSeq)
	for range opts.Parallel + nres {
		seq, ok := l.eng.TryAcquireSeq()
		if !ok {
			return nil, fmt.Errorf("%w: the engine's pool ran out of sequences", ErrBadOptions)
		}
		l.seqs = append(l.seqs, seq)
	}
	slices.Sort(l.seqs)
	l.pool = newSlotPool(l.seqs[:opts.Parallel], opts.MaxQueue)
	l.jobSlot, l.resSlot = l.pool.pseudo(), l.pool.pseudo()
	l.resFree = slices.Clone(l.seqs[opts.Parallel:])
	ok = true
	l.at = time.Now()
	o.log.Info("model ready", "model", name, "n_ctx", l.eng.NCtx(), "slots", opts.Parallel, "resident_seqs", nres,
		"load_ms", time.Since(start).Milliseconds())
	return l, nil
}

// close releases l's sequences, adapters and engine.
func (l *loaded) close() error {
	var errs []error
	if l.man != nil {
		errs = append(errs, l.man.Close())
	}
	for _, q := range l.seqs {
		l.eng.ClearSeq(q)
		l.eng.ReleaseSeq(q)
	}
	l.seqs = nil
	errs = append(errs, l.eng.Close())
	return errors.Join(errs...)
}

// saveUnsaved stores the conversation states a busy writer skipped, now
// (the model is idle: nothing else uses its sequences).
func (l *loaded) saveUnsaved() {
	l.resMu.Lock()
	todo := l.unsaved
	l.unsaved = map[*slot]convSave{}
	l.resMu.Unlock()
	for sl, cs := range todo {
		l.persistNow(sl, cs)
	}
}

// attachScheduler gives the tier scheduler the primary's engine and
// brings the resident level back.
func (o *OS) attachScheduler(l *loaded) {
	o.jobL.Store(l)
	if err := o.tiers.SetEngine(l.eng, l.lay); err != nil {
		o.log.Warn("scheduler not attached", "err", err)
		return
	}
	if err := o.applyResident(o.base, l); err != nil {
		o.log.Warn("resident packs not restored", "err", err)
	}
	o.Kick()
}

// detachScheduler stops tier jobs using the primary's engine (a running
// one is cancelled and stays pending) before the engine is closed.
func (o *OS) detachScheduler() {
	if err := o.tiers.SetEngine(nil, nil); err != nil {
		o.log.Warn("scheduler not detached", "err", err)
	}
	o.jobL.Store(nil)
}
