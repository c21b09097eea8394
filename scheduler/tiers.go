package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvgate"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// Tier names used in transitions and tier state.
const (
	TierText       = "text"       // plaintext memory (textmem), retrieved per query
	TierActivation = "activation" // inside the cube's pack: restored as KV state
	LevelDisk      = "disk"       // activation level: compressed blob in Badger
	LevelRAM       = "ram"        // activation level: decompressed state in the kvcache RAM LRU
	LevelResident  = "resident"   // activation level: cells held in the llama KV cache, shared into requests
)

// Scheduler state keys (prefix "s/", see package datadir):
//
//	s/u/<cube>/<memory id>   Usage of a memory, JSON
//	s/u/<cube>/~pack         Usage of the cube's pack, JSON
//	s/p/<cube>               packState of the cube, JSON
//	s/j/<seq %016x>          pending Job, JSON
//	s/t/<cube>/<seq %016x>   Transition, JSON
//	s/g/<pack id>            pack no state refers to any more, to delete
//	s/n                      Badger sequence for job and transition numbers
const (
	keyUsage = "s/u/"
	keyPack  = "s/p/"
	keyJob   = "s/j/"
	keyTrans = "s/t/"
	keyGarb  = "s/g/"
	keySeq   = "s/n"
	packUse  = "~pack"
)

// TierOptions configure Tiers. Zero means the default given.
type TierOptions struct {
	// Heat weighs usage into heat and sets the thresholds (MemoryOS).
	Heat HeatOptions
	// Clock gives the time of accesses and ticks. Default SystemClock().
	Clock Clock
	// KVBytes bounds the KV state bytes (decompressed, what a restore puts
	// in RAM and the KV cache) of all cubes' packs together, as committed:
	// a promotion that would pass it first demotes cooler members (least
	// heat first), or is refused. The compressed blobs on disk are smaller.
	// The RAM level is bounded by kvcache.Options.RAMBytes. Default 256 MiB.
	KVBytes int64
	// JobChunk is the most tokens a job decodes per background request:
	// a foreground request arriving mid-job waits for at most one such
	// batch (plus the engine's own runtime.BackgroundChunk bound). Default 16.
	JobChunk int
	// Interval is the period of the background loop started by Start.
	// Default 10 s.
	Interval time.Duration
	// MaxTransitions is how many transitions each cube keeps; each Tick
	// deletes older ones. Default 1000.
	MaxTransitions int
	// MaxPromoteQueue is how many Promotes may wait for the running one
	// (pack computations run one at a time, on the tier job sequence);
	// one more is refused at once with ErrBusy rather than left waiting
	// behind work it cannot see the end of. Default 2.
	MaxPromoteQueue int
	// Logger; nil discards.
	Logger *slog.Logger

	// Reserve, if set, is called before a job or a promotion computes a
	// pack of cells KV cells (its prompt restored and decoded into the
	// job's sequence) and returns once they are reserved, or an error
	// (wrapping ErrDeferred when they are only busy now); with wait it
	// waits for them (Promote, a user's warm), else not (background jobs).
	// release gives them back. The owner of the KV cache's budget
	// (memosrt.OS) sets it.
	Reserve func(ctx context.Context, cells int, wait bool) (release func(), err error)
	// AfterPut, if set, runs after a job stored its pack and before it
	// commits: a test seam (an error simulates a crash mid-job). Nil in
	// production.
	AfterPut func(Job) error
	// Parametric configures the parametric tier (off by default); it needs
	// Deps.Registry.
	Parametric ParametricOptions
	// Adapters, if set, leases the adapter set a cube's requests run under
	// when they name none (memosrt.OS: the cube's default LoRA adapters,
	// at scale 1). Tier packs are computed under it and stored under its
	// key (kvcache.ConfigKey), so that a cube with default adapters
	// restores its pack, and a changed set (another adapter version, a
	// same-named replacement file: the key holds each file's SHA-256)
	// refreshes the pack at the next Tick. Nil: packs are computed without
	// adapters.
	Adapters func(ctx context.Context, cube string) (AdapterSet, error)
	// Gate, if set, decides the codec each computed pack is stored with
	// (kvgate.Gate.Lossy for the engine's model key and the cube's
	// adapter set); the first pack of a key not yet calibrated starts its
	// calibration in the background and is stored exact. The caller owns
	// it. Nil: every pack exact.
	Gate *kvgate.Gate
	// Compose, if set, is a hook the pipeline sets where the calibration
	// gate allows composition: a background job (Tick) computing cube's
	// pack of toks, whose members are mems in pack order, calls it with
	// the job's sequence seq holding toks[:npast], an exact state; it may
	// compose members' KV chunks into seq (kvcache.WarmOptions.Compose)
	// and returns what it placed (nil: nothing) and the tokens seq holds
	// now; the job prefills the rest and stores the pack with
	// kvcache.Header.Composed set. Never called for a pack under adapters
	// nor by Promote (a user's warm prefills). Nil: jobs prefill.
	Compose func(ctx context.Context, cube string, mems []textmem.Memory, toks []int32, seq, npast int) (*kvcache.Composition, int, error)
}

// AdapterSet is a leased adapter set (TierOptions.Adapters): Refs as a
// runtime.Request takes them, Key = runtime.AdapterKey(Refs) ("" for none),
// Release gives the lease back (nil: nothing to give back).
type AdapterSet struct {
	Refs []runtime.AdapterRef
	Key  string
	// Release, when set, gives the adapter set back to the facade that
	// handed it out (TierOptions.Adapters); the job calls it once, when it
	// no longer decodes under the set.
	Release func()
}

func (a AdapterSet) release() {
	if a.Release != nil {
		a.Release()
	}
}

// adapterSet leases cube's adapter set (TierOptions.Adapters); the empty
// set without the option.
func (t *Tiers) adapterSet(ctx context.Context, cube string) (AdapterSet, error) {
	if t.opts.Adapters == nil {
		return AdapterSet{}, nil
	}
	a, err := t.opts.Adapters(ctx, cube)
	if err != nil {
		return AdapterSet{}, fmt.Errorf("scheduler: adapters of cube %s: %w", cube, err)
	}
	return a, nil
}

// Deps are what Tiers works on. Layout and Engine are nil for a read-only
// Tiers (State, Transitions, Jobs, HotSet, usage recording) in tools that
// load no model; Tick and Promote need both.
type Deps struct {
	DB     *datadir.DB
	Mem    *textmem.Store
	KV     *kvcache.Cache
	Layout *layout.Layout
	Engine *runtime.Engine
	// Registry receives the parametric tier's adapters (each cube's
	// default adapter, TierOptions.Parametric). Required when it is on.
	Registry *lora.Registry
}

// Tiers moves memories between the text and activation tiers by heat, in
// background jobs persisted in Badger, and records every move. Safe for
// concurrent use.
type Tiers struct {
	mem   *textmem.Store
	kv    *kvcache.Cache
	lay   *layout.Layout
	eng   *runtime.Engine
	db    *datadir.DB // every write through its Update, which asks Room first
	opts  TierOptions
	heat  HeatOptions
	log   *slog.Logger
	seq   *bg.Sequence
	reg   *lora.Registry
	param ParametricOptions

	// liveKV is eng's KV config (nil without one), read without jobMu
	// (State's calibration gate view)
	liveKV atomic.Pointer[runtime.KVConfig]
	// bg is the context of background distillations, cancelled by Close.
	bg       context.Context
	bgCancel context.CancelFunc

	// jobMu serializes job execution (one pack rebuild at a time).
	jobMu sync.Mutex
	// gcMu orders the deletion of garbage packs against the commits that
	// name a pack: collectGarbage reads the marks and the committed pack
	// states and deletes under it, and commitNaming checks that the pack
	// it names is stored and commits under it. So at every commit point
	// (what a Backup's snapshot or a crash keeps) every committed pack
	// state names a stored pack, but for one deleted as damaged (a
	// restore's proof, a repair), which the next Tick computes again.
	// Lock order: jobMu, then gcMu, then the kvcache's and Badger's own;
	// DeleteCube takes gcMu without jobMu.
	gcMu sync.Mutex
	// runMu guards running (the job or Promote holding jobMu, nil if
	// none) and deleting (cubes being deleted: no job of theirs starts).
	// DeleteCube takes only runMu: it cancels a running job of its cube
	// and waits for that one, never for another cube's job.
	runMu   sync.Mutex
	running *runningJob
	// distilling is the running distillation (JobDistill), nil if none.
	distilling *runningJob
	// refusedMu guards refused: the promotions refused for the KV budget
	// (ErrKVBudget) and what they were refused against (promoteRefused).
	refusedMu sync.Mutex
	refused   map[string]refusal
	// untrainable holds the model files whose weights the parametric tier
	// found untrainable (lora.ErrNotTrainable), logged once each.
	untrainable map[string]bool
	deleting    map[string]int
	promoting   int // Promotes waiting for or holding jobMu: no Tick job starts

	// gcHook, if set, is called by collectGarbage before it reads the
	// marks: a test seam (nil in production).
	gcHook func()

	// mu guards closed, cancel and resident.
	mu       sync.Mutex
	closed   bool
	cancel   context.CancelFunc
	resident map[string]string // cube → pack id held at the resident level (SetResident)
	wg       sync.WaitGroup
	kick     chan struct{}
}

// NewTiers returns the tier scheduler over d (DB, Mem and KV required).
// Pending jobs of an earlier process are kept and run at the next Tick;
// packs left to delete by a crash, and tier packs no committed state
// refers to (a job or warm cut short), are deleted now, but for the pack
// each pending job stores when it runs again (see removeOrphans).
func NewTiers(d Deps, opts TierOptions) (*Tiers, error) {
	if d.DB == nil || d.Mem == nil || d.KV == nil {
		return nil, errors.New("scheduler: tiers need a DB, a text store and a KV cache")
	}
	if (d.Layout == nil) != (d.Engine == nil) {
		return nil, errors.New("scheduler: tiers need both a Layout and an Engine, or neither (read-only)")
	}
	db := d.DB
	if err := opts.Heat.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if opts.KVBytes < 0 {
		return nil, fmt.Errorf("scheduler: KVBytes %d < 0", opts.KVBytes)
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock()
	}
	if opts.KVBytes == 0 {
		opts.KVBytes = 256 << 20
	}
	if opts.MaxTransitions <= 0 {
		opts.MaxTransitions = 1000
	}
	if opts.MaxPromoteQueue <= 0 {
		opts.MaxPromoteQueue = 2
	}
	if opts.JobChunk <= 0 {
		opts.JobChunk = 16
	}
	if opts.Interval == 0 {
		opts.Interval = 10 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	param := opts.Parametric.withDefaults(opts.Heat.WithDefaults())
	if param.Enabled && (d.Registry == nil || param.Dir == "") {
		return nil, errors.New("scheduler: the parametric tier needs an adapter registry and a directory")
	}
	seq, err := db.Badger().GetSequence([]byte(keySeq), 64)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	t := &Tiers{mem: d.Mem, kv: d.KV, lay: d.Layout, eng: d.Engine, db: db, opts: opts, heat: opts.Heat.WithDefaults(), log: log.With("component", "tiers"),
		seq: seq, kick: make(chan struct{}, 1), resident: map[string]string{}, reg: d.Registry, param: param,
		untrainable: map[string]bool{}}
	t.setLiveKV(d.Engine)
	t.bg, t.bgCancel = context.WithCancel(context.Background())
	if err := t.collectGarbage(context.Background()); err != nil {
		seq.Release()
		return nil, err
	}
	if err := t.removeOrphans(); err != nil {
		seq.Release()
		return nil, err
	}
	if param.Enabled {
		lora.RemoveTrainingCopies(param.Dir) // what a crash left; no distillation runs yet
	}
	return t, nil
}

// removeOrphans deletes the tier packs (labelled with their cube, not
// "conv:") that no committed pack state refers to: a job or warm that
// stored its pack and was cut short before its commit leaves one, and
// nothing would ever find or delete it. Conversation packs, memory chunks
// and shared packs are left alone.
//
// Kept are, besides each cube's committed pack, the packs pending jobs
// store when they run again: for each pending job, the one whose id is
// that job's pack over the committed state (jobPackID), which the job
// finds and commits without decoding it again. So a cube keeps at most one
// uncommitted pack per pending job; any other one of a cube with pending
// jobs (a warm cut short while a job was pending, a pack of members since
// changed) is deleted, as is every uncommitted pack when the job's pack
// cannot be told: without an engine (read-only: no job runs here), or
// when computing it fails (logged; the job computes its pack again if it
// runs).
func (t *Tiers) removeOrphans() error {
	ctx := context.Background()
	jobs, err := t.Jobs(ctx)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	keep := map[string]bool{}
	if t.eng != nil {
		for _, j := range jobs {
			st, err := t.packState(j.Cube)
			if err != nil {
				return fmt.Errorf("scheduler: %w", err)
			}
			id, err := t.jobPackID(ctx, j, st)
			if err != nil {
				t.log.Warn("pending job's pack not told; its cube's uncommitted packs are removed", "job", j.Seq, "kind", j.Kind,
					"cube", j.Cube, "memory", j.Memory, "err", err)
				continue
			}
			if id != "" {
				keep[id] = true
			}
		}
	}
	for _, p := range t.kv.List("") {
		// conversation packs, memory chunks ("chunk:") and the shared
		// packs of several-cube requests ("shared:", deleted with any of
		// their cubes) are the pipeline's, not tier packs
		if p.Label == "" || strings.HasPrefix(p.Label, "conv:") || strings.HasPrefix(p.Label, "chunk:") ||
			strings.HasPrefix(p.Label, "shared:") || keep[p.ID] {
			continue
		}
		st, err := t.packState(p.Label)
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		if st.PackID == p.ID {
			continue
		}
		t.log.Info("uncommitted tier pack removed", "cube", p.Label, "pack", p.ID[:12])
		if err := t.kv.Delete(p.ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Close stops the background loop (waiting for a running job to end at its
// next batch) and releases the job sequence. Pending jobs stay in Badger.
// Idempotent.
func (t *Tiers) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.cancel != nil {
		t.cancel()
	}
	t.bgCancel()
	t.mu.Unlock()
	t.wg.Wait()
	t.jobMu.Lock()
	defer t.jobMu.Unlock()
	return t.seq.Release()
}

func (t *Tiers) checkOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	return nil
}

// Start runs Tick every Interval (and soon after Kick) in a goroutine until
// ctx ends or Close. Jobs decode at background priority
// (runtime.Request.Background): foreground requests go first and a job
// yields between decode batches.
func (t *Tiers) Start(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.cancel != nil {
		return
	}
	ctx, t.cancel = context.WithCancel(ctx)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tk := time.NewTicker(t.opts.Interval)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			case <-t.kick:
			}
			if _, err := t.Tick(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("tick failed", "err", err)
			}
		}
	}()
}

// SetEngine swaps the engine and layout jobs and Promote work with: both
// nil makes the Tiers read-only until the next SetEngine (the model was
// unloaded), as NewTiers without them. A running tick job is cancelled
// (it stays pending) and SetEngine waits for it to stop, so no job uses
// an engine after SetEngine replaced it. Error: both or neither must be
// given.
func (t *Tiers) SetEngine(eng *runtime.Engine, lay *layout.Layout) error {
	if (eng == nil) != (lay == nil) {
		return errors.New("scheduler: SetEngine needs both a Layout and an Engine, or neither")
	}
	t.runMu.Lock()
	t.cancelJob()
	t.runMu.Unlock()
	t.cancelDistill("") // it trains for the model being replaced
	t.jobMu.Lock()
	t.eng, t.lay = eng, lay
	t.setLiveKV(eng)
	t.jobMu.Unlock()
	return nil
}

// setLiveKV records eng's KV config (nil eng: none).
func (t *Tiers) setLiveKV(eng *runtime.Engine) {
	if eng == nil {
		t.liveKV.Store(nil)
		return
	}
	kv := eng.KVConfig()
	t.liveKV.Store(&kv)
}

// Kick asks the background loop for a Tick soon.
func (t *Tiers) Kick() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func usageKey(cube, id string) []byte { return []byte(keyUsage + cube + "/" + id) }

func getJSON(txn *bg.Txn, key []byte, v any) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, bg.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(func(b []byte) error { return json.Unmarshal(b, v) })
}

func setJSON(txn *bg.Txn, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set(key, b)
}

// PackUse is the Use.ID that records a use of a cube's pack KV state (a
// restore, a shared resident pack): the pack's heat decides its level.
const PackUse = packUse

// conflictRetries bounds the retries of a usage transaction that lost a
// read-modify-write race (the Badger library's ErrConflict) to a concurrent one.
const conflictRetries = 8

// RecordUse applies uses in one transaction: each memory's counts decay to
// the use's time (At, else the clock's now), then grow (Usage.Visit,
// Usage.Interact).
// A transaction that conflicts with a concurrent one is retried; uses of a
// memory deleted meanwhile are kept (plan drops them at the next Tick).
func (t *Tiers) RecordUse(ctx context.Context, uses []Use) error {
	if len(uses) == 0 {
		return nil
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	now := t.opts.Clock.Now()
	var err error
	for try := 0; try < conflictRetries; try++ {
		if err = ctx.Err(); err != nil {
			return err
		}
		err = t.db.Update(func(txn *bg.Txn) error {
			for _, u := range uses {
				var rec Usage
				if _, err := getJSON(txn, usageKey(u.Cube, u.ID), &rec); err != nil {
					return err
				}
				now := now
				if !u.At.IsZero() {
					now = u.At
				}
				rec = rec.Use(t.heat, now, u.Visits, u.Interactions)
				if err := setJSON(txn, usageKey(u.Cube, u.ID), rec); err != nil {
					return err
				}
			}
			return nil
		})
		if !errors.Is(err, bg.ErrConflict) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("scheduler: record usage: %w", err)
	}
	return nil
}

// Uses returns one Use of cube for each memory id, each counting visits
// retrieval hits (N_visit) and interactions turns (L_interaction), at now.
func Uses(cube string, ids []string, visits, interactions int) []Use {
	uses := make([]Use, len(ids))
	for i, id := range ids {
		uses[i] = Use{Cube: cube, ID: id, Visits: visits, Interactions: interactions}
	}
	return uses
}

// RecordVisits counts one retrieval hit (N_visit) for each memory id of cube.
func (t *Tiers) RecordVisits(ctx context.Context, cube string, ids ...string) error {
	return t.RecordUse(ctx, Uses(cube, ids, 1, 0))
}

// RecordInteractions counts one turn (L_interaction) that used each memory id of cube.
func (t *Tiers) RecordInteractions(ctx context.Context, cube string, ids ...string) error {
	return t.RecordUse(ctx, Uses(cube, ids, 0, 1))
}

// packState is the persisted activation-tier state of a cube.
type packState struct {
	Members   []string  `json:"members"`            // memory ids in the pack, in pack (promotion) order
	Pinned    []string  `json:"pinned,omitempty"`   // members put there by Promote with pin: never demoted for low heat
	Resident  bool      `json:"resident,omitempty"` // pinned at the resident level (Promote with resident)
	PackID    string    `json:"pack_id,omitempty"`
	Tokens    int       `json:"tokens"`
	RawBytes  int64     `json:"raw_bytes"`
	BlobBytes int64     `json:"blob_bytes"`
	Updated   time.Time `json:"updated"`
}

func (t *Tiers) packState(cube string) (packState, error) {
	var st packState
	err := t.db.View(func(txn *bg.Txn) error {
		_, err := getJSON(txn, []byte(keyPack+cube), &st)
		return err
	})
	return st, err
}

// HotSet returns the memories of cube in the activation tier, in pack
// order (memories deleted from the text tier since are left out). This is
// the pack Runner.BuildPack should build; see Run.
func (t *Tiers) HotSet(ctx context.Context, cube string) ([]textmem.Memory, error) {
	st, err := t.packState(cube)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return t.loadMembers(ctx, cube, st.Members)
}

func (t *Tiers) loadMembers(ctx context.Context, cube string, ids []string) ([]textmem.Memory, error) {
	var out []textmem.Memory
	for _, id := range ids {
		m, err := t.mem.Get(ctx, cube, id)
		if errors.Is(err, textmem.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Transition is one recorded tier move.
type Transition struct {
	Seq    uint64    `json:"seq"`
	Cube   string    `json:"cube"`
	Memory string    `json:"memory,omitempty"` // memory id; "" for a move of the whole pack between levels
	Pack   string    `json:"pack,omitempty"`   // pack id after the move
	From   string    `json:"from"`             // TierText, TierActivation, LevelDisk, LevelRAM
	To     string    `json:"to"`
	Reason string    `json:"reason"` // "heat", "cold", "budget", "deleted", "prefetch"
	Heat   float64   `json:"heat"`
	Time   time.Time `json:"time"`
	// Tokens is the pack's length after the move; Decoded how many of them
	// were computed (the rest were restored from the previous pack).
	Tokens  int `json:"tokens"`
	Decoded int `json:"decoded"`
}

// MemoryTier is one memory's place and heat.
type MemoryTier struct {
	ID     string  `json:"id"`
	Text   string  `json:"text"`
	Tier   string  `json:"tier"`
	Heat   float64 `json:"heat"`
	Pinned bool    `json:"pinned,omitempty"`
	Usage  Usage   `json:"usage"`
	// Chunk is the pack id of the memory's KV chunk (composition), set by
	// the pipeline; "" for none.
	Chunk string `json:"chunk,omitempty"`
}

// CubeTiers is the tier state of a cube (GET /v1/cubes/{cube}/tiers).
type CubeTiers struct {
	Cube       string       `json:"cube"`
	Memories   []MemoryTier `json:"memories"` // hottest first
	PackID     string       `json:"pack_id,omitempty"`
	PackTokens int          `json:"pack_tokens"`
	// PackLevel is LevelResident, LevelRAM or LevelDisk; "" without a pack,
	// or when the pack PackID names is not stored (deleted as damaged, by a
	// restore or `memosrt check --repair`): the cube is not warm, requests
	// prefill, and the next Tick computes the pack again.
	PackLevel   string       `json:"pack_level,omitempty"`
	RawBytes    int64        `json:"raw_bytes"`
	BlobBytes   int64        `json:"blob_bytes"`
	PackHeat    float64      `json:"pack_heat"`
	Jobs        []Job        `json:"jobs"`        // pending, oldest first
	Transitions []Transition `json:"transitions"` // oldest first, at most the last limit
	KVBytes     int64        `json:"kv_bytes"`    // all cubes' packs, committed
	KVBudget    int64        `json:"kv_budget"`
	// Parametric is the cube's distilled adapter (nil when the tier is off).
	Parametric *Parametric `json:"parametric,omitempty"`
	// PackCodec is the pack's KV codec: "exact", "q8" or "q4".
	PackCodec string `json:"pack_codec,omitempty"`
	// PackComposed, when set, says the pack was composed from its
	// members' KV chunks by a background job (TierOptions.Compose), not
	// prefilled: approximate (kvcache.Info.Composed).
	PackComposed *kvcache.Composition `json:"pack_composed,omitempty"`
	// KVGate is the calibration gate's view of the model key the cube's
	// packs are computed under (its pack's adapter set; none without a
	// pack); nil without TierOptions.Gate or an engine.
	KVGate *kvgate.Status `json:"kv_gate,omitempty"`
}

// State returns cube's tier state with its last limit transitions (all if
// limit <= 0). This is what GET /v1/cubes/{cube}/tiers serves.
func (t *Tiers) State(ctx context.Context, cube string, limit int) (CubeTiers, error) {
	out := CubeTiers{Cube: cube, Memories: []MemoryTier{}, Jobs: []Job{}, Transitions: []Transition{}, KVBudget: t.opts.KVBytes}
	if err := t.checkOpen(); err != nil {
		return out, err
	}
	mems, err := t.mem.List(ctx, cube)
	if err != nil {
		return out, err
	}
	now := t.opts.Clock.Now()
	st, err := t.packState(cube)
	if err != nil {
		return out, err
	}
	usage, err := t.usages(ctx, cube)
	if err != nil {
		return out, err
	}
	var param []string
	if out.Parametric, param, err = t.parametricView(cube); err != nil {
		return out, err
	}
	for _, m := range mems {
		tier := TierText
		if slices.Contains(st.Members, m.ID) {
			tier = TierActivation
		} else if slices.Contains(param, m.ID) {
			tier = TierParametric
		}
		u := usage[m.ID]
		out.Memories = append(out.Memories, MemoryTier{ID: m.ID, Text: m.Text, Tier: tier, Heat: u.Heat(t.heat, now),
			Pinned: slices.Contains(st.Pinned, m.ID), Usage: u})
	}
	sort.SliceStable(out.Memories, func(i, j int) bool { return out.Memories[i].Heat > out.Memories[j].Heat })
	out.PackID, out.PackTokens, out.RawBytes, out.BlobBytes = st.PackID, st.Tokens, st.RawBytes, st.BlobBytes
	out.PackHeat = usage[packUse].Heat(t.heat, now)
	adapterKey := ""
	if i, ok := t.kv.Info(st.PackID); st.PackID != "" && ok {
		// a pack named but not stored (deleted as damaged) is at no level:
		// not warm until the next Tick computes it again
		out.PackLevel = LevelDisk
		out.PackCodec, out.PackComposed, adapterKey = i.KVCodec, i.Composed, i.AdapterKey
		if i.InRAM {
			out.PackLevel = LevelRAM
		}
		t.mu.Lock()
		if t.resident[cube] == st.PackID {
			out.PackLevel = LevelResident
		}
		t.mu.Unlock()
	}
	jobs, err := t.Jobs(ctx)
	if err != nil {
		return out, err
	}
	for _, j := range jobs {
		if j.Cube == cube {
			out.Jobs = append(out.Jobs, j)
		}
	}
	if out.Transitions, err = t.Transitions(ctx, cube, limit); err != nil {
		return out, err
	}
	if kv := t.liveKV.Load(); t.opts.Gate != nil && kv != nil {
		gs := t.opts.Gate.Status(kvgate.Key(*kv, adapterKey))
		out.KVGate = &gs
	}
	out.KVBytes, err = t.kvBytes("")
	return out, err
}

// usages returns every Usage record of cube by id.
func (t *Tiers) usages(ctx context.Context, cube string) (map[string]Usage, error) {
	out := map[string]Usage{}
	pre := []byte(keyUsage + cube + "/")
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: pre, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var u Usage
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &u) }); err != nil {
				return err
			}
			out[string(it.Item().Key()[len(pre):])] = u
		}
		return nil
	})
	return out, err
}

// Transitions returns cube's recorded moves, oldest first, the last limit
// of them (all if limit <= 0).
func (t *Tiers) Transitions(ctx context.Context, cube string, limit int) ([]Transition, error) {
	out := []Transition{}
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyTrans + cube + "/"), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var tr Transition
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &tr) }); err != nil {
				return err
			}
			out = append(out, tr)
		}
		return nil
	})
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, err
}

// kvBytes sums the committed packs' KV bytes of every cube but skip.
func (t *Tiers) kvBytes(skip string) (int64, error) {
	var n int64
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyPack), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if string(it.Item().Key()[len(keyPack):]) == skip {
				continue
			}
			var st packState
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &st) }); err != nil {
				return err
			}
			n += st.RawBytes
		}
		return nil
	})
	return n, err
}

// cubes returns the cubes with usage or pack state, sorted.
func (t *Tiers) cubes(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	err := t.db.View(func(txn *bg.Txn) error {
		for _, pre := range []string{keyUsage, keyPack, keyParam} {
			it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(pre)})
			for it.Rewind(); it.Valid(); it.Next() {
				k := string(it.Item().Key()[len(pre):])
				if i := strings.IndexByte(k, '/'); i >= 0 {
					k = k[:i]
				}
				set[k] = true
			}
			it.Close()
		}
		return ctx.Err()
	})
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	slices.Sort(out)
	return out, err
}

// Activate prefetches cube's pack one level up, disk → RAM (the kvcache RAM
// LRU, within its RAMBytes), and records the move. Call it when a cube
// becomes active (a session opens); it reads and decompresses the blob, so
// call it off the request path.
func (t *Tiers) Activate(ctx context.Context, cube string) error {
	st, err := t.packState(cube)
	if err != nil || st.PackID == "" {
		return err
	}
	for _, i := range t.kv.List(cube) {
		if i.ID == st.PackID && i.InRAM {
			return nil
		}
	}
	if _, _, _, err := t.kv.State(st.PackID); errors.Is(err, kvcache.ErrNotFound) {
		return nil // named but not stored: the next Tick computes it again
	} else if err != nil {
		return err
	}
	u, err := t.usages(ctx, cube)
	if err != nil {
		return err
	}
	now := t.opts.Clock.Now()
	tr := Transition{Cube: cube, Pack: st.PackID, From: LevelDisk, To: LevelRAM, Reason: "prefetch",
		Heat: u[packUse].Heat(t.heat, now), Time: now, Tokens: st.Tokens}
	return t.db.Update(func(txn *bg.Txn) error { return t.addTransition(txn, &tr) })
}

func (t *Tiers) addTransition(txn *bg.Txn, tr *Transition) error {
	n, err := t.seq.Next()
	if err != nil {
		return err
	}
	tr.Seq = n
	return setJSON(txn, fmt.Appendf(nil, "%s%s/%016x", keyTrans, tr.Cube, n), tr)
}

// trimTransitions deletes each cube's transitions beyond the newest
// MaxTransitions (keys only are read: s/t/<cube>/<seq hex> sort by seq)
// and returns how many it deleted.
func (t *Tiers) trimTransitions(ctx context.Context) (int, error) {
	var old [][]byte
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyTrans)})
		defer it.Close()
		var cube string
		var keys [][]byte
		flush := func() {
			if n := len(keys) - t.opts.MaxTransitions; n > 0 {
				old = append(old, keys[:n]...)
			}
			keys = keys[:0]
		}
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			rest := string(k[len(keyTrans):])
			c := rest[:max(strings.LastIndexByte(rest, '/'), 0)]
			if c != cube {
				flush()
				cube = c
			}
			keys = append(keys, k)
		}
		flush()
		return nil
	})
	if err != nil || len(old) == 0 {
		return 0, err
	}
	deleted := 0
	for len(old) > 0 {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		n := min(len(old), 1000) // well inside Badger's transaction limits
		if err := t.db.Update(func(txn *bg.Txn) error {
			for _, k := range old[:n] {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return deleted, err
		}
		old, deleted = old[n:], deleted+n
	}
	return deleted, nil
}

// runningJob is the job or Promote holding jobMu.
type runningJob struct {
	cube      string
	job       bool // a Tick's job (a Promote otherwise)
	cancel    context.CancelFunc
	done      chan struct{}
	preempted bool // cancelled by a Promote: the job is deferred, not failed
}

// errCubeDeleted: the cube is being deleted, its job or Promote does not
// run; the cube is gone (HTTP 404), as textmem.ErrUnknownCube.
var errCubeDeleted = errkind.New(errkind.NotFound, "scheduler: cube deleted")

// begin registers a job or Promote of cube, with jobMu held, and returns
// its context (cancelled by DeleteCube of the cube) and the end to defer;
// errCubeDeleted while the cube is being deleted.
func (t *Tiers) begin(ctx context.Context, cube string, job bool) (context.Context, *runningJob, func(), error) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.deleting[cube] > 0 {
		return nil, nil, nil, fmt.Errorf("%w: %s", errCubeDeleted, cube)
	}
	if job && t.promoting > 0 {
		return nil, nil, nil, fmt.Errorf("%w: a promotion goes first", ErrDeferred)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runningJob{cube: cube, job: job, cancel: cancel, done: make(chan struct{})}
	t.running = r
	return ctx, r, func() {
		t.runMu.Lock()
		t.running = nil
		t.runMu.Unlock()
		cancel()
		close(r.done)
	}, nil
}

// preempt cancels a running Tick job (it stays pending and runs again at a
// later tick, restoring what was stored): a Promote, which a user waits
// for, does not wait behind background work.
func (t *Tiers) preempt() (done func(), err error) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.promoting > t.opts.MaxPromoteQueue {
		return nil, fmt.Errorf("%w: %d promotions running or waiting", ErrBusy, t.promoting)
	}
	t.promoting++
	t.cancelJob()
	return func() {
		t.runMu.Lock()
		t.promoting--
		t.runMu.Unlock()
	}, nil
}

// cancelJob cancels a running Tick job (not a Promote); it stays pending
// and runs again at a later tick. Called with runMu held.
func (t *Tiers) cancelJob() {
	if r := t.running; r != nil && r.job {
		r.preempted = true
		r.cancel()
	}
}

// livePacks returns the pack ids committed pack states refer to.
func (t *Tiers) livePacks() (map[string]bool, error) {
	live := map[string]bool{}
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyPack), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var st packState
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &st) }); err != nil {
				return err
			}
			if st.PackID != "" {
				live[st.PackID] = true
			}
		}
		return nil
	})
	return live, err
}

// errPackGone: the pack a commit would name is no longer stored (a
// collection deleted it after it was computed or found).
var errPackGone = errors.New("scheduler: pack deleted before its commit")

// commitNaming runs update, a transaction whose pack state names pack id
// ("" for none), under gcMu once id is found stored; errPackGone if it is
// not. A pack a job or Promote found stored may have been garbage (a state
// named it a moment ago) that a collection was deleting: checked and
// committed under gcMu, the commit either comes first, and the collection
// then sees the pack named and keeps it, or comes after the deletion and
// is refused.
func (t *Tiers) commitNaming(id string, update func(txn *bg.Txn) error) error {
	t.gcMu.Lock()
	defer t.gcMu.Unlock()
	if id != "" {
		if _, ok := t.kv.Info(id); !ok {
			return fmt.Errorf("%w: %.12s", errPackGone, id)
		}
	}
	return t.db.Update(update)
}

// collectGarbage deletes the packs recorded under s/g/ that no committed
// pack state names, and their marks. The marks and the states are read
// under gcMu, with the deletions: a collection never acts on a view older
// than a commit that names a pack again (commitNaming). Each pack goes
// header first (see kvcache.Cache.Delete), while no state names it, so no
// commit point has a state naming a pack not wholly stored.
func (t *Tiers) collectGarbage(ctx context.Context) error {
	if t.gcHook != nil {
		t.gcHook()
	}
	t.gcMu.Lock()
	defer t.gcMu.Unlock()
	var ids []string
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyGarb)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ids = append(ids, string(it.Item().Key()[len(keyGarb):]))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := t.livePacks()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		// never delete a pack a committed state refers to (a marker left by
		// an interrupted collection for a pack that became live again)
		if !live[id] {
			if err := t.kv.Delete(id); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
				return err
			}
		}
		if err := t.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyGarb + id)) }); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
	}
	return nil
}

// SetResident records that cube's pack packID is (on) or is no longer
// (off) held at the resident level, and records the move. The owner of the
// resident sequences calls it (memosrt.OS); State reports the level.
func (t *Tiers) SetResident(ctx context.Context, cube, packID string, on bool, reason string) error {
	t.mu.Lock()
	was := t.resident[cube]
	if on {
		t.resident[cube] = packID
	} else {
		delete(t.resident, cube)
	}
	t.mu.Unlock()
	if on && was == packID || !on && was == "" {
		return nil
	}
	st, err := t.packState(cube)
	if err != nil {
		return err
	}
	u, err := t.usages(ctx, cube)
	if err != nil {
		return err
	}
	now := t.opts.Clock.Now()
	tr := Transition{Cube: cube, Pack: packID, From: LevelRAM, To: LevelResident, Reason: reason,
		Heat: u[packUse].Heat(t.heat, now), Time: now, Tokens: st.Tokens}
	if !on {
		tr.From, tr.To, tr.Pack = LevelResident, LevelRAM, was
	}
	return t.db.Update(func(txn *bg.Txn) error { return t.addTransition(txn, &tr) })
}

// PackHeat is a cube's committed pack and its heat.
type PackHeat struct {
	Cube     string
	PackID   string
	Tokens   int
	Heat     float64
	Resident bool // pinned at the resident level (Promote with resident)
}

// HotPacks returns every cube's committed pack with its heat (the heat of
// PackUse), hottest first; pinned resident packs first of all. A pack a
// state names but the KV cache no longer stores (deleted as damaged) is
// left out until the next Tick computes it again.
func (t *Tiers) HotPacks(ctx context.Context) ([]PackHeat, error) {
	cubes, err := t.cubes(ctx)
	if err != nil {
		return nil, err
	}
	now := t.opts.Clock.Now()
	var out []PackHeat
	for _, c := range cubes {
		st, err := t.packState(c)
		if err != nil {
			return nil, err
		}
		if _, ok := t.kv.Info(st.PackID); st.PackID == "" || !ok {
			continue // not warm: no pack, or one named but not stored
		}
		u, err := t.usages(ctx, c)
		if err != nil {
			return nil, err
		}
		out = append(out, PackHeat{Cube: c, PackID: st.PackID, Tokens: st.Tokens, Heat: u[packUse].Heat(t.heat, now), Resident: st.Resident})
	}
	slices.SortStableFunc(out, func(a, b PackHeat) int {
		if a.Resident != b.Resident {
			if a.Resident {
				return -1
			}
			return 1
		}
		switch {
		case a.Heat > b.Heat:
			return -1
		case a.Heat < b.Heat:
			return 1
		}
		return 0
	})
	return out, nil
}

// HeatOptions returns the effective heat options.
func (t *Tiers) HeatOptions() HeatOptions { return t.heat }

// Clock returns the scheduler's clock.
func (t *Tiers) Clock() Clock { return t.opts.Clock }

// DeleteCube removes cube's tier state: usage records, pack state (its
// pack is deleted), pending jobs and transitions. Call it after the cube's
// memories are deleted. A running job or Promote of the cube is cancelled
// and waited for; jobs of other cubes are not waited for.
func (t *Tiers) DeleteCube(ctx context.Context, cube string) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	// no job of the cube starts from now on; one running is cancelled and
	// waited for (it stays pending, and is deleted below)
	t.runMu.Lock()
	if t.deleting == nil {
		t.deleting = map[string]int{}
	}
	t.deleting[cube]++
	r := t.running
	t.runMu.Unlock()
	defer func() {
		t.runMu.Lock()
		if t.deleting[cube]--; t.deleting[cube] == 0 {
			delete(t.deleting, cube)
		}
		t.runMu.Unlock()
	}()
	if r != nil && r.cube == cube {
		r.cancel()
		<-r.done
	}
	t.cancelDistill(cube)
	if err := t.deleteParametric(ctx, cube); err != nil {
		return err
	}
	st, err := t.packState(cube)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	jobs, err := t.Jobs(ctx)
	if err != nil {
		return err
	}
	var keys [][]byte
	err = t.db.View(func(txn *bg.Txn) error {
		for _, pre := range []string{keyUsage + cube + "/", keyTrans + cube + "/"} {
			it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(pre)})
			for it.Rewind(); it.Valid(); it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	keys = append(keys, []byte(keyPack+cube), []byte(keyParam+cube))
	for _, j := range jobs {
		if j.Cube == cube {
			keys = append(keys, jobKey(j.Seq))
		}
	}
	// in batches: one Badger transaction holds a bounded number of writes
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		batch := keys[:n]
		keys = keys[n:]
		last := len(keys) == 0
		err := t.db.Update(func(txn *bg.Txn) error {
			for _, k := range batch {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			if last && st.PackID != "" {
				return txn.Set([]byte(keyGarb+st.PackID), nil)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("scheduler: delete cube %s: %w", cube, err)
		}
	}
	t.mu.Lock()
	delete(t.resident, cube)
	t.mu.Unlock()
	return t.collectGarbage(ctx)
}

// Membership returns cube's activation tier: member ids in pack order, the
// pinned ones, and whether the pack is pinned resident.
func (t *Tiers) Membership(cube string) (members, pinned []string, resident bool, err error) {
	st, err := t.packState(cube)
	if err != nil {
		return nil, nil, false, fmt.Errorf("scheduler: %w", err)
	}
	return st.Members, st.Pinned, st.Resident, nil
}
