package kvcache

import (
	"encoding/binary"
	"fmt"
	"math"
	goruntime "runtime"

	"golang.org/x/sync/errgroup"

	"github.com/memosrt/memosrt/internal/half"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
)

// Lossy KV quantization, after KIVI (Liu et al., "KIVI: A Tuning-Free
// Asymmetric 2bit Quantization for KV Cache", ICML 2024): keys are
// quantized per channel (each channel's values over a group of tokens
// share a minimum and a step), values per token (each token's values over
// a group of channels), asymmetric min/step with round to nearest. Only
// f16 K and V are quantized; the rest of a llama_state_seq_get_data state
// (cell positions, per-layer headers) is kept byte for byte, so the
// dequantized state restores through llama_state_seq_set_data like any
// other.
//
// Quantized stream (before zstd), little-endian:
//
//	u8  bits (2, 4 or 8)   u8 key group (tokens)   u8 value group (channels)   u8 0
//	u64 state length
//	u32 region count R; R × (u64 offset, u8 axis, u32 rows, u32 cols)
//	the state's bytes outside the regions, in order
//	per region, per group: f16 minimum, f16 step, then the codes packed
//	low bits first
//
// A region is an f16 matrix of rows × cols in the state at offset. Axis 0
// groups down a column (a K block [cells][channels]: per channel; a
// transposed V block [channels][cells]: per token), axis 1 along a row (a
// V block [cells][channels]: per token).

// LossyParams choose the quantization.
type LossyParams struct {
	Bits     int `json:"bits"`      // bits per value: 2, 4 or 8
	KeyGroup int `json:"key_group"` // tokens sharing a key channel's minimum and step (1..255)
	ValGroup int `json:"val_group"` // channels sharing a value token's minimum and step (1..255)
}

// lossyEq reports whether a and b are the same quantization (both nil:
// exact).
func lossyEq(a, b *LossyParams) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// DefaultLossy is 4-bit, keys in groups of 128 tokens, values in groups of
// 64 channels (KIVI's group size is 32 to 128).
var DefaultLossy = LossyParams{Bits: 4, KeyGroup: 128, ValGroup: 64}

func (p LossyParams) check() error {
	if p.Bits != 2 && p.Bits != 4 && p.Bits != 8 {
		return fmt.Errorf("kvcache: lossy bits %d, want 2, 4 or 8", p.Bits)
	}
	if p.KeyGroup < 1 || p.KeyGroup > 255 || p.ValGroup < 1 || p.ValGroup > 255 {
		return fmt.Errorf("kvcache: lossy groups %d/%d, want 1..255", p.KeyGroup, p.ValGroup)
	}
	return nil
}

type region struct {
	off        int
	axis       byte
	rows, cols int
}

// ggmlF16 is GGML_TYPE_F16's id.
const ggmlF16 = 1

// regions lists the f16 K and V blocks of state (layout as in
// runtime.SortSeqState); nil when K or V is not f16.
func regions(s runtime.SeqState, state []byte) []region {
	if s.NCells == 0 || s.TypeK != ggmlF16 || s.TypeV != ggmlF16 {
		return nil
	}
	n := s.NCells
	off := 4
	for binary.LittleEndian.Uint32(state[off:]) == 0 {
		off += 4
	}
	off += 4 + 12*n + 8 // cell count, cells, v_trans and n_layer
	var out []region
	for range s.NLayer {
		off += 12
		out = append(out, region{off: off, axis: 0, rows: n, cols: s.KRowBytes / 2})
		off += s.KRowBytes * n
	}
	for range s.NLayer {
		off += 12
		if !s.VTrans {
			out = append(out, region{off: off, axis: 1, rows: n, cols: s.VRowBytes / 2})
			off += s.VRowBytes * n
			continue
		}
		out = append(out, region{off: off, axis: 0, rows: s.NEmbdVGQA, cols: n})
		off += s.VRowBytes * n
	}
	return out
}

// Quantize returns the quantized stream of state with p, and ok false
// (nothing done) when state holds no f16 K and V (a quantized KV type, or
// no cells). Errors wrap runtime.ErrBadState.
func Quantize(state []byte, p LossyParams) (q []byte, ok bool, err error) {
	if err := p.check(); err != nil {
		return nil, false, err
	}
	s, err := runtime.ParseSeqState(state)
	if err != nil {
		return nil, false, err
	}
	rs := regions(s, state)
	if rs == nil {
		return nil, false, nil
	}
	q = append(q, byte(p.Bits), byte(p.KeyGroup), byte(p.ValGroup), 0)
	q = binary.LittleEndian.AppendUint64(q, uint64(len(state)))
	q = binary.LittleEndian.AppendUint32(q, uint32(len(rs)))
	for _, r := range rs {
		q = binary.LittleEndian.AppendUint64(q, uint64(r.off))
		q = append(q, r.axis)
		q = binary.LittleEndian.AppendUint32(q, uint32(r.rows))
		q = binary.LittleEndian.AppendUint32(q, uint32(r.cols))
	}
	at := 0
	for _, r := range rs {
		q = append(q, state[at:r.off]...)
		at = r.off + 2*r.rows*r.cols
	}
	q = append(q, state[at:]...)
	for _, r := range rs {
		g := p.KeyGroup
		if r.axis == 1 {
			g = p.ValGroup
		}
		q = quantRegion(q, state[r.off:r.off+2*r.rows*r.cols], r, g, p.Bits)
	}
	return q, true, nil
}

// groups calls fn for each group of r: the index of its first element, the
// stride between its elements and its length.
func groups(r region, g int, fn func(first, stride, n int)) {
	if r.axis == 0 { // down each column
		for c := 0; c < r.cols; c++ {
			for r0 := 0; r0 < r.rows; r0 += g {
				fn(r0*r.cols+c, r.cols, min(g, r.rows-r0))
			}
		}
		return
	}
	for row := 0; row < r.rows; row++ { // along each row
		for c0 := 0; c0 < r.cols; c0 += g {
			fn(row*r.cols+c0, 1, min(g, r.cols-c0))
		}
	}
}

func quantRegion(q, data []byte, r region, g, bits int) []byte {
	levels := float32(int(1)<<bits - 1)
	codes := make([]byte, 0, g)
	groups(r, g, func(first, stride, n int) {
		lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
		for i := range n {
			v := half.Float(binary.LittleEndian.Uint16(data[2*(first+i*stride):]))
			lo, hi = min(lo, v), max(hi, v)
		}
		// the stored (f16) minimum and step are the ones decoding uses
		loH := half.Bits(lo)
		lo = half.Float(loH)
		stepH := half.Bits((hi - lo) / levels)
		step := half.Float(stepH)
		q = binary.LittleEndian.AppendUint16(q, loH)
		q = binary.LittleEndian.AppendUint16(q, stepH)
		codes = codes[:0]
		for i := range n {
			v := half.Float(binary.LittleEndian.Uint16(data[2*(first+i*stride):]))
			c := float32(0)
			if step > 0 {
				c = min(max(float32(math.Round(float64((v-lo)/step))), 0), levels)
			}
			codes = append(codes, byte(c))
		}
		q = packCodes(q, codes, bits)
	})
	return q
}

func packCodes(q, codes []byte, bits int) []byte {
	per := 8 / bits
	for i := 0; i < len(codes); i += per {
		var b byte
		for j := 0; j < per && i+j < len(codes); j++ {
			b |= codes[i+j] << (j * bits)
		}
		q = append(q, b)
	}
	return q
}

// Dequantize rebuilds a state from a stream Quantize made: the f16 K and
// V values are min + code × step, everything else as it was. Errors wrap
// ErrCorrupt for a stream that does not describe a state.
func Dequantize(q []byte) ([]byte, error) {
	return dequantizeTo(q, func(n int) []byte { return make([]byte, n) })
}

// dequantizeTo is Dequantize into alloc(n), a buffer of the state's n
// bytes (its contents undefined: every byte is written), asked for only
// once the stream's sizes check out. The regions (one per layer's K or V
// block) decode on every core at once.
func dequantizeTo(q []byte, alloc func(n int) []byte) ([]byte, error) {
	bad := func(what string) ([]byte, error) { return nil, fmt.Errorf("%w: lossy stream: %s", ErrCorrupt, what) }
	if len(q) < 16 {
		return bad("short header")
	}
	bits, kg, vg := int(q[0]), int(q[1]), int(q[2])
	if (bits != 2 && bits != 4 && bits != 8) || kg == 0 || vg == 0 {
		return bad("parameters")
	}
	size := binary.LittleEndian.Uint64(q[4:])
	nr := int(binary.LittleEndian.Uint32(q[12:]))
	p := 16
	// every state byte is in q (outside regions) or a value's code of at
	// least 2 bits (of 16): a state over 8 bytes per byte of q is a lie
	// that would make this allocate it
	if size > MaxRawBytes || size > 8*uint64(len(q)) || nr > (len(q)-p)/17 {
		return bad("sizes")
	}
	rs := make([]region, nr)
	at := 0
	for i := range rs {
		r := region{off: int(binary.LittleEndian.Uint64(q[p:])), axis: q[p+8],
			rows: int(binary.LittleEndian.Uint32(q[p+9:])), cols: int(binary.LittleEndian.Uint32(q[p+13:]))}
		p += 17
		if r.off < at || r.axis > 1 || r.rows <= 0 || r.cols <= 0 || uint64(r.off)+2*uint64(r.rows)*uint64(r.cols) > size {
			return bad("region")
		}
		at = r.off + 2*r.rows*r.cols
		rs[i] = r
	}
	// the bytes between regions, then each region's codes: check that the
	// stream holds exactly them before writing anything
	plain := int(size)
	for _, r := range rs {
		plain -= 2 * r.rows * r.cols
	}
	if len(q)-p < plain {
		return bad("truncated")
	}
	src := make([]int, len(rs)+1) // stream offset of each region's codes, and the end
	src[0] = p + plain
	for i, r := range rs {
		g := kg
		if r.axis == 1 {
			g = vg
		}
		n, ok := regionCodeBytes(r, g, bits)
		if !ok || n > len(q)-src[i] {
			return bad("truncated codes")
		}
		src[i+1] = src[i] + n
	}
	if src[len(rs)] != len(q) {
		return bad("trailing bytes")
	}
	state := alloc(int(size))
	at = 0
	for _, r := range rs {
		n := r.off - at
		copy(state[at:], q[p:p+n])
		p += n
		at = r.off + 2*r.rows*r.cols
	}
	copy(state[at:], q[p:p+int(size)-at])
	var g errgroup.Group
	g.SetLimit(goruntime.GOMAXPROCS(0))
	for i, r := range rs {
		gs := kg
		if r.axis == 1 {
			gs = vg
		}
		g.Go(func() error {
			decodeRegion(state[r.off:r.off+2*r.rows*r.cols], q[src[i]:src[i+1]], r, gs, bits)
			return nil
		})
	}
	g.Wait()
	return state, nil
}

// regionCodeBytes is the length of region r's codes in a stream of bits
// per value and groups of g: per line (column for axis 0, row for axis
// 1) and group, an f16 minimum and step and the packed codes. ok is false
// when the length does not fit an int.
func regionCodeBytes(r region, g, bits int) (int, bool) {
	per := 8 / bits
	lines, along := r.cols, r.rows
	if r.axis == 1 {
		lines, along = r.rows, r.cols
	}
	lineBytes := 0
	for i0 := 0; i0 < along; i0 += g {
		lineBytes += 4 + (min(g, along-i0)+per-1)/per
	}
	if lineBytes > 0 && lines > MaxRawBytes/lineBytes {
		return 0, false
	}
	return lines * lineBytes, true
}

// decodeRegion writes region r's values into data (2×rows×cols bytes)
// from src, which starts at the region's first group, and returns the
// bytes of src it used; ok false when src is too short. 8-bit codes go to
// llama.U8ToF16, one C call a region (AVX2 and F16C, 8 values at a time,
// byte for byte what package half's conversion gives): converting each
// value in Go cost 876 (K) and 966 (V) MB/s of state on one core. For bits
// 2 and 4 a group's 2^bits values are converted to f16 once, into a table;
// a 4-bit row group's two values per byte go out in one 32-bit store.
// Stores go down a column for keys (a stride of one row): writing row by
// row instead, with every column's table of a block built first,
// measured slower (363–501 MB/s of CPU time on one core against 685–755
// for the column loop with half.Bits, BenchmarkDequantize on a shared
// 2-core machine).
func decodeRegion(data, src []byte, r region, g, bits int) (used int, ok bool) {
	if bits == 8 {
		lineStep, elemStep := 1, r.cols // axis 0: a column's values a row apart
		lines, along := r.cols, r.rows
		if r.axis == 1 {
			lineStep, elemStep, lines, along = r.cols, 1, r.rows, r.cols
		}
		n, err := llama.U8ToF16(data, src, lines, along, g, lineStep, elemStep)
		return n, err == nil
	}
	per := 8 / bits
	mask := byte(1)<<bits - 1
	lines, along := r.cols, r.rows // axis 0: groups down each column
	first, d := func(line, i int) int { return 2 * (i*r.cols + line) }, 2*r.cols
	if r.axis == 1 { // groups along each row
		lines, along = r.rows, r.cols
		first, d = func(line, i int) int { return 2 * (line*r.cols + i) }, 2
	}
	lineBytes := 0
	for i0 := 0; i0 < along; i0 += g {
		lineBytes += 4 + (min(g, along-i0)+per-1)/per
	}
	if len(src)/lineBytes < lines {
		return 0, false
	}
	var tab [256]uint16
	p := 0
	for line := range lines {
		for i0 := 0; i0 < along; i0 += g {
			n := min(g, along-i0)
			lo := half.Float(binary.LittleEndian.Uint16(src[p:]))
			step := half.Float(binary.LittleEndian.Uint16(src[p+2:]))
			codes := src[p+4 : p+4+(n+per-1)/per]
			p += 4 + len(codes)
			o := first(line, i0)
			switch bits {
			case 4:
				halfTable(tab[:16], lo, step)
				if d == 2 { // a row's values: both of a byte's in one store
					out := data[o : o+4*(n/2)]
					for i, b := range codes[:n/2] {
						binary.LittleEndian.PutUint32(out[4*i:], uint32(tab[b&15])|uint32(tab[b>>4])<<16)
					}
					o += 4 * (n / 2)
					codes = codes[n/2:]
					n %= 2
				}
				for _, b := range codes[:n/2] {
					binary.LittleEndian.PutUint16(data[o:], tab[b&15])
					binary.LittleEndian.PutUint16(data[o+d:], tab[b>>4])
					o += 2 * d
				}
				if n%2 == 1 {
					binary.LittleEndian.PutUint16(data[o:], tab[codes[n/2]&15])
				}
			default:
				halfTable(tab[:mask+1], lo, step)
				for i := range n {
					binary.LittleEndian.PutUint16(data[o:], tab[codes[i/per]>>((i%per)*bits)&mask])
					o += d
				}
			}
		}
	}
	return p, true
}

// halfTable sets tab[k] to the f16 bits of lo + k×step (halfNormal
// inlined).
func halfTable(tab []uint16, lo, step float32) {
	for k := range tab {
		f := lo + float32(k)*step
		h, ok := halfNormal(f)
		if !ok {
			h = half.Bits(f)
		}
		tab[k] = h
	}
}

// halfNormal is the branch-free path of halfBits, small enough to inline
// (halfBits, with its call to half.Bits, is not): for f whose half is
// normal (|f| in [2^-14, 65520)), ok is true and h the half's bits: the
// exponent is rebiased and the mantissa rounded to nearest even by adding
// 0xfff plus the kept mantissa's lowest bit before the shift (a carry
// correctly bumps the exponent). For any other f, ok is false and h
// meaningless.
func halfNormal(f float32) (h uint16, ok bool) {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	return uint16(b>>16)&0x8000 | uint16((a-0x38000000+0xfff+((a>>13)&1))>>13), a-0x38800000 < 0x477ff000-0x38800000
}

// halfBits is half.Bits with halfNormal's branch-free path for the normal
// halves. Equal to half.Bits for every float32 (TestHalfBits).
func halfBits(f float32) uint16 {
	if h, ok := halfNormal(f); ok {
		return h
	}
	return half.Bits(f)
}
