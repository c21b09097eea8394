package conversation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/textmem"
)

// enqueue hands a stored job to the runner; a full queue leaves it queued
// in the store for the next Open (logged).
func (m *Manager) enqueue(r jobRef) {
	select {
	case m.queue <- r:
	default:
		m.log.Warn("extraction queue full: the job waits for the next start", "cube", r.cube, "job", r.id)
	}
}

// mergeSessionJobs returns the unfinished jobs (oldest first within a
// cube, as convmem.Store.Unfinished lists them) to resume, with at most one
// consolidation job per session: the newest takes the turns of the older
// ones (theirs first, each turn once) and is stored first, then each older
// one is stored as JobMerged, naming it. A session has one queued job
// while a process runs (RecordTurns); data directories of earlier
// versions can hold several, since those forgot the session's job at a
// restart and queued another (docs/benchmarks.md, the 30-minute soak). A
// job that cannot be stored stays as it was and is resumed (logged).
func (m *Manager) mergeSessionJobs(ctx context.Context, jobs []convmem.Job) []convmem.Job {
	newest := map[jobRef]int{}
	for i, j := range jobs {
		if j.Session != "" {
			newest[jobRef{j.Cube, j.Session}] = i
		}
	}
	older := map[int][]int{} // newest's index: the older jobs' indexes
	for i, j := range jobs {
		if k := newest[jobRef{j.Cube, j.Session}]; j.Session != "" && k != i {
			older[k] = append(older[k], i)
		}
	}
	merged := map[int]bool{}
	for k, is := range older {
		into := jobs[k]
		var turns []string
		for _, i := range append(is, k) {
			for _, id := range jobs[i].Turns {
				if !slices.Contains(turns, id) {
					turns = append(turns, id)
				}
			}
		}
		into.Turns = turns
		if err := m.store.PutJob(ctx, into); err != nil {
			m.log.Warn("extraction jobs of a session not merged", "cube", into.Cube, "session", into.Session, "err", err)
			continue
		}
		jobs[k] = into
		for _, i := range is {
			j := jobs[i]
			j.State, j.MergedInto, j.Finished = convmem.JobMerged, into.ID, m.now().UTC()
			if err := m.store.PutJob(ctx, j); err != nil {
				m.log.Warn("extraction job not marked merged: resumed", "cube", j.Cube, "job", j.ID, "err", err)
				continue
			}
			merged[i] = true
		}
		m.log.Info("extraction jobs of a session merged", "cube", into.Cube, "session", into.Session, "into", into.ID, "jobs", len(is), "turns", len(turns))
	}
	out := make([]convmem.Job, 0, len(jobs)-len(merged))
	for i, j := range jobs {
		if !merged[i] {
			out = append(out, j)
		}
	}
	return out
}

func (m *Manager) runJobs(ctx context.Context) {
	defer close(m.done)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-m.queue:
			if err := m.runJob(ctx, r); err != nil && ctx.Err() == nil {
				m.log.Warn("extraction job", "cube", r.cube, "job", r.id, "err", err)
			}
		}
	}
}

// runJob runs one stored job to its end: done (memories stored, results
// recorded), failed (the error and the model's output recorded, nothing
// stored), or, when ctx ends first, left running for the next start.
// Results are written as they are stored, so a resumed job does not store
// a memory twice.
func (m *Manager) runJob(ctx context.Context, r jobRef) error {
	j, err := m.store.Job(ctx, r.cube, r.id)
	if err != nil {
		return err
	}
	if j.State != convmem.JobQueued && j.State != convmem.JobRunning {
		return nil
	}
	// the session may get another job once this one has ended; not while
	// it waits for a slot (queued again below): RecordTurns would queue a
	// second job for the session at each retry
	requeued := false
	if j.Session != "" {
		defer func() {
			if requeued {
				return
			}
			m.jobMu.Lock()
			delete(m.queued, jobRef{j.Cube, j.Session})
			m.jobMu.Unlock()
		}()
	}
	j.State, j.Started = convmem.JobRunning, m.now().UTC()
	j.Attempts++
	if err := m.store.PutJob(ctx, j); err != nil {
		return err
	}
	if h := m.hooks.JobStarted; h != nil {
		h(ctx, j)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fail := func(err error) error {
		j.State, j.Error, j.Finished = convmem.JobFailed, err.Error(), m.now().UTC()
		return errors.Join(err, m.store.PutJob(context.WithoutCancel(ctx), j))
	}
	var turns []convmem.Turn
	for _, id := range j.Turns {
		t, err := m.store.Turn(ctx, j.Cube, id)
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
	ex, dropped, err := m.extract(ctx, &j, turns)
	if ctx.Err() != nil || errors.Is(err, ErrClosing) {
		return errors.Join(ctx.Err(), err) // left running: resumed at the next Open
	}
	if errors.Is(err, ErrRetryLater) || errors.Is(err, context.Canceled) {
		// every slot busy, or a foreground request took this one: again
		// in a second, behind the jobs queued meanwhile
		j.State = convmem.JobQueued
		j.Attempts--
		if err := m.store.PutJob(ctx, j); err != nil {
			return err
		}
		requeued = true
		time.AfterFunc(time.Second, func() { m.enqueue(r) })
		return nil
	}
	if err != nil {
		return fail(err)
	}
	j.Dropped = dropped
	by := "extract:" + j.ID
	assistant := convmem.AssistantCube(turns)
	for _, e := range ex {
		if slices.ContainsFunc(j.Results, func(x convmem.JobResult) bool { return x.Text == e.Text }) {
			continue // stored before a restart
		}
		cube := convmem.Route(e.Type, j.Cube, assistant)
		_, res, err := m.Remember(ctx, cube, textmem.Memory{Text: e.Text, Kind: e.Type, Tags: e.Tags,
			Source: by, Confidence: e.Confidence, Turns: j.Turns}, by, "extracted from the conversation")
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			j.Dropped = append(j.Dropped, convmem.Dropped{Text: e.Text, Why: err.Error()})
			continue
		}
		res.Type = e.Type
		if cube != j.Cube {
			res.Cube = cube
		}
		j.Results = append(j.Results, res)
		if err := m.store.PutJob(ctx, j); err != nil {
			return err
		}
	}
	if j.Session != "" {
		if err := m.consolidate(ctx, j); err != nil {
			return err
		}
	}
	j.State, j.Finished = convmem.JobDone, m.now().UTC()
	return m.store.PutJob(ctx, j)
}

// consolidate writes a session job's results into the cube's profile and
// resets the session's interactions; the profile's memories count as used
// (Hooks.Used), so the scheduler promotes them into the cube's pack (the
// activation tier) when a model is loaded.
func (m *Manager) consolidate(ctx context.Context, j convmem.Job) error {
	var items []convmem.ProfileItem
	var ids []string
	for _, r := range j.Results {
		mem, err := m.mem.Get(ctx, j.Cube, r.MemoryID)
		if err != nil {
			continue
		}
		items = append(items, convmem.ProfileItem{MemoryID: mem.ID, Text: mem.Text, Type: r.Type,
			Confidence: mem.Confidence, Session: j.Session})
		ids = append(ids, mem.ID)
	}
	if len(items) > 0 {
		if _, err := m.store.UpdateProfile(ctx, j.Cube, items); err != nil {
			return err
		}
	}
	if err := m.store.Consolidated(ctx, j.Cube, j.Session); err != nil && !errors.Is(err, convmem.ErrNotFound) {
		return err
	}
	if len(ids) > 0 {
		if m.hooks.Used != nil {
			m.hooks.Used(j.Cube, ids)
		}
		m.kick()
	}
	return nil
}

// extract runs the extraction of j over turns: by the served model
// (Hooks.Generate), its output held to convmem.ExtractSchema (the llama
// backend through the grammar, the Ollama backend through format), or
// extractively without a model. The model sees the turns in chunks whose
// prompt leaves at least half the context to the output (extractChunks);
// a chunk that fails (its output cut or malformed) is recorded in the
// dropped list, and the job fails only when every chunk does. The last
// raw output is kept in j.Output. ErrRetryLater and a preemption
// (context.Canceled while ctx lives) mean: run again later; ErrClosing:
// resume at the next Open.
func (m *Manager) extract(ctx context.Context, j *convmem.Job, turns []convmem.Turn) ([]convmem.Extracted, []convmem.Dropped, error) {
	an := m.store.Options().Analyzer
	if m.hooks.Generate == nil {
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
	chunks := extractChunks(turns, m.extractBytes())
	for i, ch := range chunks {
		res, err := m.hooks.Generate(ctx, Generation{Prompt: convmem.ExtractPrompt(ch), Grammar: g,
			Format: []byte(convmem.ExtractSchema), MaxTokens: convmem.MaxExtractTokens})
		if errors.Is(err, ErrRetryLater) || errors.Is(err, context.Canceled) || errors.Is(err, ErrClosing) {
			return nil, nil, err
		}
		if res != nil {
			j.Output = res.Text
		}
		if err == nil && res.Cut {
			err = fmt.Errorf("%w: cut at %d tokens (done_reason length)", convmem.ErrMalformed, res.Tokens)
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
func (m *Manager) extractBytes() int {
	if m.hooks.ContextTokens != nil {
		if n := m.hooks.ContextTokens(); n > 0 {
			return max(256, n/2)
		}
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

// AddTurns records turns in cube (RecordTurns) and, with extract, queues
// one extraction job over them; it returns at once with the stored job
// (state queued; the zero Job without extract) and the turns with their
// ids. The job runs in the background. The caller checks the cube's name
// and makes its record. Errors: storage errors.
func (m *Manager) AddTurns(ctx context.Context, cube string, turns []convmem.Turn, extract bool) (convmem.Job, []convmem.Turn, error) {
	turns, err := m.RecordTurns(ctx, cube, turns)
	if err != nil {
		return convmem.Job{}, nil, err
	}
	if !extract {
		return convmem.Job{}, turns, nil
	}
	ids := make([]string, len(turns))
	for i, t := range turns {
		ids[i] = t.ID
	}
	j := m.store.NewJob(cube, ids, "")
	if err := m.store.PutJob(ctx, j); err != nil {
		return convmem.Job{}, nil, err
	}
	m.enqueue(jobRef{cube, j.ID})
	return j, turns, nil
}

// UndoJob undoes a done extraction job: memories it added are deleted and
// memories it superseded get their previous text back as a new version,
// each only while it is still at the version the job left (a memory
// changed since is kept, and listed in the job's Dropped); the job's state
// becomes undone. Errors: convmem.ErrNotFound, ErrJobState,
// ErrUndoChanged when every memory the job wrote changed since (nothing
// undone, the job left done), storage errors.
func (m *Manager) UndoJob(ctx context.Context, cube, id string) (convmem.Job, error) {
	j, err := m.store.Job(ctx, cube, id)
	if err != nil {
		return j, err
	}
	if j.State != convmem.JobDone {
		return j, fmt.Errorf("%w: job %s is %s", ErrJobState, id, j.State)
	}
	// a job whose every write was changed since has nothing to undo:
	// refused before anything is written
	var changed []string
	writes := 0
	for _, r := range j.Results {
		if r.Op == convmem.OpSame {
			continue
		}
		writes++
		cur, err := m.mem.Get(ctx, cmp.Or(r.Cube, cube), r.MemoryID)
		if err != nil && !errors.Is(err, textmem.ErrNotFound) {
			return j, err
		}
		if err == nil && cur.Version != r.Version {
			changed = append(changed, fmt.Sprintf("memory %s changed since (version %d, the job left %d)", cur.ID, cur.Version, r.Version))
		}
	}
	if writes > 0 && len(changed) == writes {
		return j, fmt.Errorf("%w: job %s: %s", ErrUndoChanged, j.ID, strings.Join(changed, "; "))
	}
	by := "undo:" + j.ID
	why := "undo of extraction job " + j.ID
	if j.By == "feedback" {
		why = "undo of feedback job " + j.ID
	}
	for i := len(j.Results) - 1; i >= 0; i-- {
		r := j.Results[i]
		if r.Op == convmem.OpSame {
			continue
		}
		cube := cmp.Or(r.Cube, cube) // a procedure routed to the assistant's cube
		cur, err := m.mem.Get(ctx, cube, r.MemoryID)
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
			if err := m.Delete(ctx, cube, r.MemoryID, by, why); err != nil {
				return j, err
			}
		case convmem.OpSupersede:
			if _, err := m.Patch(ctx, cube, r.MemoryID, textmem.Patch{Text: &r.PrevText, Kind: &r.PrevKind, Source: &r.PrevSource},
				convmem.Change{Op: "undo", By: by, Why: why}); err != nil {
				return j, err
			}
		}
	}
	j.State, j.Undone = convmem.JobUndone, m.now().UTC()
	return j, m.store.PutJob(ctx, j)
}
