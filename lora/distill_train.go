package lora

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memosrt/memosrt/runtime/llama"
)

// DistillOptions configure Distill. Zero means the default; see
// DefaultDistillOptions.
type DistillOptions struct {
	// Out is the path of the adapter file to write. Required.
	Out string
	// Name is the adapter's general.name. Default "memosrt-distilled".
	Name string
	// Epochs is the number of passes over the datapoints (one per memory
	// and Generic more). Default 40.
	Epochs int
	// LearningRate is AdamW's alpha at the first step; it decays linearly
	// to a tenth of that at the last planned step. Default 5e-4.
	LearningRate float32
	// Rank of the written adapter: each weight delta is cut to its best
	// rank-Rank approximation (Extract). 0 (the default) keeps full rank,
	// min(n_in, n_out), which reproduces the trained weights exactly.
	Rank int
	// Threads for training. Default 2.
	Threads int
	// SampleThreads for the base model's sampling and soft labels.
	// Default 1: sampling is one-token decodes, and on 2 busy vCPUs
	// (load 9-13) two threads spinning at ggml's barrier took 165 s where
	// one took 6.4 s for the same 3 datapoints (TestDistill).
	SampleThreads int
	// Generic is the number of datapoints of text sampled from the base
	// model (from BOS, temperature 1) trained each epoch besides the
	// memories' datapoints. Default: six times as many as there are memories.
	// Negative: none.
	Generic int
	// Greedy is how many of the Generic datapoints continue greedily
	// (argmax) after their first 8 sampled tokens: the base's own
	// high-probability paths, where a greedy decode will go, still trained
	// with the base's full distributions as labels. Default (0): all of
	// them; negative: none.
	Greedy int
	// Copies is how many times each memory appears in its datapoint: at
	// position 0 and then after stretches of the base's continuation, each
	// copy starting with BOS as a new text would (the memory as seen
	// anywhere in a prompt). Default 3.
	Copies int
	// Cue is how many of each memory's first text tokens are trained with
	// the base's next-token distributions as labels instead of one-hot
	// (at most half of them): the cue a memory is recalled from, which the
	// model need not produce unprompted. One-hot labels on a memory's first
	// tokens teach the model to start memories after BOS, and that moved
	// the base's distribution most at the first positions of unrelated
	// texts. Zero: the default (see DefaultDistillOptions); negative: none,
	// every text token is one-hot.
	Cue int
	// Margin decides when a memory is known: prompted with its first half
	// (BOS and ⌈n/2⌉ of its n text tokens), each token of its second half
	// is the trained model's argmax, ahead of the runner-up by at least
	// Margin nats of log-probability (so greedy decoding recalls it).
	// After each epoch Distill checks every memory on the trained weights,
	// and a known memory's datapoint sits out the next epoch while the
	// generic datapoints and the other memories train: steps stop pushing
	// memories the weights already hold, and the base-distribution labels
	// pull the rest back toward the base. A memory that is no longer known
	// trains again. Zero: the default (see DefaultDistillOptions);
	// negative: every memory trains every epoch.
	Margin float64
	// Anchor is a weight decay toward the base weights (L2-SP, Li, Grandvalet
	// and Davidson 2018, decoupled as in AdamW): after each step every
	// trained weight w becomes w − lr·Anchor·(w − w_base), lr that step's
	// learning rate. Default 0: none.
	Anchor float32
	// Budget bounds the training time (sampling and soft labels excluded;
	// writing the training copy of an f16 or quantized base included);
	// training stops after the step that reaches it and the adapter is
	// written from what was trained (DistillResult.Truncated). 0: none.
	Budget time.Duration
	// Pause, if set, is called before each optimizer step and returns when
	// training may go on, or an error that stops it (wrapped and
	// returned; no file is written). The parametric tier waits there while
	// foreground requests are in flight, to train at background priority.
	// Time spent in Pause does not count against Budget.
	Pause func(ctx context.Context) error
	// Weights chooses the weights to train by GGUF tensor name; each must
	// be a 2-D F32 matrix llama.Trainer accepts. Default
	// DistillWeights(last block): the last block's attn_q, attn_output,
	// ffn_gate, ffn_up and ffn_down (output.weight, which moves every
	// position's logits, is left out).
	Weights func(name string) bool
	// Seed of the sampler that writes the generic text and the shuffles.
	// Default 1.
	Seed uint64
	// TempDir holds the training copy of a base whose weights to train are
	// not f32 (see TrainPlan) while the Trainer reads it. Default: the
	// directory of Out.
	TempDir string
	// KeepDeltas returns the full weight deltas in DistillResult.Deltas
	// (to extract at other ranks). Default false.
	KeepDeltas bool
	// Logger receives one debug line per epoch. Default: none.
	Logger *slog.Logger
}

// DefaultDistillOptions returns the defaults Distill uses for zero fields
// (Out stays empty; Weights stays nil and means the last block's matrices).
func DefaultDistillOptions() DistillOptions {
	return DistillOptions{Name: "memosrt-distilled", Epochs: 40, LearningRate: 5e-4, Threads: 2, SampleThreads: 1, Copies: 3, Cue: 6, Margin: 1, Seed: 1}
}

// Validate reports every problem with o at once.
func (o DistillOptions) Validate() error {
	var errs []error
	if o.Out == "" {
		errs = append(errs, errors.New("lora: DistillOptions.Out is empty"))
	}
	if o.Epochs < 0 {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.Epochs %d < 0", o.Epochs))
	}
	if o.LearningRate < 0 || o.LearningRate != o.LearningRate {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.LearningRate %g < 0", o.LearningRate))
	}
	if o.Rank < 0 {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.Rank %d < 0", o.Rank))
	}
	if o.Threads < 0 || o.SampleThreads < 0 {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.Threads %d or SampleThreads %d < 0", o.Threads, o.SampleThreads))
	}
	if o.Copies < 0 {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.Copies %d < 0", o.Copies))
	}
	if o.Anchor < 0 || o.Anchor != o.Anchor {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.Anchor %g < 0", o.Anchor))
	}
	if o.Margin != o.Margin {
		errs = append(errs, errors.New("lora: DistillOptions.Margin is NaN"))
	}
	if o.Budget < 0 {
		errs = append(errs, fmt.Errorf("lora: DistillOptions.Budget %v < 0", o.Budget))
	}
	return errors.Join(errs...)
}

func (o DistillOptions) withDefaults() DistillOptions {
	d := DefaultDistillOptions()
	if o.Name == "" {
		o.Name = d.Name
	}
	if o.Epochs == 0 {
		o.Epochs = d.Epochs
	}
	if o.LearningRate == 0 {
		o.LearningRate = d.LearningRate
	}
	if o.Threads == 0 {
		o.Threads = d.Threads
	}
	if o.SampleThreads == 0 {
		o.SampleThreads = d.SampleThreads
	}
	if o.Seed == 0 {
		o.Seed = d.Seed
	}
	if o.Copies == 0 {
		o.Copies = d.Copies
	}
	if o.Margin == 0 {
		o.Margin = d.Margin
	}
	if o.Cue == 0 {
		o.Cue = d.Cue
	}
	return o
}

// DistillWeights returns a filter choosing block blk's attn_q, attn_output,
// ffn_gate, ffn_up and ffn_down: the matrices of a block that a LoRA
// adapter can hold and that the pinned llama.cpp can train without
// back-propagating through the KV cache (only the last block's; see
// llama.Trainer).
func DistillWeights(blk int) func(string) bool {
	p := fmt.Sprintf("blk.%d.", blk)
	return func(n string) bool {
		if !strings.HasPrefix(n, p) {
			return false
		}
		switch strings.TrimPrefix(n, p) {
		case "attn_q.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight":
			return true
		}
		return false
	}
}

// DistillResult describes the adapter Distill wrote.
type DistillResult struct {
	Path    string
	Bytes   int64    // size of the adapter file
	Rank    int      // rank of its pairs (the largest, min(n_in, n_out), at full rank)
	Tensors []string // the base tensors it adapts, GGUF order
	// Epochs and Steps completed (one optimizer step per datapoint).
	Epochs, Steps int
	// Truncated is true when Budget stopped training before Epochs.
	Truncated bool
	// Known is how many memories the trained weights recall (the test of
	// DistillOptions.Margin, with margin 0 when Margin is negative) at the
	// end; Skipped counts the memory datapoints that sat out an epoch
	// because their memory was known.
	Known, Skipped int
	// LossFirst and LossLast are the mean training loss of the first and
	// last completed epoch that took a step, nats per position: cross-entropy against the
	// memory token where a memory is the label, against the base model's
	// distribution elsewhere (so it includes that distribution's entropy).
	LossFirst, LossLast float64
	// MinKept is the smallest share of a delta's squared Frobenius norm
	// that its rank-Rank pair keeps (1 at full rank).
	MinKept float64
	// Train is the wall time of the optimizer steps; Prepare that of
	// loading, writing the training copy (Copy of it), sampling the
	// generic text and the base's soft labels.
	Train, Prepare, Copy time.Duration
	// BaseType is the base file's type of the trained weights
	// (TrainPlan.BaseType); CopyBytes the size of the training copy (0:
	// the base trained as it is, f32).
	BaseType  string
	CopyBytes int64
	// Deltas are the full weight deltas (DistillOptions.KeepDeltas).
	Deltas []Delta
}

// ErrNotTrainable is returned by Distill, PlanTraining and DistillRAM
// when the base model's chosen weights cannot be trained: a type the
// pinned ggml cannot dequantize (every type it computes with can; f16
// and quantized weights train on a dequantized copy, see TrainPlan), a
// weight that is not a matrix, or weights llama.Trainer refuses (those
// that feed the KV cache). Its message names the weight and its type.
var ErrNotTrainable = errors.New("lora: base weights cannot be trained")

// Distill trains the memories into the weights of the base model at
// modelPath and writes the weight change as an ordinary GGUF LoRA adapter
// (WriteFactors) at o.Out, so that with the adapter attached the model
// continues a memory's text without the memory in the prompt.
//
// Each memory is tokenized with BOS ([1 + n_tokens]); o.Copies copies of
// it must fit half a datapoint (128 tokens). Datapoints are 257 tokens
// (llama.Trainer's NCtx 256 + 1): for each memory, o.Copies copies of it,
// the first at position 0, with the base model's own continuation
// (sampled at temperature 1) after each; and o.Generic datapoints of the
// base's text from BOS (o.Greedy of them greedy after 8 sampled tokens).
// A memory's text tokens after its first o.Cue are trained as one-hot
// labels; every other position's label is the base model's next-token
// distribution there (llama.Trainer.EpochSoft), so the rest of the loss
// is KL(p_base‖q) plus a constant: knowledge distillation toward the base
// (Hinton et al. 2015) as the regularizer that keeps generic behaviour.
// AdamW, one step per datapoint, datapoints
// shuffled each epoch, learning rate decayed linearly to a tenth. The
// delta of each trained matrix is cut to o.Rank by truncated SVD
// (Extract).
//
// The defaults are the setting measured by BenchmarkDistill on
// stories260K that meets issue 14's four bars together (20 memories of
// 10-30 tokens, 1 training thread pinned to one core): 40 epochs at
// 5e-4, 120 generic datapoints all greedy, cue 6, margin 1, the last
// block alone: memory NLL 2.371 → 1.046 nats/token (−56%), greedy recall
// of the second half from the first 20/20, and on held-out generic
// text top-1 agreement 95.4% and KL(base‖adapter) 0.0235 per position
// (issue 14 asks −50%, 80%, ≥ 95% and ≤ 0.05). They cost about three
// times the earlier defaults' training time (30 epochs at 1e-3, 40
// generic, + output.weight, no cue: −83%, 20/20, 93.1%, 0.0568 with
// greedy generic text and margin 1).
//
// A base whose weights to train are f16 or quantized trains on a
// temporary copy in o.TempDir with those weights dequantized to f32
// (TrainPlan); the delta is measured from the dequantized values, and the
// adapter is for the original file (Evaluate it there).
//
// Costs: the soft labels take NCtx×n_vocab×4 bytes per datapoint (512 KiB
// each on a 512-token vocabulary; mind large vocabularies), the Trainer a
// second, unmapped copy of the model (of the training copy for an f16 or
// quantized base; the file is removed once read). llama.Init must have
// been called.
//
// Errors: o.Validate's; ErrNotTrainable (PlanTraining's, naming the
// weight and its type) or the Trainer's refusal; an error for an empty
// memory list or memories whose copies pass 128 tokens; ctx.Err() (wrapped) when
// ctx ends, checked between steps and while sampling (no file is written
// then); llama and I/O errors wrapped.
func Distill(ctx context.Context, modelPath string, memories []string, o DistillOptions) (*DistillResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if len(memories) == 0 {
		return nil, errors.New("lora: distill: no memories")
	}
	t0 := time.Now()
	bs, err := ReadBase(modelPath)
	if err != nil {
		return nil, err
	}
	if o.Weights == nil {
		o.Weights = DistillWeights(lastBlock(bs))
	}
	plan, err := PlanTraining(modelPath, o.Weights)
	if err != nil {
		return nil, err
	}
	m, err := llama.LoadModel(modelPath, llama.ModelParams{UseMmap: true})
	if err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	defer m.Close()
	dir := o.TempDir
	if dir == "" {
		dir = filepath.Dir(o.Out)
	}
	trainPath, copyTime, err := trainingCopy(ctx, modelPath, dir, plan)
	if err != nil {
		return nil, err
	}
	tr, err := llama.NewTrainer(trainPath, llama.TrainOptions{Train: o.Weights, Threads: o.Threads, LearningRate: o.LearningRate})
	if trainPath != modelPath {
		os.Remove(trainPath) // read into memory (unmapped) or refused
	}
	if err != nil {
		if errors.Is(err, llama.ErrNotTrainable) {
			return nil, fmt.Errorf("%w: %v", ErrNotTrainable, err)
		}
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	defer tr.Close()
	n, nv := tr.NCtx(), tr.NVocab()
	ev, err := llama.NewContext(m, llama.ContextParams{NCtx: n + 1, NBatch: n + 1, Threads: o.SampleThreads})
	if err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	defer ev.Close()
	// kc evaluates the trained weights (the Trainer's own model) for the
	// memories' recall; closed before the Trainer.
	kc, err := llama.NewContext(tr.Model(), llama.ContextParams{NCtx: n + 1, NBatch: n + 1, Threads: o.SampleThreads})
	if err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	defer kc.Close()
	rng := rand.New(rand.NewPCG(o.Seed, 0x6d656d6f))

	type datapoint struct {
		seq  []llama.Token // n+1 tokens
		soft []float32     // [n][nv]: zero rows for memory labels
	}
	var data []datapoint
	// add samples a datapoint: copies of mem (BOS + text) spread over it,
	// the base's continuation between and after them. Positions whose
	// label is one of a copy's text tokens keep one-hot labels; every
	// other row is the base's distribution.
	add := func(mem []llama.Token, copies, greedyAfter, cue int) error {
		gap := (n + 1 - copies*len(mem)) / copies
		var seq []llama.Token
		var starts []int
		for c := range copies {
			starts = append(starts, len(seq))
			seq = append(seq, mem...)
			end := n + 1
			if c < copies-1 {
				end = len(seq) + gap
			}
			var err error
			if seq, err = sampleBase(ctx, ev, seq, end, greedyAfter, rng); err != nil {
				return err
			}
		}
		soft, err := baseDists(ev, seq[:n], nv)
		if err != nil {
			return err
		}
		for _, st := range starts {
			// Position j predicts seq[j+1]; the cue's tokens keep the
			// base's labels.
			clear(soft[(st+cue)*nv : (st+len(mem)-1)*nv])
		}
		data = append(data, datapoint{seq, soft})
		return nil
	}
	var mems [][]llama.Token // BOS + text of each memory
	for i, s := range memories {
		toks, err := m.Tokenize(s, true, false)
		if err != nil {
			return nil, fmt.Errorf("lora: distill: memory %d: %w", i, err)
		}
		if len(toks) < 2 || len(toks)*o.Copies > n/2 {
			return nil, fmt.Errorf("lora: distill: memory %d has %d tokens, want 1..%d after BOS (%d copies fill at most half a datapoint)", i, len(toks)-1, n/2/o.Copies-1, o.Copies)
		}
		if err := add(toks, o.Copies, n+1, min(max(o.Cue, 0), (len(toks)-1)/2)); err != nil {
			return nil, err
		}
		mems = append(mems, toks)
	}
	generic := o.Generic
	if generic == 0 {
		generic = 6 * len(memories)
	}
	greedy := o.Greedy
	if greedy == 0 {
		greedy = generic
	}
	for g := range max(generic, 0) {
		after := n + 1
		if g < greedy {
			after = 9
		}
		if err := add([]llama.Token{m.BOS()}, 1, after, 0); err != nil { // nothing hard: one BOS
			return nil, err
		}
	}
	res := &DistillResult{Path: o.Out, Prepare: time.Since(t0), MinKept: 1, Copy: copyTime, BaseType: plan.BaseType, CopyBytes: plan.CopyBytes}
	base, err := tr.Weights()
	if err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}

	t1 := time.Now().Add(-copyTime) // the copy counts against Budget
	total := o.Epochs * len(data)
	perm := make([]int, len(data))
	for i := range perm {
		perm[i] = i
	}
	skip := make([]bool, len(mems)) // memory i is known: its datapoint sits out the epoch
epochs:
	for e := range o.Epochs {
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		var loss float64
		done := 0
		for k, i := range perm {
			if i < len(mems) && skip[i] {
				res.Skipped++
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("lora: distill: %w", err)
			}
			if o.Pause != nil {
				p0 := time.Now()
				if err := o.Pause(ctx); err != nil {
					return nil, fmt.Errorf("lora: distill: %w", err)
				}
				t1 = t1.Add(time.Since(p0))
			}
			if o.Budget > 0 && time.Since(t1) >= o.Budget {
				res.Truncated = true
				if done > 0 {
					res.LossLast = loss / float64(done)
				}
				break epochs
			}
			// Linear decay from lr to lr/10 over the planned steps
			// (skipped datapoints keep their place in the schedule).
			f := 1 - 0.9*float64(e*len(perm)+k)/float64(max(total-1, 1))
			tr.SetOptimizer(o.LearningRate*float32(f), 0)
			st, err := tr.EpochSoft(ctx, [][]llama.Token{data[i].seq}, [][]float32{data[i].soft}, m.EOS())
			if err != nil {
				return nil, fmt.Errorf("lora: distill: epoch %d: %w", e, err)
			}
			if o.Anchor > 0 {
				if err := anchor(tr, base, o.LearningRate*float32(f)*o.Anchor); err != nil {
					return nil, err
				}
			}
			loss += st.Loss
			done++
			res.Steps++
		}
		if done > 0 { // an epoch with every datapoint skipped keeps the last loss
			loss /= float64(done)
			if e == 0 {
				res.LossFirst = loss
			}
			res.LossLast = loss
		}
		res.Epochs++
		known := 0
		if o.Margin >= 0 {
			for i, mem := range mems {
				if skip[i], err = recalls(kc, mem, o.Margin); err != nil {
					return nil, err
				}
				if skip[i] {
					known++
				}
			}
		}
		if o.Logger != nil {
			o.Logger.Debug("distill epoch", "epoch", e, "loss", loss, "steps", res.Steps, "known", known, "train", time.Since(t1).Round(time.Second))
		}
	}
	for _, mem := range mems {
		ok, err := recalls(kc, mem, 0)
		if err != nil {
			return nil, err
		}
		if ok {
			res.Known++
		}
	}
	res.Train = time.Since(t1)
	trained, err := tr.Weights()
	if err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	rank := o.Rank
	if rank == 0 {
		for _, w := range base {
			rank = max(rank, min(w.Shape[0], w.Shape[1]))
		}
	}
	var factors []Factor
	for i := range base {
		d := Delta{Name: base[i].Name, NIn: base[i].Shape[0], NOut: base[i].Shape[1], Base: base[i].Data, Trained: trained[i].Data}
		f, err := Extract(d, rank)
		if err != nil {
			return nil, err
		}
		// WriteFactors wants one rank: pad a smaller matrix's pair with
		// zero rows/columns (they add nothing to B·A).
		if f.Rank < rank {
			f = padRank(f, rank)
		}
		res.MinKept = min(res.MinKept, f.Kept)
		factors = append(factors, f)
		res.Tensors = append(res.Tensors, d.Name)
		if o.KeepDeltas {
			res.Deltas = append(res.Deltas, d)
		}
	}
	res.Rank = rank
	if err := WriteFactors(o.Out, bs, o.Name, factors); err != nil {
		return nil, err
	}
	fi, err := os.Stat(o.Out)
	if err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	res.Bytes = fi.Size()
	return res, nil
}

// padRank returns f with rank r ≥ f.Rank: A gains zero rows, B zero
// columns, so B·A is unchanged.
func padRank(f Factor, r int) Factor {
	a := make([]float32, r*f.NIn)
	copy(a, f.A)
	b := make([]float32, f.NOut*r)
	for o := range f.NOut {
		copy(b[o*r:o*r+f.Rank], f.B[o*f.Rank:(o+1)*f.Rank])
	}
	f.A, f.B, f.Rank = a, b, r
	return f
}

// sampleBase returns prefix extended to n tokens by sampling the base
// model at temperature 1 up to greedyAfter tokens, the argmax after that
// (c holds no adapter).
func sampleBase(ctx context.Context, c *llama.Ctx, prefix []llama.Token, n, greedyAfter int, rng *rand.Rand) ([]llama.Token, error) {
	seq := append([]llama.Token(nil), prefix...)
	c.ClearMemory()
	b := llama.NewBatch(len(prefix))
	defer b.Close()
	for i, t := range prefix {
		if err := b.Add(t, i, 0, i == len(prefix)-1); err != nil {
			return nil, err
		}
	}
	if err := c.Decode(b); err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	last := len(prefix) - 1
	var buf []float32
	p := make([]float64, 0, 512)
	for len(seq) < n {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("lora: distill: %w", err)
		}
		buf = c.Logits(last, buf)
		p = softmaxInto(p[:0], buf)
		u, tok := rng.Float64(), len(p)-1
		for i, v := range p {
			if u -= v; u < 0 {
				tok = i
				break
			}
		}
		if len(seq) >= greedyAfter {
			tok = 0
			for i, v := range p {
				if v > p[tok] {
					tok = i
				}
			}
		}
		seq = append(seq, llama.Token(tok))
		b.Clear()
		if err := b.Add(llama.Token(tok), len(seq)-1, 0, true); err != nil {
			return nil, err
		}
		if err := c.Decode(b); err != nil {
			return nil, fmt.Errorf("lora: distill: %w", err)
		}
		last = 0
	}
	return seq, nil
}

// anchor moves the Trainer's weights toward base by the share k of their
// difference.
func anchor(tr *llama.Trainer, base []llama.TrainedTensor, k float32) error {
	ws, err := tr.Weights()
	if err != nil {
		return fmt.Errorf("lora: distill: %w", err)
	}
	for i, w := range ws {
		for j, v := range w.Data {
			w.Data[j] = v - k*(v-base[i].Data[j])
		}
	}
	if err := tr.SetWeights(ws); err != nil {
		return fmt.Errorf("lora: distill: %w", err)
	}
	return nil
}

// recalls reports whether c's model recalls mem (BOS + text, n text
// tokens) from its first half: prompted with BOS and ⌈n/2⌉ tokens, each
// later token is the argmax after the tokens before it, ahead of every
// other token by at least margin nats of log-probability (the logits'
// difference), so greedy decoding reproduces the second half.
func recalls(c *llama.Ctx, mem []llama.Token, margin float64) (bool, error) {
	c.ClearMemory()
	b := llama.NewBatch(len(mem) - 1)
	defer b.Close()
	for i, t := range mem[:len(mem)-1] {
		if err := b.Add(t, i, 0, true); err != nil {
			return false, err
		}
	}
	if err := c.Decode(b); err != nil {
		return false, fmt.Errorf("lora: distill: %w", err)
	}
	var buf []float32
	for j := 1 + (len(mem)-1)/2; j < len(mem); j++ {
		buf = c.Logits(j-1, buf)
		want := buf[mem[j]]
		for v, l := range buf {
			if v != int(mem[j]) && float64(want-l) < margin || v < int(mem[j]) && l == want {
				return false, nil
			}
		}
	}
	return true, nil
}

// baseDists returns the base model's next-token distribution after each
// of toks ([len(toks)][nv]float32, rows summing to 1).
func baseDists(c *llama.Ctx, toks []llama.Token, nv int) ([]float32, error) {
	c.ClearMemory()
	b := llama.NewBatch(len(toks))
	defer b.Close()
	for i, t := range toks {
		if err := b.Add(t, i, 0, true); err != nil {
			return nil, err
		}
	}
	if err := c.Decode(b); err != nil {
		return nil, fmt.Errorf("lora: distill: %w", err)
	}
	out := make([]float32, len(toks)*nv)
	var buf []float32
	p := make([]float64, 0, nv)
	for i := range toks {
		buf = c.Logits(i, buf)
		if len(buf) != nv {
			return nil, fmt.Errorf("lora: distill: %d logits, want %d", len(buf), nv)
		}
		p = softmaxInto(p[:0], buf)
		for v, x := range p {
			out[i*nv+v] = float32(x)
		}
	}
	return out, nil
}

// softmaxInto appends softmax(l) to dst.
func softmaxInto(dst []float64, l []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range l {
		mx = max(mx, float64(v))
	}
	var z float64
	for _, v := range l {
		e := math.Exp(float64(v) - mx)
		dst = append(dst, e)
		z += e
	}
	for i := range dst {
		dst[i] /= z
	}
	return dst
}

// lastBlock returns the highest block number among b's tensors (-1: none).
func lastBlock(b Base) int {
	last := -1
	for n := range b.Shapes {
		var blk int
		if _, err := fmt.Sscanf(n, "blk.%d.", &blk); err == nil && blk > last {
			last = blk
		}
	}
	return last
}

// distillCtx is the datapoint length Distill trains on: llama.Trainer's
// NCtx (256) plus one.
const distillCtx = 257

// DistillRAM estimates the bytes Distill allocates for memories memories
// under o on the model at modelPath, before it runs: the Trainer's own
// unmapped copy of the model (the file's size, or the training copy's of
// an f16 or quantized base: TrainPlan.CopyBytes), the soft labels (one
// distillCtx × n_vocab float32 matrix per datapoint: the memories and
// o.Generic, default 6 per memory) and, per trained weight, its gradient,
// AdamW's two moments and the delta Extract reads (4 float32 copies).
// The sampling contexts, the graphs and the process itself come on top:
// BenchmarkDistill's 20 memories on stories260K estimate 72.0 MiB
// (TestDistillRAM) and peak at 115 MiB of RSS. The parametric tier takes fewer memories, or none,
// to stay within its budget. Errors: the GGUF's, a model without
// token_embd.weight, PlanTraining's (ErrNotTrainable).
func DistillRAM(modelPath string, memories int, o DistillOptions) (int64, error) {
	o = o.withDefaults()
	bs, err := ReadBase(modelPath)
	if err != nil {
		return 0, err
	}
	plan, err := PlanTraining(modelPath, o.Weights)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(modelPath)
	if err != nil {
		return 0, fmt.Errorf("lora: %w", err)
	}
	size := fi.Size()
	if plan.CopyBytes > 0 {
		size = plan.CopyBytes
	}
	emb := bs.Shapes["token_embd.weight"]
	if len(emb) < 2 {
		return 0, fmt.Errorf("lora: %s has no token_embd.weight matrix", modelPath)
	}
	nv := int64(emb[1])
	generic := o.Generic
	if generic == 0 {
		generic = 6 * memories
	}
	points := int64(memories + max(generic, 0))
	w := o.Weights
	if w == nil {
		w = DistillWeights(lastBlock(bs))
	}
	var trained int64
	for n, sh := range bs.Shapes {
		if w(n) {
			e := int64(1)
			for _, d := range sh {
				e *= int64(d)
			}
			trained += e
		}
	}
	return size + points*distillCtx*nv*4 + 4*4*trained, nil
}
