package memosrt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bg "github.com/dgraph-io/badger/v4"
	"github.com/memosrt/memosrt/accesskey"
	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/modelsched"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// OS is the memory OS: one data directory, one loaded model (or none), the
// tiers and the scheduler that moves memories between them. Safe for
// concurrent use; Close releases everything it opened.
type OS struct {
	opts  Options
	log   *slog.Logger
	ready atomic.Bool // Open has finished

	afterTextDelete func(cube string) // tests: runs between a cube's text delete and the rest of it

	db    *datadir.DB
	keys  *accesskey.Store // serve's access keys, in db
	mem   *textmem.Store
	kv    *kvcache.Cache
	reg   *lora.Registry
	lay   *layout.Layout // without a model (upstream, none); a loaded model has its own
	tiers *scheduler.Tiers
	cubes *textmem.CubeRegistry
	up    *upstream // nil unless Options.Upstream
	info  ModelInfo // the upstream's

	// models are the models served, the primary (Options.Model) first;
	// fixed at Open, loaded and unloaded by package modelsched.
	models *modelsched.Set[*loaded]
	infoMu sync.Mutex           // guards infos
	infos  map[string]ModelInfo // by model name: of its last load; before one, what its file says
	// jobL is the primary's loaded state while tier jobs use it (between
	// attachScheduler and detachScheduler)
	jobL atomic.Pointer[loaded]

	// kvMu serialises pack writes of the OS (conversation packs, warms,
	// deletes): kvcache's index takes a pack id twice when two Puts of the
	// same pack race, and a later Delete then leaves a dangling entry.
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

	conv       *conversation.Manager              // turns, sessions, profiles, jobs, change logs
	jobStarted func(context.Context, convmem.Job) // tests: runs when an extraction job is marked running

	// mu guards closed and the Add side of inflight.
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
	base     context.Context // cancelled by Close once its deadline passes
	cancel   context.CancelFunc

	loopDone chan struct{} // closed when the scheduler loop exits; nil without one
	loopStop context.CancelFunc
	kick     chan struct{}
}

// Open opens the data directory, loads the model (if Options.Model) and
// starts the scheduler's background loop. The returned OS is ready; close
// it with Close. Errors: ErrBadOptions, datadir.ErrEncryptionKey, model load
// errors (llama.ErrLoad with the file's problem), storage errors.
func Open(ctx context.Context, opts Options) (*OS, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.ensureDefaults()
	o := &OS{opts: opts, log: opts.Logger, writeSem: make(chan struct{}, 2),
		kick: make(chan struct{}, 1)}
	o.base, o.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			o.stopConversations()
			o.release()
		}
	}()
	var err error
	if o.db, err = datadir.Open(datadir.Options{Dir: opts.Dir, EncryptionKey: opts.EncryptionKey, NoSync: opts.NoSync, Logger: opts.Logger}); err != nil {
		return nil, err
	}
	o.keys = accesskey.New(o.db)
	now := opts.Clock.Now
	mo := textmem.Options{Logger: opts.Logger, Now: now, Embedder: opts.Embedder, OnDelete: func(string, string) { o.Kick() },
		OnCubeDeleted: o.cubeDeletedElsewhere, OnResync: o.resyncCubes, RequireRecord: opts.TextStore != nil}
	if err := o.markTextStore(ctx, opts.TextStore, opts.TextStoreLocal); err != nil {
		return nil, err
	}
	be := opts.TextStore
	if be == nil {
		be = textmem.NewBadgerBackend(o.db)
	}
	if o.mem, err = textmem.OpenBackend(be, mo); err != nil {
		return nil, err
	}
	ko := kvcache.Options{RAMBytes: opts.RAMBytes, Logger: opts.Logger, Now: now, Shared: opts.KVShared}
	if opts.KVShared != nil && len(opts.EncryptionKey) > 0 {
		k := sha256.Sum256(append([]byte("memosrt shared packs\x00"), opts.EncryptionKey...))
		ko.SharedKey = k[:]
	}
	if opts.TextStore != nil {
		o.log.Info("text tier in a shared store", "store", fmt.Sprintf("%T", opts.TextStore))
	}
	if o.kv, err = kvcache.Open(o.db, ko); err != nil {
		return nil, err
	}
	if o.reg, err = lora.NewRegistry(o.db, lora.RegistryOptions{Logger: opts.Logger}); err != nil {
		return nil, err
	}
	if o.cubes, err = textmem.OpenCubes(ctx, o.mem, now); err != nil {
		return nil, err
	}
	if err = o.newModels(opts); err != nil {
		return nil, err
	}
	var prim *loaded
	switch {
	case opts.Model != "":
		// the primary loads now: a bad file fails Open, not the first request
		m := o.models.Models()[0]
		if prim, err = o.loadModel(ctx, m); err != nil {
			return nil, err
		}
		o.infos[m.Name] = prim.info
		o.models.Adopt(m, prim, o.defaultKeep())
		if o.opts.ResidentCells == 0 {
			o.opts.ResidentCells = prim.eng.NCtx() / 4
		}
		if o.opts.ResidentAt == 0 {
			o.opts.ResidentAt = scheduler.DefaultHeatOptions().PromoteAt
			if h := opts.Tiers.Heat.PromoteAt; h > 0 {
				o.opts.ResidentAt = h
			}
		}
	case opts.Upstream != nil:
		if o.up, err = newUpstream(o, *opts.Upstream); err != nil {
			return nil, err
		}
	}
	o.lay = layout.New(nil, o.mem, opts.Layout)
	deps := scheduler.Deps{DB: o.db, Mem: o.mem, KV: o.kv, Registry: o.reg}
	if opts.Tiers.Parametric.Enabled && opts.Tiers.Parametric.Dir == "" {
		// in the data directory, beside Badger's files
		opts.Tiers.Parametric.Dir = filepath.Join(opts.Dir, "adapters")
	}
	if prim != nil {
		deps.Layout, deps.Engine = prim.lay, prim.eng
		o.jobL.Store(prim)
	}
	if opts.Tiers.Parametric.OnChange == nil {
		opts.Tiers.Parametric.OnChange = func(string) { o.Kick() }
	}
	if opts.Model != "" {
		opts.Tiers.Reserve = o.reserveJob
		opts.Tiers.Adapters = o.tierAdapters
	}
	if o.tiers, err = scheduler.NewTiers(deps, opts.Tiers); err != nil {
		return nil, err
	}
	o.usage = scheduler.NewUsageBuffer()
	if err := o.startConversations(ctx); err != nil {
		return nil, err
	}
	if prim != nil {
		// the resident level is state too: pinned and hot packs come back
		if err := o.applyResident(ctx, prim); err != nil {
			o.log.Warn("resident packs not restored", "err", err)
		}
	}
	if opts.Model != "" && !opts.NoScheduler {
		o.loopDone = make(chan struct{})
		lctx, stop := context.WithCancel(o.base)
		o.loopStop = stop
		go o.loop(lctx)
	}
	ok = true
	o.ready.Store(true)
	if opts.TextStore != nil {
		o.resyncCubes() // cubes other nodes deleted while this one was down
	}
	return o, nil
}

// PrimaryName is the name clients see for Model: ModelName, else Model's
// file name without ".gguf".
func (opts Options) PrimaryName() string {
	if opts.ModelName != "" {
		return opts.ModelName
	}
	return strings.TrimSuffix(filepath.Base(opts.Model), ".gguf")
}

// release closes what Open opened, in reverse order (Open's failure path
// and the end of Close).
func (o *OS) release() error {
	var errs []error
	if o.tiers != nil {
		errs = append(errs, o.tiers.Close())
	}
	if o.models != nil {
		for _, l := range o.models.Release() {
			errs = append(errs, l.close())
		}
	}
	if o.kv != nil {
		errs = append(errs, o.kv.Close())
	}
	if o.mem != nil {
		errs = append(errs, o.mem.Close())
	}
	if o.db != nil {
		errs = append(errs, o.db.Close())
	}
	o.cancel()
	return errors.Join(errs...)
}

// Close stops accepting calls (ErrClosed), answers requests waiting for a
// slot or KV cells with ErrClosed at once, stops the scheduler loop,
// waits for running requests until ctx ends (then cancels them), waits for
// background pack writes, writes recorded usage, and closes the engine and
// the data directory. Idempotent: a second Close returns nil.
func (o *OS) Close(ctx context.Context) error {
	o.stopConversations() // a running extraction stays running in the store: resumed at the next Open
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	// the queue is answered at once; running requests go on until ctx ends
	var trans []chan struct{}
	if o.models != nil {
		var ls []*loaded
		ls, trans = o.models.Close()
		for _, l := range ls {
			l.pool.Drain()
		}
	}
	if o.up != nil {
		o.up.pool.Drain()
	}
	if o.loopDone != nil {
		o.loopStop() // a running tick ends at its next batch; its job stays pending
		<-o.loopDone
	}
	done := make(chan struct{})
	go func() {
		o.inflight.Wait()
		for _, t := range trans { // a load or unload in progress ends first
			<-t
		}
		o.writes.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		o.cancel()
		<-done
	}
	err := o.flushUsage(context.Background())
	return errors.Join(err, o.release())
}

// enter admits a call: ErrClosed after Close. The caller defers o.leave().
func (o *OS) enter() error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closed {
		return ErrClosed
	}
	o.inflight.Add(1)
	return nil
}

func (o *OS) leave() { o.inflight.Done() }

// bound returns ctx, also cancelled when Close gives up waiting.
func (o *OS) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(o.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// ModelInfo describes the served model.
type ModelInfo struct {
	Name      string         `json:"name"`
	Path      string         `json:"path,omitempty"`
	Backend   string         `json:"backend"` // "llama", "ollama", or "" without a model
	Size      int64          `json:"size"`    // file bytes
	Digest    string         `json:"digest,omitempty"`
	Family    string         `json:"family,omitempty"`
	ParamSize string         `json:"parameter_size,omitempty"`
	Quant     string         `json:"quantization_level,omitempty"`
	NCtx      int            `json:"n_ctx,omitempty"`
	Template  string         `json:"template,omitempty"`
	Modified  time.Time      `json:"modified_at"`
	Load      time.Duration  `json:"load_ns"`
	Info      map[string]any `json:"model_info,omitempty"`
}

// Model describes the primary model (the upstream's with Upstream; zero
// ModelInfo without one), as of its last load.
func (o *OS) Model() ModelInfo {
	if o.models.Len() == 0 {
		return o.info
	}
	return o.modelInfo(o.models.Models()[0])
}

func engineModelInfo(eng *runtime.Engine, path, name, template string, load time.Duration) ModelInfo {
	sh := eng.Shape()
	mi := ModelInfo{Name: name, Path: path, Backend: "llama", Size: int64(sh.SizeBytes), Digest: eng.KVConfig().ModelFingerprint,
		NCtx: eng.NCtx(), Template: template, Modified: time.Now().UTC(), Load: load,
		ParamSize: paramSize(sh.NParams), Quant: quantOf(sh.Desc)}
	if mi.Template == "" {
		mi.Template = eng.Model().ChatTemplate()
	}
	if a, ok := eng.Model().Meta("general.architecture"); ok {
		mi.Family = a
	}
	if st, err := os.Stat(path); err == nil {
		mi.Size, mi.Modified = st.Size(), st.ModTime().UTC()
	}
	mi.Info = map[string]any{"general.architecture": mi.Family, "general.parameter_count": sh.NParams,
		mi.Family + ".context_length": sh.NCtxTrain, mi.Family + ".embedding_length": sh.NEmbd,
		mi.Family + ".block_count": sh.NLayer, mi.Family + ".attention.head_count": sh.NHead,
		mi.Family + ".attention.head_count_kv": sh.NHeadKV, "memosrt.n_ctx": eng.NCtx(), "memosrt.n_seq_max": eng.NSeqMax()}
	return mi
}

func paramSize(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// quantOf takes the type from a llama_model_desc like "llama ?B F16".
func quantOf(desc string) string {
	f := strings.Fields(strings.ReplaceAll(desc, "(guessed)", ""))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// Stats are the OS's gauges (HTTP /api/ps and /metrics).
type Stats struct {
	Backend       string `json:"backend"`
	NCtx          int    `json:"n_ctx"`
	Slots         int    `json:"slots"`
	BusySlots     int    `json:"busy_slots"`
	Queued        int    `json:"queued"` // requests waiting for a slot
	ResidentPacks int    `json:"resident_packs"`
	ResidentCells int    `json:"resident_cells"`
	ResidentMax   int    `json:"resident_cells_budget"`
	PendingWrites int    `json:"pending_writes"`
	EngineActive  int    `json:"engine_active"` // requests in the engine's running batch
	EngineQueued  int    `json:"engine_queued"` // requests waiting for the engine's admission
	KVRAMBytes    int64  `json:"kv_ram_bytes"`
	KVDiskBytes   int64  `json:"kv_disk_bytes"`
	Packs         int    `json:"packs"`
	ConvPacks     int    `json:"conv_packs"`        // conversation packs stored
	ConvBytes     int64  `json:"conv_bytes"`        // their blob bytes (Options.ConvBytes bounds them)
	ConvEvicted   int64  `json:"conv_evicted"`      // conversation packs deleted over the budget since Open
	Fallbacks     int64  `json:"restore_fallbacks"` // stored packs that matched but were refused: the prompt was prefilled
	DiskBytes     int64  `json:"disk_bytes"`        // the data directory's files (Badger LSM and value log), bytes
	NoSpace       int64  `json:"no_space_refused"`  // writes refused since Open for want of disk space (ErrNoSpace)
	// KVShared is the shared activation level (Options.KVShared): enabled,
	// up, and its hit, miss, put and error counts since Open.
	KVShared kvcache.SharedStats `json:"kv_shared"`
}

// Stats reports the OS's gauges now.
func (o *OS) Stats() Stats {
	st := Stats{Backend: o.info.Backend, PendingWrites: int(o.pending.Load()), ResidentMax: o.opts.ResidentCells}
	st.KVRAMBytes, st.KVDiskBytes, st.Packs = o.kv.Stats()
	conv, convBytes := o.convPacks()
	st.ConvPacks, st.ConvBytes = len(conv), convBytes
	st.ConvEvicted, st.Fallbacks = o.convEvicted.Load(), o.fallbacks.Load()
	st.DiskBytes, st.NoSpace = o.db.DiskBytes(), o.db.Refused()
	st.KVShared = o.kv.SharedStats()
	if o.up != nil {
		st.Slots, st.BusySlots, st.Queued = o.up.pool.Size(), o.up.pool.Busy(), o.up.pool.Queued()
	}
	// slots, queues and engines of every loaded model; n_ctx and the
	// resident level are the primary's
	o.eachLoaded(func(l *loaded) {
		st.Slots, st.BusySlots, st.Queued = st.Slots+l.pool.Size(), st.BusySlots+l.pool.Busy(), st.Queued+l.pool.Queued()
		a, q := l.eng.Queue()
		st.EngineActive, st.EngineQueued = st.EngineActive+a, st.EngineQueued+q
	})
	l, done := o.hold()
	defer done()
	if l == nil {
		return st
	}
	st.NCtx = l.eng.NCtx()
	st.ResidentCells, st.ResidentPacks = l.res.Cells(), l.res.Len()
	return st
}

// Lower-level handles, for tools and tests that work below the OS (a
// benchmark driving the engine, an inspector reading the stores). Writes
// through them bypass the scheduler's bookkeeping.

// Engine returns the primary model's engine, nil without a model or while
// it is unloaded (keep-alive; with Options.KeepAlive unset it stays loaded
// until Close).
func (o *OS) Engine() *runtime.Engine {
	l, done := o.hold()
	defer done()
	if l == nil {
		return nil
	}
	return l.eng
}

// keyTextStore marks a data directory whose text tier is a shared store:
// its value names the store's kind.
const keyTextStore = "srv/text-store"

// markTextStore records in the data directory that its text tier is
// shared (ts set), or refuses to open it without one when it was
// (ErrTextStoreElsewhere); with ts set it also warns of memories the
// directory's own text tier holds, which the shared one does not serve.
func (o *OS) markTextStore(ctx context.Context, ts textmem.Backend, local bool) error {
	db := o.db
	var mark string
	err := db.View(func(txn *bg.Txn) error {
		item, err := txn.Get([]byte(keyTextStore))
		if errors.Is(err, bg.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		mark = string(v)
		return err
	})
	switch {
	case err != nil:
		return err
	case ts == nil && mark != "" && local:
		o.log.Warn("serving the data directory's own text tier, not the shared one it was served with", "was", mark)
		return db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyTextStore)) })
	case ts == nil && mark != "":
		return fmt.Errorf("%w (it was served with %s)", ErrTextStoreElsewhere, mark)
	case ts == nil:
		return nil
	}
	if own, err := textmem.Cubes(ctx, textmem.NewBadgerBackend(o.db)); err == nil && len(own) > 0 {
		o.log.Warn("the data directory's own text tier holds memories the shared text store does not serve: serve the directory with --text-store local, export each cube (GET /v1/cubes/CUBE/export) and import it (POST /v1/cubes/import) into a node of the shared store",
			"cubes", len(own))
	}
	name := fmt.Sprintf("%T", ts)
	if s, ok := ts.(fmt.Stringer); ok {
		name = s.String()
	}
	if mark == name {
		return nil
	}
	if mark != "" {
		o.log.Warn("the data directory was served with another text store", "was", mark, "now", name)
	}
	return db.Update(func(txn *bg.Txn) error { return txn.Set([]byte(keyTextStore), []byte(name)) })
}

// TextStore returns the text tier.
func (o *OS) TextStore() *textmem.Store { return o.mem }

// KVCache returns the activation tier's pack store.
func (o *OS) KVCache() *kvcache.Cache { return o.kv }

// DB returns the data directory's database.
func (o *OS) DB() *datadir.DB { return o.db }

// AdapterRegistry returns the LoRA adapter registry.
func (o *OS) AdapterRegistry() *lora.Registry { return o.reg }

// needEngine returns ErrNoModel when the OS serves no model.
func (o *OS) needEngine() error {
	if o.models.Len() == 0 {
		if o.up != nil {
			return fmt.Errorf("%w: the upstream backend is text-only", ErrNotSupported)
		}
		return ErrNoModel
	}
	return nil
}
