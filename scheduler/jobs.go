package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
)

// Job kinds.
const (
	JobPromote = "promote" // text → activation: append the memory to the cube's pack
	JobDemote  = "demote"  // activation → text: drop the memory from the cube's pack
)

// Job is a pending tier move, persisted under s/j/ until it commits: after a
// crash the next process runs it again. Running a job twice changes nothing
// the second time (a promote of a member or a demote of a non-member is a
// no-op), and its pack and transition commit in one Badger transaction with
// the job's deletion.
type Job struct {
	Seq     uint64    `json:"seq"`
	Kind    string    `json:"kind"`
	Cube    string    `json:"cube"`
	Memory  string    `json:"memory"`
	Reason  string    `json:"reason"` // "heat", "cold", "budget"
	Heat    float64   `json:"heat"`   // when planned
	Created time.Time `json:"created"`
}

// errRequeued is returned by runJob for a promotion that planned demotions
// to make room and was queued again behind them.
var errRequeued = errors.New("scheduler: job requeued")

func jobKey(seq uint64) []byte { return fmt.Appendf(nil, "%s%016x", keyJob, seq) }

// Jobs returns the pending jobs, oldest first.
func (t *Tiers) Jobs(ctx context.Context) ([]Job, error) {
	var out []Job
	err := t.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyJob), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var j Job
			if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &j) }); err != nil {
				return err
			}
			out = append(out, j)
		}
		return nil
	})
	return out, err
}

// enqueue persists jobs whose (kind, cube, memory) is not pending yet.
func (t *Tiers) enqueue(ctx context.Context, jobs []Job) (int, error) {
	pending, err := t.Jobs(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	err = t.db.Update(func(txn *bg.Txn) error {
		for _, j := range jobs {
			if slices.ContainsFunc(pending, func(p Job) bool { return p.Cube == j.Cube && p.Memory == j.Memory }) {
				continue
			}
			s, err := t.seq.Next()
			if err != nil {
				return err
			}
			j.Seq = s
			if err := setJSON(txn, jobKey(s), j); err != nil {
				return err
			}
			pending = append(pending, j)
			n++
		}
		return nil
	})
	return n, err
}

// TickReport says what a Tick did.
type TickReport struct {
	Planned int // jobs added
	Done    int // jobs committed (no-ops included)
	Failed  int // jobs that failed and stay pending
}

// Tick plans moves from the current heat (promote at PromoteAt when the
// memory is in the text tier, demote below DemoteBelow when in the
// activation tier) and runs every pending job, older first (jobs left by an
// earlier process included). Jobs decode at background priority. A failed
// job stays pending for the next Tick unless it was refused for the budget.
func (t *Tiers) Tick(ctx context.Context) (TickReport, error) {
	var rep TickReport
	if err := t.checkOpen(); err != nil {
		return rep, err
	}
	if t.r.eng == nil {
		return rep, errors.New("scheduler: Tick needs a Runner with an engine (not ViewRunner)")
	}
	t.jobMu.Lock()
	defer t.jobMu.Unlock()
	jobs, err := t.plan(ctx)
	if err != nil {
		return rep, err
	}
	if rep.Planned, err = t.enqueue(ctx, jobs); err != nil {
		return rep, err
	}
	var errs []error
	// a promotion that needs room requeues itself behind the demotions it
	// planned: run rounds until nothing is requeued (a few at most)
	for round := 0; round < 4; round++ {
		pending, err := t.Jobs(ctx)
		if err != nil {
			return rep, err
		}
		requeued := false
		for _, j := range pending {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			switch err := t.runJob(ctx, j); {
			case err == nil:
				rep.Done++
			case errors.Is(err, errRequeued):
				requeued = true
			case errors.Is(err, ErrKVBudget):
				t.log.Info("promotion refused", "cube", j.Cube, "memory", j.Memory, "err", err)
				rep.Done++
			default:
				rep.Failed++
				errs = append(errs, fmt.Errorf("job %d %s %s/%s: %w", j.Seq, j.Kind, j.Cube, j.Memory, err))
			}
		}
		if !requeued {
			break
		}
	}
	return rep, errors.Join(errs...)
}

// plan returns the moves the heat calls for now.
func (t *Tiers) plan(ctx context.Context) ([]Job, error) {
	cubes, err := t.cubes(ctx)
	if err != nil {
		return nil, err
	}
	now := t.opts.Clock.Now()
	var jobs []Job
	for _, cube := range cubes {
		st, err := t.packState(cube)
		if err != nil {
			return nil, err
		}
		usage, err := t.usages(ctx, cube)
		if err != nil {
			return nil, err
		}
		for _, id := range st.Members {
			if h := usage[id].Heat(t.heat, now); h < t.heat.DemoteBelow {
				jobs = append(jobs, Job{Kind: JobDemote, Cube: cube, Memory: id, Reason: "cold", Heat: h, Created: now})
			}
		}
		var ids []string
		for id := range usage {
			if id != packUse && !slices.Contains(st.Members, id) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			if h := usage[id].Heat(t.heat, now); h >= t.heat.PromoteAt {
				jobs = append(jobs, Job{Kind: JobPromote, Cube: cube, Memory: id, Reason: "heat", Heat: h, Created: now})
			}
		}
	}
	return jobs, nil
}

// runJob executes j: computes the cube's new pack, restoring the longest
// prefix of the old one and decoding only the rest at background priority,
// checks the KV budget, stores the pack and commits state, transition and
// the job's removal in one transaction. The replaced pack is deleted after.
func (t *Tiers) runJob(ctx context.Context, j Job) error {
	cube := j.Cube
	st, err := t.packState(cube)
	if err != nil {
		return err
	}
	members := slices.Clone(st.Members)
	in := slices.Contains(members, j.Memory)
	from, to := TierText, TierActivation
	switch j.Kind {
	case JobPromote:
		if !in {
			members = append(members, j.Memory)
		}
	case JobDemote:
		from, to = TierActivation, TierText
		members = slices.DeleteFunc(members, func(id string) bool { return id == j.Memory })
	default:
		return t.finish(j, nil, nil, nil)
	}
	if (j.Kind == JobPromote) == in {
		return t.finish(j, nil, nil, nil) // already done (a job run twice)
	}
	mems, err := t.loadMembers(ctx, cube, members)
	if err != nil {
		return err
	}
	now := t.opts.Clock.Now()
	tr := &Transition{Cube: cube, Memory: j.Memory, From: from, To: to, Reason: j.Reason, Heat: j.Heat, Time: now}
	if len(mems) == 0 {
		next := &packState{Updated: now}
		return t.finish(j, next, tr, &st)
	}
	p, err := t.r.BuildPack(ctx, cube, "", mems)
	if err != nil {
		return err
	}
	next := &packState{Updated: now}
	for _, m := range p.Pack {
		next.Members = append(next.Members, m.ID)
	}
	if j.Kind == JobPromote && !slices.Contains(next.Members, j.Memory) {
		return fmt.Errorf("%w: memory %s does not fit the pack's %d tokens", ErrKVBudget, j.Memory, t.r.opts.MaxPackTokens)
	}
	info, decoded, err := t.computePack(ctx, cube, p.PackTokens)
	if err != nil {
		return err
	}
	others, err := t.kvBytes(cube)
	if err != nil {
		return err
	}
	if others+info.RawBytes > t.opts.KVBytes {
		if info.ID != st.PackID {
			t.r.kv.Delete(info.ID)
		}
		if j.Kind == JobPromote {
			if err := t.makeRoom(ctx, j, others+info.RawBytes-t.opts.KVBytes); err != nil {
				return t.finish(j, nil, nil, nil, err)
			}
			return errRequeued
		}
	}
	if t.opts.afterPut != nil {
		if err := t.opts.afterPut(j); err != nil {
			return err
		}
	}
	next.PackID, next.Tokens, next.RawBytes, next.BlobBytes = info.ID, info.NTokens, info.RawBytes, info.BlobBytes
	tr.Pack, tr.Tokens, tr.Decoded = info.ID, info.NTokens, decoded
	return t.finish(j, next, tr, &st)
}

// makeRoom plans demotions of members cooler than j's memory, least heat
// first, freeing at least need bytes (estimated from each pack's bytes per
// member). It returns ErrKVBudget when even all of them would not do.
func (t *Tiers) makeRoom(ctx context.Context, j Job, need int64) error {
	cubes, err := t.cubes(ctx)
	if err != nil {
		return err
	}
	now := t.opts.Clock.Now()
	type cand struct {
		cube, id string
		heat     float64
		bytes    int64
	}
	var cands []cand
	for _, c := range cubes {
		st, err := t.packState(c)
		if err != nil {
			return err
		}
		usage, err := t.usages(ctx, c)
		if err != nil {
			return err
		}
		for _, id := range st.Members {
			if h := usage[id].Heat(t.heat, now); h < j.Heat {
				cands = append(cands, cand{c, id, h, st.RawBytes / int64(len(st.Members))})
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.heat != b.heat {
			if a.heat < b.heat {
				return -1
			}
			return 1
		}
		return 0
	})
	var jobs []Job
	for _, c := range cands {
		if need <= 0 {
			break
		}
		jobs = append(jobs, Job{Kind: JobDemote, Cube: c.cube, Memory: c.id, Reason: "budget", Heat: c.heat, Created: now})
		need -= c.bytes
	}
	if need > 0 {
		return fmt.Errorf("%w: memory %s (heat %.2f) needs %d more bytes than cooler members hold; budget %d",
			ErrKVBudget, j.Memory, j.Heat, need, t.opts.KVBytes)
	}
	// demotions run before the promotion is retried: requeue it behind them
	if _, err := t.enqueue(ctx, jobs); err != nil {
		return err
	}
	err = t.db.Update(func(txn *bg.Txn) error {
		if err := txn.Delete(jobKey(j.Seq)); err != nil {
			return err
		}
		s, err := t.seq.Next()
		if err != nil {
			return err
		}
		j.Seq = s
		return setJSON(txn, jobKey(s), j)
	})
	if err != nil {
		return err
	}
	return nil
}

// computePack returns the stored pack of toks, computing it if missing:
// the longest cached prefix is restored into a pool sequence and only the
// rest is decoded (background priority). decoded is the tokens computed.
func (t *Tiers) computePack(ctx context.Context, cube string, toks []int32) (kvcache.Info, int, error) {
	eng, kv := t.r.eng, t.r.kv
	cfg := kvcache.ScopedKey(kvcache.ConfigKey(eng.KVConfig(), ""), cube)
	id := kvcache.PackID(cfg, toks)
	if m := kv.Lookup(cfg, toks); m.ID == id && m.Tokens == len(toks) {
		for _, i := range kv.List(cube) {
			if i.ID == id {
				return i, 0, nil // computed by an earlier run of this job
			}
		}
	}
	seq, err := eng.AcquireSeq(ctx)
	if err != nil {
		return kvcache.Info{}, 0, err
	}
	defer func() {
		eng.ClearSeq(seq)
		eng.ReleaseSeq(seq)
	}()
	rs, err := kv.Restore(ctx, eng, seq, append(slices.Clone(toks), 0), kvcache.RestoreOptions{Scope: cube})
	if err != nil {
		return kvcache.Info{}, 0, err
	}
	if err := prefillBackground(ctx, eng, seq, toks, rs.Tokens, t.opts.JobChunk); err != nil {
		return kvcache.Info{}, 0, err
	}
	state, err := eng.SaveSeq(seq)
	if err != nil {
		return kvcache.Info{}, 0, err
	}
	info, err := kv.Put(ctx, kvcache.Header{KV: eng.KVConfig(), Tokens: toks, Label: cube, Scope: cube}, state)
	return info, len(toks) - rs.Tokens, err
}

// prefillBackground decodes toks[npast:] into seq (which holds toks[:npast])
// as a series of background requests of at most chunk tokens, so that a
// foreground request waits for at most one small batch of it.
func prefillBackground(ctx context.Context, eng *runtime.Engine, seq int, toks []int32, npast, chunk int) error {
	for npast < len(toks) {
		end := min(len(toks), npast+chunk)
		_, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:end], NPast: npast, PrefillOnly: true, Background: true})
		// Stopgap: the engine reports a request done before its batch loop
		// drops it from the active set, so the next request on the same seq
		// can briefly see ErrSeqBusy (reported to runtime's owner).
		for try := 0; errors.Is(err, runtime.ErrSeqBusy) && try < 100000; try++ {
			goruntime.Gosched()
			_, err = eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:end], NPast: npast, PrefillOnly: true, Background: true})
		}
		if err != nil {
			return err
		}
		npast = end
	}
	return nil
}

// finish commits a job: the new pack state (nil: unchanged), its transition
// (nil: none) and the job's removal, in one transaction; the replaced pack
// is marked for deletion in it and deleted after. A non-nil cause is logged.
func (t *Tiers) finish(j Job, next *packState, tr *Transition, old *packState, cause ...error) error {
	for _, c := range cause {
		if c != nil {
			t.log.Info("job dropped", "job", j.Seq, "kind", j.Kind, "cube", j.Cube, "memory", j.Memory, "err", c)
		}
	}
	err := t.db.Update(func(txn *bg.Txn) error {
		if next != nil {
			if len(next.Members) == 0 && next.PackID == "" {
				if err := txn.Delete([]byte(keyPack + j.Cube)); err != nil {
					return err
				}
			} else if err := setJSON(txn, []byte(keyPack+j.Cube), next); err != nil {
				return err
			}
			if old != nil && old.PackID != "" && old.PackID != next.PackID {
				if err := txn.Set([]byte(keyGarb+old.PackID), nil); err != nil {
					return err
				}
			}
		}
		if tr != nil {
			if err := t.addTransition(txn, tr); err != nil {
				return err
			}
		}
		return txn.Delete(jobKey(j.Seq))
	})
	if err != nil {
		return fmt.Errorf("scheduler: commit job %d: %w", j.Seq, err)
	}
	if len(cause) > 0 && cause[0] != nil {
		return cause[0]
	}
	return t.collectGarbage(context.Background())
}
