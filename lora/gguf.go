package lora

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// Tensor is one entry of a GGUF tensor table.
type Tensor struct {
	Name  string   `json:"name"`
	Type  string   `json:"type"`  // ggml type name: "f32", "f16", "bf16", "q8_0", ...
	Shape []uint64 `json:"shape"` // ne0 first, as GGUF stores it
	Bytes int64    `json:"bytes"`
	kind  ggml.TensorType
}

// File is what Inspect read from an adapter file: its metadata and tensor
// table (no tensor data).
type File struct {
	Path    string   `json:"path"`
	Arch    string   `json:"arch"`  // general.architecture
	Alpha   float32  `json:"alpha"` // adapter.lora.alpha; 0 when absent (scale used as is)
	Tensors []Tensor `json:"tensors"`
	Bytes   int64    `json:"bytes"` // tensor data, the memory a loaded adapter takes
}

// Info describes a checked adapter.
type Info struct {
	Arch    string   `json:"arch"`
	Rank    int      `json:"rank"`    // largest rank r over its pairs
	Alpha   float32  `json:"alpha"`   // the effective scale is Scale·Alpha/r (Scale when Alpha is 0), per llama.cpp llama_adapter_lora_weight::get_scale
	Targets []string `json:"targets"` // base tensors it modifies, sorted
	Bytes   int64    `json:"bytes"`   // tensor data bytes
}

// Base is what Check needs of a base model: its architecture and the shape
// of each of its tensors.
type Base struct {
	Arch   string
	Shapes map[string][]uint64 // tensor name → shape, ne0 first
}

// maxMetaArray bounds the arrays Inspect keeps in memory (an adapter has no
// vocabulary; longer arrays are skipped, not read into memory).
const maxMetaArray = 4096

// decode parses the GGUF header and tensor table of path. ggml.Decode checks
// every tensor's data lies inside the file.
func decode(path string, maxArray int) (*ggml.GGML, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g, err := ggml.Decode(f, maxArray)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("truncated GGUF: %w", err)
		}
		return nil, err
	}
	return g, nil
}

// ReadBase reads the architecture and tensor shapes of the base model GGUF
// at path (header only; arrays such as the vocabulary are skipped).
func ReadBase(path string) (Base, error) {
	g, err := decode(path, 0)
	if err != nil {
		return Base{}, fmt.Errorf("lora: base model %s: %w", path, err)
	}
	b := Base{Arch: g.KV().String("general.architecture"), Shapes: map[string][]uint64{}}
	for _, t := range g.Tensors().Items() {
		b.Shapes[t.Name] = t.Shape
	}
	return b, nil
}

// allowedTypes are the tensor types of LoRA halves: what llama.cpp's
// convert_lora_to_gguf.py writes (--outtype f32, f16, bf16, q8_0).
var allowedTypes = map[ggml.TensorType]string{
	ggml.TensorTypeF32: "f32", ggml.TensorTypeF16: "f16", ggml.TensorTypeBF16: "bf16", ggml.TensorTypeQ8_0: "q8_0",
}

// metaString returns the string value of key, "" when absent, or an error
// when the key holds another GGUF type (llama.cpp's gguf_get_val_str
// asserts on the type and would abort the process).
func metaString(kv ggml.KV, key string) (string, error) {
	v, ok := kv[key]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s is a %T, want a string", key, v)
	}
	return s, nil
}

// Inspect reads the adapter GGUF at path and checks what can be checked
// without the base model: general.type "adapter", adapter.type "lora",
// general.architecture set, adapter.lora.alpha (if present) a float32, no
// aLoRA invocation tokens (unsupported), and a tensor table of complete
// ".lora_a"/".lora_b" pairs of 2 or 3 dimensions in f32, f16, bf16 or q8_0,
// no name twice. Errors wrap ErrBadAdapter (or the I/O error).
func Inspect(path string) (File, error) {
	g, err := decode(path, maxMetaArray)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return File{}, fmt.Errorf("lora: %w", err)
		}
		return File{}, fmt.Errorf("%w: %s: not a readable GGUF: %v", ErrBadAdapter, path, err)
	}
	kv := g.KV()
	f := File{Path: path}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	typ, err := metaString(kv, "general.type")
	if err != nil {
		errs = append(errs, err.Error())
	} else if typ != "adapter" {
		bad("general.type is %q, want \"adapter\"", typ)
	}
	if f.Arch, err = metaString(kv, "general.architecture"); err != nil {
		errs = append(errs, err.Error())
	} else if f.Arch == "" {
		bad("general.architecture is missing")
	}
	at, err := metaString(kv, "adapter.type")
	if err != nil {
		errs = append(errs, err.Error())
	} else if at != "lora" {
		bad("adapter.type is %q, want \"lora\"", at)
	}
	if v, ok := kv["adapter.lora.alpha"]; ok {
		a, ok := v.(float32)
		if !ok {
			bad("adapter.lora.alpha is a %T, want a float32", v)
		}
		f.Alpha = a
	}
	if _, ok := kv["adapter.alora.invocation_tokens"]; ok {
		bad("aLoRA adapters (adapter.alora.invocation_tokens) are not supported")
	}
	seen := map[string]bool{}
	for _, t := range g.Tensors().Items() {
		kind := ggml.TensorType(t.Kind)
		tn, ok := allowedTypes[kind]
		if !ok {
			tn = fmt.Sprintf("%s (ggml type %d)", kind, uint32(kind))
		}
		x := Tensor{Name: t.Name, Type: tn, Shape: slices.Clone(t.Shape), Bytes: int64(t.Size()), kind: kind}
		f.Tensors = append(f.Tensors, x)
		f.Bytes += x.Bytes
		switch {
		case seen[t.Name]:
			bad("tensor %s appears twice", t.Name)
		case !strings.HasSuffix(t.Name, ".lora_a") && !strings.HasSuffix(t.Name, ".lora_b"):
			bad("tensor %s is not a LoRA half (.lora_a or .lora_b)", t.Name)
		case !ok:
			bad("tensor %s has type %s; want f32, f16, bf16 or q8_0", t.Name, tn)
		case len(t.Shape) < 2 || len(t.Shape) > 3:
			bad("tensor %s has %d dimensions, want 2 (or 3 for expert weights)", t.Name, len(t.Shape))
		case slices.Contains(t.Shape, 0):
			bad("tensor %s has an empty dimension %v", t.Name, t.Shape)
		case kind == ggml.TensorTypeQ8_0 && t.Shape[0]%32 != 0:
			bad("tensor %s is q8_0 with ne0 %d not a multiple of 32", t.Name, t.Shape[0])
		}
		seen[t.Name] = true
	}
	for name := range seen {
		base, half := strings.CutSuffix(name, ".lora_a")
		other := base + ".lora_b"
		if !half {
			base, half = strings.CutSuffix(name, ".lora_b")
			other = base + ".lora_a"
		}
		if half && !seen[other] {
			bad("tensor %s has no partner %s", name, other)
		}
	}
	if len(seen) == 0 {
		bad("no tensors")
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return f, fmt.Errorf("%w: %s: %s", ErrBadAdapter, path, strings.Join(errs, "; "))
	}
	return f, nil
}

// pair returns the A and B halves of each target, keyed by base tensor name.
func (f File) pairs() map[string][2]*Tensor {
	out := map[string][2]*Tensor{}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if base, ok := strings.CutSuffix(t.Name, ".lora_a"); ok {
			p := out[base]
			p[0] = t
			out[base] = p
		} else if base, ok := strings.CutSuffix(t.Name, ".lora_b"); ok {
			p := out[base]
			p[1] = t
			out[base] = p
		}
	}
	return out
}

func dim(s []uint64, i int) uint64 {
	if i < len(s) {
		return s[i]
	}
	return 1
}

// Check compares an inspected adapter with the base model. It refuses, with
// an error wrapping ErrBadAdapter that names the first problems, an adapter
// for another architecture, one whose targets the base model lacks, and any
// pair whose shapes llama.cpp would refuse or could abort on at decode time:
// for a weight W of shape [n_in, n_out(, n_expert)], A must be
// [n_in, r(, n_expert)] and B [r, n_out(, n_expert)] (llama-adapter.cpp
// llama_adapter_lora_init_impl; the product is built in llama-graph.cpp
// build_lora_mm); for token_embd.weight [n_embd, n_vocab] the halves are
// flipped: A [r, n_vocab], B [r, n_embd] (build_inp_embd).
func Check(f File, b Base) (Info, error) {
	info := Info{Arch: f.Arch, Alpha: f.Alpha, Bytes: f.Bytes}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if f.Arch != b.Arch {
		bad("adapter is for architecture %q, the base model is %q", f.Arch, b.Arch)
	}
	pairs := f.pairs()
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range pairs {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		p := pairs[name]
		a, bt := p[0], p[1]
		if a == nil || bt == nil {
			bad("%s: incomplete A/B pair", name)
			continue
		}
		w, ok := b.Shapes[name]
		if !ok {
			bad("%s: the base model has no such tensor (adapter for another model?)", name)
			continue
		}
		if len(w) < 2 || len(w) > 3 {
			bad("%s: base tensor has shape %v; LoRA applies to matrices only", name, w)
			continue
		}
		if len(a.Shape) != len(w) || len(bt.Shape) != len(w) || dim(a.Shape, 2) != dim(w, 2) || dim(bt.Shape, 2) != dim(w, 2) {
			bad("%s: halves A %v, B %v do not match the dimensions of base %v", name, a.Shape, bt.Shape, w)
			continue
		}
		var r uint64
		if name == "token_embd.weight" {
			r = a.Shape[0]
			if bt.Shape[1] != w[0] || a.Shape[1] != w[1] || bt.Shape[0] != r {
				bad("%s: A %v, B %v; base %v wants A [r, %d], B [r, %d]", name, a.Shape, bt.Shape, w, w[1], w[0])
				continue
			}
		} else {
			r = a.Shape[1]
			if a.Shape[0] != w[0] || bt.Shape[1] != w[1] || bt.Shape[0] != r {
				bad("%s: A %v, B %v; base %v wants A [%d, r], B [r, %d] (adapter for another model?)", name, a.Shape, bt.Shape, w, w[0], w[1])
				continue
			}
		}
		if a.kind == ggml.TensorTypeQ8_0 || bt.kind == ggml.TensorTypeQ8_0 {
			// q8_0 rows must be whole blocks; the B half has rank-long rows.
			if bt.kind == ggml.TensorTypeQ8_0 && bt.Shape[0]%32 != 0 {
				bad("%s: q8_0 B half with rank %d, not a multiple of 32", name, bt.Shape[0])
				continue
			}
		}
		info.Rank = max(info.Rank, int(r))
		info.Targets = append(info.Targets, name)
	}
	if len(errs) > 0 {
		const show = 6
		more := ""
		if len(errs) > show {
			more = fmt.Sprintf(" (and %d more)", len(errs)-show)
			errs = errs[:show]
		}
		return info, fmt.Errorf("%w: %s: %s%s", ErrBadAdapter, f.Path, strings.Join(errs, "; "), more)
	}
	return info, nil
}
