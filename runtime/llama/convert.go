package llama

/*
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "ggml.h"
#include "gguf.h"

// memosrt_gguf_open reads the GGUF header and tensor table of path (no
// tensor data: a ggml context of tensor metadata only, freed by the caller).
static inline struct gguf_context *memosrt_gguf_open(const char *path, struct ggml_context **meta) {
	struct gguf_init_params p = { .no_alloc = true, .ctx = meta };
	return gguf_init_from_file(path, p);
}

// memosrt_can_dequantize reports whether ggml converts type t to f32.
static inline int memosrt_can_dequantize(int t) {
	if (t < 0 || t >= GGML_TYPE_COUNT) return 0;
	if (t == GGML_TYPE_F32) return 1;
	const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)t);
	return tr->blck_size > 0 && tr->to_float != NULL;
}

// memosrt_convert converts nrows rows of ne0 values from type st at in
// to type dt at out, through f32 in tmp ([nrows*ne0] floats): ggml's
// to_float, then ggml's row conversion or quantizer (ggml_quantize_chunk,
// as llama_model_quantize calls it). Returns the bytes written.
static inline size_t memosrt_convert(int st, const void *in, int dt, void *out, float *tmp, int64_t nrows, int64_t ne0) {
	int64_t n = nrows * ne0;
	const float *f = (const float *)in;
	if (st != GGML_TYPE_F32) {
		ggml_get_type_traits((enum ggml_type)st)->to_float(in, tmp, n);
		f = tmp;
	}
	switch (dt) {
	case GGML_TYPE_F32:
		if (f != out) memcpy(out, f, (size_t)n * sizeof(float));
		return (size_t)n * sizeof(float);
	case GGML_TYPE_F16:
		ggml_fp32_to_fp16_row(f, (ggml_fp16_t *)out, n);
		return (size_t)n * 2;
	case GGML_TYPE_BF16:
		ggml_fp32_to_bf16_row_ref(f, (ggml_bf16_t *)out, n);
		return (size_t)n * 2;
	default:
		return ggml_quantize_chunk((enum ggml_type)dt, f, out, 0, nrows, ne0, NULL);
	}
}
*/
import "C"

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"unsafe" // unsafe: the cgo boundary; tensor rows are converted between Go buffers by ggml here.
)

// ErrConvert is returned by ConvertGGUF (and Quantize) for a file ggml's
// GGUF reader refuses, a conversion ggml cannot do (a type without a
// dequantizer, a target type that needs an importance matrix, rows that
// are not whole blocks of the target type) or an I/O error.
var ErrConvert = errors.New("llama: gguf conversion failed")

// TensorInfo is one entry of a GGUF tensor table.
type TensorInfo struct {
	Name  string
	Type  int     // ggml type (TypeName gives its name)
	Shape []int64 // ne0 first; only the tensor's dimensions
	Bytes int64   // size of its data in the file
}

// Dequantizable reports whether ggml can convert tensors of type t to f32
// (f32 itself, f16, bf16 and every quantized type with a dequantizer:
// ggml_type_traits.to_float). Every type ggml computes with on the CPU is.
func Dequantizable(t int) bool { return C.memosrt_can_dequantize(C.int(t)) != 0 }

// IsQuantized reports whether t is a block-quantized type (q8_0, q4_K,
// iq4_nl, ...), not f32, f16 or bf16.
func IsQuantized(t int) bool {
	return t >= 0 && t < int(C.GGML_TYPE_COUNT) && bool(C.ggml_is_quantized(C.enum_ggml_type(t)))
}

// TypeByName returns the ggml type named name ("f32", "f16", "q8_0", as
// TypeName writes them), or false.
func TypeByName(name string) (int, bool) {
	for t := range int(C.GGML_TYPE_COUNT) {
		if n := C.ggml_type_name(C.enum_ggml_type(t)); n != nil && C.GoString(n) == name {
			return t, true
		}
	}
	return 0, false
}

// convertTargets are the types ConvertGGUF writes: f32, f16, bf16 and
// the quantized types ggml_quantize_chunk makes without an importance
// matrix.
var convertTargets = []int{
	int(C.GGML_TYPE_F32), int(C.GGML_TYPE_F16), int(C.GGML_TYPE_BF16),
	int(C.GGML_TYPE_Q4_0), int(C.GGML_TYPE_Q4_1), int(C.GGML_TYPE_Q5_0), int(C.GGML_TYPE_Q5_1), int(C.GGML_TYPE_Q8_0),
	int(C.GGML_TYPE_Q2_K), int(C.GGML_TYPE_Q3_K), int(C.GGML_TYPE_Q4_K), int(C.GGML_TYPE_Q5_K), int(C.GGML_TYPE_Q6_K),
	int(C.GGML_TYPE_IQ4_NL), int(C.GGML_TYPE_IQ4_XS),
}

// BlockSize returns the values per block of type t (1 for f32, f16,
// bf16; 32 for q8_0; 256 for the K-quants); a row's length must be a
// multiple of it.
func BlockSize(t int) int {
	if t < 0 || t >= int(C.GGML_TYPE_COUNT) {
		return 0
	}
	return int(C.ggml_blck_size(C.enum_ggml_type(t)))
}

// ReadTensors returns the tensor table of the GGUF file at path, in file
// order (header only). Errors wrap ErrConvert.
func ReadTensors(path string) ([]TensorInfo, error) {
	g, meta, err := openGGUF(path)
	if err != nil {
		return nil, err
	}
	defer C.gguf_free(g)
	defer C.ggml_free(meta)
	ts, _ := tensorTable(g, meta)
	return ts, nil
}

func openGGUF(path string) (*C.struct_gguf_context, *C.struct_ggml_context, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var meta *C.struct_ggml_context
	g := C.memosrt_gguf_open(cs, &meta)
	if g == nil {
		return nil, nil, fmt.Errorf("%w: %s: not a GGUF file ggml reads", ErrConvert, path)
	}
	return g, meta, nil
}

// tensorTable lists g's tensors with their shapes (from meta) and their
// data offsets from the start of the file.
func tensorTable(g *C.struct_gguf_context, meta *C.struct_ggml_context) ([]TensorInfo, []int64) {
	n := int(C.gguf_get_n_tensors(g))
	ts := make([]TensorInfo, n)
	offs := make([]int64, n)
	data := int64(C.gguf_get_data_offset(g))
	for i := range n {
		name := C.gguf_get_tensor_name(g, C.int64_t(i))
		t := C.ggml_get_tensor(meta, name)
		ts[i] = TensorInfo{Name: C.GoString(name), Type: int(C.gguf_get_tensor_type(g, C.int64_t(i))),
			Bytes: int64(C.gguf_get_tensor_size(g, C.int64_t(i)))}
		if t != nil {
			nd := int(C.ggml_n_dims(t))
			for d := range nd {
				ts[i].Shape = append(ts[i].Shape, int64(t.ne[d]))
			}
		}
		offs[i] = data + int64(C.gguf_get_tensor_offset(g, C.int64_t(i)))
	}
	return ts, offs
}

// ConvertStats says what ConvertGGUF wrote.
type ConvertStats struct {
	Converted []string // tensors whose type changed, file order
	Bytes     int64    // size of the written file
}

// ConvertGGUF writes to dst a copy of the GGUF file at src: the same
// metadata (every key, in order; plus the extra keys given in meta) and
// tensors in the same order, each with the type to returns for it (its
// own type: its bytes copied as they are). A converted tensor is
// dequantized to f32 with ggml's dequantizer (ggml_type_traits.to_float)
// and, unless the target is f32, converted to f16/bf16 or quantized with
// ggml_quantize_chunk, the row quantizer llama_model_quantize calls. The
// tensor table and data offsets are written by ggml's GGUF writer
// (gguf_set_tensor_type, gguf_get_meta_data), so the copy loads wherever
// the original does. Rows are converted 4 MiB of f32 at a time; dst is
// written through a temporary file renamed into place.
//
// Errors (wrapping ErrConvert, nothing left at dst): a file ggml cannot
// read; a tensor whose type cannot be dequantized, a target type ggml
// cannot write without an importance matrix, or rows not whole blocks of
// the target (ne0 % BlockSize); I/O; ctx.Err() between tensors.
func ConvertGGUF(ctx context.Context, src, dst string, to func(TensorInfo) int, meta map[string]uint32) (ConvertStats, error) {
	var st ConvertStats
	g, mctx, err := openGGUF(src)
	if err != nil {
		return st, err
	}
	defer C.gguf_free(g)
	defer C.ggml_free(mctx)
	ts, offs := tensorTable(g, mctx)
	types := make([]int, len(ts))
	for i, t := range ts {
		types[i] = to(t)
		if types[i] == t.Type {
			continue
		}
		switch {
		case !Dequantizable(t.Type):
			return st, fmt.Errorf("%w: %s is %s, which ggml cannot dequantize", ErrConvert, t.Name, TypeName(t.Type))
		case !slices.Contains(convertTargets, types[i]):
			return st, fmt.Errorf("%w: %s: cannot write type %s (ggml needs an importance matrix or has no quantizer for it)",
				ErrConvert, t.Name, TypeName(types[i]))
		case len(t.Shape) == 0 || t.Shape[0]%int64(BlockSize(types[i])) != 0:
			return st, fmt.Errorf("%w: %s has rows of %v values, not whole %d-value blocks of %s",
				ErrConvert, t.Name, t.Shape, BlockSize(types[i]), TypeName(types[i]))
		}
	}
	for i, t := range ts {
		if types[i] != t.Type {
			cn := C.CString(t.Name)
			C.gguf_set_tensor_type(g, cn, C.enum_ggml_type(types[i]))
			C.free(unsafe.Pointer(cn))
			st.Converted = append(st.Converted, t.Name)
		}
	}
	for k, v := range meta {
		ck := C.CString(k)
		C.gguf_set_val_u32(g, ck, C.uint32_t(v))
		C.free(unsafe.Pointer(ck))
	}
	hdr := make([]byte, int(C.gguf_get_meta_size(g)))
	C.gguf_get_meta_data(g, unsafe.Pointer(&hdr[0]))

	in, err := os.Open(src)
	if err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	defer in.Close()
	tmp := dst + ".part"
	out, err := os.Create(tmp)
	if err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(out, 1<<20)
	pos := int64(len(hdr))
	if _, err := w.Write(hdr); err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	var inBuf, outBuf []byte
	var f32 []float32
	const chunk = 1 << 20 // f32 values converted at a time
	for i, t := range ts {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		at := int64(len(hdr)) + int64(C.gguf_get_tensor_offset(g, C.int64_t(i)))
		if at < pos {
			return st, fmt.Errorf("%w: %s: offset %d before %d", ErrConvert, t.Name, at, pos)
		}
		if err := zeros(w, at-pos); err != nil {
			return st, err
		}
		pos = at
		if types[i] == t.Type {
			if _, err := io.Copy(w, io.NewSectionReader(in, offs[i], t.Bytes)); err != nil {
				return st, fmt.Errorf("%w: %s: %v", ErrConvert, t.Name, err)
			}
			pos += t.Bytes
			continue
		}
		ne0 := t.Shape[0]
		nrows := int64(1)
		for _, d := range t.Shape[1:] {
			nrows *= d
		}
		inRow := t.Bytes / nrows
		outRow := int64(C.ggml_row_size(C.enum_ggml_type(types[i]), C.int64_t(ne0)))
		step := max(1, chunk/ne0)
		for r := int64(0); r < nrows; r += step {
			k := min(step, nrows-r)
			inBuf = grow(inBuf, int(k*inRow))
			outBuf = grow(outBuf, int(k*outRow))
			if len(f32) < int(k*ne0) {
				f32 = make([]float32, k*ne0)
			}
			if _, err := in.ReadAt(inBuf, offs[i]+r*inRow); err != nil {
				return st, fmt.Errorf("%w: %s: %v", ErrConvert, t.Name, err)
			}
			n := C.memosrt_convert(C.int(t.Type), unsafe.Pointer(&inBuf[0]), C.int(types[i]), unsafe.Pointer(&outBuf[0]),
				(*C.float)(unsafe.Pointer(&f32[0])), C.int64_t(k), C.int64_t(ne0))
			if int64(n) != k*outRow {
				return st, fmt.Errorf("%w: %s: converted %d bytes, want %d", ErrConvert, t.Name, n, k*outRow)
			}
			if _, err := w.Write(outBuf); err != nil {
				return st, fmt.Errorf("%w: %v", ErrConvert, err)
			}
			pos += int64(n)
		}
	}
	align := int64(C.gguf_get_alignment(g))
	if err := zeros(w, (align-pos%align)%align); err != nil {
		return st, err
	}
	if err := w.Flush(); err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	if err := out.Close(); err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	ok = true
	fi, err := os.Stat(dst)
	if err != nil {
		return st, fmt.Errorf("%w: %v", ErrConvert, err)
	}
	st.Bytes = fi.Size()
	return st, nil
}

// grow returns b resized to n bytes (reallocated when too small).
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

func zeros(w io.Writer, n int64) error {
	var z [64]byte
	for n > 0 {
		k := min(n, int64(len(z)))
		if _, err := w.Write(z[:k]); err != nil {
			return fmt.Errorf("%w: %v", ErrConvert, err)
		}
		n -= k
	}
	return nil
}
