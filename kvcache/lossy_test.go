package kvcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/memosrt/memosrt/internal/half"
	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/runtime"
)

// lossyStories are TinyStories-like texts, stories260K's kind of input.
var lossyStories = []string{
	"Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her red ball. One day, she saw a big dog near the swings. The dog was sad because it was lost. Lily gave the dog some of her bread and they became friends.",
	"Tom had a small boat. Every morning he took the boat to the lake with his dad. They looked at the fish and the birds. One day the wind was very strong and the boat went far away. Tom was scared, but his dad held his hand and they paddled back home together.",
	"Sara liked to draw pictures of the sun and the trees. Her mom gave her a new box of colors for her birthday. Sara drew a big yellow sun, a blue sky and a green hill. She showed the picture to her friend Ben, and Ben smiled and said it was the best picture he had ever seen.",
	"There was a little cat who lived in a tall house. The cat liked to sit by the window and watch the rain. One day a bird came to the window. The cat wanted to play, but the bird flew away. The cat was sad until the sun came out and the bird came back to sing.",
	"Max and Mia went to the zoo with their grandma. They saw a lion, a big elephant and a funny monkey. The monkey took Max's hat and ran up a tree. Everyone laughed. The zoo man came with a ladder and gave the hat back to Max, and Max said thank you.",
}

type lossyEval struct {
	prompts, top1, full int     // prompts; first token equal; all 32 tokens equal
	matched             float64 // mean fraction of the 32 tokens equal before the first difference
	raw, packed         int     // state bytes; quantized+zstd bytes
	lossless            int     // the lossless codec's payload bytes
	quantNs, decodeNs   int64
}

// evalLossy restores, for prompts cut from lossyStories every step
// tokens, the exact state and its lossy round trip into a sequence and
// compares 32 greedy tokens after each.
func evalLossy(t testing.TB, e *runtime.Engine, p LossyParams, step, gen int) lossyEval {
	ctx := context.Background()
	var ev lossyEval
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	defer enc.Close()
	for _, story := range lossyStories {
		toks, err := e.Tokenize(story, true)
		if err != nil {
			t.Fatal(err)
		}
		for n := 24; n <= len(toks); n += step {
			prompt := toks[:n]
			if err := e.ClearSeq(0); err != nil {
				t.Fatal(err)
			}
			if err := e.PrefillRequest(ctx, 0, prompt[:n-1], nil, false); err != nil {
				t.Fatal(err)
			}
			state, err := e.SaveSeq(0)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			q, ok, err := Quantize(state, p)
			ev.quantNs += time.Since(t0).Nanoseconds()
			if err != nil || !ok {
				t.Fatalf("quantize: %v %v", ok, err)
			}
			packed := enc.EncodeAll(q, nil)
			t0 = time.Now()
			lossy, err := Dequantize(q)
			ev.decodeNs += time.Since(t0).Nanoseconds()
			if err != nil {
				t.Fatal(err)
			}
			run := func(st []byte) []runtime.Token {
				if err := e.ClearSeq(1); err != nil {
					t.Fatal(err)
				}
				if _, err := e.RestoreSeq(1, st); err != nil {
					t.Fatal(err)
				}
				r, err := e.Generate(ctx, runtime.Request{Seq: 1, Tokens: prompt, NPast: n - 1, MaxTokens: gen})
				if err != nil {
					t.Fatal(err)
				}
				return r.Tokens
			}
			exact, got := run(state), run(lossy)
			ev.prompts++
			ev.raw += len(state)
			ev.packed += len(packed)
			ev.lossless += len(enc.EncodeAll(shuffle2(state), nil))
			same := 0
			for same < len(exact) && same < len(got) && exact[same] == got[same] {
				same++
			}
			if same > 0 {
				ev.top1++
			}
			if same == len(exact) && len(got) == len(exact) {
				ev.full++
			}
			if len(exact) > 0 {
				ev.matched += float64(same) / float64(len(exact))
			}
		}
	}
	ev.matched /= float64(ev.prompts)
	return ev
}

func (ev lossyEval) String() string {
	return fmt.Sprintf("%d prompts: first token equal %.1f%%, all 32 equal %.1f%%, matched prefix %.1f%%; %.2fx smaller than the raw f16 state (lossless zstd+shuffle2 %.2fx); dequantize %.2f GB/s of state",
		ev.prompts, 100*float64(ev.top1)/float64(ev.prompts), 100*float64(ev.full)/float64(ev.prompts), 100*ev.matched,
		float64(ev.raw)/float64(ev.packed), float64(ev.raw)/float64(ev.lossless), float64(ev.raw)/float64(ev.decodeNs))
}

// TestLossyRoundTrip: the quantized stream keeps every byte outside the
// K and V values and each value within half a step of its group's
// quantization; 8-bit is within 1/255 of the group's range.
func TestLossyRoundTrip(t *testing.T) {
	for _, fa := range []string{"on", "off"} { // V rows, transposed V
		t.Run("flash-attn="+fa, func(t *testing.T) {
			e := testenv.Engine(t, runtime.Options{FlashAttn: fa})
			toks, _ := e.Tokenize(lossyStories[0], true)
			if err := e.PrefillRequest(context.Background(), 0, toks, nil, false); err != nil {
				t.Fatal(err)
			}
			state, err := e.SaveSeq(0)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := runtime.ParseSeqState(state)
			if s.VTrans != (fa == "off") {
				t.Fatalf("v_trans %v with flash attention %s", s.VTrans, fa)
			}
			for _, bits := range []int{2, 4, 8} {
				p := LossyParams{Bits: bits, KeyGroup: 32, ValGroup: 16}
				q, ok, err := Quantize(state, p)
				if err != nil || !ok {
					t.Fatal(ok, err)
				}
				got, err := Dequantize(q)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(state) {
					t.Fatalf("%d bytes, want %d", len(got), len(state))
				}
				rs := regions(s, state)
				inRegion := make([]bool, len(state))
				values := 0
				for _, r := range rs {
					for i := r.off; i < r.off+2*r.rows*r.cols; i++ {
						inRegion[i] = true
					}
					values += r.rows * r.cols
				}
				if want := 2 * s.NLayer * s.NCells * (s.KRowBytes + s.VRowBytes) / 2; 2*values != want {
					t.Fatalf("regions hold %d values, want %d", values, want/2)
				}
				worst := float32(0)
				for i := range state {
					if !inRegion[i] && got[i] != state[i] {
						t.Fatalf("bits %d: byte %d outside K/V changed", bits, i)
					}
				}
				for _, r := range rs {
					g := p.KeyGroup
					if r.axis == 1 {
						g = p.ValGroup
					}
					groups(r, g, func(first, stride, n int) {
						lo, hi := float32(1e9), float32(-1e9)
						for i := range n {
							v := half.Float(binary.LittleEndian.Uint16(state[r.off+2*(first+i*stride):]))
							lo, hi = min(lo, v), max(hi, v)
						}
						step := (hi - lo) / float32(int(1)<<bits-1)
						for i := range n {
							o := r.off + 2*(first+i*stride)
							a := half.Float(binary.LittleEndian.Uint16(state[o:]))
							b := half.Float(binary.LittleEndian.Uint16(got[o:]))
							d := a - b
							if d < 0 {
								d = -d
							}
							// half a step, plus f16 rounding of the bounds and the result
							if tol := step/2 + 2e-3*max(-lo, hi, 1); d > tol {
								t.Fatalf("bits %d: value %g came back %g (step %g)", bits, a, b, step)
							}
							if step > 0 {
								worst = max(worst, d/step)
							}
						}
					})
				}
				t.Logf("bits %d: %d → %d bytes before zstd; worst error %.2f steps", bits, len(state), len(q), worst)
			}
		})
	}
}

// TestLossyRefusesCorrupt: a damaged stream is ErrCorrupt, never a panic
// or a state of the wrong size.
func TestLossyRefusesCorrupt(t *testing.T) {
	e := testenv.Engine(t, runtime.Options{})
	toks, _ := e.Tokenize(lossyStories[1], true)
	if err := e.PrefillRequest(context.Background(), 0, toks, nil, false); err != nil {
		t.Fatal(err)
	}
	state, _ := e.SaveSeq(0)
	q, _, err := Quantize(state, DefaultLossy)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{0, 3, 15, 16, 40, len(q) / 2, len(q) - 1} {
		if _, err := Dequantize(q[:cut]); err == nil || !strings.Contains(err.Error(), "lossy stream") {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
	if _, err := Dequantize(append(bytes.Clone(q), 0)); err == nil {
		t.Error("a trailing byte was accepted")
	}
	bad := bytes.Clone(q)
	bad[0] = 3
	if _, err := Dequantize(bad); err == nil {
		t.Error("3 bits accepted")
	}
	if _, _, err := Quantize(state, LossyParams{Bits: 3, KeyGroup: 32, ValGroup: 32}); err == nil {
		t.Error("Quantize took 3 bits")
	}
}

// TestLossyAgreement: restoring the 8-bit state instead of the exact one
// keeps the next token of every one of the 80 prompts and almost all of
// 32 greedy tokens, and 2-bit does measurably worse: the figures come from
// the restored states, not the codec's sizes. Measured: 8-bit 100.0%
// first token, 93.8% all 32 equal, 96.6% matched prefix under make's
// CGO flags (95.0% and 97.2% under go test's default, non-SIMD ones: the
// greedy paths of the exact state differ between the two builds); 2-bit
// 72.5% / 5.0% / 13.9% (71.2% / 5.0% / 13.6%).
func TestLossyAgreement(t *testing.T) {
	testenv.SkipUnderRace(t, "the lossy codecs' agreement with the exact state")
	e := testenv.Engine(t, runtime.Options{NCtx: 1024})
	e8 := evalLossy(t, e, LossyParams{Bits: 8, KeyGroup: 128, ValGroup: 64}, 6, 32)
	e2 := evalLossy(t, e, LossyParams{Bits: 2, KeyGroup: 32, ValGroup: 32}, 6, 32)
	t.Log("8-bit: ", e8)
	t.Log("2-bit: ", e2)
	if e8.prompts != 80 || e8.top1 != e8.prompts || e8.matched < 0.95 || e8.full < e8.prompts*9/10 {
		t.Errorf("8-bit: %v", e8)
	}
	if e2.top1 >= e8.top1 || e2.full >= e8.full || e2.matched >= e8.matched {
		t.Errorf("2-bit agrees as well as 8-bit: %v", e2)
	}
}

// BenchmarkLossyQuality prints issue 15's lossy figures on stories260K's
// real KV: size against the raw f16 state, agreement of 32 greedy tokens
// after the lossy restore with those after the exact one, and the
// dequantize rate on one core.
//
//	go test -run '^$' -bench LossyQuality -benchtime 1x ./kvcache/
func BenchmarkLossyQuality(b *testing.B) {
	e := testenv.Engine(b, runtime.Options{NCtx: 1024})
	for _, p := range []LossyParams{
		{Bits: 8, KeyGroup: 128, ValGroup: 64},
		{Bits: 4, KeyGroup: 32, ValGroup: 32},
		{Bits: 4, KeyGroup: 128, ValGroup: 64},
		{Bits: 2, KeyGroup: 32, ValGroup: 32},
	} {
		b.Run(fmt.Sprintf("bits=%d/kg=%d/vg=%d", p.Bits, p.KeyGroup, p.ValGroup), func(b *testing.B) {
			for range b.N {
				ev := evalLossy(b, e, p, 6, 32)
				b.ReportMetric(100*float64(ev.top1)/float64(ev.prompts), "top1-%")
				b.ReportMetric(100*float64(ev.full)/float64(ev.prompts), "greedy32-%")
				b.ReportMetric(float64(ev.raw)/float64(ev.packed), "x-smaller")
				b.ReportMetric(float64(ev.raw)/float64(ev.decodeNs), "dequant-GB/s")
				b.Log(ev)
			}
		})
	}
}

// BenchmarkDequantize: one core's rate on a stories260K state of 300
// tokens (SetBytes: the state's bytes).
func BenchmarkDequantize(b *testing.B) {
	e := testenv.Engine(b, runtime.Options{NCtx: 1024})
	toks, _ := e.Tokenize(strings.Repeat(lossyStories[2]+" ", 4), true)
	if err := e.PrefillRequest(context.Background(), 0, toks[:min(len(toks), 300)], nil, false); err != nil {
		b.Fatal(err)
	}
	state, _ := e.SaveSeq(0)
	e.Close() // its threads idle-spinning would share the 2 cores
	q, _, err := Quantize(state, DefaultLossy)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(state)))
	// the machine may be shared: the process's CPU time gives the rate
	// on one core, whatever else runs (cpu-MB/s); Dequantize decodes its
	// regions on every core, so the time of every thread counts
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		if _, err := Dequantize(q); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if ns := processCPU() - cpu0; ns > 0 {
		b.ReportMetric(float64(b.N)*float64(len(state))/float64(ns)*1e3, "cpu-MB/s")
	}
}

// BenchmarkDecodeRegion: the value decoding alone, without the state's
// allocation (SetBytes: the region's bytes).
func BenchmarkDecodeRegion(b *testing.B) {
	for _, tc := range []struct {
		name string
		r    region
		g    int
		bits int
	}{
		{"K-300x32-g128", region{axis: 0, rows: 300, cols: 32}, 128, 4},
		{"V-300x32-g64", region{axis: 1, rows: 300, cols: 32}, 64, 4},
		{"K-4096x256-g128-q8", region{axis: 0, rows: 4096, cols: 256}, 128, 8},
		{"V-4096x256-g64-q8", region{axis: 1, rows: 4096, cols: 256}, 64, 8},
	} {
		b.Run(tc.name, func(b *testing.B) {
			data := make([]byte, 2*tc.r.rows*tc.r.cols)
			for i := 0; i < len(data); i += 2 {
				binary.LittleEndian.PutUint16(data[i:], half.Bits(float32(i%97)/50-1))
			}
			src := quantRegion(nil, data, tc.r, tc.g, tc.bits)
			b.SetBytes(int64(len(data)))
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			cpu0 := threadCPU()
			b.ResetTimer()
			for range b.N {
				if _, ok := decodeRegion(data, src, tc.r, tc.g, tc.bits); !ok {
					b.Fatal("short")
				}
			}
			b.StopTimer()
			if ns := threadCPU() - cpu0; ns > 0 {
				b.ReportMetric(float64(b.N)*float64(len(data))/float64(ns)*1e3, "cpu-MB/s")
			}
		})
	}
}

// TestHalfBits: the fast converters (halfBits, halfTable) equal half.Bits
// on every float32 whose upper 20 bits vary (all signs and exponents, the
// mantissa bits that decide rounding, with low bits at and around the
// halfway point) and on 1<<20 random ones.
func TestHalfBits(t *testing.T) {
	var tab [1]uint16
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if math.IsNaN(float64(f)) {
			return
		}
		want := half.Bits(f)
		if got := halfBits(f); got != want {
			t.Fatalf("halfBits(%g) = %#04x, want %#04x", f, got, want)
		}
		if halfTable(tab[:], f, 0); f != 0 && tab[0] != want { // -0 + 0 is +0
			t.Fatalf("halfTable(%g) = %#04x, want %#04x", f, tab[0], want)
		}
	}
	for hi := uint32(0); hi < 1<<20; hi++ {
		for _, lo := range []uint32{0, 1, 0x7ff, 0x800, 0x801, 0xfff} {
			check(hi<<12 | lo)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1 << 20 {
		check(r.Uint32())
	}
}
