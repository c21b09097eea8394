package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvgate"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/memchunk"
	"github.com/memosrt/memosrt/modelsched"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/slots"
)

// model is one model served: the primary (Options.Model) or one of
// Options.Models. Its engine and everything bound to it (loaded) come and
// go with keep-alive and the RAM budget (package modelsched).
type model = modelsched.Model[*loaded]

// loaded is a model's engine and what is bound to it: request slots, the
// resident level, the adapter manager and the prompt layout. Immutable
// after load but for its own locks; used only under a model reference.
type loaded struct {
	p      *Pipeline
	at     time.Time // when the load ended
	eng    *runtime.Engine
	man    *lora.Manager
	lay    *layout.Layout
	info   ModelInfo
	cfgKey string // kvcache.ConfigKey of the live KV config, no adapters

	pool    *slots.Pool
	jobSlot *slots.Slot // reserves the cells of tier jobs (never lent)
	resSlot *slots.Slot // reserves the cells of a pack being made resident
	seqs    []int       // taken from the engine's pool at load, returned at unload
	nres    int         // resident sequences (primary only)
	// noJobSeq: the engine has no sequence for tier jobs
	// (config.Options.OneSequence); reserveJob refuses them
	noJobSeq bool

	// applyMu serialises resident level changes (applyResident, Warm).
	applyMu sync.Mutex
	// res is the resident level (the primary's resident sequences).
	res *slots.Resident

	// composition (compose.go): the scratch sequences held for it (none
	// without Options.Compose or ComposeRatio), its Composer (nil when off
	// for this model) and its cell reservations
	scratch   []int
	chunks    *memchunk.Composer
	chunkSlot *slots.Slot // reserves the cells of chunk work (a chunk's prefill, a probe)
	gateKey   string      // with Options.ComposeAuto: the model's calibration key (kvgate.Key), "" otherwise

	// unsaved are slots whose conversation state a busy writer skipped
	// (guarded by unsavedMu): unload saves them first.
	unsavedMu sync.Mutex
	unsaved   map[*slots.Slot]convSave
}

// convSave is what persist needs to store a slot's state later.
type convSave struct {
	cube string
	gen  uint64
	prev string
	ad   adapterSet
}

// DefaultMaxModels is how many models stay loaded at once when
// Options.MaxModels is 0 (modelsched.DefaultMaxLoaded: Ollama's
// OLLAMA_MAX_LOADED_MODELS default for a machine without GPUs).
const DefaultMaxModels = modelsched.DefaultMaxLoaded

// newModels builds the model set, the primary first, then opts.Models,
// and the infos of what their files say. Errors: ErrBadOptions for a
// missing name or path, a name twice, or a file that is not there.
func (p *Pipeline) newModels(opts Options) error {
	var specs []modelsched.Spec
	infos := map[string]ModelInfo{}
	seen := map[string]bool{}
	if opts.Model != "" {
		sp := modelsched.Spec{Name: opts.PrimaryName(), Path: opts.Model, Primary: true}
		if st, err := os.Stat(opts.Model); err == nil {
			sp.Size = st.Size() // else Open's load of it says what is wrong
		}
		specs = append(specs, sp)
		seen[sp.Name] = true
	}
	for i, sp := range opts.Models {
		switch {
		case sp.Name == "" || sp.Path == "":
			return fmt.Errorf("%w: Models[%d] needs a Name and a Path (got %q, %q)", ErrBadOptions, i, sp.Name, sp.Path)
		case seen[sp.Name]:
			return fmt.Errorf("%w: Models[%d]: model name %q twice", ErrBadOptions, i, sp.Name)
		}
		seen[sp.Name] = true
		info := ModelInfo{Name: sp.Name, Path: sp.Path, Backend: "llama"}
		st, err := os.Stat(sp.Path)
		if err != nil {
			return fmt.Errorf("%w: Models[%d] (%s): %w", ErrBadOptions, i, sp.Name, err)
		}
		info.Size, info.Modified = st.Size(), st.ModTime().UTC()
		// what the KV config will carry once loaded (packs are keyed by it)
		if info.Digest, err = runtime.Fingerprint(sp.Path); err != nil {
			return fmt.Errorf("%w: Models[%d] (%s): %w", ErrBadOptions, i, sp.Name, err)
		}
		infos[sp.Name] = info
		specs = append(specs, modelsched.Spec{Name: sp.Name, Path: sp.Path, Size: info.Size})
	}
	set, err := modelsched.New(specs, modelsched.Options[*loaded]{
		MaxLoaded: opts.MaxModels,
		MaxBytes:  opts.ModelBytes,
		Check:     func(path string) error { _, err := runtime.CheckModelFile(path); return err },
		Load:      p.loadModel,
		Unload:    p.unloadModel,
		Loaded:    p.modelLoaded,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	p.models, p.infos = set, infos
	return nil
}

// modelInfo is m's info as of its last load; before one, what the file says.
func (p *Pipeline) modelInfo(m *model) ModelInfo {
	p.infoMu.Lock()
	defer p.infoMu.Unlock()
	return p.infos[m.Name]
}

// modelLoaded records a load's info and attaches the tier scheduler to
// the primary (modelsched.Options.Loaded).
func (p *Pipeline) modelLoaded(m *model, l *loaded) {
	p.infoMu.Lock()
	p.infos[m.Name] = l.info
	p.infoMu.Unlock()
	if m.Primary {
		p.attachScheduler(l)
	}
}

// defaultKeep is the keep-alive of a request that names none.
func (p *Pipeline) defaultKeep() time.Duration {
	if p.opts.KeepAlive == nil {
		return -1
	}
	return *p.opts.KeepAlive
}

// findModel returns the model named name ("" is the primary), or an
// ErrModelNotFound error listing what is served.
func (p *Pipeline) findModel(name string) (*model, error) {
	if p.models.Len() == 0 {
		return nil, p.needEngine()
	}
	if m, ok := p.models.Find(name); ok {
		return m, nil
	}
	var names []string
	for _, m := range p.models.Models() {
		names = append(names, m.Name)
	}
	return nil, fmt.Errorf("%w: %q (served: %s)", ErrModelNotFound, name, strings.Join(names, ", "))
}

// use returns model name's loaded state, loading it first if needed (and
// unloading least recently used idle models for room), with a reference
// the caller gives back with done. keep is the keep-alive to apply after
// this use (nil: Options.KeepAlive). Errors: ErrModelNotFound, ErrBusy when
// every loaded model is in use and another would pass the budget, load
// errors, ctx's error, ErrClosed.
func (p *Pipeline) use(ctx context.Context, name string, keep *time.Duration) (*loaded, func(), error) {
	m, err := p.findModel(name)
	if err != nil {
		return nil, nil, err
	}
	k := p.defaultKeep()
	if keep != nil {
		k = *keep
	}
	l, done, err := p.models.Use(ctx, m, k)
	switch {
	case errors.Is(err, modelsched.ErrFull):
		return nil, nil, fmt.Errorf("%w: %w", ErrBusy, err)
	case errors.Is(err, modelsched.ErrClosed):
		return nil, nil, ErrClosed
	}
	return l, done, err
}

// hold returns the primary's loaded state with a reference that leaves
// keep-alive alone (background work, inspection), or nil if it is not
// loaded now. The caller gives it back with done.
func (p *Pipeline) hold() (*loaded, func()) {
	if p.models.Len() == 0 {
		return nil, func() {}
	}
	l, done, ok := p.models.Hold(p.models.Models()[0])
	if !ok {
		return nil, done
	}
	return l, done
}

// eachLoaded calls f with every loaded model, each under a reference that
// leaves keep-alive alone.
func (p *Pipeline) eachLoaded(f func(l *loaded)) {
	p.models.Each(func(_ *model, l *loaded) { f(l) })
}

// unloadModel saves the conversation states of m's slots, waits for its
// pack writes, detaches the scheduler (primary) and closes the engine
// (modelsched.Options.Unload).
func (p *Pipeline) unloadModel(m *model, l *loaded) {
	if m.Primary {
		p.detachScheduler()
	}
	l.saveUnsaved()
	p.writes.Wait() // conversation packs being stored
	if err := l.close(); err != nil {
		p.log.Warn("model unload", "model", m.Name, "err", err)
	}
	p.log.Info("model unloaded", "model", m.Name)
}

// Load loads model name ("" the primary) now, as a request would, and
// sets its keep-alive (nil: Options.KeepAlive); an Ollama request without
// a prompt does this. Errors as use.
func (p *Pipeline) Load(ctx context.Context, name string, keep *time.Duration) (ModelInfo, error) {
	l, done, err := p.use(ctx, name, keep)
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
func (p *Pipeline) Unload(ctx context.Context, name string) error {
	m, err := p.findModel(name)
	if err != nil {
		return err
	}
	p.models.Unload(m)
	return nil
}

// Models lists the models served, the primary first. Without a
// model: the upstream's, or none.
func (p *Pipeline) Models() []ModelState {
	if p.models.Len() == 0 {
		if p.up != nil {
			return []ModelState{{ModelInfo: p.info, Primary: true, Loaded: true}}
		}
		return nil
	}
	sts := p.models.States()
	out := make([]ModelState, len(sts))
	for i, st := range sts {
		info := p.modelInfo(p.models.Models()[i])
		if st.Loaded {
			info = p.withGate(st.L.info, st.L.eng)
		}
		out[i] = ModelState{ModelInfo: info, Primary: st.Primary, Loaded: st.Loaded, Busy: st.Busy, ExpiresAt: st.ExpiresAt}
	}
	return out
}

// withGate returns info with the calibration gate's view of the loaded
// model (no adapters) in its model_info, as "memosrt.kv_gate"
// (kvgate.Status): the codec setting, the codec packs are stored with
// now, composition, and the calibration table once made.
func (p *Pipeline) withGate(info ModelInfo, eng *runtime.Engine) ModelInfo {
	if p.gate == nil || eng == nil {
		return info
	}
	m := maps.Clone(info.Info)
	if m == nil {
		m = map[string]any{}
	}
	m["memosrt.kv_gate"] = p.gate.Status(kvgate.Key(eng.KVConfig(), ""))
	info.Info = m
	return info
}

// loadModel loads m's engine and splits its sequences: Parallel request
// slots, ResidentSeqs resident ones (primary only) and one for tier jobs.
func (p *Pipeline) loadModel(ctx context.Context, m *model) (*loaded, error) {
	opts := p.opts
	lo := opts.Engine
	lo.ModelPath = m.Path
	nres := 0
	if m.Primary {
		nres = opts.ResidentSeqs
	}
	lo.NSeqMax = opts.Parallel + nres + 1
	if opts.OneSequence {
		lo.NSeqMax = opts.Parallel // 1 (config.Options.Validate): no tier-job sequence
	}
	composing := opts.Compose > 0 || opts.ComposeRatio != nil || opts.ComposeAuto
	if composing {
		lo.NSeqMax += memchunk.Scratch
		lo.BlendProbe = true
	}
	if opts.ComposeAuto {
		lo.NSeqMax++ // the calibration's scratch (kvgate.Calibrate takes a free one)
	}
	lo.Logger = opts.Logger
	// adapters cost nothing until a request attaches one (graph reuse stays
	// on, see runtime.Options.LoRA): always allowed
	lo.LoRA = true
	start := time.Now()
	l := &loaded{p: p, nres: nres, noJobSeq: opts.OneSequence, unsaved: map[*slots.Slot]convSave{}}
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
	name := m.Name
	lay := opts.Layout
	if !m.Primary {
		lay.ChatTemplate = "" // the override is the primary's; others use their own
	}
	l.info = modelsched.EngineInfo(l.eng, m.Path, name, lay.ChatTemplate, time.Since(start))
	if l.man, err = lora.NewManager(l.eng.Model(), m.Path, p.reg, lora.Options{MaxBytes: opts.AdapterBytes,
		Detach: l.eng.DetachAdapter, Logger: opts.Logger}); err != nil {
		return nil, err
	}
	l.lay = layout.New(l.eng, p.mem, lay)
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
	if composing {
		for range memchunk.Scratch {
			seq, ok := l.eng.TryAcquireSeq()
			if !ok {
				return nil, fmt.Errorf("%w: the engine's pool ran out of sequences", ErrBadOptions)
			}
			l.scratch = append(l.scratch, seq)
		}
	}
	l.pool = slots.New(l.seqs[:opts.Parallel], opts.MaxQueue, ErrClosed)
	l.jobSlot, l.resSlot, l.chunkSlot = l.pool.Pseudo(), l.pool.Pseudo(), l.pool.Pseudo()
	if len(l.scratch) > 0 {
		if r := p.composeRatio(l); r > 0 {
			l.chunks = memchunk.NewComposer(l.eng, l.lay, p.kv, l.scratch, r)
		} else if opts.ComposeAuto && l.eng.ShiftGuard() == nil && p.gate != nil {
			// the gate's fraction is asked per turn (compose); the
			// Composer's own is runtime's default, never used then
			l.chunks = memchunk.NewComposer(l.eng, l.lay, p.kv, l.scratch, runtime.DefaultComposeOptions().Ratio)
			l.gateKey = kvgate.Key(l.eng.KVConfig(), "")
		}
	}
	l.res = slots.NewResident(l.seqs[opts.Parallel:], l.clearSeq, p.residentEvicted)
	ok = true
	l.at = time.Now()
	p.log.Info("model ready", "model", name, "n_ctx", l.eng.NCtx(), "slots", opts.Parallel, "resident_seqs", nres,
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
	for _, q := range l.scratch {
		l.eng.ClearSeq(q)
		l.eng.ReleaseSeq(q)
	}
	l.scratch = nil
	errs = append(errs, l.eng.Close())
	return errors.Join(errs...)
}

// saveUnsaved stores the conversation states a busy writer skipped, now
// (the model is idle: nothing else uses its sequences).
func (l *loaded) saveUnsaved() {
	l.unsavedMu.Lock()
	todo := l.unsaved
	l.unsaved = map[*slots.Slot]convSave{}
	l.unsavedMu.Unlock()
	for sl, cs := range todo {
		l.persistNow(sl, cs)
	}
}

// attachScheduler gives the tier scheduler the primary's engine and
// brings the resident level back.
func (p *Pipeline) attachScheduler(l *loaded) {
	p.jobL.Store(l)
	if err := p.tiers.SetEngine(l.eng, l.lay); err != nil {
		p.log.Warn("scheduler not attached", "err", err)
		return
	}
	if err := p.applyResident(p.base, l); err != nil {
		p.log.Warn("resident packs not restored", "err", err)
	}
	p.Kick()
}

// detachScheduler stops tier jobs using the primary's engine (a running
// one is cancelled and stays pending) before the engine is closed.
func (p *Pipeline) detachScheduler() {
	if err := p.tiers.SetEngine(nil, nil); err != nil {
		p.log.Warn("scheduler not detached", "err", err)
	}
	p.jobL.Store(nil)
}
