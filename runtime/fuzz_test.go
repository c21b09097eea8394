package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/grammar"
	"github.com/memosrt/memosrt/runtime/llama"
)

// seqState builds a llama_state_seq_get_data blob of the layout that
// ParseSeqState walks: one stream of n cells at positions [0, n) in nLayer
// layers with K and V rows of row bytes (V transposed when vTrans).
func seqState(n, nLayer, row int, vTrans bool) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 1) // n_stream
	b = le.AppendUint32(b, uint32(n))
	if n == 0 {
		return b
	}
	for i := 0; i < n; i++ {
		b = le.AppendUint32(b, uint32(i)) // pos
		b = le.AppendUint32(b, 1)         // n_seq_id
		b = le.AppendUint32(b, 0)         // seq id
	}
	vt := uint32(0)
	if vTrans {
		vt = 1
	}
	b = le.AppendUint32(b, vt)
	b = le.AppendUint32(b, uint32(nLayer))
	for l := 0; l < nLayer; l++ {
		b = le.AppendUint32(b, 1) // GGML_TYPE_F16
		b = le.AppendUint64(b, uint64(row))
		b = append(b, make([]byte, row*n)...)
	}
	for l := 0; l < nLayer; l++ {
		b = le.AppendUint32(b, 1)
		if vTrans {
			b = le.AppendUint32(b, 2)             // element size
			b = le.AppendUint32(b, uint32(row/2)) // n_embd_v_gqa
		} else {
			b = le.AppendUint64(b, uint64(row))
		}
		b = append(b, make([]byte, row*n)...)
	}
	return b
}

func TestSeqStateBuilder(t *testing.T) {
	for _, vt := range []bool{false, true} {
		s, err := ParseSeqState(seqState(3, 2, 8, vt))
		if err != nil || s.NCells != 3 || s.NLayer != 2 || s.KRowBytes != 8 || s.VRowBytes != 8 || s.VTrans != vt {
			t.Fatalf("vTrans=%v: %+v %v", vt, s, err)
		}
	}
	if s, err := ParseSeqState(seqState(0, 0, 0, false)); err != nil || s.NCells != 0 {
		t.Fatalf("empty: %+v %v", s, err)
	}
}

// TestParseSeqStateHostileCounts: a few bytes claiming millions of cells are
// refused as truncated, without allocating for the cells.
func TestParseSeqStateHostileCounts(t *testing.T) {
	b := binary.LittleEndian.AppendUint32(nil, 1)
	b = binary.LittleEndian.AppendUint32(b, 1<<24) // maxCells
	if _, err := ParseSeqState(b); !errors.Is(err, ErrBadState) {
		t.Fatalf("err = %v", err)
	}
	res := testing.Benchmark(func(tb *testing.B) {
		tb.ReportAllocs()
		for range tb.N {
			ParseSeqState(b)
		}
	})
	if per := res.AllocedBytesPerOp(); per > 1<<10 {
		t.Fatalf("refusing an 8-byte state allocated %d bytes", per)
	}
}

// FuzzParseSeqState: ParseSeqState never panics on arbitrary bytes; it
// returns an error wrapping ErrBadState or a layout that accounts for every
// byte (cells, layers, rows) of the input.
func FuzzParseSeqState(f *testing.F) {
	f.Add(seqState(0, 0, 0, false))
	f.Add(seqState(2, 1, 4, false))
	f.Add(seqState(3, 2, 8, true))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSeqState(b)
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("error does not wrap ErrBadState: %v", err)
			}
			return
		}
		if len(s.Positions) != s.NCells || s.NStream < 1 {
			t.Fatalf("accepted %+v", s)
		}
		if s.NCells == 0 {
			if len(b) != 4+4*s.NStream {
				t.Fatalf("empty state of %d bytes, %d streams", len(b), s.NStream)
			}
			return
		}
		// stream headers, cells, v_trans + n_layer, per-layer K and V
		// a V layer header is type + row bytes, or type + element size +
		// width when transposed: 12 bytes either way
		want := 4 + 4*s.NStream + 12*s.NCells + 8 + s.NLayer*(12+s.KRowBytes*s.NCells) + s.NLayer*(12+s.VRowBytes*s.NCells)
		if want != len(b) {
			t.Fatalf("accepted %d bytes, layout accounts for %d: %+v", len(b), want, s)
		}
	})
}

// SortSeqState moves every cell's K and V data with its position: a state
// holding positions [2 0 3 1] comes out as [0 1 2 3], each row still the
// one of its position (row bytes encode the position), for both V layouts;
// an ordered state is returned unchanged.
func TestSortSeqState(t *testing.T) {
	le := binary.LittleEndian
	perm := []int{2, 0, 3, 1}
	const nLayer, row = 2, 4 // row bytes; transposed V: 2 channels of 2-byte elements
	for _, vt := range []bool{false, true} {
		b := seqState(len(perm), nLayer, row, vt)
		s, err := ParseSeqState(b)
		if err != nil {
			t.Fatal(err)
		}
		meta := 8 // n_stream, cell count
		for i, p := range perm {
			le.PutUint32(b[meta+12*i:], uint32(p))
		}
		// fill rows: byte value 16*layer + position (K), 128 + ... (V)
		off := meta + 12*len(perm) + 8
		for l := range nLayer {
			off += 12
			for i, p := range perm {
				for k := range row {
					b[off+row*i+k] = byte(16*l + p)
				}
			}
			off += row * len(perm)
		}
		for l := range nLayer {
			off += 12
			if !vt {
				for i, p := range perm {
					for k := range row {
						b[off+row*i+k] = byte(128 + 16*l + p)
					}
				}
				off += row * len(perm)
				continue
			}
			for ch := range s.NEmbdVGQA {
				for i, p := range perm {
					b[off+2*i], b[off+2*i+1] = byte(128+16*l+p), byte(ch)
				}
				off += 2 * len(perm)
			}
		}
		out, err := SortSeqState(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseSeqState(out)
		if err != nil || len(out) != len(b) {
			t.Fatalf("sorted state: %v (%d bytes, want %d)", err, len(out), len(b))
		}
		for i, p := range got.Positions {
			if int(p) != i {
				t.Fatalf("vTrans=%v: positions %v", vt, got.Positions)
			}
		}
		off = meta + 12*len(perm) + 8
		for l := range nLayer {
			off += 12
			for i := range perm {
				if out[off+row*i] != byte(16*l+i) {
					t.Fatalf("vTrans=%v: K layer %d cell %d holds position %d's row", vt, l, i, out[off+row*i]-byte(16*l))
				}
			}
			off += row * len(perm)
		}
		for l := range nLayer {
			off += 12
			for ch := 0; ch < max(1, s.NEmbdVGQA) && (vt || ch == 0); ch++ {
				for i := range perm {
					stride := row
					if vt {
						stride = 2
					}
					if out[off+stride*i] != byte(128+16*l+i) || vt && out[off+stride*i+1] != byte(ch) {
						t.Fatalf("vTrans=%v: V layer %d channel %d cell %d wrong", vt, l, ch, i)
					}
				}
				if vt {
					off += 2 * len(perm)
				} else {
					off += row * len(perm)
				}
			}
		}
		if same, _ := SortSeqState(out); &same[0] != &out[0] {
			t.Fatal("an ordered state was copied")
		}
	}
}

// TruncateSeqState keeps positions [0, n) with their rows, for both V
// layouts, and the result parses; n past the end returns the state.
func TestTruncateSeqState(t *testing.T) {
	for _, vt := range []bool{false, true} {
		b := seqState(5, 2, 4, vt)
		out, err := TruncateSeqState(b, 3)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSeqState(out)
		if err != nil || s.NCells != 3 || len(s.Positions) != 3 || s.Positions[2] != 2 {
			t.Fatalf("vTrans=%v: %+v %v", vt, s, err)
		}
		if want := len(b) - 2*12 - 2*2*4*2; len(out) != want { // 2 cells: metadata, K and V rows of 2 layers
			t.Fatalf("vTrans=%v: %d bytes, want %d", vt, len(out), want)
		}
		if same, err := TruncateSeqState(b, 9); err != nil || len(same) != len(b) {
			t.Fatalf("n past the end: %d bytes, %v", len(same), err)
		}
	}
}

// FuzzGenerate drives the sampler chain and the decode loop of a real
// engine (stories260K, n_ctx 256) with arbitrary sampling parameters,
// prompts (any token ids, lengths up to past n_ctx), cached prefix lengths,
// stop strings and grammars, valid and not: every call returns, with a
// result or an error, never a panic or a crash; and the engine still
// answers a plain request the same way afterwards.
func FuzzGenerate(f *testing.F) {
	e, err := Load(context.Background(), Options{ModelPath: testmodels.Stories(f), NCtx: 256, NSeqMax: 1, Threads: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	base, _ := e.Tokenize("Once upon a time", true)
	want, err := e.Generate(context.Background(), Request{Tokens: base, MaxTokens: 8})
	if err != nil {
		f.Fatal(err)
	}
	grammars := []string{"", grammar.JSON, `root ::= "yes" | "no"`, `root ::= x`, `root ::= [`}
	f.Add(float32(0), int32(0), float32(0), float32(0), float32(1.1), int32(-1), uint32(1), []byte("Once upon"), uint16(0), uint8(4), "", uint8(0))
	f.Add(float32(0.8), int32(40), float32(0.9), float32(0.05), float32(1.1), int32(64), uint32(7), []byte{1, 2, 3}, uint16(2), uint8(16), ".", uint8(1))
	f.Add(float32(-1), int32(-5), float32(2), float32(-1), float32(0), int32(-2), uint32(0), []byte{}, uint16(9), uint8(0), "\xff", uint8(3))
	f.Add(float32(100), int32(1<<20), float32(1), float32(1), float32(100), int32(1<<20), uint32(3), make([]byte, 600), uint16(300), uint8(255), "a", uint8(2))
	f.Fuzz(func(t *testing.T, temp float32, topK int32, topP, minP, rep float32, lastN int32, seed uint32, prompt []byte,
		npast uint16, maxTok uint8, stop string, g uint8) {
		toks := make([]Token, 0, len(prompt)/2+1)
		for i := 0; i+1 < len(prompt); i += 2 {
			toks = append(toks, Token(int32(prompt[i])<<8|int32(prompt[i+1]))-1000) // out of range ids too
		}
		p := llama.SamplerParams{Temperature: temp, TopK: int(topK), TopP: topP, MinP: minP, RepeatPenalty: rep,
			RepeatLastN: int(lastN), Seed: seed, Grammar: grammars[int(g)%len(grammars)]}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Generate(ctx, Request{Tokens: toks, NPast: int(npast), Sampling: p, MaxTokens: int(maxTok), Stop: []string{stop}})
		e.ClearSeq(0)
		got, err := e.Generate(context.Background(), Request{Tokens: base, MaxTokens: 8})
		if err != nil || got.Text != want.Text {
			t.Fatalf("the engine changed after the fuzzed request: %q, %v; want %q", got.Text, err, want.Text)
		}
	})
}
