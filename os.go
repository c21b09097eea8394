package memosrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/memosrt/memosrt/accesskey"
	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/cubeops"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/gate"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/pipeline"
	"github.com/memosrt/memosrt/pipeline/record"
	"github.com/memosrt/memosrt/textmem"
)

// OS is the memory OS: one data directory, the models it serves (or an
// upstream, or none), the tiers and the scheduler that moves memories
// between them. Safe for concurrent use; Close releases everything it
// opened. The OS admits calls and owns the stores; requests go through
// package pipeline, conversations through package conversation.
type OS struct {
	opts  Options
	log   *slog.Logger
	ready atomic.Bool // Open has finished

	afterTextDelete func(cube string) // tests: runs between a cube's text delete and the rest of it
	deleting        cubeops.Deleting  // cubes whose delete runs (cubeops.Warm)

	db    *datadir.DB
	keys  *accesskey.Store // serve's access keys, in the text store
	guard *accesskey.Guard // keys against the cubes' records and the clock
	mem   *textmem.Store
	kv    *kvcache.Cache
	reg   *lora.Registry
	cubes *textmem.CubeRegistry
	p     *pipeline.Pipeline

	conv       *conversation.Manager              // turns, sessions, profiles, jobs, change logs
	rec        *record.Recorder                   // what answers leave in conv: set with it, before any request
	jobStarted func(context.Context, convmem.Job) // tests: runs when an extraction job is marked running

	g *gate.Gate // admits calls until Close; its Base is cancelled when Close gives up waiting

	loopDone chan struct{} // closed when the scheduler loop exits; nil without one
	loopStop context.CancelFunc
}

// Open opens the data directory, loads the model (if Options.Model) and
// starts the scheduler's background loop. The returned OS is ready; close
// it with Close. Errors: ErrBadOptions, datadir.ErrEncryptionKey, model load
// errors (llama.ErrLoad with the file's problem), storage errors.
func Open(ctx context.Context, opts Options) (*OS, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	o := &OS{opts: opts, log: opts.Logger, g: gate.New(ErrClosed)}
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
	now := opts.Clock.Now
	mo := textmem.Options{Logger: opts.Logger, Now: now, Embedder: opts.Embedder, OnDelete: func(string, string) { o.Kick() },
		OnCubeDeleted: o.cubeDeletedElsewhere, OnResync: o.resyncCubes, RequireRecord: opts.TextStore != nil}
	if err := textmem.MarkStore(ctx, o.db, opts.TextStore, opts.TextStoreLocal, o.log); err != nil {
		return nil, err
	}
	be := opts.TextStore
	if be == nil {
		be = textmem.NewBadgerBackend(o.db)
	}
	if o.mem, err = textmem.OpenBackend(be, mo); err != nil {
		return nil, err
	}
	// access keys live in the text store, so that nodes sharing it share
	// them; keys the directory kept itself move there
	o.keys = accesskey.New(be)
	if n, err := o.keys.Migrate(ctx, o.db); err != nil {
		return nil, err
	} else if n > 0 {
		o.log.Info("access keys moved into the text store", "keys", n)
	}
	ko := kvcache.Options{RAMBytes: opts.RAMBytes, Logger: opts.Logger, Now: now, Shared: opts.KVShared}
	if opts.KVShared != nil {
		ko.SharedKey = datadir.DeriveKey(opts.EncryptionKey, "memosrt shared packs")
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
	o.guard = accesskey.NewGuard(o.keys, o.cubes, now, o.log)
	if o.p, err = pipeline.New(ctx, o.g.Base(), opts, pipeline.Deps{DB: o.db, Mem: o.mem, KV: o.kv, Reg: o.reg, Cubes: o.cubes,
		OnChat:     func(ctx context.Context, req *Request, c Cube, answer string) { o.rec.Chat(ctx, req, c, answer) },
		OnResponse: func(ctx context.Context, req *Request, c Cube, res *Response) { o.rec.Response(ctx, req, c, res) }}); err != nil {
		return nil, err
	}
	if err := o.startConversations(ctx); err != nil {
		return nil, err
	}
	o.p.Start(ctx)
	if opts.Model != "" && !opts.NoScheduler {
		o.loopDone = make(chan struct{})
		lctx, stop := context.WithCancel(o.g.Base())
		o.loopStop = stop
		go func() {
			defer close(o.loopDone)
			o.p.Run(lctx, o.conv.SweepExpired) // the scheduler's background loop
		}()
	}
	ok = true
	o.ready.Store(true)
	if opts.TextStore != nil {
		o.resyncCubes() // cubes other nodes deleted while this one was down
	}
	return o, nil
}

// release closes what Open opened, in reverse order (Open's failure path
// and the end of Close).
func (o *OS) release() error {
	var errs []error
	if o.p != nil {
		errs = append(errs, o.p.Close())
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
	o.g.Cancel()
	return errors.Join(errs...)
}

// Close stops accepting calls (ErrClosed), answers requests waiting for a
// slot or KV cells with ErrClosed at once, stops the scheduler loop,
// waits for running requests until ctx ends (then cancels them), waits for
// background pack writes, writes recorded usage, and closes the engine and
// the data directory. Idempotent: a second Close returns nil.
func (o *OS) Close(ctx context.Context) error {
	o.stopConversations() // a running extraction stays running in the store: resumed at the next Open
	if !o.g.Close() {
		return nil
	}
	// the queue is answered at once; running requests go on until ctx ends
	wait := o.p.Drain()
	if o.loopDone != nil {
		o.loopStop() // a running tick ends at its next batch; its job stays pending
		<-o.loopDone
	}
	o.g.Wait(ctx, wait)
	return o.release() // the pipeline writes recorded usage first
}

// TextStore returns the text tier.
func (o *OS) TextStore() *textmem.Store { return o.mem }

// KVCache returns the activation tier's pack store.
func (o *OS) KVCache() *kvcache.Cache { return o.kv }

// DB returns the data directory's database.
func (o *OS) DB() *datadir.DB { return o.db }

// AdapterRegistry returns the LoRA adapter registry.
func (o *OS) AdapterRegistry() *lora.Registry { return o.reg }
