package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvgate"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/memchunk"
	"github.com/memosrt/memosrt/modelsched"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// Pipeline serves requests over the tiers: the served models (loaded and
// unloaded by package modelsched), the request stages (Do), the
// conversation packs it stores, the resident level and the tier
// scheduler's use of the primary model. Safe for concurrent use. The
// caller (package memosrt's OS) owns the stores in Deps and admits calls;
// Close releases what New made.
//
// Lock order: a model's applyMu, then kvMu, then genMu; infoMu and
// a model's unsavedMu are taken alone.
type Pipeline struct {
	opts Options
	log  *slog.Logger
	base context.Context // cancelled when the OS gives up waiting at Close

	db     *datadir.DB
	mem    *textmem.Store
	kv     *kvcache.Cache
	reg    *lora.Registry
	cubes  *textmem.CubeRegistry
	lay    *layout.Layout // without a model (upstream, none); a loaded model has its own
	tiers  *scheduler.Tiers
	gate   *kvgate.Gate     // the calibration gate of lossy packs; nil without a model
	up     *upstreamBackend // nil unless Options.Upstream
	info   ModelInfo        // the upstream's
	onChat func(ctx context.Context, req *Request, cube textmem.Cube, answer string)
	// onResponse is Deps.OnResponse
	onResponse func(ctx context.Context, req *Request, cube textmem.Cube, res *Response)

	// models are the models served, the primary (Options.Model) first;
	// fixed at New, loaded and unloaded by package modelsched.
	models *modelsched.Set[*loaded]
	infoMu sync.Mutex           // guards infos
	infos  map[string]ModelInfo // by model name: of its last load; before one, what its file says
	// jobL is the primary's loaded state while tier jobs use it (between
	// attachScheduler and detachScheduler)
	jobL  atomic.Pointer[loaded]
	atNew *loaded // the primary as New loaded it (Start applies its resident level)

	// kvMu serialises pack writes (conversation packs, warms, deletes,
	// imports): kvcache's index takes a pack id twice when two Puts of
	// the same pack race, and a later Delete then leaves a dangling entry.
	kvMu sync.Mutex
	// gens counts deletions per cube (guarded by genMu; raised with kvMu
	// held): a request that began before its cube was deleted stores no
	// conversation pack and leaves no reusable slot behind, also when a
	// cube of the same name is created meanwhile.
	genMu  sync.Mutex
	gens   map[string]uint64
	writes sync.WaitGroup // background conversation pack writes

	// convEvicted counts conversation packs deleted over ConvBytes;
	// fallbacks, stored packs refused at restore (prefilled instead).
	convEvicted, fallbacks atomic.Int64
	pending                atomic.Int64
	writeSem               chan struct{} // bounds concurrent writes; full: the write is skipped

	usage *scheduler.UsageBuffer
	kick  chan struct{}

	// chunkUses counts retrievals towards memory chunks
	chunkUses memchunk.Counter
	// composedPacks counts tier packs composed from their members'
	// chunks (composePack) since Open
	composedPacks atomic.Int64
}

// Deps are the stores a Pipeline works over, opened and closed by its
// caller, and the hook it calls after a chat turn.
type Deps struct {
	DB    *datadir.DB
	Mem   *textmem.Store
	KV    *kvcache.Cache
	Reg   *lora.Registry
	Cubes *textmem.CubeRegistry
	// OnChat is a hook: called after every answered foreground chat turn
	// with the cube's record as the request found it (the zero Cube
	// without one), on the request's goroutine. nil: nothing.
	OnChat func(ctx context.Context, req *Request, cube textmem.Cube, answer string)
	// OnResponse is a hook: called after every complete foreground answer
	// in a cube (chat or completion, not RenderOnly), before OnChat, with
	// the cube's record as the request found it and the Response as
	// returned, on the request's goroutine. nil: nothing.
	OnResponse func(ctx context.Context, req *Request, cube textmem.Cube, res *Response)
}

// New builds the pipeline over deps: the model set (the primary loaded
// now: a bad file fails here, not at the first request), or the upstream
// backend, and the tier scheduler over the primary's engine. opts must
// have its defaults filled (Options.WithDefaults). base bounds background
// work (resident level changes). Errors: ErrBadOptions, model load errors
// (llama.ErrLoad), storage errors.
func New(ctx, base context.Context, opts Options, deps Deps) (*Pipeline, error) {
	p := &Pipeline{opts: opts, log: opts.Logger, base: base, db: deps.DB, mem: deps.Mem, kv: deps.KV, reg: deps.Reg,
		cubes: deps.Cubes, onChat: deps.OnChat, onResponse: deps.OnResponse, writeSem: make(chan struct{}, 2), kick: make(chan struct{}, 1)}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	if err := p.newModels(opts); err != nil {
		return nil, err
	}
	var err error
	if opts.Model != "" {
		// before the primary loads: its composition asks the gate (ComposeAuto)
		if p.gate, err = kvgate.Open(p.db, kvgate.GateOptions{Codec: opts.KVCodec, Compose: opts.ComposeAuto, Targets: opts.KVGate, Logger: p.log}); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.Model != "":
		// the primary loads now: a bad file fails New, not the first request
		m := p.models.Models()[0]
		if p.atNew, err = p.loadModel(ctx, m); err != nil {
			return nil, err
		}
		p.infos[m.Name] = p.atNew.info
		p.models.Adopt(m, p.atNew, p.defaultKeep())
		if p.opts.ResidentCells == 0 {
			p.opts.ResidentCells = p.atNew.eng.NCtx() / 4
		}
		if p.opts.ResidentAt == 0 {
			p.opts.ResidentAt = scheduler.DefaultHeatOptions().PromoteAt
			if h := opts.Tiers.Heat.PromoteAt; h > 0 {
				p.opts.ResidentAt = h
			}
		}
	case opts.Upstream != nil:
		if p.up, err = newUpstream(p, *opts.Upstream); err != nil {
			return nil, err
		}
	}
	p.lay = layout.New(nil, p.mem, opts.Layout)
	sd := scheduler.Deps{DB: p.db, Mem: p.mem, KV: p.kv, Registry: p.reg}
	to := opts.Tiers
	if to.Parametric.Enabled && to.Parametric.Dir == "" {
		// in the data directory, beside Badger's files
		to.Parametric.Dir = filepath.Join(opts.Dir, "adapters")
	}
	if p.atNew != nil {
		sd.Layout, sd.Engine = p.atNew.lay, p.atNew.eng
		p.jobL.Store(p.atNew)
	}
	if to.Parametric.OnChange == nil {
		to.Parametric.OnChange = func(string) { p.Kick() }
	}
	if opts.Model != "" {
		to.Reserve = p.reserveJob
		to.Adapters = p.tierAdapters
		to.Gate = p.gate
		if opts.ComposeAuto {
			to.Compose = p.composePack
		}
	}
	if p.tiers, err = scheduler.NewTiers(sd, to); err != nil {
		return nil, err
	}
	p.usage = scheduler.NewUsageBuffer()
	ok = true
	return p, nil
}

// Start brings the primary's resident level back (pinned and hot packs
// are state too); a failure is logged.
func (p *Pipeline) Start(ctx context.Context) {
	if p.atNew == nil {
		return
	}
	if err := p.applyResident(ctx, p.atNew); err != nil {
		p.log.Warn("resident packs not restored", "err", err)
	}
	p.atNew = nil // the model set holds it from here
}

// Drain stops admitting: requests waiting for a slot are answered with
// ErrClosed at once; running ones go on. The returned wait blocks until
// loads and unloads in progress and background pack writes have ended
// (call it after the running requests ended).
func (p *Pipeline) Drain() (wait func()) {
	var trans []chan struct{}
	if p.models != nil {
		var ls []*loaded
		ls, trans = p.models.Close()
		for _, l := range ls {
			l.pool.Drain()
		}
	}
	if p.up != nil {
		p.up.pool.Drain()
	}
	return func() {
		for _, t := range trans { // a load or unload in progress ends first
			<-t
		}
		p.writes.Wait()
	}
}

// WaitWrites waits for the background conversation pack writes started
// so far.
func (p *Pipeline) WaitWrites() { p.writes.Wait() }

// Close writes recorded usage and closes the tier scheduler and every
// loaded model (after Drain and its wait). The stores in Deps stay open.
func (p *Pipeline) Close() error {
	var errs []error
	if p.gate != nil {
		errs = append(errs, p.gate.Close()) // its calibrations use the engines
	}
	if p.usage != nil {
		errs = append(errs, p.FlushUsage(context.Background()))
	}
	if p.tiers != nil {
		errs = append(errs, p.tiers.Close())
	}
	if p.models != nil {
		for _, l := range p.models.Release() {
			errs = append(errs, l.close())
		}
	}
	return errors.Join(errs...)
}
