package gguf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/bits"
	"os"

	"github.com/memosrt/memosrt/internal/half"

	"github.com/ollama/ollama/fs/ggml"

	"github.com/memosrt/memosrt/internal/atomicfile"
)

// Spec is the shape of a model of architecture Arch. Zero values of the
// optional fields mean their defaults; the sizes are required.
type Spec struct {
	// Arch is general.architecture: ArchLlama (the default: a decoder,
	// the chat and benchmark shapes) or ArchBERT (an encoder: an
	// embedding model). Metadata keys below are named for the llama
	// architecture; for BERT they are the same keys under "bert.".
	Arch      string
	Name      string // general.name; default "memosrt-random"
	NLayer    int    // transformer blocks (llama.block_count)
	NEmbd     int    // embedding width (llama.embedding_length)
	NHead     int    // attention heads; head size is NEmbd/NHead
	NHeadKV   int    // KV heads (GQA); NHead must be a multiple of it (BERT: equal to it)
	NFF       int    // feed-forward width (llama.feed_forward_length)
	NVocab    int    // vocabulary size, tokens; 0 = the tokenizer's size, otherwise it must equal it
	NCtxTrain int    // training context length, tokens (llama.context_length); BERT: rows of position_embd, the longest input
	FileType  string // weight type of the 2-D tensors: "f16" (default) or "f32"; 1-D tensors (norm weights, biases) are always f32

	RopeFreqBase float32 // llama.rope.freq_base; default 10000 (not written for BERT, which has no RoPE)
	// RMSEps is llama.attention.layer_norm_rms_epsilon, default 1e-5;
	// for BERT bert.attention.layer_norm_epsilon, default 1e-12 (BERT's
	// LayerNorm epsilon).
	RMSEps float32

	// Meta adds or overrides metadata keys (values as ggml.KV takes
	// them: uint32, float32, string, []int32, ...), for models that
	// declare what the llama architecture does not use, such as
	// "llama.rope.dimension_sections" (M-RoPE) or
	// "llama.attention.sliding_window", or "bert.pooling_type" (BERT's
	// default is 1, mean; 2 is CLS, 3 last: llama_pooling_type).
	Meta map[string]any
}

// Architectures Spec.Arch names.
const (
	ArchLlama = "llama"
	ArchBERT  = "bert"
)

// BERTTokenTypes is the number of token type rows (token_types) of a BERT
// model: tokenizer.ggml.token_type_count when the tokenizer source says,
// else 2 (BERT's "sentence A" and "sentence B"), which Write then adds.
const BERTTokenTypes = 2

// Presets are the shapes we benchmark, by name. Read-only.
//
//   - "1b": Llama 3.2 1B (16 layers, n_embd 2048, 32/8 heads, n_ff 8192),
//     with the 32000-token Llama 2 vocabulary: 1.10e9 parameters, 2.2 GB in f16.
//   - "8b": Llama 3.1 8B (32 layers, n_embd 4096, 32/8 heads, n_ff 14336),
//     Llama 2 vocabulary: 7.24e9 parameters, 14.5 GB in f16.
//   - "tiny": 2 layers, n_embd 64, for tests (4.17e6 parameters, 8.3 MB in f16).
//   - "bert-tiny": a BERT encoder (an embedding model, mean pooling) of 2
//     layers, n_embd 64, 4 heads, n_ff 128 and 512 positions, for the
//     30522-token BERT WordPiece vocabulary (bge's): 2.05e6 parameters,
//     4.1 MB in f16. Set "bert.pooling_type" to 2 in Spec.Meta for CLS
//     pooling; with random weights of std 0.02 attention barely mixes the
//     tokens, so CLS vectors hardly depend on the text (cosine 0.9999
//     between unrelated sentences, against 0.25 to 0.7 by the mean).
//
// Shapes from the models' config.json on Hugging Face (meta-llama/Llama-3.2-1B,
// meta-llama/Llama-3.1-8B); the training context is cut to 32768 tokens so
// that a context of the full training length fits in memory.
var Presets = map[string]Spec{
	"1b": {Name: "random-llama-1b", NLayer: 16, NEmbd: 2048, NHead: 32, NHeadKV: 8, NFF: 8192,
		NVocab: 32000, NCtxTrain: 32768, FileType: "f16", RopeFreqBase: 500000},
	"8b": {Name: "random-llama-8b", NLayer: 32, NEmbd: 4096, NHead: 32, NHeadKV: 8, NFF: 14336,
		NVocab: 32000, NCtxTrain: 32768, FileType: "f16", RopeFreqBase: 500000},
	"tiny": {Name: "random-llama-tiny", NLayer: 2, NEmbd: 64, NHead: 4, NHeadKV: 2, NFF: 128,
		NVocab: 32000, NCtxTrain: 2048, FileType: "f16"},
	"bert-tiny": {Arch: ArchBERT, Name: "random-bert-tiny", NLayer: 2, NEmbd: 64, NHead: 4, NHeadKV: 4, NFF: 128,
		NVocab: 30522, NCtxTrain: 512, FileType: "f16"},
}

// Weight initialisation: 2-D weights are N(0, WeightStd) (the GPT-2/Llama
// initializer_range, 0.02); norm weights are 1; biases, and BERT's token
// type embeddings, are 0. A random token type row would add one vector
// shared by every token (llama.cpp gives every token type 0) and pull all
// mean-pooled embeddings together: unrelated 8-token texts would have a
// cosine near 0.9, where textmem merges near duplicates.
const WeightStd = 0.02

// ChunkBytes is the buffer size one tensor writer fills and writes at a time.
const ChunkBytes = 4 << 20

// Validate reports every problem with s at once, wrapped in ErrBadSpec.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadSpec}, args...)...))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"n_layer", s.NLayer}, {"n_embd", s.NEmbd}, {"n_head", s.NHead}, {"n_head_kv", s.NHeadKV}, {"n_ff", s.NFF}, {"n_ctx_train", s.NCtxTrain}} {
		if f.v <= 0 {
			bad("%s = %d, must be > 0", f.name, f.v)
		}
	}
	if s.NVocab < 0 {
		bad("n_vocab = %d, must be >= 0", s.NVocab)
	}
	bert := s.Arch == ArchBERT
	if s.Arch != "" && s.Arch != ArchLlama && !bert {
		bad("architecture %q, want %q or %q", s.Arch, ArchLlama, ArchBERT)
	}
	if s.NHead > 0 && s.NEmbd > 0 {
		if s.NEmbd%s.NHead != 0 {
			bad("n_embd %d is not a multiple of n_head %d", s.NEmbd, s.NHead)
		} else if !bert && (s.NEmbd/s.NHead)%2 != 0 {
			bad("head size %d (n_embd %d / n_head %d) is odd; rope needs it even", s.NEmbd/s.NHead, s.NEmbd, s.NHead)
		}
	}
	if s.NHead > 0 && s.NHeadKV > 0 && s.NHead%s.NHeadKV != 0 {
		bad("n_head %d is not a multiple of n_head_kv %d", s.NHead, s.NHeadKV)
	} else if bert && s.NHead > 0 && s.NHeadKV > 0 && s.NHeadKV != s.NHead {
		bad("n_head_kv %d differs from n_head %d; BERT has no GQA", s.NHeadKV, s.NHead)
	}
	if _, _, err := s.types(); err != nil {
		errs = append(errs, err)
	}
	if s.RopeFreqBase < 0 || s.RMSEps < 0 {
		bad("rope_freq_base %g and rms_eps %g must be >= 0", s.RopeFreqBase, s.RMSEps)
	}
	return errors.Join(errs...)
}

// types returns the GGUF file type and the tensor type of the 2-D weights.
func (s Spec) types() (ggml.FileType, ggml.TensorType, error) {
	switch s.FileType {
	case "", "f16":
		return ggml.FileTypeF16, ggml.TensorTypeF16, nil
	case "f32":
		return ggml.FileTypeF32, ggml.TensorTypeF32, nil
	}
	return 0, 0, fmt.Errorf("%w: file type %q, want \"f16\" or \"f32\"", ErrBadSpec, s.FileType)
}

// NParams returns the number of weights in a model of shape s (what
// llama_model_n_params reports). Llama: token_embd and output
// [n_vocab][n_embd], output_norm [n_embd], and per layer two norms
// [n_embd], attn_q and attn_output [n_embd][n_embd], attn_k and attn_v
// [n_embd_kv][n_embd] (n_embd_kv = n_head_kv * n_embd / n_head), ffn_gate
// and ffn_up [n_ff][n_embd], ffn_down [n_embd][n_ff]. BERT: token_embd
// [n_vocab][n_embd], token_types [BERTTokenTypes][n_embd], position_embd
// [n_ctx_train][n_embd], token_embd_norm weight and bias [n_embd], and per
// layer attn_q, attn_k, attn_v, attn_output [n_embd][n_embd] with biases
// [n_embd], attn_output_norm and layer_output_norm weights and biases
// [n_embd], ffn_up [n_ff][n_embd] with bias [n_ff], ffn_down [n_embd][n_ff]
// with bias [n_embd]. NVocab must be set.
func (s Spec) NParams() uint64 { return count(s.tensors(BERTTokenTypes)) }

// fill is what a tensor holds.
type fill int

const (
	fillRandom fill = iota // N(0, WeightStd)
	fillOnes               // norm weights
	fillZeros              // biases, BERT's token types
)

// tensorSpec is one tensor to write: its name, GGUF shape (ne0 first) and
// its values. 1-D tensors are f32, 2-D ones Spec.FileType unless f32.
type tensorSpec struct {
	name  string
	shape []uint64
	fill  fill
	f32   bool
}

// tensors lists the tensors llama.cpp's loader expects for s.Arch, with
// GGUF shapes, i.e. [in][out] as ne0, ne1; nTypes is BERT's token type
// count (tokenizer.ggml.token_type_count).
func (s Spec) tensors(nTypes int) []tensorSpec {
	if s.Arch == ArchBERT {
		return s.bertTensors(nTypes)
	}
	embd, vocab, ff := uint64(s.NEmbd), uint64(s.NVocab), uint64(s.NFF)
	kv := uint64(0)
	if s.NHead > 0 {
		kv = uint64(s.NHeadKV * (s.NEmbd / s.NHead))
	}
	ts := []tensorSpec{
		{name: "token_embd.weight", shape: []uint64{embd, vocab}},
		{name: "output_norm.weight", shape: []uint64{embd}, fill: fillOnes},
		{name: "output.weight", shape: []uint64{embd, vocab}},
	}
	for i := range s.NLayer {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			tensorSpec{name: p + "attn_norm.weight", shape: []uint64{embd}, fill: fillOnes},
			tensorSpec{name: p + "attn_q.weight", shape: []uint64{embd, embd}},
			tensorSpec{name: p + "attn_k.weight", shape: []uint64{embd, kv}},
			tensorSpec{name: p + "attn_v.weight", shape: []uint64{embd, kv}},
			tensorSpec{name: p + "attn_output.weight", shape: []uint64{embd, embd}},
			tensorSpec{name: p + "ffn_norm.weight", shape: []uint64{embd}, fill: fillOnes},
			tensorSpec{name: p + "ffn_gate.weight", shape: []uint64{embd, ff}},
			tensorSpec{name: p + "ffn_up.weight", shape: []uint64{embd, ff}},
			tensorSpec{name: p + "ffn_down.weight", shape: []uint64{ff, embd}},
		)
	}
	return ts
}

// bertTensors lists the tensors of llama.cpp's BERT loader
// (LLM_ARCH_BERT in llama-model.cpp load_tensors: separate Q, K, V, every
// bias present, no classifier head), with GGUF shapes.
func (s Spec) bertTensors(nTypes int) []tensorSpec {
	embd, vocab, ff, pos := uint64(s.NEmbd), uint64(s.NVocab), uint64(s.NFF), uint64(s.NCtxTrain)
	ts := []tensorSpec{
		{name: "token_embd.weight", shape: []uint64{embd, vocab}},
		// f32: the graph adds a row of it to f32 activations (ggml_add
		// has no f32 + f16 kernel on the CPU)
		{name: "token_types.weight", shape: []uint64{embd, uint64(nTypes)}, fill: fillZeros, f32: true},
		{name: "position_embd.weight", shape: []uint64{embd, pos}},
		{name: "token_embd_norm.weight", shape: []uint64{embd}, fill: fillOnes},
		{name: "token_embd_norm.bias", shape: []uint64{embd}, fill: fillZeros},
	}
	for i := range s.NLayer {
		p := fmt.Sprintf("blk.%d.", i)
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			ts = append(ts,
				tensorSpec{name: p + n + ".weight", shape: []uint64{embd, embd}},
				tensorSpec{name: p + n + ".bias", shape: []uint64{embd}, fill: fillZeros})
		}
		for _, n := range []string{"attn_output_norm", "layer_output_norm"} {
			ts = append(ts,
				tensorSpec{name: p + n + ".weight", shape: []uint64{embd}, fill: fillOnes},
				tensorSpec{name: p + n + ".bias", shape: []uint64{embd}, fill: fillZeros})
		}
		ts = append(ts,
			tensorSpec{name: p + "ffn_up.weight", shape: []uint64{embd, ff}},
			tensorSpec{name: p + "ffn_up.bias", shape: []uint64{ff}, fill: fillZeros},
			tensorSpec{name: p + "ffn_down.weight", shape: []uint64{ff, embd}},
			tensorSpec{name: p + "ffn_down.bias", shape: []uint64{embd}, fill: fillZeros},
		)
	}
	return ts
}

// Write writes a random-weight model of shape spec to path, with the
// tokenizer (every tokenizer.* key) of the GGUF file tokenizerFrom. The
// weights are a deterministic function of seed and the tensor name, so equal
// arguments give byte-identical files.
//
// The file is written to a temporary file in path's directory, synced and
// renamed onto path: path is either untouched or complete. Write checks ctx
// between chunks and returns ctx.Err() (wrapped) when it ends. Errors wrap
// ErrBadSpec, ErrTokenizer, or the I/O error.
func Write(ctx context.Context, path string, spec Spec, tokenizerFrom string, seed int64) (err error) {
	if err := spec.Validate(); err != nil {
		return err
	}
	tok, nTok, err := readTokenizer(tokenizerFrom)
	if err != nil {
		return err
	}
	if spec.NVocab == 0 {
		spec.NVocab = nTok
	} else if spec.NVocab != nTok {
		return fmt.Errorf("%w: %s has %d tokens, spec n_vocab is %d", ErrTokenizer, tokenizerFrom, nTok, spec.NVocab)
	}
	fileType, weightType, _ := spec.types()
	nTypes := 0
	if spec.Arch == ArchBERT {
		nTypes = BERTTokenTypes
		if n, ok := tok["tokenizer.ggml.token_type_count"].(uint32); ok && n > 0 {
			nTypes = int(n)
		} else {
			tok["tokenizer.ggml.token_type_count"] = uint32(nTypes)
		}
	}
	tensors := spec.tensors(nTypes)
	kv := spec.meta(fileType, count(tensors))
	for k, v := range tok {
		kv[k] = v
	}
	for k, v := range spec.Meta {
		kv[k] = v
	}

	tab := newNormalTables(WeightStd)
	var ts []*ggml.Tensor
	for _, t := range tensors {
		kind := weightType
		if len(t.shape) == 1 || t.f32 {
			kind = ggml.TensorTypeF32
		}
		n := uint64(1)
		for _, d := range t.shape {
			n *= d
		}
		ts = append(ts, &ggml.Tensor{
			Name:  t.name,
			Kind:  uint32(kind),
			Shape: t.shape,
			WriterTo: &tensorData{
				ctx:  ctx,
				n:    n,
				kind: kind,
				fill: t.fill,
				seed: tensorSeed(seed, t.name),
				tab:  tab,
			},
		})
	}

	err = atomicfile.Write(path, 0o644, func(f *os.File) error {
		if err := ggml.WriteGGUF(f, kv, ts); err != nil && ctx.Err() == nil {
			return err
		}
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	return nil
}

// count returns the number of weights in ts.
func count(ts []tensorSpec) uint64 {
	var n uint64
	for _, t := range ts {
		e := uint64(1)
		for _, d := range t.shape {
			e *= d
		}
		n += e
	}
	return n
}

// meta returns the general.* and architecture keys of s (NVocab set),
// holding nParams weights.
func (s Spec) meta(fileType ggml.FileType, nParams uint64) ggml.KV {
	name := s.Name
	if name == "" {
		name = "memosrt-random"
	}
	if s.Arch == ArchBERT {
		eps := s.RMSEps
		if eps == 0 {
			eps = 1e-12
		}
		// the keys llama.cpp's BERT loader reads (load_hparams,
		// LLM_ARCH_BERT): attention.causal and layer_norm_epsilon are
		// required; pooling_type 1 (mean) makes it an embedding model
		return ggml.KV{
			"general.architecture":              ArchBERT,
			"general.name":                      name,
			"general.file_type":                 fileType,
			"general.parameter_count":           nParams,
			"bert.block_count":                  uint32(s.NLayer),
			"bert.context_length":               uint32(s.NCtxTrain),
			"bert.embedding_length":             uint32(s.NEmbd),
			"bert.feed_forward_length":          uint32(s.NFF),
			"bert.attention.head_count":         uint32(s.NHead),
			"bert.attention.layer_norm_epsilon": eps,
			"bert.attention.causal":             false,
			"bert.pooling_type":                 uint32(1),
			"bert.vocab_size":                   uint32(s.NVocab),
		}
	}
	ropeBase := s.RopeFreqBase
	if ropeBase == 0 {
		ropeBase = 10000
	}
	eps := s.RMSEps
	if eps == 0 {
		eps = 1e-5
	}
	return ggml.KV{
		"general.architecture":                   ArchLlama,
		"general.name":                           name,
		"general.file_type":                      fileType,
		"general.parameter_count":                nParams,
		"llama.block_count":                      uint32(s.NLayer),
		"llama.context_length":                   uint32(s.NCtxTrain),
		"llama.embedding_length":                 uint32(s.NEmbd),
		"llama.feed_forward_length":              uint32(s.NFF),
		"llama.attention.head_count":             uint32(s.NHead),
		"llama.attention.head_count_kv":          uint32(s.NHeadKV),
		"llama.attention.layer_norm_rms_epsilon": eps,
		"llama.rope.dimension_count":             uint32(s.NEmbd / s.NHead),
		"llama.rope.freq_base":                   ropeBase,
		"llama.vocab_size":                       uint32(s.NVocab),
	}
}

// readTokenizer returns the tokenizer.* keys of the GGUF file at path and the
// number of tokens in tokenizer.ggml.tokens.
func readTokenizer(path string) (ggml.KV, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrTokenizer, err)
	}
	defer f.Close()
	g, err := ggml.Decode(f, -1) // -1: keep every array (the vocabulary)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %v", ErrTokenizer, path, err)
	}
	src := g.KV()
	out := ggml.KV{}
	for k := range src.Keys() {
		if len(k) > len("tokenizer.") && k[:len("tokenizer.")] == "tokenizer." {
			out[k] = src[k]
		}
	}
	n := len(src.Strings("tokenizer.ggml.tokens"))
	if n == 0 {
		return nil, 0, fmt.Errorf("%w: %s has no tokenizer.ggml.tokens", ErrTokenizer, path)
	}
	return out, n, nil
}

// tensorSeed derives a tensor's generator seed from the file seed and its
// name, so that tensors written in any order or in parallel are the same.
func tensorSeed(seed int64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix64(uint64(seed) ^ h.Sum64())
}

// splitmix64 is the SplitMix64 finaliser (Steele, Lea, Flood 2014).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// wyrand is the wyhash PRNG (Wang Yi, public domain): 64 random bits per
// step for one 64x64->128 multiply.
type wyrand uint64

func (r *wyrand) next() uint64 {
	*r += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(uint64(*r), uint64(*r)^0xe7037ed1a0b428db)
	return hi ^ lo
}

// normalTables map 16 random bits to a N(0, std) value: entry i is the
// quantile at (i+0.5)/65536, so a uniform index gives a normal sample
// (discretised, truncated at about 4.3 std), as f16 and f32 bits.
type normalTables struct {
	f16 [1 << 16]uint16
	f32 [1 << 16]uint32
}

func newNormalTables(std float64) *normalTables {
	t := new(normalTables)
	for i := range t.f16 {
		p := (float64(i) + 0.5) / (1 << 16)
		x := std * math.Sqrt2 * math.Erfinv(2*p-1)
		t.f16[i] = half.Bits(float32(x))
		t.f32[i] = math.Float32bits(float32(x))
	}
	return t
}

// tensorData produces one tensor's bytes in ChunkBytes pieces.
type tensorData struct {
	ctx  context.Context
	n    uint64 // elements
	kind ggml.TensorType
	fill fill // random, all 1.0 (norm weights) or all 0 (biases)
	seed uint64
	tab  *normalTables
}

// WriteTo writes the tensor's n elements to w; it stops with ctx.Err() when
// the context ends.
func (t *tensorData) WriteTo(w io.Writer) (int64, error) {
	size := uint64(2)
	if t.kind == ggml.TensorTypeF32 {
		size = 4
	}
	total := int64(t.n * size)
	buf := make([]byte, min(int64(ChunkBytes), total))
	if t.fill == fillOnes {
		writeOnes(buf, t.kind)
	}
	rng := wyrand(t.seed)
	var written int64
	for written < total {
		if err := t.ctx.Err(); err != nil {
			return written, err
		}
		b := buf[:min(int64(len(buf)), total-written)]
		if t.fill == fillRandom {
			t.random(b, &rng)
		}
		n, err := w.Write(b)
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

func writeOnes(b []byte, kind ggml.TensorType) {
	if kind == ggml.TensorTypeF32 {
		for i := 0; i+4 <= len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(1))
		}
		return
	}
	for i := 0; i+2 <= len(b); i += 2 {
		binary.LittleEndian.PutUint16(b[i:], 0x3c00)
	}
}

// random writes random values into b (a whole number of elements): four
// f16 or two f32 values per generator step.
func (t *tensorData) random(b []byte, rng *wyrand) {
	i := 0
	if t.kind == ggml.TensorTypeF32 {
		for ; i+8 <= len(b); i += 8 {
			x := rng.next()
			binary.LittleEndian.PutUint64(b[i:], uint64(t.tab.f32[x&0xffff])|uint64(t.tab.f32[x>>16&0xffff])<<32)
		}
		if i < len(b) {
			binary.LittleEndian.PutUint32(b[i:], t.tab.f32[rng.next()&0xffff])
		}
		return
	}
	for ; i+8 <= len(b); i += 8 {
		x := rng.next()
		binary.LittleEndian.PutUint64(b[i:], uint64(t.tab.f16[x&0xffff])|
			uint64(t.tab.f16[x>>16&0xffff])<<16|
			uint64(t.tab.f16[x>>32&0xffff])<<32|
			uint64(t.tab.f16[x>>48])<<48)
	}
	for ; i+2 <= len(b); i += 2 {
		binary.LittleEndian.PutUint16(b[i:], t.tab.f16[rng.next()&0xffff])
	}
}
