package llama

/*
#include <stdlib.h>
#include "llama.h"

static inline uint32_t memosrt_quantize(const char *in, const char *out, int ftype, int threads) {
	struct llama_model_quantize_params p = llama_model_quantize_default_params();
	p.ftype = (enum llama_ftype)ftype;
	p.nthread = threads;
	return llama_model_quantize(in, out, &p);
}
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"unsafe" // unsafe: the cgo boundary; C strings freed here.
)

// quantFile is a file type Quantize writes: llama.cpp's llama_ftype and
// the ggml type of its 2-D weights.
type quantFile struct {
	ftype int
	typ   int
	// kquant: llama.cpp's quantizer falls back to another type for a
	// weight whose rows are not whole 256-value blocks (llama-quant.cpp
	// llama_tensor_get_type), so every shape is accepted.
	kquant bool
}

var quantFiles = map[string]quantFile{
	"f32":    {int(C.LLAMA_FTYPE_ALL_F32), int(C.GGML_TYPE_F32), false},
	"f16":    {int(C.LLAMA_FTYPE_MOSTLY_F16), int(C.GGML_TYPE_F16), false},
	"bf16":   {int(C.LLAMA_FTYPE_MOSTLY_BF16), int(C.GGML_TYPE_BF16), false},
	"q8_0":   {int(C.LLAMA_FTYPE_MOSTLY_Q8_0), int(C.GGML_TYPE_Q8_0), false},
	"q4_0":   {int(C.LLAMA_FTYPE_MOSTLY_Q4_0), int(C.GGML_TYPE_Q4_0), false},
	"q4_1":   {int(C.LLAMA_FTYPE_MOSTLY_Q4_1), int(C.GGML_TYPE_Q4_1), false},
	"q5_0":   {int(C.LLAMA_FTYPE_MOSTLY_Q5_0), int(C.GGML_TYPE_Q5_0), false},
	"q5_1":   {int(C.LLAMA_FTYPE_MOSTLY_Q5_1), int(C.GGML_TYPE_Q5_1), false},
	"q2_k":   {int(C.LLAMA_FTYPE_MOSTLY_Q2_K), int(C.GGML_TYPE_Q2_K), true},
	"q3_k_m": {int(C.LLAMA_FTYPE_MOSTLY_Q3_K_M), int(C.GGML_TYPE_Q3_K), true},
	"q4_k_s": {int(C.LLAMA_FTYPE_MOSTLY_Q4_K_S), int(C.GGML_TYPE_Q4_K), true},
	"q4_k_m": {int(C.LLAMA_FTYPE_MOSTLY_Q4_K_M), int(C.GGML_TYPE_Q4_K), true},
	"q5_k_s": {int(C.LLAMA_FTYPE_MOSTLY_Q5_K_S), int(C.GGML_TYPE_Q5_K), true},
	"q5_k_m": {int(C.LLAMA_FTYPE_MOSTLY_Q5_K_M), int(C.GGML_TYPE_Q5_K), true},
	"q6_k":   {int(C.LLAMA_FTYPE_MOSTLY_Q6_K), int(C.GGML_TYPE_Q6_K), true},
}

// QuantizeTypes returns the file types Quantize writes, sorted.
func QuantizeTypes() []string {
	out := make([]string, 0, len(quantFiles))
	for k := range quantFiles {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// QuantizeOptions configure Quantize.
type QuantizeOptions struct {
	// Type is the file type: "f16", "q8_0", "q4_0", "q4_k_m", ...
	// (QuantizeTypes). Required.
	Type string
	// Threads for llama.cpp's quantizer. Default 0: one per CPU.
	Threads int
}

// QuantizeResult says how Quantize made the file.
type QuantizeResult struct {
	// Fallback is true when the file was written by ConvertGGUF instead
	// of llama_model_quantize (see Quantize); Kept lists the weights it
	// left in f16 then.
	Fallback bool
	Kept     []string
	Bytes    int64 // size of the written file
}

// Quantize writes the model at src to dst in the file type o.Type with
// llama.cpp's own quantizer (llama_model_quantize, as llama-quantize does:
// its per-tensor type choices, 1-D tensors and norms kept in f32).
//
// llama.cpp refuses a legacy type (q4_0, q4_1, q5_0, q5_1, q8_0) for a
// model with a weight whose rows are not whole 32-value blocks
// ("Unsupported tensor size": stories260K's ffn_down rows have 172
// values); the K-quants have a fallback for such weights and f16 needs
// none. For that case only, Quantize writes the file with ConvertGGUF
// instead: every 2-D weight except the norms in o.Type, quantized by the
// same row quantizer llama_model_quantize calls (ggml_quantize_chunk),
// and each weight whose rows do not fit in f16 (where llama.cpp's own
// fallback chain ends); QuantizeResult.Fallback says so.
//
// Errors: an unknown type; an unreadable src; llama.cpp's failure (its
// reason is logged through SetLogger's logger; dst is removed); ctx.Err()
// before the start. llama_model_quantize itself is not interruptible.
// Init must have been called.
func Quantize(ctx context.Context, src, dst string, o QuantizeOptions) (QuantizeResult, error) {
	var res QuantizeResult
	qf, ok := quantFiles[strings.ToLower(o.Type)]
	if !ok {
		return res, fmt.Errorf("%w: unknown type %q (want one of %s)", ErrConvert, o.Type, strings.Join(QuantizeTypes(), ", "))
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	ts, err := ReadTensors(src)
	if err != nil {
		return res, err
	}
	var misfit []string
	if !qf.kquant {
		for _, t := range ts {
			if quantizes(t) && t.Shape[0]%int64(BlockSize(qf.typ)) != 0 {
				misfit = append(misfit, t.Name)
			}
		}
	}
	if len(misfit) == 0 {
		cin, cout := C.CString(src), C.CString(dst)
		defer C.free(unsafe.Pointer(cin))
		defer C.free(unsafe.Pointer(cout))
		if C.memosrt_quantize(cin, cout, C.int(qf.ftype), C.int(o.Threads)) != 0 {
			os.Remove(dst)
			return res, fmt.Errorf("%w: llama_model_quantize %s → %s as %s failed (see the log)", ErrConvert, src, dst, o.Type)
		}
	} else {
		f16 := int(C.GGML_TYPE_F16)
		to := func(t TensorInfo) int {
			switch {
			case !quantizes(t) || t.Type != int(C.GGML_TYPE_F32) && t.Type != f16 && t.Type != int(C.GGML_TYPE_BF16):
				return t.Type // 1-D, norms, and weights already quantized stay as they are
			case slices.Contains(misfit, t.Name):
				return f16
			}
			return qf.typ
		}
		if _, err := ConvertGGUF(ctx, src, dst, to, map[string]uint32{"general.file_type": uint32(qf.ftype)}); err != nil {
			return res, err
		}
		res.Fallback, res.Kept = true, misfit
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	res.Bytes = fi.Size()
	return res, nil
}

// quantizes reports whether llama_model_quantize quantizes t: a weight
// of 2 or more dimensions that is not a norm (llama-quant.cpp's rules for
// the tensors of llama-like models).
func quantizes(t TensorInfo) bool {
	return strings.HasSuffix(t.Name, "weight") && len(t.Shape) >= 2 && !strings.Contains(t.Name, "_norm.weight")
}
