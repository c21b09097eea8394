package llama

/*
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include "llama.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-opt.h"

// What the parameter filter compares against and records: C memory owned
// by the Trainer, so llama.cpp never holds a Go pointer.
typedef struct {
	int n;
	char **names;                       // [n] tensor names chosen in Go
	const struct ggml_tensor **found;   // [n] the model's tensors, set by the filter
} memosrt_filter;

static inline bool memosrt_filter_cb(const struct ggml_tensor *t, void *ud) {
	memosrt_filter *f = (memosrt_filter *)ud;
	for (int i = 0; i < f->n; i++) {
		if (strcmp(t->name, f->names[i]) == 0) {
			f->found[i] = t;
			return true;
		}
	}
	return false;
}

// Optimizer parameters read from a C struct the Trainer owns and may change
// between epochs (learning rate schedule).
static inline struct ggml_opt_optimizer_params memosrt_opt_pars(void *ud) {
	return *(struct ggml_opt_optimizer_params *)ud;
}

static inline void memosrt_opt_init(struct llama_context *ctx, struct llama_model *m, memosrt_filter *f, struct ggml_opt_optimizer_params *p, int sgd) {
	struct llama_opt_params lp;
	memset(&lp, 0, sizeof(lp));
	lp.n_ctx_train = 0; // the context's n_ctx
	lp.param_filter = memosrt_filter_cb;
	lp.param_filter_ud = f;
	lp.get_opt_pars = memosrt_opt_pars;
	lp.get_opt_pars_ud = p;
	lp.optimizer_type = sgd ? GGML_OPT_OPTIMIZER_TYPE_SGD : GGML_OPT_OPTIMIZER_TYPE_ADAMW;
	llama_opt_init(ctx, m, lp);
}

static inline void memosrt_tensor_get(const struct ggml_tensor *t, void *dst, size_t n) {
	ggml_backend_tensor_get(t, dst, 0, n);
}

static inline void memosrt_tensor_set(struct ggml_tensor *t, const void *src, size_t n) {
	ggml_backend_tensor_set(t, src, 0, n);
}

// The trainer's eval callback (llama_context_params.cb_eval, called by
// ggml_backend_sched_compute_splits) repairs one fault of the pinned ggml:
// ggml-alloc may compute GGML_OP_RMS_NORM_BACK in place over its src[0]
// (the incoming gradient dz, when that has no other consumer), but the CPU
// kernel copies x into dst before it reads dz again, so dz is lost and the
// gradient below every RMS norm is wrong. The callback asks the scheduler
// to stop after every GGML_OP_MUL node (in llama's graphs dz is the MUL of
// the norm's weight backward) and records them; when an in-place
// rms_norm_back is next and its dz is such a finished node, the callback
// computes the right dx into scratch memory first (x, a forward tensor,
// is finished too) and writes it over the kernel's result afterwards. A
// dz that is not a finished MUL is reported (err 1), never ignored.
#define MEMOSRT_FIX_RING 64
typedef struct {
	float *buf;   // [n_rows][ne0] dx computed before the node runs
	size_t cap;   // floats allocated in buf
	const struct ggml_tensor *pending; // the node buf belongs to
	const struct ggml_tensor *done[MEMOSRT_FIX_RING]; // MUL nodes computed, latest graph
	int ndone;    // entries written to done (mod MEMOSRT_FIX_RING)
	long fixed;   // nodes repaired so far
	int err;      // 1: a node whose sources are not known to be final, or an unexpected layout; 2: out of memory; 3: soft labels of the wrong shape
	// Soft labels (Trainer.EpochSoft): before each cross-entropy loss node
	// the callback overwrites the rows of its labels tensor that soft_rows
	// marks with the rows of soft for datapoint soft_next (then advances).
	const float *soft;               // [soft_n][soft_ctx][soft_vocab], NULL: one-hot labels only
	const unsigned char *soft_rows;  // [soft_n][soft_ctx], 1: replace that position's label
	int soft_n, soft_ctx, soft_vocab;
	int soft_next;                   // datapoints whose loss was computed so far in this epoch
	long zeroed;                     // gradient accumulators zeroed so far (see memosrt_fix_cb)
} memosrt_fix;

// dx of y = x/rms(x), rms(x) = sqrt(mean(x²) + eps), for one row:
// dx = (dz − x·mean(x·dz)/(mean(x²) + eps)) / rms(x) (RMSNorm, Zhang and
// Sennrich 2019; the derivative of x·(mean(x²)+eps)^(−1/2)).
static inline void memosrt_rms_norm_back_row(int n, float eps, const float *dz, const float *x, float *dx) {
	double sxx = 0, sxdz = 0;
	for (int i = 0; i < n; i++) {
		sxx += (double)x[i] * x[i];
		sxdz += (double)x[i] * dz[i];
	}
	double meps = sxx / n + eps;
	double r = 1.0 / sqrt(meps);
	double c = (sxdz / n) / meps;
	for (int i = 0; i < n; i++) {
		dx[i] = (float)(r * (dz[i] - x[i] * c));
	}
}

static inline bool memosrt_fix_done(const memosrt_fix *f, const struct ggml_tensor *t) {
	int n = f->ndone < MEMOSRT_FIX_RING ? f->ndone : MEMOSRT_FIX_RING;
	for (int i = 0; i < n; i++) {
		if (f->done[i] == t) return true;
	}
	return false;
}

static inline bool memosrt_fix_cb(struct ggml_tensor *t, bool ask, void *ud) {
	memosrt_fix *f = (memosrt_fix *)ud;
	bool broken = t->op == GGML_OP_RMS_NORM_BACK && t->src[0] != NULL && t->src[1] != NULL && t->data == t->src[0]->data;
	if (!ask) {
		if (t->op == GGML_OP_MUL) {
			f->done[f->ndone % MEMOSRT_FIX_RING] = t;
			f->ndone++;
		}
		if (broken && f->pending == t) {
			memcpy(t->data, f->buf, (size_t)ggml_nelements(t) * sizeof(float));
			f->pending = NULL;
			f->fixed++;
		}
		return true;
	}
	if (t->op == GGML_OP_MUL) {
		return true;
	}
	if (t->op == GGML_OP_ADD && t->src[0] != NULL && t->view_src == t->src[0] && t->src[0]->op == GGML_OP_NONE &&
		t->src[0]->view_src == NULL && strncmp(t->name, "grad for ", 9) == 0) {
		// The first in-place add into a weight's gradient accumulator in
		// this step: zero the accumulator first. ggml-opt gives a weight
		// an accumulator whenever graphs are not static (llama.cpp's are
		// rebuilt per step) and resets it only when opt_period > 1, via
		// the previous step's graph, which it has already dropped; so in
		// the pinned ggml every step's gradient was the sum of all
		// gradients since the first step. Nothing reads the accumulator
		// before this node, so zeroing it before the range runs is safe.
		memset(t->src[0]->data, 0, ggml_nbytes(t->src[0]));
		f->zeroed++;
		return false;
	}
	if (t->op == GGML_OP_CROSS_ENTROPY_LOSS && f->soft != NULL) {
		// The labels are a graph input, set (one-hot) before the graph
		// is computed; this runs before the loss node and its backward.
		struct ggml_tensor *l = t->src[1];
		int i = f->soft_next++;
		if (l == NULL || i >= f->soft_n || l->type != GGML_TYPE_F32 || !ggml_is_contiguous(l) ||
			l->ne[0] != f->soft_vocab || l->ne[1] != f->soft_ctx || ggml_nelements(l) != (int64_t)f->soft_vocab * f->soft_ctx) {
			f->err = 3;
			return false;
		}
		size_t nv = (size_t)f->soft_vocab;
		for (int r = 0; r < f->soft_ctx; r++) {
			if (f->soft_rows[(size_t)i * f->soft_ctx + r]) {
				memcpy((float *)l->data + (size_t)r * nv, f->soft + ((size_t)i * f->soft_ctx + r) * nv, nv * sizeof(float));
			}
		}
		return false;
	}
	if (!broken) {
		return false;
	}
	const struct ggml_tensor *dz = t->src[0], *x = t->src[1];
	if (!memosrt_fix_done(f, dz) || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t) || !ggml_is_contiguous(dz) ||
		!ggml_is_contiguous(x) || ggml_nelements(dz) != ggml_nelements(t) || ggml_nelements(x) != ggml_nelements(t)) {
		f->err = 1;
		return false;
	}
	size_t n = (size_t)ggml_nelements(t);
	if (n > f->cap) {
		float *nb = (float *)realloc(f->buf, n * sizeof(float));
		if (nb == NULL) {
			f->err = 2;
			return false;
		}
		f->buf = nb;
		f->cap = n;
	}
	float eps;
	memcpy(&eps, t->op_params, sizeof(float));
	int ne0 = (int)t->ne[0];
	size_t rows = n / (size_t)ne0;
	for (size_t r = 0; r < rows; r++) {
		memosrt_rms_norm_back_row(ne0, eps, (const float *)dz->data + r * ne0, (const float *)x->data + r * ne0, f->buf + r * ne0);
	}
	f->pending = t;
	return true;
}

// memosrt_train_ctx creates the training context with the repair callback
// and a persistent threadpool (the scheduler computes the graph in pieces,
// and without a pool ggml-cpu would start and join its threads per piece).
static inline struct llama_context *memosrt_train_ctx(struct llama_model *m, int n_ctx, int threads, memosrt_fix *f, struct ggml_threadpool **pool) {
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = n_ctx;
	cp.n_batch = n_ctx;
	cp.n_ubatch = n_ctx;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	cp.type_k = GGML_TYPE_F32;
	cp.type_v = GGML_TYPE_F32;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.no_perf = true;
	cp.cb_eval = memosrt_fix_cb;
	cp.cb_eval_user_data = f;
	struct llama_context *c = llama_init_from_model(m, cp);
	*pool = NULL;
	if (c != NULL && threads > 1) {
		struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
		*pool = ggml_threadpool_new(&tpp);
		if (*pool != NULL) {
			llama_attach_threadpool(c, *pool, *pool);
		}
	}
	return c;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unsafe" // unsafe: the cgo boundary; dataset buffers and tensors are copied between C and Go memory here only.

	"github.com/ollama/ollama/fs/ggml"
)

// Training errors.
var (
	// ErrNotTrainable is returned by NewTrainer when a chosen weight is not
	// F32 (quantized and F16 weights cannot be trained by ggml-opt), is one
	// llama.cpp never trains (token_embd.weight, rope_freqs.weight), feeds
	// the KV cache (see Trainer), or when the filter chooses no weight.
	ErrNotTrainable = errors.New("llama: weight cannot be trained")
	// ErrTrain is returned when llama.cpp does not offer a chosen weight to
	// the optimizer, or a dataset is malformed (a sequence longer than
	// NCtx()+1 tokens, none at all, a token outside the vocabulary).
	ErrTrain = errors.New("llama: training failed")
)

// TrainOptions configure a Trainer. Zero means the default.
type TrainOptions struct {
	// Train chooses the weights to train by GGUF tensor name
	// ("blk.0.attn_q.weight"). Required.
	Train func(name string) bool
	// NCtx is the tokens per datapoint; llama.cpp rounds it up to a
	// multiple of 256. Default 256.
	NCtx int
	// Threads for the forward and backward graphs. Default 2.
	Threads int
	// LearningRate is AdamW's alpha. Default 1e-3.
	LearningRate float32
	// WeightDecay is AdamW's decoupled weight decay (0 disables; the default).
	WeightDecay float32
	// SGD selects plain stochastic gradient descent (ggml-opt's
	// GGML_OPT_OPTIMIZER_TYPE_SGD: w ← w·(1 − lr·wd) − lr·g) instead of
	// AdamW. With it one step at a known learning rate exposes the gradient
	// (g = −Δw/lr), which the gradient tests use.
	SGD bool
}

// TrainedTensor is one trained weight: Data is [Shape[1]][Shape[0]]float32
// (ne0 fastest, as in GGUF), copied into Go memory.
type TrainedTensor struct {
	Name  string
	Shape [2]int // ne0, ne1
	Data  []float32
}

// EpochStats are llama.cpp's figures for one epoch (ggml_opt_result).
type EpochStats struct {
	Loss     float64 // mean cross-entropy per token, nats
	LossUnc  float64 // its standard error
	Accuracy float64 // fraction of positions whose argmax is the label
	NData    int     // datapoints
}

// Trainer fine-tunes chosen F32 weights of its own copy of a model in
// process with llama.cpp's training API (llama_opt_init, llama_opt_epoch;
// AdamW from ggml-opt, cross-entropy on every position of every
// datapoint). It loads the model separately (not memory-mapped, since the
// weights are written) because llama_opt_init changes the model's
// n_ctx_train.
//
// Only weights no cached K or V depends on train: the last block's attn_q,
// attn_output, ffn_gate, ffn_up, ffn_down, ffn_norm, and output.weight,
// output_norm.weight. llama_opt_epoch in the pinned llama.cpp builds the
// inference graph, which writes K and V into the KV cache with
// ggml_set_rows; ggml's backward pass aborts on that write once it depends
// on a trained weight (llama.cpp issue 16258, fixed upstream by a
// training graph without the cache). NewTrainer refuses other weights.
//
// The Trainer's context repairs one fault of the pinned ggml that made
// every gradient below an RMS norm wrong (see memosrt_fix_cb): ggml-alloc
// runs rms_norm_back in place over its incoming gradient, which the CPU
// kernel overwrites before reading it. Its eval callback stops the
// scheduler before those nodes and recomputes them. TestTrainerGradient checks each trainable weight's gradient
// against central finite differences of the loss. The same callback zeroes
// each weight's gradient accumulator before a step adds into it: the
// pinned ggml-opt never resets them for llama.cpp's per-step graphs, so
// every step used the sum of all gradients so far (TestTrainerEpochSoft
// checks a repeated step is the same step), and it writes
// EpochSoft's soft labels.
// Not safe for concurrent use; Close frees every C object.
type Trainer struct {
	model  *Model
	ctx    *Ctx
	filter *C.memosrt_filter
	pars   *C.struct_ggml_opt_optimizer_params
	names  []string
	nCtx   int
	nVocab int
	sgd    bool
	fix    *C.memosrt_fix // C memory of the eval callback that repairs rms_norm_back
}

// NewTrainer loads the GGUF model at path for training the weights o.Train
// chooses. It refuses, with ErrNotTrainable, a chosen weight that is not
// F32 before llama.cpp sees it.
func NewTrainer(path string, o TrainOptions) (_ *Trainer, err error) {
	if o.Train == nil {
		return nil, fmt.Errorf("%w: TrainOptions.Train is nil", ErrNotTrainable)
	}
	if o.NCtx <= 0 {
		o.NCtx = 256
	}
	if o.Threads <= 0 {
		o.Threads = 2
	}
	if o.LearningRate <= 0 {
		o.LearningRate = 1e-3
	}
	names, err := trainableNames(path, o.Train)
	if err != nil {
		return nil, err
	}
	m, err := LoadModel(path, ModelParams{UseMmap: false})
	if err != nil {
		return nil, err
	}
	t := &Trainer{model: m, names: names, sgd: o.SGD}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	t.fix = (*C.memosrt_fix)(C.calloc(1, C.size_t(unsafe.Sizeof(C.memosrt_fix{}))))
	m.mu.RLock()
	var pool *C.struct_ggml_threadpool
	c := C.memosrt_train_ctx(m.m, C.int(o.NCtx), C.int(o.Threads), t.fix, &pool)
	m.mu.RUnlock()
	if c == nil {
		return nil, fmt.Errorf("%w: training context n_ctx=%d", ErrContext, o.NCtx)
	}
	t.ctx = &Ctx{c: c, model: m, pool: pool, nVocab: int(C.llama_vocab_n_tokens(m.vocab))}
	t.nCtx = t.ctx.NCtx()
	t.nVocab = t.ctx.nVocab
	// llama_opt_epoch computes through the scheduler without setting the
	// CPU backend's thread count and pool; one decode sets both.
	b := NewBatch(1)
	defer b.Close()
	if err := b.Add(m.BOS(), 0, 0, true); err != nil {
		return nil, err
	}
	if err := t.ctx.Decode(b); err != nil {
		return nil, fmt.Errorf("%w: warm-up decode: %v", ErrTrain, err)
	}
	t.ctx.ClearMemory()

	t.filter = (*C.memosrt_filter)(C.calloc(1, C.size_t(unsafe.Sizeof(C.memosrt_filter{}))))
	t.filter.n = C.int(len(names))
	t.filter.names = (**C.char)(C.calloc(C.size_t(len(names)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	t.filter.found = (**C.struct_ggml_tensor)(C.calloc(C.size_t(len(names)), C.size_t(unsafe.Sizeof((*C.struct_ggml_tensor)(nil)))))
	cnames := unsafe.Slice(t.filter.names, len(names))
	for i, n := range names {
		cnames[i] = C.CString(n) // freed by Close
	}
	t.pars = (*C.struct_ggml_opt_optimizer_params)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_ggml_opt_optimizer_params{}))))
	*t.pars = C.ggml_opt_get_default_optimizer_params(nil)
	t.SetOptimizer(o.LearningRate, o.WeightDecay)

	m.mu.RLock()
	sgd := C.int(0)
	if o.SGD {
		sgd = 1
	}
	C.memosrt_opt_init(t.ctx.c, m.m, t.filter, t.pars, sgd)
	m.mu.RUnlock()
	for i, f := range unsafe.Slice(t.filter.found, len(names)) {
		if f == nil {
			return nil, fmt.Errorf("%w: llama.cpp did not offer %s to the optimizer", ErrTrain, names[i])
		}
	}
	return t, nil
}

// trainableNames returns the tensors of the GGUF at path that train
// chooses, refusing non-F32 ones and those llama.cpp never trains.
func trainableNames(path string, train func(string) bool) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrLoad, err)
	}
	defer f.Close()
	g, err := ggml.Decode(f, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrLoad, path, err)
	}
	last := -1
	for _, t := range g.Tensors().Items() {
		var b int
		if _, err := fmt.Sscanf(t.Name, "blk.%d.", &b); err == nil && b > last {
			last = b
		}
	}
	var names []string
	for _, t := range g.Tensors().Items() {
		if !train(t.Name) {
			continue
		}
		switch {
		case t.Kind != uint32(TypeF32):
			return nil, fmt.Errorf("%w: %s is %s; only f32 weights can be trained (quantized and f16 weights cannot)",
				ErrNotTrainable, t.Name, TypeName(int(t.Kind)))
		case t.Name == "token_embd.weight" || t.Name == "rope_freqs.weight":
			return nil, fmt.Errorf("%w: llama.cpp does not train %s", ErrNotTrainable, t.Name)
		case !cacheFree(t.Name, last):
			return nil, fmt.Errorf("%w: %s feeds the KV cache; the pinned llama.cpp cannot back-propagate through the cache write "+
				"(ggml_set_rows, llama.cpp issue 16258), so only the last block's attn_q, attn_output, ffn_* and the output weights train",
				ErrNotTrainable, t.Name)
		case len(t.Shape) > 2:
			return nil, fmt.Errorf("%w: %s has shape %v, want at most 2 dimensions", ErrNotTrainable, t.Name, t.Shape)
		}
		names = append(names, t.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: the filter chose no tensor of %s", ErrNotTrainable, path)
	}
	return names, nil
}

// cacheFree reports whether no K or V written to the KV cache depends on
// the weight name, given the last block's index: llama_opt_epoch builds the
// inference graph, whose cache writes (ggml_set_rows, a view) ggml's
// backward pass asserts on once they depend on a trained weight; the
// assertion would abort the process (llama.cpp issue 16258).
func cacheFree(name string, last int) bool {
	switch name {
	case "output.weight", "output_norm.weight":
		return true
	}
	p := fmt.Sprintf("blk.%d.", last)
	if !strings.HasPrefix(name, p) {
		return false
	}
	switch strings.TrimPrefix(name, p) {
	case "attn_q.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_norm.weight":
		return true
	}
	return false
}

// NCtx returns the tokens per datapoint (the context's n_ctx).
func (t *Trainer) NCtx() int { return t.nCtx }

// NVocab returns the vocabulary size: the width of a soft label row.
func (t *Trainer) NVocab() int { return t.nVocab }

// Model returns the Trainer's own copy of the model, whose chosen weights
// hold the trained values: a context made on it (NewContext) evaluates
// base plus the full weight delta. Valid until Close; close such contexts
// first.
func (t *Trainer) Model() *Model { return t.model }

// Names returns the trained tensors' names, in GGUF order.
func (t *Trainer) Names() []string { return append([]string(nil), t.names...) }

// SetOptimizer sets the learning rate and weight decay of the optimizer
// (AdamW, or SGD with TrainOptions.SGD) for the following steps (read by
// llama.cpp before each optimizer step).
func (t *Trainer) SetOptimizer(lr, wd float32) {
	if t.pars == nil {
		return
	}
	t.pars.adamw.alpha = C.float(lr)
	t.pars.adamw.wd = C.float(wd)
	t.pars.sgd.alpha = C.float(lr)
	t.pars.sgd.wd = C.float(wd)
}

// Epoch trains one pass over seqs in the order given: each sequence is one
// datapoint, inputs seq[:NCtx()] and labels seq[1:NCtx()+1]; a sequence
// shorter than NCtx()+1 tokens is padded with pad at the end (those
// positions are trained too: llama_opt_epoch has no label mask, so pack
// sequences to full length where that matters). One optimizer step per
// datapoint. ctx is checked before the pass; llama_opt_epoch itself is not
// interruptible, so keep passes short.
func (t *Trainer) Epoch(ctx context.Context, seqs [][]Token, pad Token) (EpochStats, error) {
	return t.EpochSoft(ctx, seqs, nil, pad)
}

// EpochSoft is Epoch with soft labels: soft is nil or has one entry per
// datapoint, and soft[i] is nil (one-hot labels, as Epoch) or
// [NCtx()][NVocab()]float32, a target distribution for each position j
// (the next token after seqs[i][j]). A row that is all zeros keeps that
// position's one-hot label seqs[i][j+1]; any other row must be a
// distribution (entries ≥ 0 summing to 1 within 1e-3) and replaces it, so
// the loss at that position is the cross-entropy H(p, q) = H(p) +
// KL(p‖q) against the model's q. With p the base model's own next-token
// distribution this is knowledge distillation (Hinton, Vinyals and Dean
// 2015, "Distilling the Knowledge in a Neural Network", at temperature
// 1): a KL regularizer toward the base. EpochStats.Loss then includes
// H(p) and Accuracy counts agreement with argmax p.
//
// llama_opt_epoch writes one-hot labels only; the Trainer's eval callback
// overwrites the chosen rows of ggml-opt's labels tensor right before each
// datapoint's cross-entropy node (which its backward reads too). A labels
// tensor of another shape is an ErrTrain after the pass.
func (t *Trainer) EpochSoft(ctx context.Context, seqs [][]Token, soft [][]float32, pad Token) (EpochStats, error) {
	if t.ctx.closed() {
		return EpochStats{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return EpochStats{}, err
	}
	if len(seqs) == 0 {
		return EpochStats{}, fmt.Errorf("%w: no datapoints", ErrTrain)
	}
	n := t.nCtx
	for i, s := range seqs {
		if len(s) > n+1 || len(s) < 2 {
			return EpochStats{}, fmt.Errorf("%w: sequence %d has %d tokens, want 2..%d", ErrTrain, i, len(s), n+1)
		}
		for _, tok := range s {
			if tok < 0 || int(tok) >= t.nVocab {
				return EpochStats{}, fmt.Errorf("%w: sequence %d: token %d outside [0, %d)", ErrTrain, i, tok, t.nVocab)
			}
		}
	}
	if pad < 0 || int(pad) >= t.nVocab {
		return EpochStats{}, fmt.Errorf("%w: pad token %d outside [0, %d)", ErrTrain, pad, t.nVocab)
	}
	if soft != nil {
		if len(soft) != len(seqs) {
			return EpochStats{}, fmt.Errorf("%w: %d soft label sets for %d datapoints", ErrTrain, len(soft), len(seqs))
		}
		nv := t.nVocab
		cs := (*float32)(C.malloc(C.size_t(4 * len(seqs) * n * nv)))
		cr := (*byte)(C.calloc(C.size_t(len(seqs)*n), 1))
		if cs == nil || cr == nil {
			C.free(unsafe.Pointer(cs))
			C.free(unsafe.Pointer(cr))
			return EpochStats{}, fmt.Errorf("%w: out of memory for %d×%d×%d soft labels", ErrTrain, len(seqs), n, nv)
		}
		defer func() {
			t.fix.soft, t.fix.soft_rows, t.fix.soft_n = nil, nil, 0
			C.free(unsafe.Pointer(cs))
			C.free(unsafe.Pointer(cr))
		}()
		dst := unsafe.Slice(cs, len(seqs)*n*nv)
		rows := unsafe.Slice(cr, len(seqs)*n)
		for i, p := range soft {
			if p == nil {
				continue
			}
			if len(p) != n*nv {
				return EpochStats{}, fmt.Errorf("%w: soft labels %d have %d values, want %d×%d", ErrTrain, i, len(p), n, nv)
			}
			for j := range n {
				row := p[j*nv : (j+1)*nv]
				var sum float64
				neg := false
				for _, v := range row {
					sum += float64(v)
					neg = neg || v < 0 || v != v
				}
				if sum == 0 && !neg {
					continue
				}
				if neg || sum < 1-1e-3 || sum > 1+1e-3 {
					return EpochStats{}, fmt.Errorf("%w: soft labels %d, position %d: entries sum to %g or are negative, want a distribution", ErrTrain, i, j, sum)
				}
				copy(dst[(i*n+j)*nv:], row)
				rows[i*n+j] = 1
			}
		}
		t.fix.soft, t.fix.soft_rows = (*C.float)(unsafe.Pointer(cs)), (*C.uchar)(unsafe.Pointer(cr))
		t.fix.soft_n, t.fix.soft_ctx, t.fix.soft_vocab, t.fix.soft_next = C.int(len(seqs)), C.int(n), C.int(nv), 0
	}
	ds := C.ggml_opt_dataset_init(C.GGML_TYPE_I32, C.GGML_TYPE_I32, C.int64_t(n), C.int64_t(n), C.int64_t(len(seqs)), 1)
	if ds == nil {
		return EpochStats{}, fmt.Errorf("%w: dataset of %d×%d tokens", ErrTrain, len(seqs), n)
	}
	defer C.ggml_opt_dataset_free(ds)
	data := unsafe.Slice((*int32)(C.ggml_opt_dataset_data(ds).data), n*len(seqs))
	labels := unsafe.Slice((*int32)(C.ggml_opt_dataset_labels(ds).data), n*len(seqs))
	for i, s := range seqs {
		d, l := data[i*n:(i+1)*n], labels[i*n:(i+1)*n]
		for j := range n {
			d[j], l[j] = pad, pad
			if j < len(s) {
				d[j] = s[j]
			}
			if j+1 < len(s) {
				l[j] = s[j+1]
			}
		}
	}
	res := C.ggml_opt_result_init()
	defer C.ggml_opt_result_free(res)
	zeroed := t.fix.zeroed
	C.llama_opt_epoch(t.ctx.c, ds, res, nil, C.int64_t(len(seqs)), nil, nil)
	switch t.fix.err {
	case 1:
		return EpochStats{}, fmt.Errorf("%w: an in-place rms_norm_back node whose incoming gradient is not a finished MUL or has an unexpected layout; its gradient would be wrong", ErrTrain)
	case 2:
		return EpochStats{}, fmt.Errorf("%w: out of memory repairing rms_norm_back", ErrTrain)
	case 3:
		return EpochStats{}, fmt.Errorf("%w: soft labels: ggml-opt's labels tensor is not [%d][%d]float32 or more loss nodes than %d datapoints", ErrTrain, n, t.nVocab, len(seqs))
	}
	if z := int(t.fix.zeroed - zeroed); z != len(seqs)*len(t.names) {
		return EpochStats{}, fmt.Errorf("%w: %d gradient accumulators zeroed in %d steps of %d weights; gradients would accumulate across steps", ErrTrain, z, len(seqs), len(t.names))
	}
	if soft != nil && int(t.fix.soft_next) != len(seqs) {
		return EpochStats{}, fmt.Errorf("%w: soft labels: %d loss nodes computed for %d datapoints", ErrTrain, t.fix.soft_next, len(seqs))
	}
	var st EpochStats
	var loss, unc, acc, accUnc C.double
	var nd C.int64_t
	C.ggml_opt_result_loss(res, &loss, &unc)
	C.ggml_opt_result_accuracy(res, &acc, &accUnc)
	C.ggml_opt_result_ndata(res, &nd)
	st.Loss, st.LossUnc, st.Accuracy, st.NData = float64(loss), float64(unc), float64(acc), int(nd)
	return st, nil
}

// Weights copies the current values of the trained tensors into Go memory
// (the base values before the first Epoch).
func (t *Trainer) Weights() ([]TrainedTensor, error) {
	if t.ctx.closed() || t.filter == nil {
		return nil, ErrClosed
	}
	out := make([]TrainedTensor, len(t.names))
	for i, f := range unsafe.Slice(t.filter.found, len(t.names)) {
		ne0, ne1 := int(f.ne[0]), int(f.ne[1])
		buf := make([]float32, ne0*ne1)
		C.memosrt_tensor_get(f, unsafe.Pointer(&buf[0]), C.size_t(4*len(buf)))
		out[i] = TrainedTensor{Name: t.names[i], Shape: [2]int{ne0, ne1}, Data: buf}
	}
	return out, nil
}

// SetWeights writes ws into the trained tensors of the same names (Shape
// and len(Data) must match; a name not trained is an ErrTrain), e.g. to
// restore the base values Weights returned before training. AdamW's
// moments are not reset.
func (t *Trainer) SetWeights(ws []TrainedTensor) error {
	if t.ctx.closed() || t.filter == nil {
		return ErrClosed
	}
	found := unsafe.Slice(t.filter.found, len(t.names))
	for _, w := range ws {
		i := slices.Index(t.names, w.Name)
		if i < 0 {
			return fmt.Errorf("%w: %s is not trained", ErrTrain, w.Name)
		}
		f := found[i]
		ne0, ne1 := int(f.ne[0]), int(f.ne[1])
		if w.Shape != [2]int{ne0, ne1} || len(w.Data) != ne0*ne1 {
			return fmt.Errorf("%w: %s: shape %v with %d values, want [%d %d]", ErrTrain, w.Name, w.Shape, len(w.Data), ne0, ne1)
		}
		C.memosrt_tensor_set(f, unsafe.Pointer(&w.Data[0]), C.size_t(4*len(w.Data)))
	}
	return nil
}

// Close frees the context, the model and the filter and optimizer
// parameters. Idempotent.
func (t *Trainer) Close() error {
	if t == nil {
		return nil
	}
	if t.ctx != nil {
		t.ctx.Close()
		t.ctx = nil
	}
	if t.model != nil {
		t.model.Close()
		t.model = nil
	}
	if t.filter != nil {
		if t.filter.names != nil {
			for _, p := range unsafe.Slice(t.filter.names, int(t.filter.n)) {
				C.free(unsafe.Pointer(p))
			}
			C.free(unsafe.Pointer(t.filter.names))
		}
		C.free(unsafe.Pointer(t.filter.found))
		C.free(unsafe.Pointer(t.filter))
		t.filter = nil
	}
	if t.pars != nil {
		C.free(unsafe.Pointer(t.pars))
		t.pars = nil
	}
	if t.fix != nil {
		C.free(unsafe.Pointer(t.fix.buf))
		C.free(unsafe.Pointer(t.fix))
		t.fix = nil
	}
	return nil
}
