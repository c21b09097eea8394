package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/scheduler"
)

// UseEngine attaches the llama backend over eng, which the caller keeps
// owning (close it after Shutdown). Parallel sequences serve requests;
// ResidentPacks more hold resident packs. All are taken from the engine's
// sequence pool (Engine.TryAcquireSeq) and returned by Shutdown.
func (s *Server) UseEngine(eng *runtime.Engine, eo EngineOptions) error {
	if eng == nil || eo.Name == "" {
		return fmt.Errorf("%w: UseEngine needs an engine and a Name", ErrBadOptions)
	}
	n := eng.NSeqMax()
	if eo.ResidentPacks < 0 || eo.ResidentPacks >= n {
		return fmt.Errorf("%w: ResidentPacks %d with NSeqMax %d: need 0 <= ResidentPacks < NSeqMax", ErrBadOptions, eo.ResidentPacks, n)
	}
	if eo.Parallel == 0 {
		eo.Parallel = n - eo.ResidentPacks
	}
	if eo.Parallel < 1 || eo.Parallel+eo.ResidentPacks > n {
		return fmt.Errorf("%w: Parallel %d + ResidentPacks %d > NSeqMax %d", ErrBadOptions, eo.Parallel, eo.ResidentPacks, n)
	}
	b := &llamaBackend{s: s, eng: eng, eo: eo, kv: s.opts.KV, res: map[string]*residentPack{},
		cfgKey:   kvcache.ConfigKey(eng.KVConfig(), ""),
		writeSem: make(chan struct{}, 2)}
	b.runner = scheduler.New(eng, s.opts.Store, s.opts.KV, scheduler.Options{Logger: s.log, ChatTemplate: eo.ChatTemplate})
	b.tmpl = eo.ChatTemplate
	if b.tmpl == "" {
		b.tmpl = eng.Model().ChatTemplate()
	}
	// The server's sequences come from the engine's pool and are held until
	// close, so that other users of the pool never get them.
	var seqs []int
	for len(seqs) < eo.Parallel+eo.ResidentPacks {
		seq, ok := eng.TryAcquireSeq()
		if !ok {
			for _, q := range seqs {
				eng.ReleaseSeq(q)
			}
			return fmt.Errorf("%w: the engine's pool has %d free sequences, want Parallel %d + ResidentPacks %d",
				ErrBadOptions, len(seqs), eo.Parallel, eo.ResidentPacks)
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	b.seqs = seqs
	b.pool = newSlotPool(seqs[:eo.Parallel], s.opts.MaxQueue)
	b.resFree = slices.Clone(seqs[eo.Parallel:])
	b.info = engineModelInfo(eng, eo)
	if err := s.attach(b); err != nil {
		for _, q := range seqs {
			eng.ReleaseSeq(q)
		}
		return err
	}
	s.log.Info("llama backend ready", "model", eo.Name, "n_ctx", eng.NCtx(), "slots", eo.Parallel, "resident_slots", eo.ResidentPacks)
	return nil
}

// llamaBackend serves requests from an in-process engine.
type llamaBackend struct {
	s      *Server
	eng    *runtime.Engine
	eo     EngineOptions
	kv     *kvcache.Cache
	runner *scheduler.Runner
	pool   *slotPool
	info   modelInfo
	cfgKey string
	seqs   []int  // taken from the engine's pool, returned by close
	tmpl   string // chat template; "" for the plain layout

	// resMu guards res and resFree.
	resMu   sync.Mutex
	res     map[string]*residentPack // by cube
	resFree []int                    // reserved sequences holding no pack

	// kvMu serialises this backend's pack writes (Put, Warm, Delete):
	// kvcache's index takes a pack id twice when two Puts of the same pack
	// race, and a later Delete then leaves a dangling entry.
	kvMu sync.Mutex

	writes   sync.WaitGroup // background conversation pack writes
	pending  atomic.Int64
	writeSem chan struct{} // bounds concurrent writes; full: the write is skipped
}

// residentPack is a cube's pack held in a reserved sequence.
type residentPack struct {
	seq      int
	adapters string // adapter set the pack was computed under
	toks     []int32
	packID   string
	created  time.Time
	used     time.Time
}

func engineModelInfo(eng *runtime.Engine, eo EngineOptions) modelInfo {
	sh := eng.Shape()
	mi := modelInfo{Name: eo.Name, Size: int64(sh.SizeBytes), Digest: eng.KVConfig().ModelFingerprint,
		NCtx: eng.NCtx(), Template: eo.ChatTemplate, Modified: time.Now().UTC(),
		ParamSize: paramSize(sh.NParams), Quant: quantOf(sh.Desc)}
	if mi.Template == "" {
		mi.Template = eng.Model().ChatTemplate()
	}
	if a, ok := eng.Model().Meta("general.architecture"); ok {
		mi.Family = a
	}
	if eo.ModelPath != "" {
		if st, err := os.Stat(eo.ModelPath); err == nil {
			mi.Size, mi.Modified = st.Size(), st.ModTime().UTC()
		}
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

func (b *llamaBackend) model() modelInfo { return b.info }

// render assembles the prompt: with a cube, the system turn holding the
// pack (scheduler's layout) then the request's turns, the last user turn
// prefixed with retrieved memories; rendered with the model's chat template,
// or without one as the pack text followed by "\n"+content per turn.
func (b *llamaBackend) render(ctx context.Context, req *genRequest) (string, []int32, int, error) {
	if len(req.Context) > 0 {
		n := int32(b.eng.Shape().NVocab)
		for i, t := range req.Context {
			if t < 0 || t >= n {
				return "", nil, 0, badField(fmt.Sprintf("context[%d]", i), "token %d not in [0, %d)", t, n)
			}
		}
		text := req.Prompt
		if !req.Raw && b.tmpl != "" {
			t, err := b.eng.Model().ApplyChatTemplate(b.tmpl, []llama.ChatMessage{{Role: "user", Content: req.Prompt}}, true)
			if err != nil {
				return "", nil, 0, badField("prompt", "chat template: %v", err)
			}
			text = t
		} else if !req.Raw {
			text = "\n" + text
		}
		rt, err := b.eng.Tokenize(text, false)
		if err != nil {
			return "", nil, 0, err
		}
		return b.eng.Detokenize(req.Context) + text, append(slices.Clone(req.Context), rt...), 0, nil
	}
	if req.Raw {
		toks, err := b.eng.Tokenize(req.Prompt, true)
		return req.Prompt, toks, 0, err
	}
	msgs := req.conversation()
	var sys string
	var packToks []int32
	nMem := 0
	if req.Cube != "" {
		p, err := b.runner.Build(ctx, req.Cube, req.query())
		if err != nil {
			return "", nil, 0, err
		}
		sys, packToks, nMem = packText(p.Pack), p.PackTokens, len(p.Pack)+len(p.Retrieved)
		msgs = withRetrieved(msgs, retrievedText(p.Retrieved))
	}
	model := b.eng.Model()
	tmpl := b.tmpl
	var head, rest string
	if tmpl != "" {
		var all []llama.ChatMessage
		if req.Cube != "" {
			all = append(all, llama.ChatMessage{Role: "system", Content: sys})
		}
		for _, m := range msgs {
			all = append(all, llama.ChatMessage{Role: m.Role, Content: m.Content})
		}
		full, err := model.ApplyChatTemplate(tmpl, all, true)
		if err != nil {
			return "", nil, 0, badField("messages", "chat template: %v", err)
		}
		rest = full
		if req.Cube != "" {
			h, err := model.ApplyChatTemplate(tmpl, all[:1], false)
			if err == nil && strings.HasPrefix(full, h) {
				head, rest = h, full[len(h):]
			}
		}
	} else {
		// one turn per line; an assistant turn continues the line before
		// it, as the model wrote it, so that the next turn's prompt extends
		// the tokens the sequence holds after this one
		var sb strings.Builder
		for i, m := range msgs {
			if (i > 0 || req.Cube != "") && m.Role != "assistant" {
				sb.WriteString("\n")
			}
			sb.WriteString(m.Content)
		}
		head, rest = sys, sb.String()
	}
	var toks []int32
	if head != "" {
		ht, err := b.eng.Tokenize(head, true)
		if err != nil {
			return "", nil, 0, err
		}
		if !slices.Equal(ht, packToks) {
			b.s.log.Debug("pack tokens differ from the scheduler's; warmed packs will not match", "cube", req.Cube)
		}
		rt, err := b.eng.Tokenize(rest, false)
		if err != nil {
			return "", nil, 0, err
		}
		toks = append(ht, rt...)
	} else {
		t, err := b.eng.Tokenize(rest, true)
		if err != nil {
			return "", nil, 0, err
		}
		toks = t
	}
	return head + rest, toks, nMem, nil
}

func promptField(req *genRequest) string {
	if req.Messages != nil {
		return "messages"
	}
	return "prompt"
}

func (b *llamaBackend) generate(ctx context.Context, req *genRequest) (genResult, error) {
	var out genResult
	rendered, toks, nMem, err := b.render(ctx, req)
	if err != nil {
		return out, err
	}
	out.PromptTokens, out.Memories, out.Rendered = len(toks), nMem, rendered
	if req.RenderOnly {
		return out, nil
	}
	limit := b.eng.NCtx()
	if req.NumCtx > 0 && req.NumCtx < limit {
		limit = req.NumCtx // served by the loaded context: no reload
	}
	if len(toks) == 0 {
		return out, badField(promptField(req), "empty prompt")
	}
	if len(toks) >= limit {
		return out, badField(promptField(req), "prompt is %d tokens, context is %d (num_ctx %d, loaded n_ctx %d)", len(toks), limit, req.NumCtx, b.eng.NCtx())
	}
	maxTok := req.NumPredict
	if maxTok <= 0 {
		maxTok = b.s.opts.DefaultNumPredict
	}
	if maxTok <= 0 || maxTok > limit-len(toks) {
		maxTok = limit - len(toks)
	}
	ad, err := b.adapters(ctx, req.Cube, req.Adapters)
	if err != nil {
		return out, err
	}
	defer ad.release()
	out.Adapters = ad.key
	scope := scopeOf(req.Cube, ad.key)
	sl, resN, err := b.pool.acquire(ctx, toks, scope)
	if err != nil {
		return out, err
	}
	defer b.pool.release(sl)
	npast, source, prev, err := b.prepare(ctx, sl, toks, resN, req.Cube, ad)
	sl.scope = scope
	if err != nil {
		sl.toks = nil
		return out, err
	}
	sp := req.Sampling
	sp.Grammar = req.Grammar
	if sp.RepeatLastN == repeatWholeContext {
		sp.RepeatLastN = limit
	}
	res, gerr := b.run(ctx, runtime.Request{Seq: sl.seq, Tokens: toks, NPast: npast, Sampling: sp,
		MaxTokens: maxTok, Stop: req.Stop, OnText: req.OnText, Start: req.Start, Adapters: ad.refs})
	out.Text, out.EvalTokens, out.TTFT, out.PromptTime, out.EvalTime, out.DoneReason =
		res.Text, res.EvalTokens, res.TTFT, res.PrefillTime, res.EvalTime, res.DoneReason
	out.CachedTokens, out.CacheSource = res.CachedTokens, source
	// what the sequence holds now: a prefix of prompt + generated tokens
	all := append(slices.Clip(toks), res.Tokens...)
	held := b.eng.SeqLen(sl.seq)
	if held > len(all) {
		b.eng.ClearSeq(sl.seq)
		held = 0
	}
	sl.toks = all[:held]
	out.Context = make([]int, held)
	for i, t := range sl.toks {
		out.Context[i] = int(t)
	}
	if gerr != nil {
		return out, gerr
	}
	if req.Persist && b.kv != nil && !b.s.opts.NoPersist && held >= b.s.opts.MinPersistTokens {
		b.persist(sl, req.Cube, prev, ad)
	}
	return out, nil
}

// run is Engine.Generate, retried while the engine still lists the
// sequence's previous request: a finished job leaves the engine's active set
// only after the batch step it finished in, so a slot reused at once can
// meet runtime.ErrSeqBusy for up to one step.
func (b *llamaBackend) run(ctx context.Context, req runtime.Request) (runtime.Result, error) {
	for wait := 50 * time.Microsecond; ; wait *= 2 {
		res, err := b.eng.Generate(ctx, req)
		if !errors.Is(err, runtime.ErrSeqBusy) || wait > time.Second {
			return res, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		}
	}
}

// retryBusy runs f while it fails with runtime.ErrSeqBusy (see run).
func retryBusy(ctx context.Context, f func() error) error {
	for wait := 50 * time.Microsecond; ; wait *= 2 {
		err := f()
		if !errors.Is(err, runtime.ErrSeqBusy) || wait > time.Second {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// prepare makes sl's sequence hold the longest available prefix of toks
// (at most len(toks)-1 tokens): what the slot already holds, the cube's
// resident pack's cells shared into it, or a pack of the cube restored from
// the activation tier. Only state of the request's own cube is reused (see
// slot.scope). It returns the prefix length, its source, and the id of the
// conversation pack the state continues ("" if none).
func (b *llamaBackend) prepare(ctx context.Context, sl *slot, toks []int32, resN int, cube string, ad adapterSet) (int, string, string, error) {
	usable := len(toks) - 1
	best, source, prev := min(resN, usable), "", ""
	if best > 0 {
		source = "resident"
		if continues(best, len(sl.toks)) {
			prev = sl.convPack
		}
	}
	b.resMu.Lock()
	var rp *residentPack
	rpN := 0
	if r, ok := b.res[cube]; ok && cube != "" && r.adapters == ad.key {
		rp, rpN = r, min(commonPrefix(r.toks, toks), usable)
	}
	if rp != nil && rpN > best {
		err := b.eng.ClearSeq(sl.seq)
		if err == nil {
			err = b.eng.CopySeq(rp.seq, sl.seq, 0, rpN)
		}
		rp.used = time.Now()
		b.resMu.Unlock()
		sl.convPack = ""
		if err != nil {
			return 0, "", "", err
		}
		return rpN, "shared", "", nil
	}
	b.resMu.Unlock()
	if b.kv != nil {
		if m := b.kv.Lookup(kvcache.ScopedKey(ad.cfgKey, cube), toks); min(m.Tokens, usable) > best && b.packInScope(m.ID, cube) {
			var rs kvcache.Restored
			err := retryBusy(ctx, func() error {
				var err error
				rs, err = b.kv.Restore(ctx, b.eng, sl.seq, toks, kvcache.RestoreOptions{AdapterKey: ad.key, Scope: cube})
				return err
			})
			sl.convPack = ""
			if err != nil {
				return 0, "", "", err
			}
			if rs.Tokens > 0 {
				if continues(rs.Tokens, rs.PackTotal) {
					prev = rs.PackID
				}
				return rs.Tokens, "restored", prev, nil
			}
			return 0, "", "", nil
		}
	}
	if best == 0 {
		sl.convPack = ""
	}
	return best, source, prev, nil
}

// continues reports whether a new state sharing n tokens with an old one
// of total tokens continues that conversation (then the old conversation
// pack is dropped once the new one is stored): at least 3/4 shared. A
// branch from an early turn keeps the old pack.
func continues(n, total int) bool { return total > 0 && 4*n >= 3*total }

// persist saves sl's state as a conversation pack in the background (the
// state is copied now, so the slot is free again at once) and then drops
// prev, the pack the new state extends. Skipped when two writes are already
// running.
func (b *llamaBackend) persist(sl *slot, cube, prev string, ad adapterSet) {
	select {
	case b.writeSem <- struct{}{}:
	default:
		b.s.log.Debug("conversation pack skipped: writes busy", "seq", sl.seq)
		return
	}
	state, err := b.eng.SaveSeq(sl.seq)
	if err != nil {
		<-b.writeSem
		b.s.log.Warn("conversation state not saved", "seq", sl.seq, "err", err)
		return
	}
	toks := slices.Clone(sl.toks)
	id := kvcache.PackID(kvcache.ScopedKey(ad.cfgKey, cube), toks)
	sl.convPack = id
	b.writes.Add(1)
	b.pending.Add(1)
	go func() {
		defer func() { b.pending.Add(-1); <-b.writeSem; b.writes.Done() }()
		start := time.Now()
		b.kvMu.Lock()
		defer b.kvMu.Unlock()
		if b.hasPack(id) {
			return // the same conversation state is stored already
		}
		info, err := b.kv.Put(context.Background(), kvcache.Header{KV: b.eng.KVConfig(), AdapterKey: ad.key, Tokens: toks, Label: "conv:" + cube, Scope: cube}, state)
		if err != nil {
			b.s.log.Warn("conversation pack not stored", "cube", cube, "err", err)
			return
		}
		if prev != "" && prev != info.ID && b.isConv(prev) {
			if err := b.kv.Delete(prev); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
				b.s.log.Warn("old conversation pack not deleted", "pack", prev, "err", err)
			}
		}
		b.s.log.Debug("conversation pack stored", "cube", cube, "pack", info.ID[:12], "n_tokens", info.NTokens,
			"blob_bytes", info.BlobBytes, "ms", time.Since(start).Milliseconds())
	}()
}

func (b *llamaBackend) hasPack(id string) bool {
	for _, p := range b.kv.List("") {
		if p.ID == id {
			return true
		}
	}
	return false
}

// packInScope reports whether pack id belongs to cube: labelled cube or
// "conv:"+cube. kvcache's lookup is not scoped; a pack of another cube is
// treated as a miss (a shorter pack of this cube is then not found).
func (b *llamaBackend) packInScope(id, cube string) bool {
	for _, p := range b.kv.List("") {
		if p.ID == id {
			return p.Label == "conv:"+cube || cube != "" && p.Label == cube
		}
	}
	return false
}

// isConv reports whether pack id is a conversation pack.
func (b *llamaBackend) isConv(id string) bool {
	for _, p := range b.kv.List("") {
		if p.ID == id {
			return strings.HasPrefix(p.Label, "conv:")
		}
	}
	return false
}

func (b *llamaBackend) embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	var vecs [][]float32
	var err error
	if e := b.s.opts.Embedder; e != nil {
		vecs, err = e.Embed(ctx, texts)
	} else {
		vecs, err = b.eng.Embed(ctx, texts) // the loaded model, mean-pooled
	}
	if err != nil {
		return nil, 0, err
	}
	n := 0
	for _, t := range texts {
		if toks, err := b.eng.Tokenize(t, false); err == nil {
			n += len(toks)
		}
	}
	return vecs, n, nil
}

func (b *llamaBackend) warm(ctx context.Context, cube string, resident bool) (packStatus, error) {
	if b.kv == nil {
		return packStatus{}, fmt.Errorf("%w: no activation tier (KV cache)", ErrNotSupported)
	}
	start := time.Now()
	p, err := b.runner.Build(ctx, cube, "")
	if err != nil {
		return packStatus{}, err
	}
	ad, err := b.adapters(ctx, cube, nil) // the cube's default adapters
	if err != nil {
		return packStatus{}, err
	}
	defer ad.release()
	wo := kvcache.WarmOptions{Label: cube, Scope: cube, Background: true, Adapters: ad.refs}
	if len(p.PackTokens) == 0 {
		return packStatus{}, badField("cube", "cube %s renders an empty pack", cube)
	}
	if !resident {
		sl, _, err := b.pool.acquire(ctx, p.PackTokens, scopeOf(cube, ad.key))
		if err != nil {
			return packStatus{}, err
		}
		b.kvMu.Lock()
		err = retryBusy(ctx, func() error {
			_, err := b.kv.Warm(ctx, b.eng, sl.seq, p.PackTokens, wo)
			return err
		})
		b.kvMu.Unlock()
		sl.toks, sl.convPack, sl.scope = nil, "", scopeOf(cube, ad.key)
		if err == nil {
			sl.toks = slices.Clone(p.PackTokens)
		}
		b.pool.release(sl)
		if err != nil {
			return packStatus{}, err
		}
	} else {
		if b.eo.ResidentPacks == 0 {
			return packStatus{}, badField("resident", "no resident slots (start the server with --resident N)")
		}
		seq := b.takeResidentSeq(cube)
		b.kvMu.Lock()
		var info kvcache.Info
		err := retryBusy(ctx, func() error {
			var err error
			info, err = b.kv.Warm(ctx, b.eng, seq, p.PackTokens, wo)
			return err
		})
		b.kvMu.Unlock()
		b.resMu.Lock()
		if err != nil {
			b.eng.ClearSeq(seq)
			b.resFree = append(b.resFree, seq)
		} else {
			now := time.Now()
			b.res[cube] = &residentPack{seq: seq, adapters: ad.key, toks: slices.Clone(p.PackTokens), packID: info.ID, created: now, used: now}
		}
		b.resMu.Unlock()
		if err != nil {
			return packStatus{}, err
		}
	}
	st, err := b.packs(cube)
	st.Memories = len(p.Pack)
	st.WarmMs = float64(time.Since(start).Microseconds()) / 1e3
	return st, err
}

// takeResidentSeq returns a reserved sequence for cube's pack: the one it
// holds already, a free one, or the least recently used one (evicted).
func (b *llamaBackend) takeResidentSeq(cube string) int {
	b.resMu.Lock()
	defer b.resMu.Unlock()
	if r, ok := b.res[cube]; ok {
		delete(b.res, cube)
		return r.seq
	}
	if n := len(b.resFree); n > 0 {
		seq := b.resFree[n-1]
		b.resFree = b.resFree[:n-1]
		return seq
	}
	var lru string
	for c, r := range b.res {
		if lru == "" || r.used.Before(b.res[lru].used) {
			lru = c
		}
	}
	seq := b.res[lru].seq
	delete(b.res, lru)
	b.s.log.Info("resident pack evicted", "cube", lru, "seq", seq)
	return seq
}

func (b *llamaBackend) packs(cube string) (packStatus, error) {
	st := packStatus{Cube: cube, NCtx: b.eng.NCtx(), Packs: []packInfo{}}
	if b.kv != nil {
		for _, label := range []string{cube, "conv:" + cube} {
			for _, i := range b.kv.List(label) {
				st.Packs = append(st.Packs, packInfo{ID: i.ID, Label: i.Label, NTokens: i.NTokens, RawBytes: i.RawBytes,
					BlobBytes: i.BlobBytes, InRAM: i.InRAM, Created: i.Created})
			}
		}
	}
	slices.SortFunc(st.Packs, func(a, b packInfo) int { return a.Created.Compare(b.Created) })
	b.resMu.Lock()
	defer b.resMu.Unlock()
	if r, ok := b.res[cube]; ok {
		st.Resident = &resident{Seq: r.seq, Tokens: len(r.toks), PackID: r.packID, Created: r.created}
	}
	for _, r := range b.res {
		st.ResidentCells += len(r.toks)
	}
	return st, nil
}

func (b *llamaBackend) dropCube(cube string) {
	b.pool.forget(cube)
	b.resMu.Lock()
	defer b.resMu.Unlock()
	if r, ok := b.res[cube]; ok {
		delete(b.res, cube)
		b.eng.ClearSeq(r.seq)
		b.resFree = append(b.resFree, r.seq)
	}
}

func (b *llamaBackend) stats() backendStats {
	st := backendStats{Kind: "llama", NCtx: b.eng.NCtx(), Slots: b.pool.size(), BusySlots: b.pool.busy(),
		Queued: b.pool.queued(), PendingWrites: int(b.pending.Load())}
	st.EngineActive, st.EngineQueued = b.eng.Queue()
	b.resMu.Lock()
	for _, r := range b.res {
		st.ResidentCells += len(r.toks)
	}
	b.resMu.Unlock()
	return st
}

// close waits for background pack writes, then returns the sequences to
// the engine's pool (emptied). Requests have ended (Server.Shutdown).
func (b *llamaBackend) close(ctx context.Context) error {
	done := make(chan struct{})
	go func() { b.writes.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.resMu.Lock()
	seqs := b.seqs
	b.seqs = nil
	b.res = map[string]*residentPack{}
	b.resMu.Unlock()
	for _, q := range seqs {
		b.eng.ClearSeq(q)
		b.eng.ReleaseSeq(q)
	}
	return nil
}

// adapterSet is a request's leased LoRA adapters and the keys KV state is
// valid under.
type adapterSet struct {
	refs   []runtime.AdapterRef
	key    string // runtime.AdapterKey(refs), "" for none
	cfgKey string // kvcache.ConfigKey of the live KV config and key
	lease  *lora.Lease
}

func (a adapterSet) release() { a.lease.Release() }

// adapters leases specs in cube (nil: the cube's defaults) from the
// EngineOptions.Adapters manager.
func (b *llamaBackend) adapters(ctx context.Context, cube string, specs []lora.Spec) (adapterSet, error) {
	none := adapterSet{cfgKey: b.cfgKey}
	man := b.eo.Adapters
	if man == nil {
		if len(specs) > 0 {
			return none, badField("adapters", "this server has no LoRA adapters (runtime loaded without them)")
		}
		return none, nil
	}
	l, err := man.Acquire(ctx, cube, specs)
	if err != nil {
		return none, err
	}
	if len(l.Refs) == 0 {
		l.Release()
		return none, nil
	}
	key := l.Key()
	return adapterSet{refs: l.Refs, key: key, cfgKey: kvcache.ConfigKey(b.eng.KVConfig(), key), lease: l}, nil
}

// scopeOf is the slot scope of a cube under an adapter set: state computed
// with other adapters is not valid for this request.
func scopeOf(cube, adapterKey string) string {
	if adapterKey == "" {
		return cube
	}
	return cube + "\x00" + adapterKey
}
