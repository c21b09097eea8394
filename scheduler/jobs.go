package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvgate"
	"github.com/memosrt/memosrt/textmem"
)

// Job kinds.
const (
	JobPromote = "promote" // text → activation: append the memory to the cube's pack
	JobDemote  = "demote"  // activation → text: drop the memory from the cube's pack
	JobRefresh = "refresh" // recompute the cube's pack: a member's text changed (Memory is "")
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
	Reason  string    `json:"reason"` // "heat", "cold", "budget", "deleted", "changed", "missing"
	Heat    float64   `json:"heat"`   // when planned
	Created time.Time `json:"created"`
}

// errRequeued is returned by runJob for a promotion that planned demotions
// to make room and was queued again behind them.
var errRequeued = errors.New("scheduler: job requeued")

// errPackTokens is wrapped (with ErrKVBudget) by runJob for a promotion
// whose memory does not fit its cube's pack's MaxPackTokens: refused
// against that pack alone, whatever the other packs' bytes.
var errPackTokens = errors.New("does not fit the pack's tokens")

// maxPendingPromotions bounds the promotions pending for one cube: plan
// enqueues the hottest memories first and no more while this many wait.
// A pack takes one memory a job, and background jobs wait while requests
// hold the KV cells (ErrDeferred), so under steady traffic the queue
// drained more slowly than heat filled it: one record per hot memory
// (5,490 of them after `make soak SOAK=30m`, docs/benchmarks.md). Plan
// reads the heat again every Tick, so a memory left out is planned later
// if it is still hot.
const maxPendingPromotions = 8

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

// errJobGone: the job was removed (its cube deleted) after it was listed.
var errJobGone = errors.New("scheduler: job gone")

// runPending runs j if it is still pending (a cube delete may have removed
// it since the Tick listed it, jobMu not held in between). Caller holds
// jobMu.
func (t *Tiers) runPending(ctx context.Context, j Job) error {
	jctx, r, end, err := t.begin(ctx, j.Cube, true)
	if errors.Is(err, ErrDeferred) {
		return err
	}
	if err != nil {
		return errJobGone // its cube is being deleted, the job with it
	}
	defer end()
	err = t.db.View(func(txn *bg.Txn) error {
		_, err := txn.Get(jobKey(j.Seq))
		return err
	})
	if errors.Is(err, bg.ErrKeyNotFound) {
		return errJobGone
	}
	if err != nil {
		return err
	}
	err = t.runJob(jctx, j)
	t.runMu.Lock()
	preempted := r.preempted
	t.runMu.Unlock()
	if err != nil && preempted && ctx.Err() == nil {
		return fmt.Errorf("%w: preempted by a promotion", ErrDeferred)
	}
	return err
}

// enqueue persists jobs whose (kind, cube, memory) is not pending yet, in
// order, leaving out promotions of a cube with maxPendingPromotions
// pending.
// On a disk too full for the write it enqueues nothing and returns an
// error wrapping datadir.ErrNoSpace.
func (t *Tiers) enqueue(ctx context.Context, jobs []Job) (int, error) {
	pending, err := t.Jobs(ctx)
	if err != nil {
		return 0, err
	}
	promotions := map[string]int{} // pending promotions by cube
	for _, p := range pending {
		if p.Kind == JobPromote {
			promotions[p.Cube]++
		}
	}
	n := 0
	err = t.db.Update(func(txn *bg.Txn) error {
		for _, j := range jobs {
			if slices.ContainsFunc(pending, func(p Job) bool { return p.Cube == j.Cube && p.Memory == j.Memory && p.Kind == j.Kind }) {
				continue
			}
			if j.Kind == JobPromote {
				if promotions[j.Cube] >= maxPendingPromotions {
					continue
				}
				promotions[j.Cube]++
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
	Planned  int // jobs added
	Done     int // jobs committed (no-ops included)
	Failed   int // jobs that failed and stay pending
	Deferred int // jobs whose KV cells were busy (ErrDeferred); they stay pending
}

// Tick plans moves from the current heat (promote at PromoteAt when the
// memory is in the text tier, demote below DemoteBelow when in the
// activation tier) and runs every pending job, older first (jobs left by an
// earlier process included). Jobs decode at background priority. A failed
// job stays pending for the next Tick unless it was refused for the budget;
// a promotion so refused is not planned again for refusalHold (a minute)
// unless the packs' bytes, its cube's pack or the budget change.
func (t *Tiers) Tick(ctx context.Context) (TickReport, error) {
	var rep TickReport
	if err := t.checkOpen(); err != nil {
		return rep, err
	}
	// jobMu is taken per job, not for the whole Tick: a Promote (a user's
	// warm) or a cube delete waits for at most the running job
	t.jobMu.Lock()
	if t.eng == nil {
		t.jobMu.Unlock()
		return rep, ErrReadOnly
	}
	jobs, err := t.plan(ctx)
	if err == nil {
		rep.Planned, err = t.enqueue(ctx, jobs)
	}
	t.jobMu.Unlock()
	if err != nil {
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
			if j.Kind == JobDistill {
				// trains beside the tier jobs, one at a time; pending until
				// it commits
				t.jobMu.Lock()
				if t.eng != nil {
					t.startDistill(j)
				}
				t.jobMu.Unlock()
				continue
			}
			t.jobMu.Lock()
			err := ErrReadOnly
			if t.eng != nil { // the model was unloaded meanwhile (SetEngine)
				err = t.runPending(ctx, j)
			}
			t.jobMu.Unlock()
			if errors.Is(err, ErrReadOnly) {
				return rep, err
			}
			switch {
			case errors.Is(err, errJobGone):
			case err == nil:
				rep.Done++
			case errors.Is(err, errRequeued):
				requeued = true
			case errors.Is(err, ErrDeferred):
				rep.Deferred++
			case errors.Is(err, ErrKVBudget):
				if t.noteRefusal(j, errors.Is(err, errPackTokens)) {
					t.log.Info("promotion refused", "cube", j.Cube, "memory", j.Memory, "err", err)
				}
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
	if _, err := t.trimTransitions(ctx); err != nil {
		errs = append(errs, fmt.Errorf("trim transitions: %w", err))
	}
	return rep, errors.Join(errs...)
}

// plan returns the moves the heat and the text tier call for now: a
// member deleted from the text tier is demoted ("deleted"), an unpinned
// member below DemoteBelow is demoted ("cold"), a memory of the text tier
// at or above PromoteAt is promoted ("heat"), and a pack whose members'
// text changed is recomputed ("changed"), as is a pack the state names but
// the KV cache no longer stores ("missing": deleted as damaged). Usage
// records of memories that no longer exist are dropped.
func (t *Tiers) plan(ctx context.Context) ([]Job, error) {
	cubes, err := t.cubes(ctx)
	if err != nil {
		return nil, err
	}
	now := t.opts.Clock.Now()
	kvTotal, err := t.kvBytes("")
	if err != nil {
		return nil, err
	}
	t.pruneRefusals(now)
	var jobs []Job
	var gone [][]byte
	for _, cube := range cubes {
		st, err := t.packState(cube)
		if err != nil {
			return nil, err
		}
		usage, err := t.usages(ctx, cube)
		if err != nil {
			return nil, err
		}
		var param []string
		if t.param.Enabled {
			var dj []Job
			if dj, param, err = t.planParametric(ctx, cube, usage, st, now); err != nil {
				return nil, err
			}
			jobs = append(jobs, dj...)
		}
		exists := func(id string) (bool, error) {
			_, err := t.mem.Get(ctx, cube, id)
			if errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrBadCube) {
				return false, nil
			}
			return err == nil, err
		}
		demoted := false
		for _, id := range st.Members {
			ok, err := exists(id)
			if err != nil {
				return nil, err
			}
			h := usage[id].Heat(t.heat, now)
			switch {
			case !ok:
				jobs = append(jobs, Job{Kind: JobDemote, Cube: cube, Memory: id, Reason: "deleted", Heat: h, Created: now})
				demoted = true
			case h < t.heat.DemoteBelow && !slices.Contains(st.Pinned, id):
				jobs = append(jobs, Job{Kind: JobDemote, Cube: cube, Memory: id, Reason: "cold", Heat: h, Created: now})
				demoted = true
			}
		}
		var ids []string
		for id := range usage {
			if id != packUse && !slices.Contains(st.Members, id) && !slices.Contains(param, id) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		var promote []Job
		for _, id := range ids {
			ok, err := exists(id)
			if err != nil {
				return nil, err
			}
			if !ok {
				gone = append(gone, usageKey(cube, id))
				continue
			}
			if h := usage[id].Heat(t.heat, now); h >= t.heat.PromoteAt && !t.promoteRefused(cube, id, st.PackID, kvTotal, now) {
				promote = append(promote, Job{Kind: JobPromote, Cube: cube, Memory: id, Reason: "heat", Heat: h, Created: now})
			}
		}
		// hottest first (ties by id): enqueue takes the first few
		slices.SortStableFunc(promote, func(a, b Job) int { return cmp.Compare(b.Heat, a.Heat) })
		jobs = append(jobs, promote...)
		if !demoted && st.PackID != "" && t.lay != nil {
			mems, err := t.loadMembers(ctx, cube, st.Members)
			if err != nil {
				return nil, err
			}
			p, err := t.lay.Pack(ctx, cube, mems)
			if err != nil {
				return nil, err
			}
			key, err := t.packKeyNow(ctx, cube)
			if err != nil {
				return nil, err
			}
			if kvcache.PackID(key, p.PackTokens) != st.PackID {
				jobs = append(jobs, Job{Kind: JobRefresh, Cube: cube, Reason: "changed", Heat: usage[packUse].Heat(t.heat, now), Created: now})
			} else if _, ok := t.kv.Info(st.PackID); !ok {
				// named but not stored (deleted as damaged by a restore or a
				// repair): packs are recomputable, so compute it again
				jobs = append(jobs, Job{Kind: JobRefresh, Cube: cube, Reason: "missing", Heat: usage[packUse].Heat(t.heat, now), Created: now})
			}
		}
	}
	budget, err := t.planBudget(ctx, now, jobs)
	if err != nil {
		return nil, err
	}
	jobs = append(jobs, budget...)
	if len(gone) > 0 {
		err := t.db.Update(func(txn *bg.Txn) error {
			for _, k := range gone {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, bg.ErrConflict) {
			return nil, err
		}
	}
	return jobs, nil
}

// refusalHold is how long plan leaves a promotion refused for the KV
// budget unplanned while nothing it was refused against changed: the
// memory's heat, which decides which cooler members it may displace, goes
// on changing without a pack changing.
const refusalHold = time.Minute

// refusal is what a promotion was refused against: the cube's pack, the
// committed packs' bytes, the budget, and when.
type refusal struct {
	packID  string
	kvTotal int64
	budget  int64
	at      time.Time
	// tokens: refused for the pack's tokens (errPackTokens), which the
	// other packs' bytes and the budget do not change
	tokens bool
}

// noteRefusal records j's promotion as refused for the KV budget against
// the packs as they are now (tokens: for its cube's pack's tokens, against
// that pack alone), and reports whether it is news (not refused against
// the same packs before), which the caller logs. Without it every
// Tick planned, laid out and refused the same promotions again, each with
// a job record written and deleted (`make soak-mix`: docs/benchmarks.md).
func (t *Tiers) noteRefusal(j Job, tokens bool) bool {
	st, err := t.packState(j.Cube)
	if err != nil {
		return true
	}
	total, err := t.kvBytes("")
	if err != nil {
		return true
	}
	r := refusal{packID: st.PackID, kvTotal: total, budget: t.opts.KVBytes, at: t.opts.Clock.Now(), tokens: tokens}
	key := j.Cube + "\x00" + j.Memory
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	if t.refused == nil {
		t.refused = map[string]refusal{}
	}
	old, seen := t.refused[key]
	t.refused[key] = r
	return !seen || old.packID != r.packID || old.tokens != r.tokens || !r.tokens && (old.kvTotal != r.kvTotal || old.budget != r.budget)
}

// promoteRefused reports whether memory id of cube was refused promotion
// within refusalHold of now against the same pack of its cube and, unless
// refused for that pack's tokens, the same committed bytes and budget.
func (t *Tiers) promoteRefused(cube, id, packID string, kvTotal int64, now time.Time) bool {
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	r, ok := t.refused[cube+"\x00"+id]
	return ok && now.Sub(r.at) < refusalHold && r.packID == packID && (r.tokens || r.kvTotal == kvTotal && r.budget == t.opts.KVBytes)
}

// pruneRefusals drops the refusals older than refusalHold (plan calls it
// once per Tick).
func (t *Tiers) pruneRefusals(now time.Time) {
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	for k, r := range t.refused {
		if now.Sub(r.at) >= refusalHold {
			delete(t.refused, k)
		}
	}
}

// planBudget returns demotions ("budget") of the coolest unpinned members,
// least heat first, while the committed packs hold more KV bytes than
// KVBytes (a refresh made a pack larger, the budget was lowered). Members
// already planned to leave are skipped.
func (t *Tiers) planBudget(ctx context.Context, now time.Time, planned []Job) ([]Job, error) {
	total, err := t.kvBytes("")
	if err != nil || total <= t.opts.KVBytes {
		return nil, err
	}
	cubes, err := t.cubes(ctx)
	if err != nil {
		return nil, err
	}
	type cand struct {
		cube, id string
		heat     float64
		bytes    int64
	}
	var cands []cand
	for _, c := range cubes {
		st, err := t.packState(c)
		if err != nil {
			return nil, err
		}
		usage, err := t.usages(ctx, c)
		if err != nil {
			return nil, err
		}
		for _, id := range st.Members {
			if slices.Contains(st.Pinned, id) || slices.ContainsFunc(planned, func(j Job) bool { return j.Cube == c && j.Memory == id }) {
				continue
			}
			cands = append(cands, cand{c, id, usage[id].Heat(t.heat, now), st.RawBytes / int64(len(st.Members))})
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		switch {
		case a.heat < b.heat:
			return -1
		case a.heat > b.heat:
			return 1
		}
		return 0
	})
	var out []Job
	for _, c := range cands {
		if total <= t.opts.KVBytes {
			break
		}
		out = append(out, Job{Kind: JobDemote, Cube: c.cube, Memory: c.id, Reason: "budget", Heat: c.heat, Created: now})
		total -= c.bytes
	}
	return out, nil
}

// packKey is the prefix-chain key of cube's tier packs: the live KV config
// under the adapter set of key adapterKey (TierOptions.Adapters), scoped to
// the cube.
func (t *Tiers) packKey(cube, adapterKey string) string {
	return kvcache.ScopedKey(kvcache.ConfigKey(t.eng.KVConfig(), adapterKey), cube)
}

// packKeyNow is packKey under cube's adapter set now.
func (t *Tiers) packKeyNow(ctx context.Context, cube string) (string, error) {
	a, err := t.adapterSet(ctx, cube)
	if err != nil {
		return "", err
	}
	a.release()
	return t.packKey(cube, a.Key), nil
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
	members, change, err := t.jobMembers(ctx, j, st)
	if err != nil {
		return err
	}
	if !change {
		return t.finish(j, nil, nil, nil)
	}
	from, to := TierText, TierActivation
	if j.Kind == JobDemote {
		from, to = TierActivation, TierText
	}
	mems, err := t.loadMembers(ctx, cube, members)
	if err != nil {
		return err
	}
	now := t.opts.Clock.Now()
	tr := &Transition{Cube: cube, Memory: j.Memory, From: from, To: to, Reason: j.Reason, Heat: j.Heat, Time: now}
	if j.Kind == JobRefresh {
		tr = nil
	}
	keep := func(ids []string) []string {
		return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !slices.Contains(members, id) })
	}
	if len(mems) == 0 {
		next := &packState{Updated: now}
		return t.finish(j, next, tr, &st)
	}
	p, err := t.lay.Pack(ctx, cube, mems)
	if err != nil {
		return err
	}
	next := &packState{Updated: now, Pinned: keep(st.Pinned), Resident: st.Resident}
	for _, m := range p.Pack {
		next.Members = append(next.Members, m.ID)
	}
	if j.Kind == JobPromote && !slices.Contains(next.Members, j.Memory) {
		// refused for good against this pack: the job goes (Tick notes
		// the refusal, so plan leaves the memory unplanned while the pack
		// stays as it is)
		if err := t.finish(j, nil, nil, nil); err != nil {
			return err
		}
		return fmt.Errorf("%w: memory %s %w (%d)", ErrKVBudget, j.Memory, errPackTokens, t.lay.Options().MaxPackTokens)
	}
	info, decoded, err := t.computePack(ctx, cube, p.PackTokens, p.Pack, false)
	if err != nil {
		return err
	}
	others, err := t.kvBytes(cube)
	if err != nil {
		return err
	}
	if others+info.RawBytes > t.opts.KVBytes && j.Kind == JobPromote {
		if info.ID != st.PackID {
			t.kv.Delete(info.ID)
		}
		if err := t.makeRoom(ctx, j, others+info.RawBytes-t.opts.KVBytes); err != nil {
			return t.finish(j, nil, nil, nil, err)
		}
		return errRequeued
	}
	// a demotion or refresh always commits (a refresh over the budget is
	// brought back under it by the next tick's budget demotions)
	if t.opts.AfterPut != nil {
		if err := t.opts.AfterPut(j); err != nil {
			return err
		}
	}
	next.PackID, next.Tokens, next.RawBytes, next.BlobBytes = info.ID, info.NTokens, info.RawBytes, info.BlobBytes
	if tr != nil {
		tr.Pack, tr.Tokens, tr.Decoded = info.ID, info.NTokens, decoded
	}
	return t.finish(j, next, tr, &st)
}

// jobMembers returns the member ids of j's cube's pack once j commits over
// the committed pack state st, before the layout fits them into
// MaxPackTokens (see layout.Layout.Pack), and false when j commits without a new
// pack: a promotion of a member or a demotion of a non-member (a job run
// twice), a demotion of a member pinned since it was planned (a warm) or,
// when planned "cold", used again since, a refresh of an empty pack, an
// unknown kind.
func (t *Tiers) jobMembers(ctx context.Context, j Job, st packState) ([]string, bool, error) {
	members := slices.Clone(st.Members)
	in := slices.Contains(members, j.Memory)
	switch j.Kind {
	case JobPromote:
		param, err := t.parametricIDs(j.Cube)
		if err != nil {
			return nil, false, err
		}
		if in || slices.Contains(param, j.Memory) { // a parametric memory stays out of the pack
			return nil, false, nil
		}
		return append(members, j.Memory), true, nil
	case JobDemote:
		if !in || j.Reason != "deleted" && slices.Contains(st.Pinned, j.Memory) {
			return nil, false, nil
		}
		if j.Reason == "cold" {
			usage, err := t.usages(ctx, j.Cube)
			if err != nil {
				return nil, false, err
			}
			if h := usage[j.Memory].Heat(t.heat, t.opts.Clock.Now()); h >= t.heat.DemoteBelow {
				return nil, false, nil
			}
		}
		return slices.DeleteFunc(members, func(id string) bool { return id == j.Memory }), true, nil
	case JobRefresh:
		return members, len(members) > 0, nil
	}
	return nil, false, nil
}

// jobPackID returns the id of the pack j stores when it runs over the
// committed pack state st (computePack's lookup key: the cube's packKey and
// the pack tokens of its members), "" when it stores none. It needs the
// engine and layout.
func (t *Tiers) jobPackID(ctx context.Context, j Job, st packState) (string, error) {
	members, change, err := t.jobMembers(ctx, j, st)
	if err != nil || !change {
		return "", err
	}
	mems, err := t.loadMembers(ctx, j.Cube, members)
	if err != nil || len(mems) == 0 {
		return "", err
	}
	p, err := t.lay.Pack(ctx, j.Cube, mems)
	if err != nil {
		return "", err
	}
	key, err := t.packKeyNow(ctx, j.Cube)
	if err != nil {
		return "", err
	}
	return kvcache.PackID(key, p.PackTokens), nil
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
// rest is decoded, in cells reserved through TierOptions.Reserve. With wait
// (a caller waits: Promote) it waits for the cells and decodes at
// foreground priority; without (tick jobs), at background priority, and
// the members mems (pack order) may be composed from their KV chunks
// (TierOptions.Compose). decoded is the tokens computed.
func (t *Tiers) computePack(ctx context.Context, cube string, toks []int32, mems []textmem.Memory, wait bool) (kvcache.Info, int, error) {
	eng, kv := t.eng, t.kv
	ad, err := t.adapterSet(ctx, cube)
	if err != nil {
		return kvcache.Info{}, 0, err
	}
	defer ad.release()
	cfg := t.packKey(cube, ad.Key)
	if i, ok := kv.Info(kvcache.PackID(cfg, toks)); ok {
		return i, 0, nil // computed by an earlier run of this job, or before
	}
	if t.opts.Reserve != nil {
		release, err := t.opts.Reserve(ctx, len(toks)+1, wait)
		if err != nil {
			return kvcache.Info{}, 0, err
		}
		defer release()
	}
	var lossy *kvcache.LossyParams
	if g := t.opts.Gate; g != nil {
		// exact until the model key is calibrated; the calibration waits
		// for this job's sequence
		key := kvgate.Key(eng.KVConfig(), ad.Key)
		lossy = g.Lossy(key)
		g.Start(key, eng)
	}
	seq, err := eng.AcquireSeq(ctx)
	if err != nil {
		return kvcache.Info{}, 0, err
	}
	defer func() {
		eng.ClearSeq(seq)
		eng.ReleaseSeq(seq)
	}()
	// with wait a caller waits for it (Promote: a user's warm): foreground,
	// as any request's prefill; queued behind background chunks it would
	// hold the pack writes and cube deletes serialised after it
	wo := kvcache.WarmOptions{Adapters: ad.Refs, Label: cube, Scope: cube, Background: !wait, Chunk: t.opts.JobChunk, Lossy: lossy}
	if f := t.opts.Compose; f != nil && !wait && ad.Key == "" && len(mems) > 0 {
		wo.Compose = func(ctx context.Context, seq, npast int) (*kvcache.Composition, int, error) {
			return f(ctx, cube, mems, toks, seq, npast)
		}
	}
	return kv.Compute(ctx, eng, seq, toks, wo)
}

// finish commits a job: the new pack state (nil: unchanged), its transition
// (nil: none) and the job's removal, in one transaction (commitNaming: the
// pack next names is stored at the commit); the replaced pack is marked for
// deletion in it and deleted after. A non-nil cause is logged. A pack
// deleted since it was computed leaves the job pending (ErrDeferred).
func (t *Tiers) finish(j Job, next *packState, tr *Transition, old *packState, cause ...error) error {
	for _, c := range cause {
		if c != nil {
			t.log.Info("job dropped", "job", j.Seq, "kind", j.Kind, "cube", j.Cube, "memory", j.Memory, "err", c)
		}
	}
	id := ""
	if next != nil {
		id = next.PackID
	}
	err := t.commitNaming(id, func(txn *bg.Txn) error {
		if next != nil {
			if err := writePack(txn, j.Cube, next, old); err != nil {
				return err
			}
		}
		if tr != nil {
			if err := t.addTransition(txn, tr); err != nil {
				return err
			}
		}
		return txn.Delete(jobKey(j.Seq))
	})
	if errors.Is(err, errPackGone) {
		// stays pending: the next tick computes the pack again
		return fmt.Errorf("%w: job %d: %w", ErrDeferred, j.Seq, err)
	}
	if err != nil {
		return fmt.Errorf("scheduler: commit job %d: %w", j.Seq, err)
	}
	if len(cause) > 0 && cause[0] != nil {
		return cause[0]
	}
	return t.collectGarbage(context.Background())
}

// writePack writes cube's pack state next in txn (deleting the key when
// next holds nothing) and marks old's pack (nil: none) for deletion when
// next no longer refers to it; next's pack is live again if a state before
// held it.
func writePack(txn *bg.Txn, cube string, next, old *packState) error {
	if len(next.Members) == 0 && next.PackID == "" {
		if err := txn.Delete([]byte(keyPack + cube)); err != nil {
			return err
		}
	} else if err := setJSON(txn, []byte(keyPack+cube), next); err != nil {
		return err
	}
	if old != nil && old.PackID != "" && old.PackID != next.PackID {
		if err := txn.Set([]byte(keyGarb+old.PackID), nil); err != nil {
			return err
		}
	}
	if next.PackID != "" {
		return txn.Delete([]byte(keyGarb + next.PackID))
	}
	return nil
}

// Promoted reports a Promote.
type Promoted struct {
	Pack     kvcache.Info // the cube's pack after the move (zero Info for none)
	Members  int          // memories in the pack
	Promoted int          // memories that entered it now
	Decoded  int          // tokens computed (the rest restored from the previous pack)
}

// Promote moves memories ids of cube into the activation tier now: they
// join the pack after its current members, in the order given, while they
// fit MaxPackTokens (the rest stay in the text tier); the pack is computed
// at foreground priority, the caller waiting (restoring the longest stored
// prefix), and its
// state, pins and one transition per memory that entered (reason) commit in
// one transaction. With pin the memories are pinned: low heat never
// demotes them (an explicit warm by the user); with resident the cube's pack
// is pinned at the resident level. It is refused with ErrKVBudget when the
// pack would pass KVBytes, and with ErrReadOnly without an engine.
func (t *Tiers) Promote(ctx context.Context, cube string, ids []string, reason string, pin, resident bool) (Promoted, error) {
	var out Promoted
	if err := t.checkOpen(); err != nil {
		return out, err
	}
	done, err := t.preempt()
	if err != nil {
		return out, err
	}
	defer done()
	t.jobMu.Lock()
	defer t.jobMu.Unlock()
	if t.eng == nil {
		return out, ErrReadOnly
	}
	ctx, _, end, err := t.begin(ctx, cube, false)
	if err != nil {
		return out, err
	}
	defer end()
	st, err := t.packState(cube)
	if err != nil {
		return out, err
	}
	param, err := t.parametricIDs(cube)
	if err != nil {
		return out, err
	}
	members := slices.Clone(st.Members)
	for _, id := range ids {
		if !slices.Contains(members, id) && !slices.Contains(param, id) {
			members = append(members, id)
		}
	}
	mems, err := t.loadMembers(ctx, cube, members)
	if err != nil {
		return out, err
	}
	p, err := t.lay.Pack(ctx, cube, mems)
	if err != nil {
		return out, err
	}
	now := t.opts.Clock.Now()
	next := &packState{Updated: now, Pinned: slices.Clone(st.Pinned), Resident: st.Resident || resident}
	for _, m := range p.Pack {
		next.Members = append(next.Members, m.ID)
		if pin && slices.Contains(ids, m.ID) && !slices.Contains(next.Pinned, m.ID) {
			next.Pinned = append(next.Pinned, m.ID)
		}
	}
	// computed (or found stored) and committed under gcMu once it is seen
	// stored; a collection that deleted the pack in between (it was garbage
	// a moment ago) makes the first try find it gone, and the second
	// computes it again
	var info kvcache.Info
	var trs []*Transition
	for try := 0; ; try++ {
		var decoded int
		info, decoded, err = t.computePack(ctx, cube, p.PackTokens, nil, true)
		if err != nil {
			return out, err
		}
		others, err := t.kvBytes(cube)
		if err != nil {
			return out, err
		}
		if others+info.RawBytes > t.opts.KVBytes {
			if info.ID != st.PackID {
				t.kv.Delete(info.ID)
			}
			return out, fmt.Errorf("%w: cube %s's pack of %d tokens needs %d bytes, %d of %d are taken",
				ErrKVBudget, cube, info.NTokens, info.RawBytes, others, t.opts.KVBytes)
		}
		next.PackID, next.Tokens, next.RawBytes, next.BlobBytes = info.ID, info.NTokens, info.RawBytes, info.BlobBytes
		usage, err := t.usages(ctx, cube)
		if err != nil {
			return out, err
		}
		trs = trs[:0]
		for _, id := range next.Members {
			if slices.Contains(st.Members, id) {
				continue
			}
			trs = append(trs, &Transition{Cube: cube, Memory: id, Pack: info.ID, From: TierText, To: TierActivation, Reason: reason,
				Heat: usage[id].Heat(t.heat, now), Time: now, Tokens: info.NTokens, Decoded: decoded})
			decoded = 0 // counted once, on the first transition
		}
		err = t.commitNaming(info.ID, func(txn *bg.Txn) error {
			if err := writePack(txn, cube, next, &st); err != nil {
				return err
			}
			for _, tr := range trs {
				if err := t.addTransition(txn, tr); err != nil {
					return err
				}
			}
			return nil
		})
		if errors.Is(err, errPackGone) && try == 0 {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("scheduler: commit promotion of %s: %w", cube, err)
		}
		break
	}
	out = Promoted{Pack: info, Members: len(next.Members), Promoted: len(trs)}
	if len(trs) > 0 {
		out.Decoded = trs[0].Decoded
	}
	return out, t.collectGarbage(context.Background())
}
