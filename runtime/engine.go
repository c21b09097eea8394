package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/memosrt/memosrt/runtime/embedding"
	"github.com/memosrt/memosrt/runtime/llama"
)

// Token is a vocabulary id.
type Token = llama.Token

// Options are load-time settings of an Engine. Zero means the default given.
type Options struct {
	// ModelPath is the GGUF file. Required.
	ModelPath string
	// LibDir holds loadable ggml backend modules (libggml-cuda.so); "" loads none.
	LibDir string
	// NGPULayers is the number of layers offloaded to a GPU; -1 all. Default 0.
	NGPULayers int
	// NCtx is the KV cache size in cells (tokens), shared by all sequences.
	// Default 4096, capped at the model's training context.
	NCtx int
	// NBatch is the most tokens per llama_decode call. Default 512.
	NBatch int
	// NUBatch is the physical micro-batch in tokens. Default 512.
	NUBatch int
	// NSeqMax is the number of sequences. Default 1. Several share one
	// unified KV cache (kv_unified, as CopySeq needs); one is created
	// without: the same single stream and state layout, but llama_decode
	// then checks 1 sequence pair, not 256² (docs/benchmarks.md).
	NSeqMax int
	// Threads for prefill and decode. Default: number of CPUs, with the
	// decode count lowered to 1 while that measures faster (CPU
	// contention; see threads.go); a value given is used as is.
	Threads int
	// TypeK, TypeV are the KV cache types: "f16" (default), "q8_0", "q4_0", "f32".
	TypeK, TypeV string
	// FlashAttn is "auto" (default), "on" or "off". "auto" is off on the
	// CPU alone (NGPULayers 0) with f16/f32 K and V and a KQ buffer (NCtx x
	// NUBatch x n_head x 4 B) of at most FlashAttnOffMaxKQ (512 MiB);
	// else llama.cpp's auto (on where supported: the CPU, a GPU).
	FlashAttn string
	// Mmap maps the GGUF file (llama.cpp's use_mmap) instead of reading the
	// weights into memory. Mapping loads faster and shares pages between
	// processes, but on this AVX-512 machine the mapped 1B shape decoded
	// 12-20% slower (BenchmarkDecodeBatch with MEMOSRT_BENCH_MMAP=1, side by
	// side). A likely cause: mapped weights keep the file's alignment (GGUF
	// aligns tensors to 32 bytes, general.alignment; all of the 1B's start at
	// 32 mod 64), so 64-byte vector loads straddle cache lines, while read
	// weights land in ggml's 64-byte-aligned CPU buffers. Default false.
	Mmap bool
	// LoRA allows requests to attach LoRA adapters (Request.Adapters).
	// llama.cpp's graph reuse cannot see adapter switches, so the first two
	// decodes after a switch build their graphs anew (llama.Ctx.DropGraph);
	// otherwise graphs are reused as without LoRA. Default false: adapters
	// are refused.
	LoRA bool
	// BlendProbe installs the tensor tap (llama.Ctx.TapStart) that
	// ComposeSeq's selection by KV deviation (ComposeOptions.Ratio) needs.
	// Idle, it costs one C call per graph node and decode. Default false.
	BlendProbe bool
	// Logger receives load information and llama.cpp warnings; nil discards.
	Logger *slog.Logger
	// Progress, if set, is called with the load fraction in [0, 1].
	Progress func(float32)
}

// DefaultOptions returns Options with every default filled in except ModelPath.
func DefaultOptions() Options {
	return Options{NCtx: 4096, NBatch: 512, NUBatch: 512, NSeqMax: 1, Threads: goruntime.NumCPU(),
		TypeK: "f16", TypeV: "f16", FlashAttn: "auto"}
}

func (o *Options) ensureDefaults() {
	d := DefaultOptions()
	if o.NCtx == 0 {
		o.NCtx = d.NCtx
	}
	if o.NBatch == 0 {
		o.NBatch = d.NBatch
	}
	if o.NUBatch == 0 {
		o.NUBatch = min(d.NUBatch, o.NBatch)
	}
	if o.NSeqMax == 0 {
		o.NSeqMax = d.NSeqMax
	}
	if o.Threads == 0 {
		o.Threads = d.Threads
	}
	if o.TypeK == "" {
		o.TypeK = d.TypeK
	}
	if o.TypeV == "" {
		o.TypeV = d.TypeV
	}
	if o.FlashAttn == "" {
		o.FlashAttn = d.FlashAttn
	}
}

var kvTypes = map[string]int{"f16": llama.TypeF16, "f32": llama.TypeF32, "q8_0": llama.TypeQ8_0, "q4_0": llama.TypeQ4_0}
var faModes = map[string]int{"auto": llama.FlashAttnAuto, "on": llama.FlashAttnEnabled, "off": llama.FlashAttnDisabled}

// Validate reports every invalid field at once (after defaults are applied).
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	if o.ModelPath == "" {
		errs = append(errs, errors.New("ModelPath is empty"))
	}
	if o.NCtx < 8 {
		errs = append(errs, fmt.Errorf("NCtx %d < 8", o.NCtx))
	}
	if o.Threads < 1 || o.Threads > 512 {
		errs = append(errs, fmt.Errorf("Threads %d not in [1, 512] (0: all CPUs)", o.Threads))
	}
	if o.NBatch < 1 || o.NUBatch < 1 || o.NUBatch > o.NBatch {
		errs = append(errs, fmt.Errorf("NBatch %d / NUBatch %d: need 1 <= NUBatch <= NBatch", o.NBatch, o.NUBatch))
	}
	if o.NSeqMax < 1 || o.NSeqMax > 256 {
		errs = append(errs, fmt.Errorf("NSeqMax %d not in [1, 256]", o.NSeqMax))
	}
	if _, ok := kvTypes[o.TypeK]; !ok {
		errs = append(errs, fmt.Errorf("TypeK %q: want f16, f32, q8_0 or q4_0", o.TypeK))
	}
	if _, ok := kvTypes[o.TypeV]; !ok {
		errs = append(errs, fmt.Errorf("TypeV %q: want f16, f32, q8_0 or q4_0", o.TypeV))
	}
	if _, ok := faModes[o.FlashAttn]; !ok {
		errs = append(errs, fmt.Errorf("FlashAttn %q: want auto, on or off", o.FlashAttn))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadOptions, errors.Join(errs...))
	}
	return nil
}

// Engine owns one model and one llama context. Safe for concurrent use;
// calls that use the context are serialized.
type Engine struct {
	opts  Options
	log   *slog.Logger
	model *llama.Model
	shape llama.Shape
	fp    string

	// mu guards ctx, batch, kv, closed and every llama context call.
	mu     sync.Mutex
	ctx    *llama.Ctx
	batch  *llama.Batch
	kv     KVConfig
	closed bool

	closeOnce sync.Once
	b         batcher            // queue of the batch goroutine (see batch.go)
	stepID    atomic.Int64       // current decode step, for the abort callback
	bgStep    atomic.Int64       // stepID of a running background-only step, else 0
	bgHeld    time.Time          // since when background work has been held back by foreground work (zero: not held); guarded by mu
	fg        atomic.Int32       // foreground callers in flight (BeginForeground)
	seqs      chan int           // free sequence ids (AcquireSeq)
	enc       *embedding.Encoder // Embed's context, created on first use; guarded by mu
	ended     []endedJob         // jobs ended by the running step, finished after it; guarded by mu
	tuner     *threadTuner       // decode threads under contention (nil: Options.Threads as given); guarded by mu
	threads   int                // decode threads set on ctx now; guarded by mu
	shiftErr  error              // ShiftGuard's verdict for this model and KV config, set at Load
}

// Load loads the model and creates the context, then probes the KV layout
// (one token decoded and serialized) so that KVConfig is exact.
func Load(ctx context.Context, opts Options) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	autoThreads := opts.Threads == 0 // tuned under contention (threads.go)
	opts.ensureDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Logger != nil && opts.Logger.Enabled(context.Background(), slog.LevelInfo) {
		// llama.cpp warns about many harmless things; show them only when asked for info
		llama.SetLogger(opts.Logger)
	}
	llama.Init(opts.LibDir)
	if miss := llama.MissingCPUFeatures(); len(miss) > 0 {
		// go build and go test compile cgo with "-O2 -g", no -march: ggml
		// then runs baseline x86-64 kernels: the 1B shape's prefill was
		// 28x slower at 64 tokens, 71x at 256 (issue 15); make passes
		// -O3 -march=native
		log.Warn("ggml's CPU backend was compiled without SIMD extensions this CPU has: prefill and decode run many times slower; build with make, or set CGO_CFLAGS and CGO_CXXFLAGS to \"-O3 -march=native\"",
			"missing", strings.Join(miss, ","))
	}
	arch, err := CheckModelFile(opts.ModelPath)
	if err != nil {
		return nil, err
	}
	fp, err := Fingerprint(opts.ModelPath)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	mp := llama.ModelParams{NGPULayers: opts.NGPULayers, UseMmap: opts.Mmap}
	mp.Progress = func(f float32) bool {
		if opts.Progress != nil {
			opts.Progress(f)
		}
		return ctx.Err() == nil
	}
	m, err := llama.LoadModel(opts.ModelPath, mp)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// the header was sound: the architecture, or a hyperparameter
		return nil, fmt.Errorf("%w: %w (architecture %q: one this llama.cpp, ec98e2002, does not know, or a missing hyperparameter; MEMOSRT_LOG=info shows llama.cpp's reason)", ErrModelFile, err, arch)
	}
	shape := m.Shape()
	nctx := opts.NCtx
	if shape.NCtxTrain > 0 && nctx > shape.NCtxTrain {
		log.Info("n_ctx capped at the training context", "n_ctx", nctx, "n_ctx_train", shape.NCtxTrain)
		nctx = shape.NCtxTrain
		opts.NCtx = nctx
	}
	fa := faModes[opts.FlashAttn]
	plain := func(t string) bool { return t == "f16" || t == "f32" }
	if opts.FlashAttn == "auto" && opts.NGPULayers == 0 && plain(opts.TypeK) && plain(opts.TypeV) {
		if kq, off := FlashAttnAutoOff(nctx, opts.NUBatch, shape.NHead); off {
			log.Info("flash attention auto: off (the CPU; KQ buffer within FlashAttnOffMaxKQ)", "kq_bytes", kq)
			fa = llama.FlashAttnDisabled
		}
	}
	c, err := llama.NewContext(m, llama.ContextParams{
		NCtx: nctx, NBatch: opts.NBatch, NUBatch: opts.NUBatch, NSeqMax: opts.NSeqMax,
		Threads: opts.Threads, TypeK: kvTypes[opts.TypeK], TypeV: kvTypes[opts.TypeV],
		FlashAttn: fa, KVUnified: opts.NSeqMax > 1, Tap: opts.BlendProbe,
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	// llama.cpp caps n_batch at the requested n_ctx (and pads n_ctx up to a
	// multiple of 256): a batch larger than the context's own n_batch would
	// abort the process (GGML_ASSERT in llama_decode)
	if nb := c.NBatch(); nb > 0 && nb < opts.NBatch {
		opts.NBatch = nb
		opts.NUBatch = min(opts.NUBatch, nb)
	}
	e := &Engine{opts: opts, log: log, model: m, shape: shape, fp: fp, ctx: c, batch: llama.NewBatch(opts.NBatch), threads: opts.Threads}
	if autoThreads {
		e.tuner = newThreadTuner(opts.Threads)
	}
	if err := e.probe(); err != nil {
		e.batch.Close()
		c.Close()
		m.Close()
		return nil, err
	}
	e.shiftErr = ShiftGuard(m.Attention(), e.kv, c.CanShift())
	e.seqs = make(chan int, opts.NSeqMax)
	for i := 0; i < opts.NSeqMax; i++ {
		e.seqs <- i
	}
	e.startBatcher()
	log.Info("model loaded", "model", opts.ModelPath, "desc", shape.Desc, "n_layer", shape.NLayer,
		"n_ctx", c.NCtx(), "n_seq_max", c.NSeqMax(), "type_k", opts.TypeK, "type_v", opts.TypeV,
		"v_trans", e.kv.VTrans, "load_ms", time.Since(start).Milliseconds())
	return e, nil
}

// FlashAttnOffMaxKQ bounds the KQ buffer (bytes) for which FlashAttn
// "auto" turns flash attention off on the CPU, as Ollama keeps it off there.
// Without flash attention a prefill holds a micro-batch's KQ scores for the
// whole context, resident once a prefill has filled it; with it, ggml's CPU
// kernel is slower than the plain path's matrix products, the more so the
// longer the context (docs/benchmarks.md, Prefill level with the peer).
// 512 MiB is the buffer of 32 heads (the 1B shape, Llama 3's 1B and 8B) at
// n_ctx 8,192 and the default n_ubatch (512); at the default n_ctx (4,096)
// it is half that.
const FlashAttnOffMaxKQ = 512 << 20

// FlashAttnAutoOff reports the KQ buffer of a context (nctx cells x nubatch
// tokens x nhead heads x 4 bytes, the f32 scores of one micro-batch against
// every cell) and whether FlashAttn "auto" turns flash attention off on the
// CPU for it: when that buffer is at most FlashAttnOffMaxKQ.
func FlashAttnAutoOff(nctx, nubatch, nhead int) (kqBytes int64, off bool) {
	kq := int64(nctx) * int64(nubatch) * int64(nhead) * 4
	return kq, kq <= FlashAttnOffMaxKQ
}

// probe decodes one token into sequence 0 and parses its serialized state to
// learn the live KV layout (types, row sizes, V transposition as resolved by
// flash-attention "auto").
func (e *Engine) probe() error {
	tok := e.model.BOS()
	if tok < 0 {
		tok = 0
	}
	e.batch.Clear()
	e.batch.Add(tok, 0, 0, true)
	if err := e.ctx.Decode(e.batch); err != nil {
		return fmt.Errorf("runtime: probe decode: %w", err)
	}
	st, err := e.ctx.StateSeqGet(0)
	e.ctx.ClearMemory()
	if err != nil {
		return fmt.Errorf("runtime: probe state: %w", err)
	}
	s, err := ParseSeqState(st)
	if err != nil {
		return fmt.Errorf("runtime: probe state: %w", err)
	}
	e.kv = KVConfig{
		ModelFingerprint: e.fp, NLayer: s.NLayer, KRowBytes: s.KRowBytes, VRowBytes: s.VRowBytes,
		NEmbdVGQA: s.NEmbdVGQA, TypeK: llama.TypeName(s.TypeK), TypeV: llama.TypeName(s.TypeV),
		VTrans: s.VTrans, NStream: s.NStream, NCtx: e.ctx.NCtx(),
	}
	return nil
}

// Close frees the context and model. Idempotent.
func (e *Engine) Close() error {
	e.closeOnce.Do(e.stopBatcher)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	e.batch.Close()
	e.ctx.Close()
	if e.enc != nil {
		e.enc.Close()
	}
	return e.model.Close()
}

// Options returns the effective load options.
func (e *Engine) Options() Options { return e.opts }

// Shape returns the model's hyperparameters.
func (e *Engine) Shape() llama.Shape { return e.shape }

// KVConfig returns the live KV layout (what saved state must match).
func (e *Engine) KVConfig() KVConfig { return e.kv }

// NCtx returns the KV cache size in cells.
func (e *Engine) NCtx() int { return e.kv.NCtx }

// NSeqMax returns the number of sequences.
func (e *Engine) NSeqMax() int { return e.opts.NSeqMax }

// Model returns the loaded model (tokenizer and metadata access).
func (e *Engine) Model() *llama.Model { return e.model }

// Tokenize converts text to tokens; addBOS prepends BOS when the model's
// tokenizer wants one. Special-token text is parsed.
func (e *Engine) Tokenize(text string, addBOS bool) ([]Token, error) {
	return e.model.Tokenize(text, addBOS, true)
}

// Detokenize renders tokens as text.
func (e *Engine) Detokenize(toks []Token) string { return e.model.Detokenize(toks) }

// BOS returns the model's beginning-of-sequence token, or -1.
func (e *Engine) BOS() Token { return e.model.BOS() }

// Fingerprint returns a hex SHA-256 over a GGUF file's size and sampled
// content (first and last 4 MiB and 16 evenly spaced 64 KiB windows), enough
// to tell apart models of equal shape without reading gigabytes.
func Fingerprint(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("runtime: fingerprint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("runtime: fingerprint: %w", err)
	}
	size := st.Size()
	h := sha256.New()
	binary.Write(h, binary.LittleEndian, size)
	read := func(off, n int64) error {
		if off < 0 {
			off = 0
		}
		if off+n > size {
			n = size - off
		}
		_, err := io.Copy(h, io.NewSectionReader(f, off, n))
		return err
	}
	const head = 4 << 20
	if err := read(0, head); err != nil {
		return "", fmt.Errorf("runtime: fingerprint: %w", err)
	}
	for i := int64(1); i <= 16; i++ {
		if err := read(size*i/17, 64<<10); err != nil {
			return "", fmt.Errorf("runtime: fingerprint: %w", err)
		}
	}
	if err := read(size-head, head); err != nil {
		return "", fmt.Errorf("runtime: fingerprint: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (e *Engine) lock() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// ClearSeq removes every cell of seq.
func (e *Engine) ClearSeq(seq int) error {
	if err := e.lock(); err != nil {
		return err
	}
	defer e.mu.Unlock()
	e.ctx.SeqRemove(seq, -1, -1)
	return nil
}

// SeqLen returns the number of positions held by seq (max position + 1).
func (e *Engine) SeqLen(seq int) int {
	if err := e.lock(); err != nil {
		return 0
	}
	defer e.mu.Unlock()
	return e.ctx.SeqPosMax(seq) + 1
}

// SaveSeq serializes seq's KV state (llama_state_seq_get_data) with its
// cells in position order (SortSeqState).
func (e *Engine) SaveSeq(seq int) ([]byte, error) {
	if err := e.lock(); err != nil {
		return nil, err
	}
	st, err := e.ctx.StateSeqGet(seq)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return SortSeqState(st)
}

// RestoreSeq replaces seq's KV with state, which must hold positions
// [0, n) (in any cell order). The state is parsed and checked against the
// live KVConfig before llama.cpp sees it; on any error seq is
// left empty (never half-restored) and other sequences are untouched.
// Restoring an empty state (no cells) empties seq and returns nil.
// Returns the number of cells restored.
func (e *Engine) RestoreSeq(seq int, state []byte) (int, error) {
	s, err := ParseSeqState(state)
	if err == nil {
		err = s.CheckAgainst(e.kv)
	}
	if err == nil {
		// the cells hold positions [0, n) in any order: a sequence that
		// shared a resident pack's cells (CopySeq) and then decoded more
		// serializes in cache order, its own new cells first
		seen := make([]bool, len(s.Positions))
		for i, p := range s.Positions {
			if p < 0 || int(p) >= len(seen) || seen[p] {
				err = fmt.Errorf("%w: cell %d at position %d; only prefix states [0, n) restore", ErrBadState, i, p)
				break
			}
			seen[p] = true
		}
	}
	if lerr := e.lock(); lerr != nil {
		return 0, lerr
	}
	defer e.mu.Unlock()
	if seq < 0 || seq >= e.opts.NSeqMax {
		return 0, fmt.Errorf("%w: seq %d not in [0, %d)", ErrBadState, seq, e.opts.NSeqMax)
	}
	e.ctx.SeqRemove(seq, -1, -1)
	if err != nil {
		return 0, err
	}
	if s.NCells == 0 {
		return 0, nil
	}
	if err := e.ctx.StateSeqSet(seq, state); err != nil {
		e.ctx.SeqRemove(seq, -1, -1)
		return 0, fmt.Errorf("%w (%d cells; n_ctx %d): %w", ErrRestoreFailed, s.NCells, e.kv.NCtx, err)
	}
	return s.NCells, nil
}

// TruncateSeq keeps positions [0, n) of seq and removes the rest.
func (e *Engine) TruncateSeq(seq, n int) error {
	if err := e.lock(); err != nil {
		return err
	}
	defer e.mu.Unlock()
	if !e.ctx.SeqRemove(seq, n, -1) {
		return fmt.Errorf("runtime: cannot truncate seq %d at %d", seq, n)
	}
	return nil
}

// CopySeq shares positions [p0, p1) of src into dst (llama_memory_seq_cp;
// cells are shared, not copied). p1 < 0 means to the end.
func (e *Engine) CopySeq(src, dst, p0, p1 int) error {
	if err := e.lock(); err != nil {
		return err
	}
	defer e.mu.Unlock()
	return e.ctx.SeqCopy(src, dst, p0, p1)
}

// ShiftSeq adds delta to the positions in [p0, p1) of seq (RoPE shift,
// llama_memory_seq_add).
func (e *Engine) ShiftSeq(seq, p0, p1, delta int) error {
	if err := e.lock(); err != nil {
		return err
	}
	defer e.mu.Unlock()
	return e.ctx.SeqShift(seq, p0, p1, delta)
}

// textOut assembles generated bytes into text, cutting at stop strings and
// holding back what could still become a stop string or a UTF-8 character.
type textOut struct {
	stops   []string
	onText  func(string) error
	buf     []byte // all output so far
	emitted int    // bytes of buf already sent to onText
}

func newTextOut(stops []string, on func(string) error) *textOut {
	var s []string
	for _, x := range stops {
		if x != "" {
			s = append(s, x)
		}
	}
	return &textOut{stops: s, onText: on}
}

// add appends piece and reports whether a stop string was hit.
func (o *textOut) add(piece []byte) (bool, error) {
	o.buf = append(o.buf, piece...)
	for _, s := range o.stops {
		// search only where a new match can start
		from := max(0, o.emitted-len(s))
		if i := strings.Index(string(o.buf[from:]), s); i >= 0 {
			o.buf = o.buf[:from+i]
			return true, o.flush()
		}
	}
	safe := len(o.buf)
	for _, s := range o.stops {
		for k := min(len(s)-1, len(o.buf)); k > 0; k-- {
			if strings.HasPrefix(s, string(o.buf[len(o.buf)-k:])) {
				safe = min(safe, len(o.buf)-k)
				break
			}
		}
	}
	// hold back only an incomplete UTF-8 sequence at the end (at most 3
	// bytes, until its continuation bytes arrive or the output ends); an
	// invalid byte is passed on as it is, never holding back what follows
	safe = utf8Cut(o.buf, o.emitted, safe)
	return false, o.emit(safe)
}

// utf8Cut returns end moved back before an incomplete UTF-8 sequence that
// ends b[from:end] (a lead byte whose continuation bytes have not arrived),
// or end itself.
func utf8Cut(b []byte, from, end int) int {
	for k := 1; k <= utf8.UTFMax-1 && end-k >= from; k++ {
		c := b[end-k]
		if c < utf8.RuneSelf {
			return end // ASCII: complete
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[end-k : end]) {
				return end - k
			}
			return end
		}
	}
	return end
}

func (o *textOut) emit(upto int) error {
	if upto <= o.emitted {
		return nil
	}
	chunk := string(o.buf[o.emitted:upto])
	o.emitted = upto
	if o.onText != nil {
		return o.onText(chunk)
	}
	return nil
}

func (o *textOut) flush() error { return o.emit(len(o.buf)) }

func (o *textOut) text() string { return string(o.buf) }
