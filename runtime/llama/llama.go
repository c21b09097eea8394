package llama

/*
// llama.h and ggml.h come from the pinned ollama module: through
// third_party/ in a checkout (links made by `make links`), or, when this
// module is itself in the module cache (`go get`), from the ollama module
// beside it there.
#cgo CPPFLAGS: -I${SRCDIR}/../../third_party/llama.cpp/include -I${SRCDIR}/../../third_party/ggml/include
#cgo CPPFLAGS: -I${SRCDIR}/../../../../ollama/ollama@v0.17.4/llama/llama.cpp/include -I${SRCDIR}/../../../../ollama/ollama@v0.17.4/ml/backend/ggml/ggml/include
#cgo CFLAGS: -Wall
#cgo CXXFLAGS: -std=c++17 -Wall
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "gguf.h"

extern void memosrtLog(int level, char *text);
extern _Bool memosrtProgress(float p, uintptr_t h);

static inline void memosrt_log_cb(enum ggml_log_level level, const char *text, void *ud) {
	(void)ud;
	if (level == GGML_LOG_LEVEL_CONT || level < GGML_LOG_LEVEL_WARN) return;
	memosrtLog((int)level, (char *)text);
}

static inline void memosrt_set_log(void) {
	llama_log_set(memosrt_log_cb, NULL);
	ggml_log_set(memosrt_log_cb, NULL);
}

static inline bool memosrt_progress_cb(float p, void *ud) {
	return memosrtProgress(p, (uintptr_t)ud);
}

static inline void memosrt_set_progress(struct llama_model_params *p, uintptr_t h) {
	p->progress_callback = memosrt_progress_cb;
	p->progress_callback_user_data = (void *)h;
}

// Abort flag polled by ggml between graph nodes (llama_set_abort_callback).
static inline bool memosrt_abort_cb(void *data) {
	return __atomic_load_n((volatile int *)data, __ATOMIC_RELAXED) != 0;
}

static inline void memosrt_set_abort(struct llama_context *ctx, int *flag) {
	llama_set_abort_callback(ctx, memosrt_abort_cb, flag);
}

// memosrt_cpu_missing returns a bit per x86 SIMD extension that this CPU
// (and OS) supports but ggml's CPU backend was not compiled for: ggml's
// ggml_cpu_has_* report the compiler's target (__AVX2__, ...), not the CPU.
// Bits: 1 AVX, 2 AVX2, 4 FMA, 8 F16C, 16 AVX512F. 0 elsewhere.
static inline unsigned memosrt_cpu_missing(void) {
	unsigned m = 0;
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx") && !ggml_cpu_has_avx()) m |= 1;
	if (__builtin_cpu_supports("avx2") && !ggml_cpu_has_avx2()) m |= 2;
	if (__builtin_cpu_supports("fma") && !ggml_cpu_has_fma()) m |= 4;
	if (__builtin_cpu_supports("f16c") && !ggml_cpu_has_f16c()) m |= 8;
	if (__builtin_cpu_supports("avx512f") && !ggml_cpu_has_avx512()) m |= 16;
#endif
	return m;
}

static inline void memosrt_store_flag(int *flag, int v) {
	__atomic_store_n(flag, v, __ATOMIC_RELAXED);
}

// A tap copies the rows of one named graph tensor (e.g. "Vcur-1") out of
// each ubatch's graph as it is computed (llama_context_params.cb_eval, the
// eval callback of ggml_backend_sched_compute_splits) and then stops that
// graph: the tapped Decode computes only the nodes up to that tensor.
typedef struct {
	int active;     // capture on (set between TapStart and TapStop)
	char name[64];  // tensor name, e.g. "Vcur-1"
	float *buf;     // captured values, appended ubatch by ubatch
	size_t cap;     // floats allocated in buf
	size_t used;    // floats written to buf
	int err;        // 1: tensor not F32 or not contiguous; 2: out of memory
} memosrt_tap;

static inline bool memosrt_tap_cb(struct ggml_tensor *t, bool ask, void *ud) {
	memosrt_tap *tp = (memosrt_tap *)ud;
	if (tp == NULL || !tp->active) return ask ? false : true;
	if (strcmp(t->name, tp->name) != 0) return ask ? false : true;
	if (ask) return true;
	if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) { tp->err = 1; return false; }
	size_t n = (size_t)ggml_nelements(t);
	if (tp->used + n > tp->cap) {
		size_t c = tp->cap ? tp->cap : 4096;
		while (c < tp->used + n) c *= 2;
		float *nb = (float *)realloc(tp->buf, c * sizeof(float));
		if (nb == NULL) { tp->err = 2; return false; }
		tp->buf = nb;
		tp->cap = c;
	}
	ggml_backend_tensor_get(t, tp->buf + tp->used, 0, n * sizeof(float));
	tp->used += n;
	return false; // stop this graph: nothing after the tapped tensor is needed
}

static inline void memosrt_set_tap(struct llama_context_params *p, memosrt_tap *tp) {
	p->cb_eval = memosrt_tap_cb;
	p->cb_eval_user_data = tp;
}

static inline void memosrt_tap_name(memosrt_tap *tp, const char *name) {
	strncpy(tp->name, name, sizeof(tp->name) - 1);
	tp->name[sizeof(tp->name) - 1] = 0;
}

static inline void memosrt_batch_set(struct llama_batch *b, int i, llama_token tok, llama_pos pos, llama_seq_id seq, int8_t logits) {
	b->token[i] = tok;
	b->pos[i] = pos;
	b->n_seq_id[i] = 1;
	b->seq_id[i][0] = seq;
	b->logits[i] = logits;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	goruntime "runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe" // unsafe: the cgo boundary; C buffers are viewed and copied into Go memory here only.

	_ "github.com/ollama/ollama/llama/llama.cpp/src"      // compiles llama.cpp into the binary
	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src" // compiles ggml (CPU backend) into the binary

	"github.com/memosrt/memosrt/errkind"
)

// Token is a vocabulary id (llama_token).
type Token = int32

// GGML tensor types usable for the KV cache (values of enum ggml_type).
const (
	TypeF32  = int(C.GGML_TYPE_F32)
	TypeF16  = int(C.GGML_TYPE_F16)
	TypeQ4_0 = int(C.GGML_TYPE_Q4_0)
	TypeQ8_0 = int(C.GGML_TYPE_Q8_0)
)

// Flash attention modes (enum llama_flash_attn_type).
const (
	FlashAttnAuto     = int(C.LLAMA_FLASH_ATTN_TYPE_AUTO)
	FlashAttnDisabled = int(C.LLAMA_FLASH_ATTN_TYPE_DISABLED)
	FlashAttnEnabled  = int(C.LLAMA_FLASH_ATTN_TYPE_ENABLED)
)

// TypeName returns ggml's name of a tensor type ("f16", "q8_0").
func TypeName(t int) string { return C.GoString(C.ggml_type_name(C.enum_ggml_type(t))) }

var logger atomic.Pointer[slog.Logger]

// SetLogger routes llama.cpp and ggml warnings and errors to l (nil discards them).
// llama.cpp logging is process-global, so this is too.
func SetLogger(l *slog.Logger) { logger.Store(l) }

//export memosrtLog
func memosrtLog(level C.int, text *C.char) {
	l := logger.Load()
	if l == nil {
		return
	}
	msg := C.GoString(text)
	for len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	if level >= C.GGML_LOG_LEVEL_ERROR {
		l.Error(msg, "src", "llama.cpp")
	} else {
		l.Warn(msg, "src", "llama.cpp")
	}
}

//export memosrtProgress
func memosrtProgress(p C.float, h C.uintptr_t) C._Bool {
	fn := cgo.Handle(h).Value().(func(float32) bool)
	return C._Bool(fn(float32(p)))
}

var initOnce sync.Once

// Init initialises the llama.cpp backend once per process and loads the ggml
// backend modules (libggml-*.so, e.g. CUDA) found in libDir, if libDir is not
// empty and exists. The CPU backend is compiled in and always present.
// Later calls only load further directories.
func Init(libDir string) {
	initOnce.Do(func() {
		C.memosrt_set_log()
		C.llama_backend_init()
	})
	if libDir == "" {
		return
	}
	if st, err := os.Stat(libDir); err != nil || !st.IsDir() {
		return
	}
	cs := C.CString(libDir)
	defer C.free(unsafe.Pointer(cs))
	C.ggml_backend_load_all_from_path(cs)
}

// Device describes one ggml backend device.
type Device struct {
	Name        string
	Description string
	Kind        string // "cpu", "gpu", "igpu" or "accel"
	FreeBytes   uint64
	TotalBytes  uint64
}

// GPULayers returns ngl, a number of layers to offload (-1 or less: all),
// or 0 for all when no GPU device ("gpu" or "igpu") is registered (Init
// first): a CPU-only machine offloads nothing.
func GPULayers(ngl int) int {
	if ngl >= 0 {
		return ngl
	}
	for _, d := range Devices() {
		if d.Kind == "gpu" || d.Kind == "igpu" {
			return ngl
		}
	}
	return 0
}

// Devices lists the ggml backend devices registered in this process.
func Devices() []Device {
	n := int(C.ggml_backend_dev_count())
	out := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d := C.ggml_backend_dev_get(C.size_t(i))
		var free, total C.size_t
		C.ggml_backend_dev_memory(d, &free, &total)
		kind := "accel"
		switch C.ggml_backend_dev_type(d) {
		case C.GGML_BACKEND_DEVICE_TYPE_CPU:
			kind = "cpu"
		case C.GGML_BACKEND_DEVICE_TYPE_GPU:
			kind = "gpu"
		case C.GGML_BACKEND_DEVICE_TYPE_IGPU:
			kind = "igpu"
		}
		out = append(out, Device{
			Name:        C.GoString(C.ggml_backend_dev_name(d)),
			Description: C.GoString(C.ggml_backend_dev_description(d)),
			Kind:        kind,
			FreeBytes:   uint64(free),
			TotalBytes:  uint64(total),
		})
	}
	return out
}

// SystemInfo returns llama_print_system_info(): the CPU features compiled in.
func SystemInfo() string { return C.GoString(C.llama_print_system_info()) }

// MissingCPUFeatures returns the x86 SIMD extensions (of AVX, AVX2, FMA,
// F16C and AVX512, named as SystemInfo names them) that this CPU supports
// but ggml's CPU backend was not compiled for; nil when none, and always
// on other architectures. ggml's kernels are chosen by the C compiler's
// target, so a cgo build without -march (go build and go test default to
// CGO_CFLAGS "-O2 -g"; make sets -O3 -march=native) runs baseline x86-64
// code on any CPU: on one AVX-512 core, prefill of the generated 1B shape
// took 46.5 s instead of 1.6 s for 64 tokens, 380 s instead of 5.4 s for
// 256 (issue 15).
func MissingCPUFeatures() []string {
	m := uint(C.memosrt_cpu_missing())
	var out []string
	for i, name := range []string{"AVX", "AVX2", "FMA", "F16C", "AVX512"} {
		if m&(1<<i) != 0 {
			out = append(out, name)
		}
	}
	return out
}

// Errors returned at the C boundary.
var (
	ErrLoad       = errors.New("llama: model load failed")
	ErrContext    = errors.New("llama: context creation failed")
	ErrClosed     = errors.New("llama: closed")
	ErrNoKVSlot   = errkind.New(errkind.Unavailable, "llama: no KV cache slot for the batch (n_ctx full)")
	ErrAborted    = errors.New("llama: decode aborted")
	ErrDecode     = errors.New("llama: decode failed")
	ErrTokenize   = errors.New("llama: tokenize failed")
	ErrTemplate   = errors.New("llama: chat template failed")
	ErrStateSeq   = errors.New("llama: sequence state rejected")
	ErrAdapter    = errors.New("llama: LoRA adapter failed")
	ErrBadSeqID   = errors.New("llama: sequence id out of range")
	ErrBatchFull  = errors.New("llama: batch full")
	ErrGrammar    = errkind.New(errkind.Invalid, "llama: grammar")
	ErrEmptyBatch = errors.New("llama: empty batch")
	ErrBadParams  = errkind.New(errkind.Invalid, "llama: sampler parameter out of range")
)

// ModelParams are load-time model settings.
type ModelParams struct {
	// NGPULayers is the number of layers offloaded to GPU devices; -1 means all. Default 0.
	NGPULayers int
	// UseMmap maps the weights instead of reading them. Default false here; set true to map.
	UseMmap bool
	// VocabOnly loads only the tokenizer.
	VocabOnly bool
	// Progress, if not nil, is called with values in [0, 1] while loading; returning false aborts.
	Progress func(float32) bool
}

// Model is a loaded GGUF model. Safe for concurrent use after load except Close.
type Model struct {
	mu     sync.RWMutex // guards m against Close
	m      *C.struct_llama_model
	vocab  *C.struct_llama_vocab
	arrays map[string]bool // the GGUF's array-valued metadata keys (see HasMeta)
}

// LoadModel loads the GGUF file at path. Init must have been called.
// Returns an error wrapping ErrLoad when llama.cpp refuses the file.
func LoadModel(path string, p ModelParams) (*Model, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrLoad, err)
	}
	mp := C.llama_model_default_params()
	mp.n_gpu_layers = C.int32_t(p.NGPULayers)
	if p.NGPULayers < 0 {
		mp.n_gpu_layers = 999
	}
	mp.use_mmap = C._Bool(p.UseMmap)
	mp.vocab_only = C._Bool(p.VocabOnly)
	var h cgo.Handle
	if p.Progress != nil {
		h = cgo.NewHandle(p.Progress)
		defer h.Delete()
		C.memosrt_set_progress(&mp, C.uintptr_t(h))
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	m := C.llama_model_load_from_file(cs, mp)
	if m == nil {
		return nil, fmt.Errorf("%w: %s", ErrLoad, path)
	}
	return &Model{m: m, vocab: C.llama_model_get_vocab(m), arrays: ggufArrayKeys(cs)}, nil
}

// ggufArrayKeys returns the array-valued metadata keys of the GGUF file
// at path (metadata only: gguf_init_from_file with no tensor context), or
// nil when it cannot be read.
func ggufArrayKeys(path *C.char) map[string]bool {
	g := C.gguf_init_from_file(path, C.struct_gguf_init_params{no_alloc: C.bool(true)})
	if g == nil {
		return nil
	}
	defer C.gguf_free(g)
	keys := map[string]bool{}
	for i := range C.int64_t(C.gguf_get_n_kv(g)) {
		if C.gguf_get_kv_type(g, i) == C.GGUF_TYPE_ARRAY {
			keys[C.GoString(C.gguf_get_key(g, i))] = true
		}
	}
	return keys
}

// HasMeta reports whether the GGUF declares metadata key, of any type:
// Meta does not see array values (llama.cpp's load_hparams leaves them out
// of the model's string map), such as <arch>.rope.dimension_sections.
func (m *Model) HasMeta(key string) bool {
	if _, ok := m.Meta(key); ok {
		return true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.m != nil && m.arrays[key]
}

// Close frees the model. Contexts made from it must be closed first. Idempotent.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m != nil {
		C.llama_model_free(m.m)
		m.m = nil
		m.vocab = nil
	}
	return nil
}

// Shape of a model, read from its hyperparameters.
type Shape struct {
	NLayer    int // transformer blocks
	NEmbd     int // embedding width
	NHead     int // attention heads
	NHeadKV   int // KV heads (GQA)
	NCtxTrain int // training context length, tokens
	NVocab    int // vocabulary size, tokens
	NParams   uint64
	SizeBytes uint64
	Desc      string // llama_model_desc, e.g. "llama ?B F16"
}

// Shape returns the model's hyperparameters.
func (m *Model) Shape() Shape {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return Shape{}
	}
	buf := make([]byte, 256)
	n := C.llama_model_desc(m.m, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if n < 0 {
		n = 0
	}
	return Shape{
		NLayer:    int(C.llama_model_n_layer(m.m)),
		NEmbd:     int(C.llama_model_n_embd(m.m)),
		NHead:     int(C.llama_model_n_head(m.m)),
		NHeadKV:   int(C.llama_model_n_head_kv(m.m)),
		NCtxTrain: int(C.llama_model_n_ctx_train(m.m)),
		NVocab:    int(C.llama_vocab_n_tokens(m.vocab)),
		NParams:   uint64(C.llama_model_n_params(m.m)),
		SizeBytes: uint64(C.llama_model_size(m.m)),
		Desc:      string(buf[:min(int(n), len(buf))]),
	}
}

// RoPE types (enum llama_rope_type): how a model rotates Q and K by position.
const (
	RopeTypeNone   = int(C.LLAMA_ROPE_TYPE_NONE)
	RopeTypeNorm   = int(C.LLAMA_ROPE_TYPE_NORM)
	RopeTypeNeoX   = int(C.LLAMA_ROPE_TYPE_NEOX)
	RopeTypeMRoPE  = int(C.LLAMA_ROPE_TYPE_MROPE)
	RopeTypeIMRoPE = int(C.LLAMA_ROPE_TYPE_IMROPE)
	RopeTypeVision = int(C.LLAMA_ROPE_TYPE_VISION)
)

// Attention facts of a model that decide whether its KV cells may be moved
// to other positions (see runtime.ShiftGuard).
type Attention struct {
	Arch      string // general.architecture, e.g. "llama"
	RopeType  int    // RopeType*, from llama_model_rope_type
	NSWA      int    // sliding-window size in tokens (llama_model_n_swa); 0: none
	Hybrid    bool   // attention and recurrent layers (llama_model_is_hybrid)
	Recurrent bool   // recurrent state only (llama_model_is_recurrent)
	// KVLoraRank is <arch>.attention.kv_lora_rank, > 0 for multi-head
	// latent attention (MLA, DeepSeek-2 style), whose cache holds a
	// compressed latent next to a separate rotated part.
	KVLoraRank int
	// SlidingWindowMeta is true when the GGUF declares
	// <arch>.attention.sliding_window (even where llama.cpp ignores it
	// for this architecture).
	SlidingWindowMeta bool
	// RopeSections is true when the GGUF declares
	// <arch>.rope.dimension_sections (M-RoPE), even where llama.cpp
	// resolves another RoPE type for this architecture.
	RopeSections bool
}

// Attention returns the model's attention facts.
func (m *Model) Attention() Attention {
	m.mu.RLock()
	if m.m == nil {
		m.mu.RUnlock()
		return Attention{}
	}
	a := Attention{
		RopeType:  int(C.llama_model_rope_type(m.m)),
		NSWA:      int(C.llama_model_n_swa(m.m)),
		Hybrid:    bool(C.llama_model_is_hybrid(m.m)),
		Recurrent: bool(C.llama_model_is_recurrent(m.m)),
	}
	m.mu.RUnlock()
	a.Arch, _ = m.Meta("general.architecture")
	if v, ok := m.Meta(a.Arch + ".attention.kv_lora_rank"); ok {
		fmt.Sscan(v, &a.KVLoraRank)
	}
	a.SlidingWindowMeta = m.HasMeta(a.Arch + ".attention.sliding_window")
	a.RopeSections = m.HasMeta(a.Arch + ".rope.dimension_sections")
	return a
}

// HeadSize returns the K head width in elements: the GGUF's
// <arch>.attention.key_length when present, else n_embd / n_head; 0 when
// unknown (or after Close).
func (m *Model) HeadSize() int {
	arch, _ := m.Meta("general.architecture")
	if v, ok := m.Meta(arch + ".attention.key_length"); ok {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			return n
		}
	}
	if sh := m.Shape(); sh.NHead > 0 {
		return sh.NEmbd / sh.NHead
	}
	return 0
}

// Meta returns the GGUF metadata value for key, and whether it exists.
func (m *Model) Meta(key string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return "", false
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	buf := make([]byte, 4096)
	n := C.llama_model_meta_val_str(m.m, ck, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if n < 0 {
		return "", false
	}
	if int(n) >= len(buf) {
		buf = make([]byte, int(n)+1)
		n = C.llama_model_meta_val_str(m.m, ck, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	}
	return string(buf[:n]), true
}

// ChatTemplate returns the model's default chat template (tokenizer.chat_template), or "".
func (m *Model) ChatTemplate() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return ""
	}
	p := C.llama_model_chat_template(m.m, nil)
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// BOS, EOS return the special token ids (-1 when absent or closed).
func (m *Model) BOS() Token {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return -1
	}
	return Token(C.llama_vocab_bos(m.vocab))
}

func (m *Model) EOS() Token {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return -1
	}
	return Token(C.llama_vocab_eos(m.vocab))
}

// IsEOG reports whether tok ends generation (EOS, EOT, ...); a closed
// model ends every generation.
func (m *Model) IsEOG(tok Token) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return true
	}
	return bool(C.llama_vocab_is_eog(m.vocab, C.llama_token(tok)))
}

// AddBOS reports whether the tokenizer prepends BOS to a prompt.
func (m *Model) AddBOS() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return false
	}
	return bool(C.llama_vocab_get_add_bos(m.vocab))
}

// Tokenize converts text to tokens. addSpecial adds BOS/EOS as the model's
// tokenizer asks; parseSpecial turns special-token text (e.g. "<s>") into its id.
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]Token, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return nil, ErrClosed
	}
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	n := len(text) + 2
	for attempt := 0; attempt < 2; attempt++ {
		toks := make([]Token, n)
		var p *C.llama_token
		if n > 0 {
			p = (*C.llama_token)(unsafe.Pointer(&toks[0]))
		}
		got := C.llama_tokenize(m.vocab, ct, C.int32_t(len(text)), p, C.int32_t(n), C._Bool(addSpecial), C._Bool(parseSpecial))
		if got >= 0 {
			return toks[:got], nil
		}
		if got == C.INT32_MIN {
			break
		}
		n = int(-got)
	}
	return nil, fmt.Errorf("%w: %d bytes of text", ErrTokenize, len(text))
}

// TokenPiece returns the text bytes of one token (special tokens rendered when special).
func (m *Model) TokenPiece(tok Token, special bool) []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return nil
	}
	buf := make([]byte, 64)
	for {
		n := C.llama_token_to_piece(m.vocab, C.llama_token(tok), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, C._Bool(special))
		if n >= 0 {
			return buf[:n]
		}
		buf = make([]byte, int(-n))
	}
}

// Detokenize renders tokens as text (llama_detokenize; no special tokens, no
// leading-space removal), so that Detokenize(Tokenize(s)) == s for plain text.
func (m *Model) Detokenize(toks []Token) string {
	var out []byte
	for _, t := range toks {
		out = append(out, m.TokenPiece(t, false)...)
	}
	return string(out)
}

// ChatMessage is one turn for ApplyChatTemplate.
type ChatMessage struct {
	Role    string // "system", "user", "assistant"
	Content string
}

// ApplyChatTemplate renders msgs with tmpl (a Jinja-like template text or a
// built-in name such as "chatml"; "" uses the model's template) using
// llama_chat_apply_template. addAssistant appends the assistant turn opener.
// Returns an error wrapping ErrTemplate when the template is not supported.
func (m *Model) ApplyChatTemplate(tmpl string, msgs []ChatMessage, addAssistant bool) (string, error) {
	if tmpl == "" {
		tmpl = m.ChatTemplate()
	}
	if tmpl == "" {
		return "", fmt.Errorf("%w: model has no chat template", ErrTemplate)
	}
	ctmpl := C.CString(tmpl)
	defer C.free(unsafe.Pointer(ctmpl))
	cmsgs := (*C.struct_llama_chat_message)(C.calloc(C.size_t(max(len(msgs), 1)), C.size_t(unsafe.Sizeof(C.struct_llama_chat_message{}))))
	defer C.free(unsafe.Pointer(cmsgs))
	view := unsafe.Slice(cmsgs, max(len(msgs), 1))
	total := 0
	for i, msg := range msgs {
		view[i].role = C.CString(msg.Role)
		view[i].content = C.CString(msg.Content)
		total += len(msg.Role) + len(msg.Content)
	}
	defer func() {
		for i := range msgs {
			C.free(unsafe.Pointer(view[i].role))
			C.free(unsafe.Pointer(view[i].content))
		}
	}()
	size := 2*total + 256
	for attempt := 0; attempt < 2; attempt++ {
		buf := make([]byte, size)
		n := C.llama_chat_apply_template(ctmpl, cmsgs, C.size_t(len(msgs)), C._Bool(addAssistant), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)))
		if n < 0 {
			return "", fmt.Errorf("%w: template not supported", ErrTemplate)
		}
		if int(n) <= len(buf) {
			return string(buf[:n]), nil
		}
		size = int(n)
	}
	return "", ErrTemplate
}

// ContextParams are load-time context settings (llama_context_params).
type ContextParams struct {
	NCtx      int // KV cache size in tokens, shared by all sequences; 0 = training context
	NBatch    int // max tokens per Decode call; 0 = 2048
	NUBatch   int // physical micro-batch, tokens; 0 = 512
	NSeqMax   int // max distinct sequences; 0 = 1
	Threads   int // CPU threads for prefill and decode (one persistent ggml threadpool); 0 = llama.cpp's default
	TypeK     int // KV key type: TypeF16, TypeQ8_0, TypeQ4_0 or TypeF32 (the zero value is TypeF32)
	TypeV     int // KV value type; see TypeK
	FlashAttn int // FlashAttnAuto, FlashAttnDisabled, FlashAttnEnabled
	KVUnified bool
	// Embeddings makes Decode produce embeddings (llama_get_embeddings_seq)
	// pooled per sequence with Pooling.
	Embeddings bool
	// Pooling is the pooling type with Embeddings: PoolingMean, PoolingCLS,
	// PoolingLast, or PoolingUnspecified for the model's own.
	Pooling int
	// Tap installs the tensor tap (Ctx.TapStart): an eval callback that
	// is idle, one C call per graph node, until a tap starts. Default off.
	Tap bool
}

// Pooling types (enum llama_pooling_type).
const (
	PoolingUnspecified = int(C.LLAMA_POOLING_TYPE_UNSPECIFIED)
	PoolingMean        = int(C.LLAMA_POOLING_TYPE_MEAN)
	PoolingCLS         = int(C.LLAMA_POOLING_TYPE_CLS)
	PoolingLast        = int(C.LLAMA_POOLING_TYPE_LAST)
)

// Ctx is a llama context: a KV cache with NSeqMax sequences and the compute
// graph. Not safe for concurrent use: one goroutine owns it (runtime.Engine
// serializes every call). After Close every method is a no-op: those that
// return an error return ErrClosed, the others zero values.
type Ctx struct {
	c      *C.struct_llama_context
	model  *Model
	abort  *C.int                    // C memory polled by the abort callback
	pool   *C.struct_ggml_threadpool // CPU worker threads, nil with one thread
	nVocab int
	embd   bool           // the context outputs embeddings (ContextParams.Embeddings)
	tap    *C.memosrt_tap // C memory read by the eval callback; nil without ContextParams.Tap
	// dropGraph makes the next Decode build its graph anew (DropGraph).
	dropGraph bool
	// lastYield is when Decode last yielded (yieldInterval).
	lastYield time.Time
}

// yieldInterval is how long Decode lets its goroutine run before it
// yields (runtime.Gosched) ahead of the next llama_decode. A goroutine
// that decodes step after step (the engine's batch goroutine, a trainer's
// loop) spends nearly all its time in cgo calls and never blocks, so the
// Go scheduler sees it run past its 10 ms slice (forcePreemptNS in Go's
// runtime/proc.go). Go 1.26 does not preempt a goroutine in a cgo call
// (preemptone) but takes its P, and as the goroutine is never
// rescheduled, sysmon takes the P again on each of its ticks and stays at
// its shortest sleep (20 µs, sysmon in proc.go): thousands of wake-ups a
// second on the CPUs that ggml's threads spin on. A yield starts a new
// slice; half the slice puts one in every slice.
const yieldInterval = 5 * time.Millisecond

// NewContext creates a context on m.
func NewContext(m *Model, p ContextParams) (*Ctx, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return nil, ErrClosed
	}
	cp := C.llama_context_default_params()
	if p.NCtx > 0 {
		cp.n_ctx = C.uint32_t(p.NCtx)
	}
	if p.NBatch > 0 {
		cp.n_batch = C.uint32_t(p.NBatch)
	}
	if p.NUBatch > 0 {
		cp.n_ubatch = C.uint32_t(p.NUBatch)
	}
	if p.NSeqMax > 0 {
		cp.n_seq_max = C.uint32_t(p.NSeqMax)
	}
	if p.Threads > 0 {
		cp.n_threads = C.int32_t(p.Threads)
		cp.n_threads_batch = C.int32_t(p.Threads)
	}
	cp.type_k = C.enum_ggml_type(p.TypeK)
	cp.type_v = C.enum_ggml_type(p.TypeV)
	cp.flash_attn_type = C.enum_llama_flash_attn_type(p.FlashAttn)
	cp.kv_unified = C._Bool(p.KVUnified)
	cp.no_perf = true
	if p.Embeddings {
		cp.embeddings = true
		cp.pooling_type = C.enum_llama_pooling_type(p.Pooling)
	}
	var tap *C.memosrt_tap
	if p.Tap {
		tap = (*C.memosrt_tap)(C.calloc(1, C.size_t(unsafe.Sizeof(C.memosrt_tap{}))))
		C.memosrt_set_tap(&cp, tap)
	}
	c := C.llama_init_from_model(m.m, cp)
	if c == nil {
		C.free(unsafe.Pointer(tap))
		return nil, fmt.Errorf("%w: n_ctx=%d n_batch=%d n_seq_max=%d type_k=%s type_v=%s", ErrContext,
			p.NCtx, p.NBatch, p.NSeqMax, TypeName(p.TypeK), TypeName(p.TypeV))
	}
	flag := (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))
	C.memosrt_set_abort(c, flag)
	ctx := &Ctx{c: c, model: m, abort: flag, nVocab: int(C.llama_vocab_n_tokens(m.vocab)), embd: p.Embeddings, tap: tap}
	// A persistent ggml threadpool, as llama-server attaches one. Without
	// it ggml-cpu starts and joins its worker threads on every graph; and
	// the OpenMP alternative (GGML_USE_OPENMP) keeps one libgomp team per
	// calling OS thread, which Go's scheduler multiplies until libgomp's
	// barriers sleep in futex instead of spinning (see docs/design.md, Build
	// choices; the figures are in docs/benchmarks.md).
	if n := int(cp.n_threads); n > 1 {
		tpp := C.ggml_threadpool_params_default(C.int(n))
		ctx.pool = C.ggml_threadpool_new(&tpp)
		if ctx.pool != nil {
			C.llama_attach_threadpool(c, ctx.pool, ctx.pool)
		}
	}
	return ctx, nil
}

// Close frees the context. Idempotent.
func (c *Ctx) Close() error {
	if c != nil && c.c != nil {
		C.llama_free(c.c)
		c.c = nil
		if c.pool != nil {
			C.ggml_threadpool_free(c.pool)
			c.pool = nil
		}
		C.free(unsafe.Pointer(c.abort))
		c.abort = nil
		if c.tap != nil {
			C.free(unsafe.Pointer(c.tap.buf))
			C.free(unsafe.Pointer(c.tap))
			c.tap = nil
		}
	}
	return nil
}

// ErrTap is returned by TapStop when no tap is installed
// (ContextParams.Tap), or when the tapped tensor was not F32 and
// contiguous, or memory for its rows ran out.
var ErrTap = errors.New("llama: tensor tap")

// TapStart arms the tap: until TapStop, every Decode copies the values of
// the graph tensor called name (llama.cpp names them "<name>-<layer>",
// e.g. "Vcur-1": layer 1's V before it enters the KV cache, shape
// [n_embd_v_gqa][n_tokens] float32 for llama) and stops each ubatch's graph
// right after it. Such a Decode writes the KV cells of the layers before
// the tapped tensor only and leaves its logits undefined: decode into a
// scratch sequence and remove it afterwards. Returns ErrTap without
// ContextParams.Tap.
func (c *Ctx) TapStart(name string) error {
	if c.closed() {
		return ErrClosed
	}
	if c.tap == nil {
		return fmt.Errorf("%w: context created without ContextParams.Tap", ErrTap)
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	C.memosrt_tap_name(c.tap, cs)
	c.tap.used = 0
	c.tap.err = 0
	c.tap.active = 1
	return nil
}

// TapStop disarms the tap and returns the captured values in Go memory,
// ubatch after ubatch in batch order ([n_tokens][width]float32 for a
// tensor of width values per token). An error wraps ErrTap.
func (c *Ctx) TapStop() ([]float32, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	if c.tap == nil {
		return nil, fmt.Errorf("%w: context created without ContextParams.Tap", ErrTap)
	}
	c.tap.active = 0
	switch c.tap.err {
	case 1:
		return nil, fmt.Errorf("%w: tensor %q is not contiguous F32", ErrTap, C.GoString(&c.tap.name[0]))
	case 2:
		return nil, fmt.Errorf("%w: out of memory after %d values", ErrTap, int(c.tap.used))
	}
	n := int(c.tap.used)
	if n == 0 {
		return nil, nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(c.tap.buf)), n)...), nil
}

// CanShift reports whether the KV cache supports position shifts
// (llama_memory_can_shift): false for recurrent state and for
// sliding-window caches whose two halves differ in size.
func (c *Ctx) CanShift() bool {
	if c.closed() {
		return false
	}
	return bool(C.llama_memory_can_shift(c.mem()))
}

// Model returns the model the context was made from.
func (c *Ctx) Model() *Model { return c.model }

// closed reports a closed context.
func (c *Ctx) closed() bool { return c == nil || c.c == nil }

// NCtx returns the KV cache size in tokens; NBatch, NUBatch, NSeqMax likewise.
func (c *Ctx) NCtx() int {
	if c.closed() {
		return 0
	}
	return int(C.llama_n_ctx(c.c))
}

func (c *Ctx) NCtxSeq() int {
	if c.closed() {
		return 0
	}
	return int(C.llama_n_ctx_seq(c.c))
}

func (c *Ctx) NBatch() int {
	if c.closed() {
		return 0
	}
	return int(C.llama_n_batch(c.c))
}

func (c *Ctx) NUBatch() int {
	if c.closed() {
		return 0
	}
	return int(C.llama_n_ubatch(c.c))
}

func (c *Ctx) NSeqMax() int {
	if c.closed() {
		return 0
	}
	return int(C.llama_n_seq_max(c.c))
}

// SetThreads sets the thread counts of one-token decodes (n) and of
// batches (nBatch), as llama_set_n_threads; with a threadpool (Threads > 1
// at NewContext) they are capped at its size.
func (c *Ctx) SetThreads(n, nBatch int) {
	if !c.closed() {
		C.llama_set_n_threads(c.c, C.int32_t(n), C.int32_t(nBatch))
	}
}

// SetAbort raises (true) or clears (false) the abort flag that llama_decode
// polls; a raised flag makes a running Decode return ErrAborted. Safe to call
// from any goroutine while the context is open (runtime.Engine calls it only
// then).
func (c *Ctx) SetAbort(on bool) {
	v := 0
	if on {
		v = 1
	}
	if f := c.abort; f != nil {
		C.memosrt_store_flag(f, C.int(v))
	}
}

// Batch is a llama_batch of up to Cap tokens, one sequence id per token.
// Not safe for concurrent use.
type Batch struct {
	b   C.struct_llama_batch
	cap int
	n   int
}

// NewBatch allocates a batch for up to capacity tokens.
func NewBatch(capacity int) *Batch {
	return &Batch{b: C.llama_batch_init(C.int32_t(capacity), 0, 1), cap: capacity}
}

// Add appends a token at position pos of sequence seq; logits asks for its output row.
func (b *Batch) Add(tok Token, pos int, seq int, logits bool) error {
	if b.cap == 0 {
		return ErrClosed
	}
	if b.n >= b.cap {
		return ErrBatchFull
	}
	l := C.int8_t(0)
	if logits {
		l = 1
	}
	C.memosrt_batch_set(&b.b, C.int(b.n), C.llama_token(tok), C.llama_pos(pos), C.llama_seq_id(seq), l)
	b.n++
	b.b.n_tokens = C.int32_t(b.n)
	return nil
}

// Len returns the number of tokens in the batch; Cap its capacity.
func (b *Batch) Len() int { return b.n }
func (b *Batch) Cap() int { return b.cap }

// Clear empties the batch.
func (b *Batch) Clear() {
	b.n = 0
	if b.cap > 0 {
		b.b.n_tokens = 0
	}
}

// Close frees the batch. Idempotent.
func (b *Batch) Close() error {
	if b.cap > 0 {
		C.llama_batch_free(b.b)
		b.cap = 0
		b.n = 0
	}
	return nil
}

// DropGraph makes the next Decode build its compute graph anew instead of
// reusing the previous one. Call it after changing the attached LoRA
// adapters: llama.cpp's reuse check (llm_graph_params::allow_reuse,
// llama-graph.h) compares the adapter map by address, so it cannot see a
// switch and would run the previous adapters' graph. The next Decode turns
// the embeddings output on for itself (llama_set_embeddings), a graph
// parameter the check does compare, so both it and the Decode after it
// build new graphs; logits are unchanged. Without it graph reuse stays on
// (llama.cpp's default; LLAMA_GRAPH_REUSE_DISABLE is never needed).
func (c *Ctx) DropGraph() { c.dropGraph = true }

// Decode runs the batch (llama_decode). Return codes become ErrNoKVSlot (1),
// ErrAborted (2) and ErrDecode (others).
func (c *Ctx) Decode(b *Batch) error {
	if c.closed() {
		return ErrClosed
	}
	if b.cap == 0 {
		return fmt.Errorf("%w: batch", ErrClosed)
	}
	if b.n == 0 {
		return ErrEmptyBatch
	}
	if c.dropGraph && !c.embd && C.llama_pooling_type(c.c) == C.LLAMA_POOLING_TYPE_NONE {
		c.dropGraph = false
		C.llama_set_embeddings(c.c, true)
		defer C.llama_set_embeddings(c.c, false)
	}
	if now := time.Now(); now.Sub(c.lastYield) >= yieldInterval {
		goruntime.Gosched()
		c.lastYield = now
	}
	rc := C.llama_decode(c.c, b.b)
	switch rc {
	case 0:
		return nil
	case 1:
		return ErrNoKVSlot
	case 2:
		return ErrAborted
	default:
		return fmt.Errorf("%w: code %d", ErrDecode, int(rc))
	}
}

// Logits copies the output row for batch index i (a token added with
// logits=true) into dst, which grows to [n_vocab]float32, and returns it.
func (c *Ctx) Logits(i int, dst []float32) []float32 {
	if c.closed() {
		return nil
	}
	p := C.llama_get_logits_ith(c.c, C.int32_t(i))
	if p == nil {
		return nil
	}
	dst = append(dst[:0], unsafe.Slice((*float32)(unsafe.Pointer(p)), c.nVocab)...)
	return dst
}

// PoolingType returns the context's resolved pooling type.
func (c *Ctx) PoolingType() int {
	if c.closed() {
		return PoolingUnspecified
	}
	return int(C.llama_pooling_type(c.c))
}

// Embeddings copies the pooled embedding of seq ([n]float32, n = n_embd),
// or nil when the context has none.
func (c *Ctx) Embeddings(seq int, n int) []float32 {
	if c.closed() {
		return nil
	}
	p := C.llama_get_embeddings_seq(c.c, C.llama_seq_id(seq))
	if p == nil {
		return nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(p)), n)...)
}

func (c *Ctx) mem() C.llama_memory_t { return C.llama_get_memory(c.c) }

func (c *Ctx) checkSeq(seq int) error {
	if c.closed() {
		return ErrClosed
	}
	if seq < 0 || seq >= c.NSeqMax() {
		return fmt.Errorf("%w: %d not in [0, %d)", ErrBadSeqID, seq, c.NSeqMax())
	}
	return nil
}

// SeqRemove removes positions [p0, p1) of seq (p1 < 0: to the end).
// seq < 0 removes from all sequences. Reports whether it succeeded.
func (c *Ctx) SeqRemove(seq, p0, p1 int) bool {
	if c.closed() {
		return false
	}
	return bool(C.llama_memory_seq_rm(c.mem(), C.llama_seq_id(seq), C.llama_pos(p0), C.llama_pos(p1)))
}

// SeqCopy shares positions [p0, p1) of src into dst (cells shared, nothing copied).
func (c *Ctx) SeqCopy(src, dst, p0, p1 int) error {
	if err := c.checkSeq(src); err != nil {
		return err
	}
	if err := c.checkSeq(dst); err != nil {
		return err
	}
	C.llama_memory_seq_cp(c.mem(), C.llama_seq_id(src), C.llama_seq_id(dst), C.llama_pos(p0), C.llama_pos(p1))
	return nil
}

// SeqKeep removes every sequence but seq.
func (c *Ctx) SeqKeep(seq int) {
	if !c.closed() {
		C.llama_memory_seq_keep(c.mem(), C.llama_seq_id(seq))
	}
}

// SeqShift adds delta to the positions in [p0, p1) of seq (llama_memory_seq_add).
func (c *Ctx) SeqShift(seq, p0, p1, delta int) error {
	if c.closed() {
		return ErrClosed
	}
	if !bool(C.llama_memory_can_shift(c.mem())) {
		return fmt.Errorf("llama: this model's KV cache cannot shift positions")
	}
	C.llama_memory_seq_add(c.mem(), C.llama_seq_id(seq), C.llama_pos(p0), C.llama_pos(p1), C.llama_pos(delta))
	return nil
}

// SeqPosMax returns the largest position in seq, or -1 when seq is empty.
func (c *Ctx) SeqPosMax(seq int) int {
	if c.closed() {
		return -1
	}
	return int(C.llama_memory_seq_pos_max(c.mem(), C.llama_seq_id(seq)))
}

// SeqPosMin returns the smallest position in seq, or -1 when seq is empty.
func (c *Ctx) SeqPosMin(seq int) int {
	if c.closed() {
		return -1
	}
	return int(C.llama_memory_seq_pos_min(c.mem(), C.llama_seq_id(seq)))
}

// ClearMemory empties the whole KV cache (all sequences).
func (c *Ctx) ClearMemory() {
	if !c.closed() {
		C.llama_memory_clear(c.mem(), true)
	}
}

// StateSeqSize returns the byte size of seq's serialized state (llama_state_seq_get_size).
func (c *Ctx) StateSeqSize(seq int) int {
	if c.closed() {
		return 0
	}
	return int(C.llama_state_seq_get_size(c.c, C.llama_seq_id(seq)))
}

// StateSeqGet serializes seq's KV state (llama_state_seq_get_data) into a new slice.
func (c *Ctx) StateSeqGet(seq int) ([]byte, error) {
	if err := c.checkSeq(seq); err != nil {
		return nil, err
	}
	n := c.StateSeqSize(seq)
	buf := make([]byte, n)
	if n == 0 {
		return buf, nil
	}
	var pin goruntime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	got := C.llama_state_seq_get_data(c.c, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(n), C.llama_seq_id(seq))
	if int(got) != n {
		return nil, fmt.Errorf("%w: wrote %d of %d bytes", ErrStateSeq, int(got), n)
	}
	return buf, nil
}

// StateSeqSet restores seq from data produced by StateSeqGet. On failure
// llama.cpp clears seq (llama_kv_cache::state_read), so the sequence is left
// empty, never half-restored; the error wraps ErrStateSeq.
func (c *Ctx) StateSeqSet(seq int, data []byte) error {
	if err := c.checkSeq(seq); err != nil {
		return err
	}
	if len(data) == 0 {
		return fmt.Errorf("%w: empty state", ErrStateSeq)
	}
	var pin goruntime.Pinner
	pin.Pin(&data[0])
	defer pin.Unpin()
	got := C.llama_state_seq_set_data(c.c, (*C.uint8_t)(unsafe.Pointer(&data[0])), C.size_t(len(data)), C.llama_seq_id(seq))
	if got == 0 {
		c.SeqRemove(seq, -1, -1)
		return fmt.Errorf("%w: %d bytes into seq %d", ErrStateSeq, len(data), seq)
	}
	return nil
}

// Adapter is a loaded LoRA adapter (llama_adapter_lora). Free it with Close
// after every context using it has detached it.
type Adapter struct {
	a *C.struct_llama_adapter_lora
}

// LoadAdapter loads a GGUF LoRA adapter for model m. Returns an error wrapping
// ErrAdapter when llama.cpp refuses it (wrong base model shapes, bad file).
func LoadAdapter(m *Model, path string) (*Adapter, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return nil, ErrClosed
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAdapter, err)
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	a := C.llama_adapter_lora_init(m.m, cs)
	if a == nil {
		return nil, fmt.Errorf("%w: %s refused by llama.cpp", ErrAdapter, path)
	}
	return &Adapter{a: a}, nil
}

// Close frees the adapter. Idempotent.
func (a *Adapter) Close() error {
	if a != nil && a.a != nil {
		C.llama_adapter_lora_free(a.a)
		a.a = nil
	}
	return nil
}

// SetAdapter attaches a to the context with scale (replacing its scale if attached).
func (c *Ctx) SetAdapter(a *Adapter, scale float32) error {
	if c.closed() || a == nil || a.a == nil {
		return ErrClosed
	}
	if rc := C.llama_set_adapter_lora(c.c, a.a, C.float(scale)); rc != 0 {
		return fmt.Errorf("%w: attach code %d", ErrAdapter, int(rc))
	}
	return nil
}

// RemoveAdapter detaches a; it is not an error if a was not attached.
func (c *Ctx) RemoveAdapter(a *Adapter) {
	if !c.closed() && a != nil && a.a != nil {
		C.llama_rm_adapter_lora(c.c, a.a)
	}
}

// ClearAdapters detaches all adapters.
func (c *Ctx) ClearAdapters() {
	if !c.closed() {
		C.llama_clear_adapter_lora(c.c)
	}
}
