package runtime

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/memosrt/memosrt/internal/half"
	"github.com/memosrt/memosrt/runtime/llama"
)

// SliceSeqState returns the part of a sequence state (SaveSeq format) that
// holds positions [p0, p1): its cells sorted by position (SortSeqState),
// those outside the range dropped, K and V rows of every layer kept for
// the rest. The positions are kept as they are (a slice of [0, n) at p0 > 0
// restores at p0, not at 0; RestoreSeq refuses it, ComposeSeq takes it).
// An empty range gives a state of no cells. Errors wrap ErrBadState.
func SliceSeqState(state []byte, p0, p1 int) ([]byte, error) {
	state, err := SortSeqState(state)
	if err != nil {
		return nil, err
	}
	s, err := ParseSeqState(state)
	if err != nil {
		return nil, err
	}
	if p0 < 0 || p1 < p0 {
		return nil, fmt.Errorf("%w: slice [%d, %d)", ErrBadState, p0, p1)
	}
	// cells are sorted: the range is one run [lo, hi) of cell indices
	lo, hi := 0, 0
	for lo < s.NCells && int(s.Positions[lo]) < p0 {
		lo++
	}
	for hi = lo; hi < s.NCells && int(s.Positions[hi]) < p1; hi++ {
	}
	le := binary.LittleEndian
	if hi == lo {
		out := le.AppendUint32(nil, uint32(s.NStream))
		for range s.NStream {
			out = le.AppendUint32(out, 0)
		}
		return out, nil
	}
	n, all := hi-lo, s.NCells
	out := make([]byte, 0, len(state))
	off := 4
	for le.Uint32(state[off:]) == 0 {
		off += 4
	}
	out = append(out, state[:off]...)
	out = le.AppendUint32(out, uint32(n))
	off += 4
	out = append(out, state[off+12*lo:off+12*hi]...)
	off += 12 * all
	out = append(out, state[off:off+8]...) // v_trans, n_layer
	off += 8
	rows := func(row int) {
		out = append(out, state[off+row*lo:off+row*hi]...)
		off += row * all
	}
	for range s.NLayer {
		out = append(out, state[off:off+12]...) // type, row size
		off += 12
		rows(s.KRowBytes)
	}
	for range s.NLayer {
		out = append(out, state[off:off+12]...)
		if !s.VTrans {
			off += 12
			rows(s.VRowBytes)
			continue
		}
		el := int(le.Uint32(state[off+4:]))
		off += 12
		for range s.NEmbdVGQA {
			rows(el)
		}
	}
	return append(out, state[off:]...), nil
}

// seqStateV returns layer l's V rows of a sequence state as float32,
// [n_cells][width] in cell order, and the row width in elements. Only F16
// and F32 V caches are read; other types return an error wrapping
// ErrBadState.
func seqStateV(state []byte, l int) ([][]float32, int, error) {
	s, err := ParseSeqState(state)
	if err != nil {
		return nil, 0, err
	}
	if s.NCells == 0 {
		return nil, 0, nil
	}
	if l < 0 || l >= s.NLayer {
		return nil, 0, fmt.Errorf("%w: layer %d of %d", ErrBadState, l, s.NLayer)
	}
	var el int
	switch s.TypeV {
	case llama.TypeF16:
		el = 2
	case llama.TypeF32:
		el = 4
	default:
		return nil, 0, fmt.Errorf("%w: V type %s is not read (f16 and f32 only)", ErrBadState, llama.TypeName(s.TypeV))
	}
	width := s.VRowBytes / el
	le := binary.LittleEndian
	at := func(b []byte) float32 {
		if el == 2 {
			return half.Float(le.Uint16(b))
		}
		return math.Float32frombits(le.Uint32(b))
	}
	n := s.NCells
	// skip the header, cell metadata and every K layer
	off := 4
	for le.Uint32(state[off:]) == 0 {
		off += 4
	}
	off += 4 + 12*n + 8
	off += s.NLayer * (12 + s.KRowBytes*n)
	// V layers before l (transposed or not, a layer is its 12-byte header
	// and VRowBytes per cell)
	off += l*(12+s.VRowBytes*n) + 12
	out := make([][]float32, n)
	for i := range out {
		out[i] = make([]float32, width)
	}
	for i := range n {
		for c := range width {
			var p int
			if s.VTrans {
				p = off + (c*n+i)*el // per channel, one element per cell
			} else {
				p = off + i*s.VRowBytes + c*el
			}
			out[i][c] = at(state[p:])
		}
	}
	return out, width, nil
}
