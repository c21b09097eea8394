package memosrt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// Memory that conversations write by themselves (issue 17; package
// convmem). A chat turn in a cube is recorded after its answer: its text
// becomes a textmem memory of Kind KindTurn (searchable at once, retrieved
// into prompts like any memory once it left the short-term queue), and
// convmem queues it short-term, moves overflowing turns into topic
// sessions and tells which sessions are hot enough to consolidate. A
// consolidation, or AddMessages, queues an extraction job: run in the
// background by one goroutine (jobRunner), persisted, resumed after a
// restart; its memories go through the same governance as AddMemory
// (identical adds are no-ops, a contradicted liking is superseded).

// KindTurn is the Kind of the memories that hold recorded chat turns.
const KindTurn = "turn"

// SourceShortTerm is the Source of the memory of a turn still in its
// cube's short-term queue: Search finds it, prompts never hold it (the
// conversation carries it); it becomes "dialog:<id>" when the turn moves.
const SourceShortTerm = "short-term"

// jobRunner runs extraction jobs one at a time, in the background.
type jobRunner struct {
	queue chan jobRef
	stop  context.CancelFunc
	done  chan struct{}
	// mu guards queued: sessions with a consolidation job not yet run.
	mu     sync.Mutex
	queued map[jobRef]bool
	// hook, in tests, runs when a job has been marked running, before it
	// extracts.
	hook func(ctx context.Context, j convmem.Job)
}

type jobRef struct{ cube, id string }

// startJobs opens the conversation store and starts the job runner,
// resuming the jobs a previous run left queued or running.
func (o *OS) startJobs(ctx context.Context) error {
	co := o.opts.Conversations
	co.Now = o.opts.Clock.Now
	if co.Logger == nil {
		co.Logger = o.log
	}
	var err error
	if o.conv, err = convmem.Open(o.mem.Backend(), co); err != nil {
		return err
	}
	jctx, stop := context.WithCancel(o.base)
	o.jobs = &jobRunner{queue: make(chan jobRef, 1024), stop: stop, done: make(chan struct{}), queued: map[jobRef]bool{}}
	if cubes, err := o.conv.PendingCubes(ctx); err != nil {
		o.log.Warn("turn memories not checked", "err", err)
	} else {
		for _, c := range cubes {
			if err := o.materialize(ctx, c); err != nil {
				o.log.Warn("turn memories not written", "cube", c, "err", err)
			}
		}
	}
	left, err := o.conv.Unfinished(ctx)
	if err != nil {
		o.log.Warn("extraction jobs not resumed", "err", err)
	}
	for _, j := range left {
		o.log.Info("extraction job resumed", "cube", j.Cube, "job", j.ID, "state", j.State)
		o.enqueue(jobRef{j.Cube, j.ID})
	}
	go o.runJobs(jctx)
	return nil
}

// stopJobs stops the runner: a running job's generation is cancelled and
// the job stays running in the store, to be resumed at the next Open.
func (o *OS) stopJobs() {
	if o.jobs == nil {
		return
	}
	o.jobs.stop() // idempotent, as Close is
	<-o.jobs.done
}

// enqueue hands a stored job to the runner; a full queue leaves it queued
// in the store for the next Open (logged).
func (o *OS) enqueue(r jobRef) {
	select {
	case o.jobs.queue <- r:
	default:
		o.log.Warn("extraction queue full: the job waits for the next start", "cube", r.cube, "job", r.id)
	}
}

func (o *OS) runJobs(ctx context.Context) {
	defer close(o.jobs.done)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-o.jobs.queue:
			if err := o.runJob(ctx, r); err != nil && ctx.Err() == nil {
				o.log.Warn("extraction job", "cube", r.cube, "job", r.id, "err", err)
			}
		}
	}
}

// runJob runs one stored job to its end: done (memories stored, results
// recorded), failed (the error and the model's output recorded, nothing
// stored), or, when ctx ends first, left running for the next start.
// Results are written as they are stored, so a resumed job does not store
// a memory twice.
func (o *OS) runJob(ctx context.Context, r jobRef) error {
	j, err := o.conv.Job(ctx, r.cube, r.id)
	if err != nil {
		return err
	}
	if j.State != convmem.JobQueued && j.State != convmem.JobRunning {
		return nil
	}
	if j.Session != "" {
		defer func() {
			o.jobs.mu.Lock()
			delete(o.jobs.queued, jobRef{j.Cube, j.Session})
			o.jobs.mu.Unlock()
		}()
	}
	j.State, j.Started = convmem.JobRunning, o.opts.Clock.Now().UTC()
	j.Attempts++
	if err := o.conv.PutJob(ctx, j); err != nil {
		return err
	}
	if h := o.jobs.hook; h != nil {
		h(ctx, j)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fail := func(err error) error {
		j.State, j.Error, j.Finished = convmem.JobFailed, err.Error(), o.opts.Clock.Now().UTC()
		return errors.Join(err, o.conv.PutJob(context.WithoutCancel(ctx), j))
	}
	var turns []convmem.Turn
	for _, id := range j.Turns {
		t, err := o.conv.Turn(ctx, j.Cube, id)
		if errors.Is(err, convmem.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		turns = append(turns, t)
	}
	if len(turns) == 0 {
		return fail(errors.New("memosrt: the job's turns were deleted"))
	}
	ex, dropped, err := o.extract(ctx, &j, turns)
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return errors.Join(ctx.Err(), err) // left running: resumed at the next Open
	}
	if errors.Is(err, errNoIdleSlot) || errors.Is(err, context.Canceled) {
		// every slot busy, or a foreground request took this one: again
		// in a second, behind the jobs queued meanwhile
		j.State = convmem.JobQueued
		j.Attempts--
		if err := o.conv.PutJob(ctx, j); err != nil {
			return err
		}
		time.AfterFunc(time.Second, func() { o.enqueue(r) })
		return nil
	}
	if err != nil {
		return fail(err)
	}
	j.Dropped = dropped
	by := "extract:" + j.ID
	for _, e := range ex {
		if slices.ContainsFunc(j.Results, func(x convmem.JobResult) bool { return x.Text == e.Text }) {
			continue // stored before a restart
		}
		_, res, err := o.remember(ctx, j.Cube, textmem.Memory{Text: e.Text, Kind: e.Type, Tags: e.Tags,
			Source: by, Confidence: e.Confidence, Turns: j.Turns}, by, "extracted from the conversation")
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			j.Dropped = append(j.Dropped, convmem.Dropped{Text: e.Text, Why: err.Error()})
			continue
		}
		res.Type = e.Type
		j.Results = append(j.Results, res)
		if err := o.conv.PutJob(ctx, j); err != nil {
			return err
		}
	}
	if j.Session != "" {
		if err := o.consolidate(ctx, j); err != nil {
			return err
		}
	}
	j.State, j.Finished = convmem.JobDone, o.opts.Clock.Now().UTC()
	return o.conv.PutJob(ctx, j)
}

// consolidate writes a session job's results into the cube's profile and
// resets the session's interactions; the profile's memories are promoted
// into the cube's pack (the activation tier) when a model is loaded.
func (o *OS) consolidate(ctx context.Context, j convmem.Job) error {
	var items []convmem.ProfileItem
	var ids []string
	for _, r := range j.Results {
		m, err := o.mem.Get(ctx, j.Cube, r.MemoryID)
		if err != nil {
			continue
		}
		items = append(items, convmem.ProfileItem{MemoryID: m.ID, Text: m.Text, Type: r.Type,
			Confidence: m.Confidence, Session: j.Session})
		ids = append(ids, m.ID)
	}
	if len(items) > 0 {
		if _, err := o.conv.UpdateProfile(ctx, j.Cube, items); err != nil {
			return err
		}
	}
	if err := o.conv.Consolidated(ctx, j.Cube, j.Session); err != nil && !errors.Is(err, convmem.ErrNotFound) {
		return err
	}
	if len(ids) > 0 {
		// the profile feeds the pack: its memories count as used, so
		// the scheduler promotes them as it does any hot memory
		uses := make([]scheduler.Use, len(ids))
		for i, id := range ids {
			uses[i] = scheduler.Use{Cube: j.Cube, ID: id, Visits: 1, Interactions: 1}
		}
		o.addUses(uses)
		o.Kick()
	}
	return nil
}

// extract runs the extraction of j over turns: by the served model, its
// output held to convmem.ExtractSchema (the llama backend through the
// grammar, the Ollama backend through format), or extractively without a
// model. The model sees the turns in chunks whose prompt leaves at least
// half the context to the output (extractChunks); a chunk that fails (its
// output cut or malformed) is recorded in the dropped list, and the job
// fails only when every chunk does. The last raw output is kept in
// j.Output. errNoIdleSlot and a preemption (context.Canceled while ctx
// lives) mean: run again later.
func (o *OS) extract(ctx context.Context, j *convmem.Job, turns []convmem.Turn) ([]convmem.Extracted, []convmem.Dropped, error) {
	an := o.conv.Options().Analyzer
	if o.opts.Model == "" && o.up == nil {
		j.By = "extractive"
		return convmem.Extractive(turns, an), nil, nil
	}
	j.By = "model"
	g, err := convmem.ExtractGrammar()
	if err != nil {
		return nil, nil, err
	}
	var out []convmem.Extracted
	var dropped []convmem.Dropped
	var firstErr error
	chunks := extractChunks(turns, o.extractBytes())
	for i, ch := range chunks {
		req := Request{Prompt: convmem.ExtractPrompt(ch), Raw: true, Sampling: Sampling{Grammar: g},
			Format: []byte(convmem.ExtractSchema), NumPredict: convmem.MaxExtractTokens,
			NoPersist: true, NoUsage: true, Record: RecordNone, background: true}
		res, err := o.do(ctx, &req, false)
		if errors.Is(err, errNoIdleSlot) || errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
			return nil, nil, err
		}
		if res != nil {
			j.Output = res.Text
		}
		if err == nil && res.DoneReason == "length" {
			err = fmt.Errorf("%w: cut at %d tokens (done_reason length)", convmem.ErrMalformed, res.Usage.EvalTokens)
		}
		var ex []convmem.Extracted
		var dr []convmem.Dropped
		if err == nil {
			srcs := make([]string, len(ch))
			for i, t := range ch {
				srcs[i] = t.Text()
			}
			ex, dr, err = convmem.ParseExtraction(res.Text, srcs, an)
		}
		if err != nil {
			err = fmt.Errorf("memosrt: extraction, chunk %d of %d: %w", i+1, len(chunks), err)
			firstErr = cmp.Or(firstErr, err)
			dropped = append(dropped, convmem.Dropped{Why: err.Error()})
			continue
		}
		out, dropped = append(out, ex...), append(dropped, dr...)
	}
	if firstErr != nil && len(out) == 0 && len(dropped) == len(chunks) {
		return nil, nil, firstErr
	}
	return out, dropped, nil
}

// extractBytes bounds the turn text of one extraction chunk: a quarter of
// the loaded context at two bytes a token, so that the prompt takes at most
// about half of n_ctx and the output the rest (8 KiB without a loaded
// model: the Ollama backend).
func (o *OS) extractBytes() int {
	if l := o.jobL.Load(); l != nil {
		return max(256, l.eng.NCtx()/2)
	}
	return 8 << 10
}

// extractChunks splits turns into runs of at most limit bytes of text; a
// longer turn is cut to limit (its start is what is extracted from).
func extractChunks(turns []convmem.Turn, limit int) [][]convmem.Turn {
	var out [][]convmem.Turn
	var cur []convmem.Turn
	size := 0
	for _, t := range turns {
		if n := len(t.User) + len(t.Assistant); n > limit {
			u := strings.ToValidUTF8(t.User[:min(len(t.User), limit)], "")
			t.Assistant = strings.ToValidUTF8(t.Assistant[:min(len(t.Assistant), limit-len(u))], "")
			t.User = u
		}
		n := len(t.User) + len(t.Assistant)
		if len(cur) > 0 && size+n > limit {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// remember stores m in cube under governance and logs it by by: an
// identical memory is returned as it is (OpSame); a memory m contradicts
// (convmem.Contradicts: the opposite liking of the same thing) takes m's
// text as its next version (OpSupersede: the old text stays in its
// history, the change log links both, and the pack holding it is
// recomputed at the next tick); else m is added (OpAdd).
func (o *OS) remember(ctx context.Context, cube string, m textmem.Memory, by, why string) (textmem.Memory, convmem.JobResult, error) {
	if m.Kind != KindTurn && convmem.Sentiment(m.Text) != 0 {
		hits, err := o.mem.Search(ctx, cube, m.Text, 5)
		if err != nil {
			return textmem.Memory{}, convmem.JobResult{}, err
		}
		for _, h := range hits {
			old := h.Memory
			if old.Kind == KindTurn || !convmem.Contradicts(old.Text, m.Text, o.conv.Options().Analyzer) {
				continue
			}
			// the new statement replaces the old one whole: its source,
			// kind and expiry (none clears the old one's)
			p := textmem.Patch{Text: &m.Text, Source: &m.Source, Expires: &m.Expires}
			if m.Kind != "" {
				p.Kind = &m.Kind
			}
			cur, err := o.patchMemory(ctx, cube, old.ID, p, convmem.Change{Op: convmem.OpSupersede, By: by,
				Why: fmt.Sprintf("contradicts version %d: %q", old.Version, old.Text)})
			if err != nil {
				return cur, convmem.JobResult{}, err
			}
			return cur, convmem.JobResult{MemoryID: cur.ID, Op: convmem.OpSupersede, Text: cur.Text, Version: cur.Version,
				PrevText: old.Text, PrevKind: old.Kind, PrevSource: old.Source, PrevVersion: old.Version}, nil
		}
	}
	got, how, err := o.addMemory(ctx, cube, m)
	if err != nil {
		return got, convmem.JobResult{}, err
	}
	res := convmem.JobResult{MemoryID: got.ID, Op: convmem.OpAdd, Text: got.Text, Version: got.Version}
	switch how {
	case textmem.Identical:
		res.Op = convmem.OpSame
		o.logChange(ctx, cube, got.ID, convmem.Change{Op: convmem.OpSame, By: by, Why: "identical add: nothing stored", Version: got.Version})
		if !m.Expires.IsZero() && !m.Expires.Equal(got.Expires) {
			// the one thing an identical add can change: when it expires
			if got, err = o.patchMemory(ctx, cube, got.ID, textmem.Patch{Expires: &m.Expires},
				convmem.Change{Op: "update", By: by, Why: "expiry set by an identical add"}); err != nil {
				return got, res, err
			}
			res.Version = got.Version
		}
	case textmem.NearMerged:
		res.Op = "update"
		o.logChange(ctx, cube, got.ID, convmem.Change{Op: "update", By: by, Why: "near-duplicate add merged as the next version", Text: got.Text, Version: got.Version})
	default:
		if !m.Expires.IsZero() {
			if err := o.conv.SetExpiry(ctx, cube, got.ID, m.Expires); err != nil {
				return got, res, err
			}
		}
		if why == "" {
			why = "added"
		}
		o.logChange(ctx, cube, got.ID, convmem.Change{Op: convmem.OpAdd, By: by, Why: why, Text: got.Text, Version: got.Version})
	}
	return got, res, nil
}

// logChange appends to a memory's change log; a failure is logged, not
// returned (the change itself is stored).
func (o *OS) logChange(ctx context.Context, cube, id string, c convmem.Change) {
	if err := o.conv.Log(context.WithoutCancel(ctx), cube, id, c); err != nil {
		o.log.Warn("change log", "cube", cube, "id", id, "err", err)
	}
}

// recordChat records the turn of a chat request that was answered: the
// last message if it is the user's, and the answer unless req.Record is
// RecordUser, and not in a NoRecord cube (its record as the request found
// it). Sessions made hot by the move are queued for consolidation.
// A failure is logged, never the request's.
func (o *OS) recordChat(ctx context.Context, req *Request, cube Cube, answer string) {
	if req.Cube == "" || req.Record == RecordNone || req.background || o.opts.NoRecord || cube.NoRecord || len(req.Messages) == 0 {
		return
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "user" || strings.TrimSpace(last.Content) == "" {
		return
	}
	t := convmem.Turn{User: last.Content}
	if req.Record != RecordUser {
		t.Assistant = answer
	}
	if _, err := o.recordTurns(context.WithoutCancel(ctx), req.Cube, []convmem.Turn{t}, !o.opts.NoExtract); err != nil {
		o.log.Warn("turn not recorded", "cube", req.Cube, "err", err)
	}
}

// recordTurns appends turns to the cube's short-term queue and has their
// textmem memories written in the background (materializeLater: Kind
// KindTurn, searchable, retrieved into prompts once the overflow moved
// them into a session); with consolidate,
// sessions the move made due get an extraction job. Returns the turns
// with their ids.
func (o *OS) recordTurns(ctx context.Context, cube string, turns []convmem.Turn, consolidate bool) ([]convmem.Turn, error) {
	now := o.opts.Clock.Now().UTC()
	for i := range turns {
		if turns[i].Time.IsZero() {
			turns[i].Time = now
		}
	}
	moved, err := o.conv.Record(ctx, cube, turns...)
	if err != nil {
		return nil, err
	}
	o.materializeLater(cube)
	if !consolidate {
		return turns, nil
	}
	for _, mv := range moved {
		s, err := o.conv.Session(ctx, cube, mv.Session)
		if err != nil || s.Heat < o.conv.Options().HeatAt || s.Interactions == 0 {
			continue
		}
		key := jobRef{cube, s.ID}
		o.jobs.mu.Lock()
		dup := o.jobs.queued[key]
		o.jobs.queued[key] = true
		o.jobs.mu.Unlock()
		if dup {
			continue
		}
		ids := s.Turns[max(0, len(s.Turns)-s.Interactions):]
		j := o.conv.NewJob(cube, ids, s.ID)
		if err := o.conv.PutJob(ctx, j); err != nil {
			return turns, err
		}
		o.enqueue(jobRef{cube, j.ID})
	}
	return turns, nil
}

// materialize brings the textmem memories of cube's pending turns
// (convmem.Store.Pending) up to date: a turn without one gets a memory of
// Kind KindTurn (EventTime the turn's time), Source SourceShortTerm while
// it is in the short-term queue (searchable by Search, hidden from
// prompts: Layout.HideSources) or "dialog:<id>" once it moved; a moved
// turn whose memory still has the short-term Source gets its dialog as
// Source. The dialog (convmem.Turn.Dialog: the turns without a pause
// longer than SessionGap, a sitting) keeps textmem's neighbour expansion
// and context smoothing within what was said together, as a LoCoMo dialog
// session does for the flat store; topic sessions cut a sitting wherever
// its topic drifts, and as Source they cost LoCoMo dev recall@10 (75.85
// against the flat 76.00, `make recall-sessions` at 806723d). The memory's
// id is the turn's, so running it again after a crash between a record or
// move and the link writes nothing twice.
func (o *OS) materialize(ctx context.Context, cube string) error {
	o.turnMu.Lock()
	defer o.turnMu.Unlock()
	pend, err := o.conv.Pending(ctx, cube)
	if err != nil {
		return err
	}
	limit := textmem.DefaultOptions().MaxTextBytes
	for _, t := range pend {
		src := SourceShortTerm
		if t.Session != "" {
			src = "dialog:" + t.Dialog
		}
		id := t.Memory
		if id == "" {
			text := t.Text()
			if len(text) > limit {
				text = strings.ToValidUTF8(text[:limit], "")
			}
			// the turn's id is its memory's (Import: no duplicate check or
			// near-duplicate merge, which would let a turn overwrite
			// another memory's text); a repair after a crash between this
			// write and the link finds it stored
			_, err := o.mem.Import(ctx, cube, textmem.Memory{ID: t.ID, Text: text, Kind: KindTurn, Source: src, EventTime: t.Time})
			if err != nil && !errors.Is(err, textmem.ErrIDExists) {
				return err
			}
			id = t.ID
		} else if src != SourceShortTerm {
			switch m, err := o.mem.Get(ctx, cube, id); {
			case errors.Is(err, textmem.ErrNotFound):
			case err != nil:
				return err
			case m.Source == SourceShortTerm:
				if _, err := o.mem.Patch(ctx, cube, id, textmem.Patch{Source: &src}); err != nil && !errors.Is(err, textmem.ErrNotFound) {
					return err
				}
			}
		}
		if err := o.conv.SetMemory(ctx, cube, t, id); err != nil && !errors.Is(err, convmem.ErrNotFound) {
			return err
		}
	}
	return nil
}

// materializeLater writes cube's pending turn memories (materialize) in a
// goroutine, off the chat request's path: the memory write costs about as
// much as the rest of recording (`make bench-conv`). At most one write per
// cube waits at a time; one asked for while another runs runs after it.
// Reads that must see every turn (Search, Memories) materialize first; a
// write cut short by Close or a crash is done at the next Open (the
// turns stay pending).
func (o *OS) materializeLater(cube string) {
	o.turnsMu.Lock()
	if o.turnsDue == nil {
		o.turnsDue = map[string]bool{}
	}
	due := o.turnsDue[cube]
	o.turnsDue[cube] = true
	o.turnsMu.Unlock()
	if due {
		return
	}
	go func() {
		if o.enter() != nil {
			return
		}
		defer o.leave()
		o.turnsMu.Lock()
		delete(o.turnsDue, cube)
		o.turnsMu.Unlock()
		if err := o.materialize(o.base, cube); err != nil {
			o.log.Warn("turn memories not written (written at the next read or start)", "cube", cube, "err", err)
		}
	}()
}

// MaxMessages bounds the messages of one AddMessages call: the turns are
// recorded before it returns.
const MaxMessages = 1000

// MessagesOptions configure AddMessages.
type MessagesOptions struct {
	// NoExtract records the turns without an extraction job (Mem0's
	// infer=false).
	NoExtract bool
}

// AddMessages records msgs as turns of cube (each user message with the
// assistant message after it; system and tool messages are left out) and
// queues one extraction job over them, as Mem0's add(messages) and MemOS's
// MemReader do; it returns at once with the stored job (state queued) and
// the turns. The job runs in the background: see Job, Jobs and UndoJob.
// The cube is created if needed. Errors: *FieldError for no messages, no
// message with text, or a bad role; textmem.ErrBadCube; storage errors.
func (o *OS) AddMessages(ctx context.Context, cube string, msgs []Message, mo MessagesOptions) (convmem.Job, []convmem.Turn, error) {
	if err := o.enter(); err != nil {
		return convmem.Job{}, nil, err
	}
	defer o.leave()
	if len(msgs) == 0 {
		return convmem.Job{}, nil, badField("messages", "at least one message is required")
	}
	if len(msgs) > MaxMessages {
		return convmem.Job{}, nil, badField("messages", "%d messages, at most %d in one call", len(msgs), MaxMessages)
	}
	var turns []convmem.Turn
	for i, m := range msgs {
		if err := checkRole(fmt.Sprintf("messages[%d].role", i), m.Role); err != nil {
			return convmem.Job{}, nil, err
		}
		if strings.TrimSpace(m.Content) == "" {
			continue
		}
		switch m.Role {
		case "user":
			turns = append(turns, convmem.Turn{User: m.Content})
		case "assistant":
			if n := len(turns); n > 0 && turns[n-1].Assistant == "" {
				turns[n-1].Assistant = m.Content
			} else {
				turns = append(turns, convmem.Turn{Assistant: m.Content})
			}
		}
	}
	if len(turns) == 0 {
		return convmem.Job{}, nil, badField("messages", "no user or assistant message has text")
	}
	if err := o.ensureCube(ctx, cube); err != nil {
		return convmem.Job{}, nil, err
	}
	turns, err := o.recordTurns(ctx, cube, turns, !o.opts.NoExtract)
	if err != nil {
		return convmem.Job{}, nil, err
	}
	if mo.NoExtract {
		return convmem.Job{}, turns, nil
	}
	ids := make([]string, len(turns))
	for i, t := range turns {
		ids[i] = t.ID
	}
	j := o.conv.NewJob(cube, ids, "")
	if err := o.conv.PutJob(ctx, j); err != nil {
		return convmem.Job{}, nil, err
	}
	o.enqueue(jobRef{cube, j.ID})
	return j, turns, nil
}

// ensureCube creates cube's record unless it has one.
func (o *OS) ensureCube(ctx context.Context, cube string) error {
	if !textmem.ValidCube(cube) {
		return fmt.Errorf("%w: %q", textmem.ErrBadCube, cube)
	}
	if _, err := o.cubes.create(ctx, Cube{Name: cube}); err != nil && !errors.Is(err, ErrCubeExists) {
		return err
	}
	return nil
}

// Job returns an extraction job of cube. Errors: convmem.ErrNotFound.
func (o *OS) Job(ctx context.Context, cube, id string) (convmem.Job, error) {
	if err := o.enter(); err != nil {
		return convmem.Job{}, err
	}
	defer o.leave()
	return o.conv.Job(ctx, cube, id)
}

// Jobs returns cube's extraction jobs, oldest first.
func (o *OS) Jobs(ctx context.Context, cube string) ([]convmem.Job, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Jobs(ctx, cube)
}

// ErrJobState is returned by UndoJob for a job that is not done.
var ErrJobState = errkind.New(errkind.Conflict, "memosrt: the job is not done")

// UndoJob undoes a done extraction job: memories it added are deleted and
// memories it superseded get their previous text back as a new version,
// each only while it is still at the version the job left (a memory
// changed since is kept, and listed in the job's Dropped); the job's state
// becomes undone. Errors: convmem.ErrNotFound, ErrJobState.
func (o *OS) UndoJob(ctx context.Context, cube, id string) (convmem.Job, error) {
	if err := o.enter(); err != nil {
		return convmem.Job{}, err
	}
	defer o.leave()
	j, err := o.conv.Job(ctx, cube, id)
	if err != nil {
		return j, err
	}
	if j.State != convmem.JobDone {
		return j, fmt.Errorf("%w: job %s is %s", ErrJobState, id, j.State)
	}
	by := "undo:" + j.ID
	for i := len(j.Results) - 1; i >= 0; i-- {
		r := j.Results[i]
		if r.Op == convmem.OpSame {
			continue
		}
		cur, err := o.mem.Get(ctx, cube, r.MemoryID)
		if errors.Is(err, textmem.ErrNotFound) {
			continue
		}
		if err != nil {
			return j, err
		}
		if cur.Version != r.Version {
			j.Dropped = append(j.Dropped, convmem.Dropped{Text: cur.Text,
				Why: fmt.Sprintf("undo skipped: memory %s changed since (version %d, the job left %d)", cur.ID, cur.Version, r.Version)})
			continue
		}
		switch r.Op {
		case convmem.OpAdd:
			if err := o.deleteMemory(ctx, cube, r.MemoryID, by, "undo of extraction job "+j.ID); err != nil {
				return j, err
			}
		case convmem.OpSupersede:
			if _, err := o.patchMemory(ctx, cube, r.MemoryID, textmem.Patch{Text: &r.PrevText, Kind: &r.PrevKind, Source: &r.PrevSource},
				convmem.Change{Op: "undo", By: by, Why: "undo of extraction job " + j.ID}); err != nil {
				return j, err
			}
		}
	}
	j.State, j.Undone = convmem.JobUndone, o.opts.Clock.Now().UTC()
	return j, o.conv.PutJob(ctx, j)
}

// patchMemory applies p to memory id as one new version (textmem.Patch)
// and keeps what derives from it in step: a changed text recomputes the
// pack holding it at the next tick and changes its profile entry; a
// changed expiry moves its place in the expiry index; c (Text and Version
// filled in) goes into its change log.
func (o *OS) patchMemory(ctx context.Context, cube, id string, p textmem.Patch, c convmem.Change) (textmem.Memory, error) {
	m, err := o.mem.Patch(ctx, cube, id, p)
	if err != nil {
		return m, err
	}
	if p.Expires != nil {
		if err := o.conv.SetExpiry(ctx, cube, id, *p.Expires); err != nil {
			return m, err
		}
	}
	if p.Text != nil {
		o.Kick()
		_ = o.conv.ProfileForget(ctx, cube, id, m.Text)
	}
	c.Text, c.Version = m.Text, m.Version
	o.logChange(ctx, cube, id, c)
	return m, nil
}

// deleteMemory deletes memory id and what derives from it (its turn
// record, profile entry and expiry), logging the delete.
func (o *OS) deleteMemory(ctx context.Context, cube, id, by, why string) error {
	if err := o.mem.Delete(ctx, cube, id); err != nil {
		return err
	}
	o.forgetDerived(ctx, cube, id)
	o.logChange(ctx, cube, id, convmem.Change{Op: "delete", By: by, Why: why})
	return nil
}

// forgetDerived drops convmem's records of a deleted memory.
func (o *OS) forgetDerived(ctx context.Context, cube, id string) {
	ctx = context.WithoutCancel(ctx)
	err := errors.Join(o.conv.DropTurn(ctx, cube, id), o.conv.ProfileForget(ctx, cube, id, ""),
		o.conv.ClearExpiry(ctx, cube, id))
	if err != nil {
		o.log.Warn("records of a deleted memory", "cube", cube, "id", id, "err", err)
	}
}

// Profile returns cube's long-term profile: facts and preferences about
// the user, and knowledge, written by consolidated sessions.
func (o *OS) Profile(ctx context.Context, cube string) (convmem.Profile, error) {
	if err := o.enter(); err != nil {
		return convmem.Profile{}, err
	}
	defer o.leave()
	if err := o.checkCube(ctx, cube); err != nil {
		return convmem.Profile{}, err
	}
	return o.conv.Profile(ctx, cube)
}

// ShortTerm returns cube's short-term queue of turns, oldest first.
func (o *OS) ShortTerm(ctx context.Context, cube string) ([]convmem.Turn, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.ShortTerm(ctx, cube)
}

// Sessions returns cube's mid-term sessions with their heat, oldest first.
func (o *OS) Sessions(ctx context.Context, cube string) ([]convmem.Session, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Sessions(ctx, cube)
}

// MemoryLog returns memory id's change log, oldest first: what changed it,
// when and why.
func (o *OS) MemoryLog(ctx context.Context, cube, id string) ([]convmem.Change, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Changes(ctx, cube, id)
}

// sweepExpired deletes the memories whose expiry has passed (logged with
// By "expiry"). Run by every tick.
func (o *OS) sweepExpired(ctx context.Context) error {
	cubes, err := o.conv.ExpiringCubes(ctx)
	if err != nil {
		return err
	}
	now := o.opts.Clock.Now()
	for _, c := range cubes {
		ids, err := o.conv.Expired(ctx, c, now)
		if err != nil {
			return err
		}
		for _, id := range ids {
			err := o.deleteMemory(ctx, c, id, "expiry", "expired")
			if errors.Is(err, textmem.ErrNotFound) {
				err = o.conv.ClearExpiry(ctx, c, id)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// sessionWeight and sessionTop shape how sessions rerank a search (see
// fuse).
const (
	sessionWeight = 0.03
	sessionTop    = 3
)

// fuse reranks the hits of a search in cube with the cube's conversation
// memory, as MemoryOS retrieves sessions first and pages within them:
// each hit scores 1/(60+rank) (reciprocal rank fusion, Cormack et al.
// 2009), plus sessionWeight/(60+srank) when its turn lies in one of ses,
// the sessionTop sessions that best match the query (srank their rank).
// The bonus is small on purpose: at most 0.03/60 = 0.0005, what separates
// rank 9 from rank 11 or 12, so a session lifts a hit over a near tie and
// never over a clearly better one (with 0.5 a session's hits displaced the
// text tier's: LoCoMo dev recall@10 68.4 against 76.0 from a 3k pool,
// `make recall-sessions` at 0249fbb). Score is the fused score (one scale
// for all); hits keep their order otherwise.
func (o *OS) fuse(ctx context.Context, cube string, ses []convmem.SessionHit, hits []textmem.Hit) ([]textmem.Hit, error) {
	srank := map[string]int{}
	for i, s := range ses {
		srank[s.Session.ID] = i
	}
	turnIDs := make([]string, len(hits))
	for i, h := range hits {
		turnIDs[i] = h.Memory.ID
	}
	of, err := o.conv.SessionsOf(ctx, cube, turnIDs)
	if err != nil {
		return nil, err
	}
	type scored struct {
		h     textmem.Hit
		score float64
	}
	sc := make([]scored, 0, len(hits))
	for i, h := range hits {
		s := 1 / (60 + float64(i))
		if r, ok := srank[of[h.Memory.ID]]; ok {
			s += sessionWeight / (60 + float64(r))
		}
		sc = append(sc, scored{h, s})
	}
	slices.SortStableFunc(sc, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	out := make([]textmem.Hit, len(sc))
	for i, x := range sc {
		x.h.Score = x.score
		out[i] = x.h
	}
	return out, nil
}

// liveHits drops hits whose memory has expired (the sweep deletes them at
// the next tick).
func (o *OS) liveHits(hits []textmem.Hit) []textmem.Hit {
	now := o.opts.Clock.Now()
	return slices.DeleteFunc(hits, func(h textmem.Hit) bool {
		return !h.Memory.Expires.IsZero() && !h.Memory.Expires.After(now)
	})
}
