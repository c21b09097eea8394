package conversation

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/textmem"
)

// KindTurn is the Kind of the memories that hold recorded chat turns.
const KindTurn = "turn"

// SourceShortTerm is the Source of the memory of a turn still in its
// cube's short-term queue: Search finds it, prompts never hold it (the
// conversation carries it); it becomes "dialog:<id>" when the turn moves.
const SourceShortTerm = "short-term"

var (
	// ErrJobState is returned by UndoJob for a job that is not done.
	ErrJobState = errkind.New(errkind.Conflict, "memosrt: the job is not done")
	// ErrUndoChanged is returned by UndoJob when every memory the job
	// wrote changed since: nothing is undone and the job stays done.
	ErrUndoChanged = errkind.New(errkind.Conflict, "memosrt: nothing undone")
	// ErrRetryLater, wrapped in an error of Hooks.Generate, says the
	// generation did not run now (no slot idle for background work, or a
	// foreground request took it): the job is queued again a second later.
	ErrRetryLater = errors.New("conversation: generation not run now")
	// ErrClosing, wrapped in an error of Hooks.Generate, says the model
	// is closing: the job stays running in the store, resumed at the next
	// Open.
	ErrClosing = errors.New("conversation: closing")
)

// Options configure a Manager.
type Options struct {
	// Store configures the conversation records (convmem.Open); its Now
	// is the clock of jobs, expiry and turn times too. Its Logger
	// defaults to Logger.
	Store convmem.Options
	// Logger receives the warnings of background work; default none.
	Logger *slog.Logger
	// Base is the context of background work (the job runner, turn
	// memories written off the request's path); default
	// context.Background.
	Base context.Context
	// NoExtract turns off consolidation jobs on recorded turns: sessions
	// still form; AddTurns still queues its job.
	NoExtract bool
	// Hooks are what the facade lends the Manager.
	Hooks Hooks
}

// Hooks are the facade's services a Manager calls; each may be nil.
type Hooks struct {
	// AddMemory stores m in cube through the facade's write path (the
	// cube's record first), without governance, reporting what the text
	// tier did (textmem.Store.AddOutcome's outcome and errors). Nil: the
	// text tier's AddOutcome.
	AddMemory func(ctx context.Context, cube string, m textmem.Memory) (textmem.Memory, textmem.AddOutcome, error)
	// Generate runs one background generation with the served model. A
	// nil *Generated means nothing was generated. Its error wraps
	// ErrRetryLater or ErrClosing when the job should run later, or ends
	// in context.Canceled when a foreground request pre-empted it. Nil:
	// no model is served, and jobs extract without one.
	Generate func(ctx context.Context, g Generation) (*Generated, error)
	// ContextTokens returns the loaded model's context length in tokens,
	// 0 while none is loaded; it sizes the chunks of turns one generation
	// sees. Nil: always 0.
	ContextTokens func() int
	// Used counts one visit and one interaction towards the heat of each
	// of cube's memories ids (a consolidated profile's), so the scheduler
	// promotes them as it does any hot memory.
	Used func(cube string, ids []string)
	// Rate counts delta (-1 or +1) visits and interactions towards the
	// heat of each of cube's memories ids (feedback's rating; counts never
	// fall below 0).
	Rate func(cube string, ids []string, delta int)
	// Kick asks the scheduler for a tick soon (a changed memory's pack is
	// recomputed there).
	Kick func()
	// Go runs f in the background as the facade's in-flight work, so
	// that its Close waits for it; once the facade is closing it drops f.
	// Nil: f runs in a plain goroutine.
	Go func(f func())
	// JobStarted, when set, runs when a job has been marked running,
	// before it extracts (a failpoint for restart tests).
	JobStarted func(ctx context.Context, j convmem.Job)
}

// Generation is one generation an extraction asks of the served model.
type Generation struct {
	// Prompt is sent as it is, without the model's chat template.
	Prompt string
	// Grammar (GBNF) holds the llama backend's output; Format (a JSON
	// schema) holds the Ollama backend's; both describe the same output.
	Grammar string
	Format  []byte
	// MaxTokens bounds the output, in tokens.
	MaxTokens int
}

// Generated is the outcome of a Generation.
type Generated struct {
	// Text is the output.
	Text string
	// Cut is true when the output stopped at MaxTokens (Ollama's
	// done_reason "length").
	Cut bool
	// Tokens is how many tokens were generated.
	Tokens int
}

// Manager runs a data directory's conversation memory: turn recording,
// the governed write path with its change log, extraction jobs and the
// expiry sweep. Safe for concurrent use.
type Manager struct {
	store *convmem.Store
	mem   *textmem.Store
	log   *slog.Logger
	now   func() time.Time
	base  context.Context
	hooks Hooks
	// noExtract is Options.NoExtract.
	noExtract bool

	// the job runner: one goroutine running queue's jobs in turn
	queue chan jobRef
	stop  context.CancelFunc
	done  chan struct{}
	// bg counts the background writes run without Hooks.Go; Close waits
	// for them (the store under them is closed after Close).
	bg sync.WaitGroup
	// jobMu guards queued: sessions with a consolidation job not yet run.
	jobMu  sync.Mutex
	queued map[jobRef]bool

	// turnMu serialises materialize; dueMu guards due, the cubes whose
	// turn memories a background write will bring up to date.
	turnMu sync.Mutex
	dueMu  sync.Mutex
	due    map[string]bool

	// feedbackMu serialises Feedback: checking and setting a response
	// record's Rated.
	feedbackMu sync.Mutex
}

type jobRef struct{ cube, id string }

// Open opens the conversation records in mem's backend and starts the job
// runner: the turn memories a previous run left unwritten are written and
// the jobs it left queued or running are resumed (failures there are
// logged, not returned). Close stops it. Errors: convmem.ErrBadOptions.
func Open(ctx context.Context, mem *textmem.Store, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Store.Logger == nil {
		opts.Store.Logger = opts.Logger
	}
	if opts.Base == nil {
		opts.Base = context.Background()
	}
	if opts.Hooks.AddMemory == nil {
		opts.Hooks.AddMemory = mem.AddOutcome
	}
	st, err := convmem.Open(mem.Backend(), opts.Store)
	if err != nil {
		return nil, err
	}
	m := &Manager{store: st, mem: mem, log: opts.Logger, now: st.Options().Now, base: opts.Base,
		hooks: opts.Hooks, noExtract: opts.NoExtract, queue: make(chan jobRef, 1024), done: make(chan struct{}),
		queued: map[jobRef]bool{}, due: map[string]bool{}}
	jctx, stop := context.WithCancel(opts.Base)
	m.stop = stop
	if cubes, err := st.PendingCubes(ctx); err != nil {
		m.log.Warn("turn memories not checked", "err", err)
	} else {
		for _, c := range cubes {
			if err := m.Materialize(ctx, c); err != nil {
				m.log.Warn("turn memories not written", "cube", c, "err", err)
			}
		}
	}
	left, err := st.Unfinished(ctx)
	if err != nil {
		m.log.Warn("extraction jobs not resumed", "err", err)
	}
	for _, j := range m.mergeSessionJobs(ctx, left) {
		m.log.Info("extraction job resumed", "cube", j.Cube, "job", j.ID, "state", j.State)
		if j.Session != "" {
			// RecordTurns queues no second job for the session
			m.queued[jobRef{j.Cube, j.Session}] = true
		}
		m.enqueue(jobRef{j.Cube, j.ID})
	}
	go m.runJobs(jctx)
	return m, nil
}

// Close stops the job runner: a running job's generation is cancelled and
// the job stays running in the store, to be resumed at the next Open. The
// records stay readable (they live in the text tier's backend, which the
// caller closes). It waits for the background turn-memory writes run
// without Hooks.Go, so that none runs on a closed store. Idempotent.
func (m *Manager) Close() {
	m.stop()
	<-m.done
	m.bg.Wait()
}

// Store returns the conversation records.
func (m *Manager) Store() *convmem.Store { return m.store }

// Profile returns cube's long-term profile (convmem.Store.Profile) with
// every other memory of the cube of Kind "preference" appended to its
// Preferences, oldest first: preferences are their own kind, whoever
// wrote them (an app's add, an extraction, a feedback's correction), as
// retrieval gives them their own block. Errors: the stores'.
func (m *Manager) Profile(ctx context.Context, cube string) (convmem.Profile, error) {
	p, err := m.store.Profile(ctx, cube)
	if err != nil {
		return p, err
	}
	mems, err := m.mem.List(ctx, cube)
	if err != nil {
		return p, err
	}
	for _, mem := range mems {
		if mem.Kind != convmem.TypePreference || slices.ContainsFunc(p.Preferences, func(it convmem.ProfileItem) bool { return it.MemoryID == mem.ID }) {
			continue
		}
		p.Preferences = append(p.Preferences, convmem.ProfileItem{MemoryID: mem.ID, Text: mem.Text, Type: convmem.TypePreference,
			Confidence: mem.Confidence, Updated: mem.Updated})
	}
	return p, nil
}

// kick calls Hooks.Kick when set.
func (m *Manager) kick() {
	if m.hooks.Kick != nil {
		m.hooks.Kick()
	}
}

// background runs f through Hooks.Go, or in a goroutine Close waits for.
func (m *Manager) background(f func()) {
	if m.hooks.Go != nil {
		m.hooks.Go(f)
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		f()
	}()
}
