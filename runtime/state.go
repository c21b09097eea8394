package runtime

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/memosrt/memosrt/runtime/llama"
)

// KVConfig is what makes a serialized sequence state valid for a context:
// a state saved under one KVConfig restores only into a context with an equal
// one (see Compatible). It is read off the live context by a probe at Load.
type KVConfig struct {
	ModelFingerprint string `json:"model_fingerprint"` // hex digest of the GGUF file (see Fingerprint)
	NLayer           int    `json:"n_layer"`           // layers holding KV
	KRowBytes        int    `json:"k_row_bytes"`       // bytes of one K cell row (n_embd_k_gqa in type_k)
	VRowBytes        int    `json:"v_row_bytes"`       // bytes of one V cell row (n_embd_v_gqa in type_v)
	NEmbdVGQA        int    `json:"n_embd_v_gqa"`      // V width, elements
	TypeK            string `json:"type_k"`            // ggml type name, e.g. "f16"
	TypeV            string `json:"type_v"`
	VTrans           bool   `json:"v_trans"`  // V stored transposed (flash attention off)
	NStream          int    `json:"n_stream"` // KV streams (1: unified KV cache)
	NCtx             int    `json:"n_ctx"`    // live context size, cells (not part of compatibility)
}

// Compatible reports nil when state saved under c restores into a context
// whose config is live and needs nTokens cells, or an error naming the first
// difference.
func (c KVConfig) Compatible(live KVConfig, nTokens int) error {
	switch {
	case c.ModelFingerprint != live.ModelFingerprint:
		return fmt.Errorf("%w: saved for model %.12s, live model is %.12s", ErrBadState, c.ModelFingerprint, live.ModelFingerprint)
	case c.NLayer != live.NLayer:
		return fmt.Errorf("%w: n_layer %d, live %d", ErrBadState, c.NLayer, live.NLayer)
	case c.TypeK != live.TypeK || c.TypeV != live.TypeV:
		return fmt.Errorf("%w: KV types %s/%s, live %s/%s", ErrBadState, c.TypeK, c.TypeV, live.TypeK, live.TypeV)
	case c.KRowBytes != live.KRowBytes || c.VRowBytes != live.VRowBytes || c.NEmbdVGQA != live.NEmbdVGQA:
		return fmt.Errorf("%w: KV row widths %d/%d, live %d/%d", ErrBadState, c.KRowBytes, c.VRowBytes, live.KRowBytes, live.VRowBytes)
	case c.VTrans != live.VTrans:
		return fmt.Errorf("%w: V layout transposed=%v (flash attention %s), live transposed=%v", ErrBadState, c.VTrans, onOff(!c.VTrans), live.VTrans)
	case c.NStream != live.NStream:
		return fmt.Errorf("%w: n_stream %d, live %d", ErrBadState, c.NStream, live.NStream)
	case nTokens > live.NCtx:
		return fmt.Errorf("%w: needs %d cells, n_ctx is %d", ErrBadState, nTokens, live.NCtx)
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// SeqState is the parsed layout of one llama_state_seq_get_data blob
// (format of llama_kv_cache::state_write in llama-kv-cache.cpp).
type SeqState struct {
	NStream   int
	NCells    int     // cells holding the sequence
	Positions []int32 // position of each cell, in cell order
	VTrans    bool
	NLayer    int
	TypeK     int // ggml type id
	TypeV     int
	KRowBytes int
	VRowBytes int // for transposed V: element size × NEmbdVGQA
	NEmbdVGQA int // 0 unless VTrans
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 4 {
		r.err = fmt.Errorf("%w: truncated at byte %d of %d", ErrBadState, r.off, len(r.b))
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	lo := uint64(r.u32())
	hi := uint64(r.u32())
	return lo | hi<<32
}

func (r *reader) skip(n uint64) {
	if r.err != nil {
		return
	}
	if uint64(len(r.b)-r.off) < n {
		r.err = fmt.Errorf("%w: truncated: %d bytes needed at byte %d of %d", ErrBadState, n, r.off, len(r.b))
		return
	}
	r.off += int(n)
}

// maxCells bounds cell counts read from untrusted input (far above any n_ctx).
const maxCells = 1 << 24

// ParseSeqState walks a sequence state blob without touching llama.cpp and
// checks that it is well formed, describes one sequence in one stream, has
// uniform per-layer types and row sizes, and ends exactly at len(b).
// Errors wrap ErrBadState.
func ParseSeqState(b []byte) (SeqState, error) {
	r := &reader{b: b}
	var s SeqState
	s.NStream = int(r.u32())
	if r.err == nil && (s.NStream < 1 || s.NStream > 256) {
		return s, fmt.Errorf("%w: n_stream %d", ErrBadState, s.NStream)
	}
	for st := 0; st < s.NStream && r.err == nil; st++ {
		n := r.u32()
		if n == 0 {
			continue
		}
		if s.NCells != 0 {
			return s, fmt.Errorf("%w: sequence spans several streams", ErrBadState)
		}
		// each cell takes 12 bytes (pos, n_seq_id, seq id): refuse a count
		// the input cannot hold before allocating for it
		if n > maxCells || uint64(n)*12 > uint64(len(r.b)-r.off) {
			return s, fmt.Errorf("%w: %d cells, %d bytes left at byte %d", ErrBadState, n, len(r.b)-r.off, r.off)
		}
		s.NCells = int(n)
		s.Positions = make([]int32, 0, n)
		for i := uint32(0); i < n && r.err == nil; i++ {
			pos := int32(r.u32())
			nseq := r.u32()
			if r.err == nil && nseq != 1 {
				return s, fmt.Errorf("%w: cell %d belongs to %d sequences, want 1", ErrBadState, i, nseq)
			}
			r.u32() // source seq id, replaced by the destination on restore
			s.Positions = append(s.Positions, pos)
		}
		s.VTrans = r.u32() != 0
		s.NLayer = int(r.u32())
		if r.err == nil && (s.NLayer < 1 || s.NLayer > 4096) {
			return s, fmt.Errorf("%w: n_layer %d", ErrBadState, s.NLayer)
		}
		for l := 0; l < s.NLayer && r.err == nil; l++ {
			t := int(int32(r.u32()))
			row := r.u64()
			if r.err != nil {
				break
			}
			if l == 0 {
				s.TypeK, s.KRowBytes = t, int(row)
			} else if t != s.TypeK || int(row) != s.KRowBytes {
				return s, fmt.Errorf("%w: layer %d K type/row %d/%d differs from layer 0", ErrBadState, l, t, row)
			}
			if row == 0 || row > 1<<24 {
				return s, fmt.Errorf("%w: K row of %d bytes", ErrBadState, row)
			}
			r.skip(row * uint64(n))
		}
		for l := 0; l < s.NLayer && r.err == nil; l++ {
			t := int(int32(r.u32()))
			var rowBytes, width uint64
			if !s.VTrans {
				rowBytes = r.u64()
			} else {
				el := uint64(r.u32())
				width = uint64(r.u32())
				rowBytes = el * width
			}
			if r.err != nil {
				break
			}
			if l == 0 {
				s.TypeV, s.VRowBytes, s.NEmbdVGQA = t, int(rowBytes), int(width)
			} else if t != s.TypeV || int(rowBytes) != s.VRowBytes {
				return s, fmt.Errorf("%w: layer %d V type/row differs from layer 0", ErrBadState, l)
			}
			if rowBytes == 0 || rowBytes > 1<<24 {
				return s, fmt.Errorf("%w: V row of %d bytes", ErrBadState, rowBytes)
			}
			r.skip(rowBytes * uint64(n))
		}
	}
	if r.err != nil {
		return s, r.err
	}
	if r.off != len(b) {
		return s, fmt.Errorf("%w: %d trailing bytes", ErrBadState, len(b)-r.off)
	}
	return s, nil
}

// CheckAgainst verifies that s can be restored into a context with config c.
func (s SeqState) CheckAgainst(c KVConfig) error {
	if s.NCells == 0 {
		return nil
	}
	switch {
	case s.NStream != c.NStream:
		return fmt.Errorf("%w: n_stream %d, live %d", ErrBadState, s.NStream, c.NStream)
	case s.NLayer != c.NLayer:
		return fmt.Errorf("%w: n_layer %d, live %d", ErrBadState, s.NLayer, c.NLayer)
	case s.VTrans != c.VTrans:
		return fmt.Errorf("%w: V transposed=%v, live %v", ErrBadState, s.VTrans, c.VTrans)
	case llama.TypeName(s.TypeK) != c.TypeK || llama.TypeName(s.TypeV) != c.TypeV:
		return fmt.Errorf("%w: KV types %s/%s, live %s/%s", ErrBadState, llama.TypeName(s.TypeK), llama.TypeName(s.TypeV), c.TypeK, c.TypeV)
	case s.KRowBytes != c.KRowBytes || s.VRowBytes != c.VRowBytes:
		return fmt.Errorf("%w: row bytes K %d V %d, live K %d V %d", ErrBadState, s.KRowBytes, s.VRowBytes, c.KRowBytes, c.VRowBytes)
	case s.NCells > c.NCtx:
		return fmt.Errorf("%w: %d cells, n_ctx %d", ErrBadState, s.NCells, c.NCtx)
	}
	return nil
}

// SortSeqState returns state with its cells in position order. A sequence
// that shared another's cells (CopySeq) and then decoded more may hold its
// positions in any cache order, and llama_state_seq_get_data writes cells
// in cache order; attention sums over cells in that order, so a state
// restored out of order gives slightly different floats than a prefill
// (greedy output can diverge). Sorting makes stored states canonical: the
// cells of positions [0, n) come out as a prefill lays them. A state
// already in order is returned as is. Errors wrap ErrBadState.
func SortSeqState(state []byte) ([]byte, error) {
	s, err := ParseSeqState(state)
	if err != nil || s.NCells == 0 {
		return state, err
	}
	n := s.NCells
	order := make([]int, n) // order[k] = cell index holding the k-th smallest position
	for i := range order {
		order[i] = i
	}
	sorted := true
	for i := 1; i < n; i++ {
		if s.Positions[i] < s.Positions[i-1] {
			sorted = false
			break
		}
	}
	if sorted {
		return state, nil
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(s.Positions[a]) - int(s.Positions[b]) })
	out := make([]byte, len(state))
	// header: n_stream, then per stream its cell count; find the stream
	// holding the cells by walking as ParseSeqState does
	off := 4
	for {
		c := int(binary.LittleEndian.Uint32(state[off:]))
		off += 4
		if c != 0 {
			break
		}
	}
	copy(out, state[:off])
	// cell metadata: 12 bytes each
	for k, i := range order {
		copy(out[off+12*k:off+12*k+12], state[off+12*i:off+12*i+12])
	}
	off += 12 * n
	copy(out[off:off+8], state[off:off+8]) // v_trans, n_layer
	off += 8
	rows := func(hdr, row int) {
		copy(out[off:off+hdr], state[off:off+hdr])
		off += hdr
		for k, i := range order {
			copy(out[off+row*k:off+row*k+row], state[off+row*i:off+row*i+row])
		}
		off += row * n
	}
	for range s.NLayer {
		rows(12, s.KRowBytes) // type i32, row size u64
	}
	for range s.NLayer {
		if !s.VTrans {
			rows(12, s.VRowBytes)
			continue
		}
		// type i32, element size u32, n_embd_v_gqa u32, then per channel
		// one element per cell
		copy(out[off:off+12], state[off:off+12])
		el := int(binary.LittleEndian.Uint32(state[off+4:]))
		off += 12
		for range s.NEmbdVGQA {
			for k, i := range order {
				copy(out[off+el*k:off+el*k+el], state[off+el*i:off+el*i+el])
			}
			off += el * n
		}
	}
	// trailing streams (empty for a one-sequence state)
	copy(out[off:], state[off:])
	return out, nil
}

// TruncateSeqState returns state holding only positions [0, n): restoring
// it fills n cells, not every cell of the saved sequence (a conversation
// pack restored for a shorter prompt). Cells are sorted first
// (SortSeqState); positions [0, n) must be the first n cells. It is
// SliceSeqState(state, 0, n) after that check; n >= the state's cells
// returns it as is. Errors wrap ErrBadState.
func TruncateSeqState(state []byte, n int) ([]byte, error) {
	state, err := SortSeqState(state)
	if err != nil {
		return nil, err
	}
	s, err := ParseSeqState(state)
	if err != nil {
		return nil, err
	}
	if n >= s.NCells {
		return state, nil
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: truncate to %d cells", ErrBadState, n)
	}
	for i := range n {
		if int(s.Positions[i]) != i {
			return nil, fmt.Errorf("%w: positions are not [0, %d)", ErrBadState, s.NCells)
		}
	}
	return SliceSeqState(state, 0, n)
}
