package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/internal/safepath"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/textmem"
)

// The parametric tier (issue 14): memories that stay hot are distilled
// into the cube's LoRA adapter (lora.Distill), which is then attached to
// the cube's requests by default; they leave the pack.
const (
	TierParametric = "parametric" // distilled into the cube's default LoRA adapter
	// JobDistill trains the cube's adapter from its parametric members and
	// the memories eligible now (Memory is ""). It runs beside the tier
	// jobs, never under their lock: a pack job or a Promote never waits
	// for a training run.
	JobDistill = "distill"
	// keyParam + cube holds the cube's paramState, JSON.
	keyParam = "s/a/"
	// kindTurn is the Kind of recorded chat turns (memosrt's turn
	// recording): conversation, not knowledge to train in.
	kindTurn = "turn"
)

// ParametricOptions configure the parametric tier. It is off unless
// Enabled: training takes minutes of CPU per cube.
type ParametricOptions struct {
	Enabled bool
	// HeatAt is the heat H at which a memory starts to count as hot; it
	// stays hot while its heat is at least KeepAbove (the hysteresis of the
	// activation tier: heat decays between uses, so a steadily used memory
	// dips under H after each pause). A memory pinned in the pack (a
	// user's warm) counts as hot. Default Heat.PromoteAt.
	HeatAt float64
	// KeepAbove is the heat under which a hot memory stops being hot (its
	// hot-since time is forgotten). Default Heat.DemoteBelow: a memory is
	// distilled after For in the activation tier without being demoted.
	KeepAbove float64
	// For is the horizon D: how long a memory stays hot before it is
	// distilled. Default 7 days.
	For time.Duration
	// Max is the most memories one cube's adapter holds; the hottest are
	// taken first. Default 32.
	Max int
	// Dir holds the adapter files, Dir/<cube>/v<version>.gguf. Required
	// when Enabled.
	Dir string
	// Name is the adapter's name in the cube's registry scope. Default
	// "distilled".
	Name string
	// Distill configures training (Out is set per job). Threads default
	// 1; Budget (training time per job) default 1 hour, after which the
	// adapter trained so far goes to the gate.
	Distill lora.DistillOptions
	// MaxRAM bounds a job's allocations as lora.DistillRAM estimates them
	// before it runs: the coolest memories wait for a later version until
	// the estimate fits; a job whose one memory does not fit fails (and is
	// recorded). Default 1 GiB.
	MaxRAM int64
	// Gate is the quality check a trained adapter passes before it
	// replaces the cube's previous one (lora.Evaluate).
	Gate lora.GateOptions
	// OnChange, if set, is called after a distillation of cube ended
	// (attached, refused or failed; not cancelled): the owner of the tick
	// loop (memosrt.OS) ticks soon, so the pack leaves the distilled
	// members without waiting for a period.
	OnChange func(cube string)
}

func (o ParametricOptions) withDefaults(h HeatOptions) ParametricOptions {
	if o.HeatAt == 0 {
		o.HeatAt = h.PromoteAt
	}
	if o.KeepAbove == 0 {
		o.KeepAbove = min(h.DemoteBelow, o.HeatAt)
	}
	if o.For == 0 {
		o.For = 7 * 24 * time.Hour
	}
	if o.Max <= 0 {
		o.Max = 32
	}
	if o.Name == "" {
		o.Name = "distilled"
	}
	if o.Distill.Threads == 0 {
		o.Distill.Threads = 1
	}
	if o.Distill.Budget == 0 {
		o.Distill.Budget = time.Hour
	}
	if o.MaxRAM <= 0 {
		o.MaxRAM = 1 << 30
	}
	return o
}

// paramState is a cube's parametric tier, persisted under s/a/<cube>.
type paramState struct {
	// Members are the memory ids the attached adapter was trained on;
	// Digests the SHA-256 of each one's text then.
	Members []string          `json:"members,omitempty"`
	Digests map[string]string `json:"digests,omitempty"`
	// HotSince is, for each hot memory (not a member: reached HeatAt and
	// not under KeepAbove at any Tick since), the first Tick it was hot.
	HotSince map[string]time.Time `json:"hot_since,omitempty"`
	// Version counts trained adapters (the file is Dir/<cube>/v<Version>.gguf).
	Version int    `json:"version"`
	Adapter string `json:"adapter,omitempty"` // registry RefName of the attached version; "" when none
	Path    string `json:"path,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	// Eval is the gate's measurement of the last trained adapter (attached
	// or refused); Seconds its training and gate time; BaseType the base
	// model's type of the trained weights (lora.TrainPlan.BaseType).
	Eval     *lora.Evaluation `json:"eval,omitempty"`
	BaseType string           `json:"base_type,omitempty"`
	Seconds  float64          `json:"seconds,omitempty"`
	// FailedAt and Failure: the last run that did not attach an adapter
	// (refused by the gate, or failed); no run starts before FailedAt+For
	// unless the members change.
	FailedAt time.Time `json:"failed_at,omitzero"`
	Failure  string    `json:"failure,omitempty"`
	Updated  time.Time `json:"updated"`
}

// Parametric is a cube's parametric tier as State reports it.
type Parametric struct {
	Adapter    string           `json:"adapter,omitempty"` // "<name>@<sha12>", attached by default; "" when none
	Version    int              `json:"version"`
	Members    int              `json:"members"`
	Bytes      int64            `json:"bytes,omitempty"`
	Eval       *lora.Evaluation `json:"eval,omitempty"`
	BaseType   string           `json:"base_type,omitempty"` // the served model's type of the weights distillation trains ("q8_0+f16")
	Seconds    float64          `json:"seconds,omitempty"`
	Failure    string           `json:"failure,omitempty"`
	FailedAt   time.Time        `json:"failed_at,omitzero"`
	Distilling bool             `json:"distilling,omitempty"`
}

func digest(text string) string {
	s := sha256.Sum256([]byte(text))
	return hex.EncodeToString(s[:])
}

func (t *Tiers) paramState(cube string) (paramState, error) {
	var ps paramState
	err := t.db.View(func(txn *bg.Txn) error {
		_, err := getJSON(txn, []byte(keyParam+cube), &ps)
		return err
	})
	return ps, err
}

// parametricIDs returns cube's parametric members (nil when the tier is off).
func (t *Tiers) parametricIDs(cube string) ([]string, error) {
	if !t.param.Enabled {
		return nil, nil
	}
	ps, err := t.paramState(cube)
	return ps.Members, err
}

// planParametric is plan's part for the parametric tier, with jobMu held:
// a member deleted or changed since it was distilled retires the cube's
// adapter now (its record leaves the registry, so no request attaches it
// from this Tick on; the members go back to the text tier, recorded), the
// hot-since times are brought up to date, and a JobDistill is returned
// when some memory has been hot for For (and the last failed run is older
// than For). usage is the cube's usage records, st its pack state. It
// returns the jobs and the cube's parametric members after the retirement.
func (t *Tiers) planParametric(ctx context.Context, cube string, usage map[string]Usage, st packState, now time.Time) ([]Job, []string, error) {
	o := t.param
	ps, err := t.paramState(cube)
	if err != nil {
		return nil, nil, err
	}
	if ps.HotSince == nil {
		ps.HotSince = map[string]time.Time{}
	}
	hot0 := maps.Clone(ps.HotSince)
	var stale []Transition
	for _, id := range ps.Members {
		m, err := t.mem.Get(ctx, cube, id)
		reason := ""
		switch {
		case errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrBadCube):
			reason = "deleted"
		case err != nil:
			return nil, nil, err
		case digest(m.Text) != ps.Digests[id]:
			reason = "changed"
		}
		if reason != "" {
			stale = append(stale, Transition{Cube: cube, Memory: id, From: TierParametric, To: TierText, Reason: reason,
				Heat: usage[id].Heat(t.heat, now), Time: now})
		}
	}
	var trs []Transition
	retrain := map[string]bool{}
	if len(stale) > 0 {
		// never answer from stale weights: the adapter goes now; the other
		// members go back to the text tier too (retrained below, without
		// the stale ones, as they are still hot)
		if err := t.retire(ctx, cube, ps); err != nil {
			return nil, nil, err
		}
		trs = stale
		for _, id := range ps.Members {
			if !slices.ContainsFunc(stale, func(tr Transition) bool { return tr.Memory == id }) {
				trs = append(trs, Transition{Cube: cube, Memory: id, From: TierParametric, To: TierText, Reason: "retrained",
					Heat: usage[id].Heat(t.heat, now), Time: now})
			}
		}
		// the unchanged members are trained again at once (this Tick's
		// job), hot or not now
		for _, tr := range trs[len(stale):] {
			ps.HotSince[tr.Memory] = now.Add(-o.For)
			retrain[tr.Memory] = true
		}
		ps.Members, ps.Digests, ps.Adapter, ps.Path, ps.Bytes = nil, nil, "", "", 0
		ps.FailedAt, ps.Failure = time.Time{}, ""
	}
	// hot since: every memory with usage or pinned, not a member
	cands := map[string]bool{}
	for id := range usage {
		if id != packUse {
			cands[id] = true
		}
	}
	for _, id := range st.Pinned {
		cands[id] = true
	}
	eligible := len(retrain) > 0
	for id := range ps.HotSince {
		if !cands[id] && !retrain[id] {
			delete(ps.HotSince, id)
		}
	}
	for id := range cands {
		if slices.Contains(ps.Members, id) {
			delete(ps.HotSince, id)
			continue
		}
		if retrain[id] {
			continue
		}
		h := usage[id].Heat(t.heat, now)
		_, was := ps.HotSince[id]
		hot := h >= o.HeatAt || was && h >= o.KeepAbove || slices.Contains(st.Pinned, id)
		if hot {
			m, err := t.mem.Get(ctx, cube, id)
			if errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrBadCube) || err == nil && m.Kind == kindTurn {
				hot = false
			} else if err != nil {
				return nil, nil, err
			}
		}
		if !hot {
			delete(ps.HotSince, id)
			continue
		}
		since, ok := ps.HotSince[id]
		if !ok {
			ps.HotSince[id], since = now, now
		}
		if !now.Before(since.Add(o.For)) {
			eligible = true
		}
	}
	if len(trs) > 0 || !maps.Equal(hot0, ps.HotSince) {
		ps.Updated = now
		err := t.db.Update(func(txn *bg.Txn) error {
			if err := setJSON(txn, []byte(keyParam+cube), ps); err != nil {
				return err
			}
			for i := range trs {
				if err := t.addTransition(txn, &trs[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		for _, tr := range trs {
			t.log.Info("parametric memory left the adapter", "cube", cube, "memory", tr.Memory, "reason", tr.Reason)
		}
	}
	if !eligible || !ps.FailedAt.IsZero() && now.Before(ps.FailedAt.Add(o.For)) {
		return nil, ps.Members, nil
	}
	return []Job{{Kind: JobDistill, Cube: cube, Reason: "heat", Created: now}}, ps.Members, nil
}

// retire removes cube's adapter record (requests stop attaching it) and
// its file. The record goes first: a crash after it leaves a file only.
func (t *Tiers) retire(ctx context.Context, cube string, ps paramState) error {
	if ps.Adapter == "" {
		return nil
	}
	if err := t.reg.Remove(ctx, cube, t.param.Name); err != nil && !errors.Is(err, lora.ErrNotFound) {
		return fmt.Errorf("scheduler: retire adapter of cube %s: %w", cube, err)
	}
	if ps.Path != "" {
		if err := os.Remove(ps.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.log.Warn("retired adapter file not removed", "path", ps.Path, "err", err)
		}
	}
	t.log.Info("adapter retired", "cube", cube, "adapter", ps.Adapter)
	return nil
}

// startDistill runs the distill job j in the background unless one is
// running already (one training run at a time; j stays pending until it
// commits).
func (t *Tiers) startDistill(j Job) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.distilling != nil || t.deleting[j.Cube] > 0 || t.eng == nil {
		return
	}
	eng := t.eng
	model := eng.Options().ModelPath
	ctx, cancel := context.WithCancel(t.bg)
	r := &runningJob{cube: j.Cube, job: true, cancel: cancel, done: make(chan struct{})}
	t.distilling = r
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := t.runDistill(ctx, j, model, eng.Foreground)
		t.runMu.Lock()
		t.distilling = nil
		t.runMu.Unlock()
		cancel()
		close(r.done)
		if ctx.Err() != nil {
			t.log.Info("distillation cancelled; it stays pending", "cube", j.Cube, "err", err)
			return
		}
		if err != nil {
			t.log.Warn("distillation failed", "cube", j.Cube, "err", err)
		}
		// the pack without the distilled members, under the new adapter
		t.Kick()
		if t.param.OnChange != nil {
			t.param.OnChange(j.Cube)
		}
	}()
}

// cancelDistill cancels a running distillation (of cube, or any with "")
// and waits for it. It stays pending.
func (t *Tiers) cancelDistill(cube string) {
	t.runMu.Lock()
	r := t.distilling
	t.runMu.Unlock()
	if r != nil && (cube == "" || r.cube == cube) {
		r.cancel()
		<-r.done
	}
}

// distillSet returns the memories the cube's next adapter holds: its
// current members that are unchanged, then the memories hot for For, the
// hottest first, at most Max; each with its text's digest.
func (t *Tiers) distillSet(ctx context.Context, cube string, ps paramState, now time.Time) ([]textmem.Memory, error) {
	usage, err := t.usages(ctx, cube)
	if err != nil {
		return nil, err
	}
	cur, err := t.loadMembers(ctx, cube, ps.Members)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(cur, func(m textmem.Memory) bool { return digest(m.Text) != ps.Digests[m.ID] })
	var ids []string
	for id, since := range ps.HotSince {
		if !now.Before(since.Add(t.param.For)) && !slices.Contains(ps.Members, id) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		hi, hj := usage[ids[i]].Heat(t.heat, now), usage[ids[j]].Heat(t.heat, now)
		if hi != hj {
			return hi > hj
		}
		return ids[i] < ids[j]
	})
	hot, err := t.loadMembers(ctx, cube, ids)
	if err != nil {
		return nil, err
	}
	out = append(out, hot[:min(len(hot), max(t.param.Max-len(out), 0))]...)
	return out, nil
}

// runDistill trains, checks and attaches the cube's next adapter (job j),
// without jobMu: training takes minutes and pack jobs go on meanwhile. The
// commit takes jobMu and gives up (the job is dropped; the next Tick plans
// again) when the cube's memories or parametric state changed during
// training.
//
// Training waits before each optimizer step while foreground() (the
// engine's foreground requests in flight) is above 0, unless
// Distill.Pause is set.
func (t *Tiers) runDistill(ctx context.Context, j Job, model string, foreground func() int) error {
	cube := j.Cube
	now := t.opts.Clock.Now()
	ps, err := t.paramState(cube)
	if err != nil {
		return err
	}
	mems, err := t.distillSet(ctx, cube, ps, now)
	if err != nil {
		return err
	}
	if len(mems) == 0 {
		return t.finishDistill(j, nil, nil)
	}
	ver := ps.Version + 1
	now0 := now
	// untrainable weights: said once per model file; memories stay put
	plan, err := lora.PlanTraining(model, t.param.Distill.Weights)
	if errors.Is(err, lora.ErrNotTrainable) {
		t.runMu.Lock()
		first := !t.untrainable[model]
		t.untrainable[model] = true
		t.runMu.Unlock()
		if first {
			t.log.Warn("parametric tier: this model cannot be trained; hot memories stay in the activation tier", "model", model, "err", err)
		}
		return t.finishDistill(j, func(p *paramState) { p.FailedAt, p.Failure = now0, err.Error() }, nil)
	} else if err != nil {
		return err
	}
	for {
		need, err := lora.DistillRAM(model, len(mems), t.param.Distill)
		if err != nil {
			return err
		}
		if need <= t.param.MaxRAM {
			break
		}
		if len(mems) == 1 {
			why := fmt.Sprintf("RAM: one memory needs an estimated %d bytes (lora.DistillRAM), the budget is %d", need, t.param.MaxRAM)
			t.log.Warn("distillation refused", "cube", cube, "why", why)
			return t.finishDistill(j, func(p *paramState) { p.Version, p.FailedAt, p.Failure = ver, now0, why }, nil)
		}
		mems = mems[:len(mems)-1] // the coolest waits for a later version
	}
	texts := make([]string, len(mems))
	for i, m := range mems {
		texts[i] = m.Text
	}
	dir, err := safepath.Join(t.param.Dir, cube)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	out := filepath.Join(dir, fmt.Sprintf("v%d.gguf", ver))
	o := t.param.Distill
	o.Out = out
	if o.Pause == nil {
		o.Pause = func(ctx context.Context) error {
			for foreground() > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
			return nil
		}
	}
	if o.Name == "" {
		o.Name = "memosrt-" + cube
	}
	t0 := time.Now()
	t.log.Info("distilling", "cube", cube, "version", ver, "memories", len(mems))
	res, err := lora.Distill(ctx, model, texts, o)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fail := func(why string, ev *lora.Evaluation) error {
		os.Remove(out)
		t.log.Warn("distilled adapter not attached", "cube", cube, "version", ver, "why", why)
		return t.finishDistill(j, func(p *paramState) {
			p.Version, p.FailedAt, p.Failure, p.Eval, p.Seconds, p.BaseType = ver, now, why, ev, time.Since(t0).Seconds(), plan.BaseType
		}, nil)
	}
	if err != nil {
		return fail(err.Error(), nil)
	}
	ev, err := lora.Evaluate(ctx, model, out, texts, t.param.Gate)
	if ctx.Err() != nil {
		os.Remove(out)
		return ctx.Err()
	}
	if err != nil {
		return fail(err.Error(), nil)
	}
	if !ev.Passed {
		return fail("quality gate: "+ev.Reason, &ev)
	}
	secs := time.Since(t0).Seconds()
	// commit, with jobMu: no pack job or Promote reads the pack state
	// between the check below and the transaction
	t.jobMu.Lock()
	defer t.jobMu.Unlock()
	if err := ctx.Err(); err != nil {
		os.Remove(out)
		return err
	}
	cur, err := t.paramState(cube)
	if err != nil {
		return err
	}
	digests := map[string]string{}
	for _, m := range mems {
		now, err := t.mem.Get(ctx, cube, m.ID)
		if err != nil || now.Text != m.Text {
			os.Remove(out)
			t.log.Info("distilled adapter dropped: a memory changed during training", "cube", cube, "memory", m.ID)
			return t.finishDistill(j, nil, nil)
		}
		digests[m.ID] = digest(m.Text)
	}
	if cur.Adapter != ps.Adapter || !slices.Equal(cur.Members, ps.Members) {
		os.Remove(out)
		t.log.Info("distilled adapter dropped: the parametric tier changed during training", "cube", cube)
		return t.finishDistill(j, nil, nil)
	}
	rec, err := t.reg.Add(ctx, lora.AddRequest{Name: t.param.Name, Cube: cube, Path: out, Default: true, Replace: true})
	if err != nil {
		os.Remove(out)
		return fmt.Errorf("scheduler: register adapter: %w", err)
	}
	st, err := t.packState(cube)
	if err != nil {
		return err
	}
	usage, err := t.usages(ctx, cube)
	if err != nil {
		return err
	}
	at := t.opts.Clock.Now()
	var trs []Transition
	ids := make([]string, len(mems))
	for _, id := range ps.Members {
		if !slices.ContainsFunc(mems, func(m textmem.Memory) bool { return m.ID == id }) {
			// left out for the RAM budget (it shrank): back to the text tier
			trs = append(trs, Transition{Cube: cube, Memory: id, From: TierParametric, To: TierText, Reason: "budget",
				Heat: usage[id].Heat(t.heat, at), Time: at})
		}
	}
	for i, m := range mems {
		ids[i] = m.ID
		if slices.Contains(ps.Members, m.ID) {
			continue
		}
		from := TierText
		if slices.Contains(st.Members, m.ID) {
			from = TierActivation
		}
		trs = append(trs, Transition{Cube: cube, Memory: m.ID, From: from, To: TierParametric, Reason: "distilled",
			Heat: usage[m.ID].Heat(t.heat, at), Time: at})
	}
	// the members leave the pack: the next Tick recomputes it without them
	// (and under the new adapter: its key holds the file's SHA-256)
	var nextPack *packState
	if slices.ContainsFunc(st.Members, func(id string) bool { return slices.Contains(ids, id) }) {
		np := st
		np.Members = slices.DeleteFunc(slices.Clone(st.Members), func(id string) bool { return slices.Contains(ids, id) })
		np.Pinned = slices.DeleteFunc(slices.Clone(st.Pinned), func(id string) bool { return slices.Contains(ids, id) })
		np.Updated = at
		if len(np.Members) == 0 {
			np = packState{Updated: at}
		}
		nextPack = &np
	}
	old := cur.Path
	err = t.finishDistill(j, func(p *paramState) {
		p.Members, p.Digests, p.Version = ids, digests, ver
		p.Adapter, p.Path, p.Bytes = rec.RefName(), out, res.Bytes
		p.Eval, p.Seconds, p.FailedAt, p.Failure, p.BaseType = &ev, secs, time.Time{}, "", plan.BaseType
		for _, id := range ids {
			delete(p.HotSince, id)
		}
	}, func(txn *bg.Txn) error {
		for i := range trs {
			if err := t.addTransition(txn, &trs[i]); err != nil {
				return err
			}
		}
		if nextPack == nil {
			return nil
		}
		return writePack(txn, cube, nextPack, &st)
	})
	if err != nil {
		return err
	}
	if old != "" && old != out {
		if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.log.Warn("replaced adapter file not removed", "path", old, "err", err)
		}
	}
	t.log.Info("memories distilled", "cube", cube, "adapter", rec.RefName(), "memories", len(ids), "base_type", plan.BaseType,
		"nll_base", ev.NLLBase, "nll_adapter", ev.NLLAdapter, "top1", ev.Top1, "kl", ev.KL, "seconds", secs)
	return t.collectGarbage(context.Background())
}

// finishDistill commits j's end: edit applied to the cube's parametric
// state (nil: unchanged), more writes, and the job's removal, in one
// transaction.
func (t *Tiers) finishDistill(j Job, edit func(*paramState), more func(*bg.Txn) error) error {
	err := t.db.Update(func(txn *bg.Txn) error {
		if edit != nil {
			var ps paramState
			if _, err := getJSON(txn, []byte(keyParam+j.Cube), &ps); err != nil {
				return err
			}
			edit(&ps)
			ps.Updated = t.opts.Clock.Now()
			if err := setJSON(txn, []byte(keyParam+j.Cube), ps); err != nil {
				return err
			}
		}
		if more != nil {
			if err := more(txn); err != nil {
				return err
			}
		}
		return txn.Delete(jobKey(j.Seq))
	})
	if err != nil {
		return fmt.Errorf("scheduler: commit distillation %d: %w", j.Seq, err)
	}
	return nil
}

// parametricView is cube's parametric tier for State.
func (t *Tiers) parametricView(cube string) (*Parametric, []string, error) {
	if !t.param.Enabled {
		return nil, nil, nil
	}
	ps, err := t.paramState(cube)
	if err != nil {
		return nil, nil, err
	}
	t.runMu.Lock()
	busy := t.distilling != nil && t.distilling.cube == cube
	t.runMu.Unlock()
	return &Parametric{Adapter: ps.Adapter, Version: ps.Version, Members: len(ps.Members), Bytes: ps.Bytes, Eval: ps.Eval,
		BaseType: ps.BaseType, Seconds: ps.Seconds, Failure: ps.Failure, FailedAt: ps.FailedAt, Distilling: busy}, ps.Members, nil
}

// deleteParametric removes cube's adapter record and files (DeleteCube);
// the caller deletes the state key.
func (t *Tiers) deleteParametric(ctx context.Context, cube string) error {
	if !t.param.Enabled {
		return nil
	}
	if err := t.reg.Remove(ctx, cube, t.param.Name); err != nil && !errors.Is(err, lora.ErrNotFound) && !errors.Is(err, lora.ErrBadName) {
		return fmt.Errorf("scheduler: delete cube %s: %w", cube, err)
	}
	dir, err := safepath.Join(t.param.Dir, cube)
	if err != nil {
		return fmt.Errorf("scheduler: delete cube %s: %w", cube, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("scheduler: delete cube %s: %w", cube, err)
	}
	return nil
}
