package kvcache

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/zstd"

	"github.com/memosrt/memosrt/internal/half"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
)

// Exploration of lossy stored forms beyond Quantize's KIVI codes, for
// issue 15's gate (≥ 4x smaller than the raw f16 state, ≥ 99% first
// token, ≥ 95% of 32 greedy tokens equal): each method is simulated (K
// and V quantized and put back into the state as f16), restored, and 32
// greedy tokens compared with those after the exact state, on the 80
// prompts BenchmarkLossyQuality uses. Sizes are real: the codes are
// entropy coded with huff0 (klauspost/compress, one Huffman table over
// all codes of a state), the per-channel centres and steps counted as
// f16, the rest of the state (and any cell kept exact) zstd'd.
//
//	MEMOSRT_LOSSY_EXPLORE=floor|main|alloc|fine go test -run LossyExplore -v -timeout 30m ./kvcache/
//
// Methods:
//   - entropy-coded uniform quantization (a fixed step per channel, alpha
//     × the channel's standard deviation over the state's tokens, codes
//     round((x − mean)/step) then Huffman coded): at high rate a uniform
//     quantizer followed by an entropy coder is within 0.254 bit per value
//     of the rate-distortion bound (Gish and Pierce, "Asymptotically
//     efficient quantizing", IEEE Trans. Inf. Theory 14(5), 1968), where
//     min/max codes spend bits on each group's range;
//   - "region": one step for a whole layer's K (or V), centred per channel;
//   - "tok": values per token (KIVI's axis) rather than per channel;
//   - the first cell kept exact (the attention sink: Xiao et al.,
//     "Efficient Streaming Language Models with Attention Sinks", ICLR
//     2024; IntactKV, Liu et al., ACL Findings 2024) and a window of the
//     most recent cells kept in f16 (KIVI's full-precision residual of
//     recent tokens, Liu et al., ICML 2024);
//   - K only / V only / one layer only quantized: where the errors matter
//     (per-layer bit allocation);
//   - floors: ±1 f16 ulp at random, and f16 rounded to 9, 8, 7, 5 or 3
//     mantissa bits (relative errors up to 2^-10 … 2^-4), with no stored
//     form: how much error the greedy paths bear at all.

// simCfg is one simulated method.
type simCfg struct {
	name      string
	kMode     string  // "chan": step alpha×σ per channel; "region": one step per layer; "tok"
	vMode     string  // same
	alpha     float64 // step in units of σ
	vAlpha    float64 // 0: alpha
	center    bool    // subtract the per-channel (chan/region) or per-token (tok) mean
	keepFirst int     // cells at the lowest positions kept exact
	keepLast  int     // cells at the highest positions kept exact
	noise     string  // "ulp": ±1 f16 ulp at random instead of quantizing; "mant=N": keep N mantissa bits
	layerA    []float64
	only      string // "K", "V" or "L<n>": quantize only those, the rest exact
}

// mat views a region as [cell][channel].
type mat struct {
	trans        bool
	cells, chans int
}

func (m mat) idx(cell, ch int) int {
	if m.trans {
		return ch*m.cells + cell // transposed V: [chans][cells]
	}
	return cell*m.chans + ch
}

func simLossy(state []byte, c simCfg, rng *rand.Rand) (out []byte, stored int) {
	s, err := runtime.ParseSeqState(state)
	if err != nil {
		panic(err)
	}
	rs := regions(s, state)
	out = append([]byte(nil), state...)
	n := s.NCells
	keep := make([]bool, n)
	maxPos := int32(-1)
	for _, p := range s.Positions {
		maxPos = max(maxPos, p)
	}
	for i, p := range s.Positions {
		keep[i] = int(p) < c.keepFirst || int(p) > int(maxPos)-c.keepLast
	}
	var codes []byte
	var other []byte // bytes kept exactly (non-region + kept cells) and params
	at := 0
	for _, r := range rs {
		other = append(other, state[at:r.off]...)
		at = r.off + 2*r.rows*r.cols
	}
	other = append(other, state[at:]...)
	params := 0
	noiseOnly := false // no stored form: size not measured
	for ri, r := range rs {
		isK := ri < s.NLayer
		layer := ri % s.NLayer
		if (c.only == "K" && !isK) || (c.only == "V" && isK) || (strings.HasPrefix(c.only, "L") && c.only != fmt.Sprintf("L%d", layer)) {
			for i := 0; i < 2*r.rows*r.cols; i++ {
				other = append(other, state[r.off+i])
			}
			continue
		}
		m := mat{trans: !isK && s.VTrans, cells: n, chans: r.cols}
		if m.trans {
			m.chans = r.rows
		}
		get := func(cell, ch int) float64 {
			return float64(half.Float(binary.LittleEndian.Uint16(state[r.off+2*m.idx(cell, ch):])))
		}
		set := func(cell, ch int, v float64) {
			binary.LittleEndian.PutUint16(out[r.off+2*m.idx(cell, ch):], half.Bits(float32(v)))
		}
		for cell := range n {
			if keep[cell] {
				for ch := range m.chans {
					other = binary.LittleEndian.AppendUint16(other, binary.LittleEndian.Uint16(state[r.off+2*m.idx(cell, ch):]))
				}
			}
		}
		if strings.HasPrefix(c.noise, "ulp") || strings.HasPrefix(c.noise, "mant=") {
			mb := 10
			if strings.HasPrefix(c.noise, "mant=") {
				fmt.Sscanf(c.noise, "mant=%d", &mb)
			}
			for cell := range n {
				for ch := range m.chans {
					if keep[cell] {
						continue
					}
					o := r.off + 2*m.idx(cell, ch)
					h := binary.LittleEndian.Uint16(state[o:])
					if c.noise == "ulp" {
						if rng.IntN(2) == 0 {
							h++
						} else if h&0x7fff != 0 {
							h--
						}
					} else {
						sh := uint(10 - mb)
						h = uint16((uint32(h) + (1 << sh >> 1)) >> sh << sh)
					}
					binary.LittleEndian.PutUint16(out[o:], h)
				}
			}
			noiseOnly = true
			continue
		}
		mode := c.kMode
		alpha := c.alpha
		if !isK {
			mode = c.vMode
			if c.vAlpha > 0 {
				alpha = c.vAlpha
			}
		}
		if c.layerA != nil {
			alpha *= c.layerA[layer]
		}
		// groups: list of (cells, chans) sets sharing step and centre
		type grp struct{ cells, chans []int }
		var gs []grp
		var live []int
		for cell := range n {
			if !keep[cell] {
				live = append(live, cell)
			}
		}
		all := make([]int, m.chans)
		for i := range all {
			all[i] = i
		}
		switch mode {
		case "chan":
			for ch := range m.chans {
				gs = append(gs, grp{live, []int{ch}})
			}
		case "tok":
			for _, cell := range live {
				gs = append(gs, grp{[]int{cell}, all})
			}
		case "region":
			gs = append(gs, grp{live, all})
		}
		for _, g := range gs {
			var sum, sq float64
			cnt := 0
			for _, cell := range g.cells {
				for _, ch := range g.chans {
					v := get(cell, ch)
					sum += v
					sq += v * v
					cnt++
				}
			}
			if cnt == 0 {
				continue
			}
			mean := sum / float64(cnt)
			sd := math.Sqrt(max(sq/float64(cnt)-mean*mean, 0))
			if mode == "region" && c.center { // per-channel centres, one step
				params += 2 * len(g.chans)
			} else if c.center {
				params += 2
			}
			params += 2
			centre := func(ch int) float64 { return 0 }
			if c.center {
				if mode == "region" {
					ms := make([]float64, m.chans)
					for _, ch := range g.chans {
						for _, cell := range g.cells {
							ms[ch] += get(cell, ch)
						}
						ms[ch] = float64(half.Float(half.Bits(float32(ms[ch] / float64(len(g.cells))))))
					}
					centre = func(ch int) float64 { return ms[ch] }
				} else {
					mh := float64(half.Float(half.Bits(float32(mean))))
					centre = func(int) float64 { return mh }
				}
			}
			// codes are bytes: a step too fine for the group's extremes
			// is widened so that none is clipped
			dev := 0.0
			for _, cell := range g.cells {
				for _, ch := range g.chans {
					dev = max(dev, math.Abs(get(cell, ch)-centre(ch)))
				}
			}
			step := float64(half.Float(half.Bits(float32(max(alpha*sd, dev/126, 1e-4)))))
			for _, cell := range g.cells {
				for _, ch := range g.chans {
					v := get(cell, ch)
					k := math.Round((v - centre(ch)) / step)
					k = min(max(k, -127), 127)
					codes = append(codes, byte(int(k)+128))
					set(cell, ch, centre(ch)+k*step)
				}
			}
		}
	}
	if noiseOnly {
		return out, 0
	}
	enc, _ := zstd.NewWriter(nil)
	stored = len(enc.EncodeAll(other, nil)) + params + 32 + 17*len(rs)
	enc.Close()
	if len(codes) > 0 {
		var sc huff0.Scratch
		h, _, err := huff0.Compress4X(codes, &sc)
		switch err {
		case nil:
			stored += len(h)
		case huff0.ErrUseRLE:
			stored += 1
		default:
			stored += len(codes)
		}
	}
	return out, stored
}

type exactRun struct {
	state  []byte
	prompt []runtime.Token
	tokens []runtime.Token
}

func exactRuns(t testing.TB, e *runtime.Engine, step, gen int) []exactRun {
	ctx := context.Background()
	var out []exactRun
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
			x := exactRun{state: state, prompt: prompt}
			x.tokens = genFrom(t, e, state, prompt, gen)
			out = append(out, x)
		}
	}
	return out
}

func genFrom(t testing.TB, e *runtime.Engine, st []byte, prompt []runtime.Token, gen int) []runtime.Token {
	if err := e.ClearSeq(1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RestoreSeq(1, st); err != nil {
		t.Fatal(err)
	}
	r, err := e.Generate(context.Background(), runtime.Request{Seq: 1, Tokens: prompt, NPast: len(prompt) - 1, MaxTokens: gen})
	if err != nil {
		t.Fatal(err)
	}
	return r.Tokens
}

func scoreRuns(t testing.TB, e *runtime.Engine, xs []exactRun, codec func([]byte) ([]byte, int)) lossyEval {
	var ev lossyEval
	for _, x := range xs {
		lossy, stored := codec(x.state)
		got := genFrom(t, e, lossy, x.prompt, len(x.tokens))
		exact := x.tokens
		ev.prompts++
		ev.raw += len(x.state)
		ev.packed += stored
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
		ev.matched += float64(same) / float64(len(exact))
	}
	ev.matched /= float64(ev.prompts)
	return ev
}

func (ev lossyEval) row() string {
	ratio := "  n/a "
	if ev.packed > 0 {
		ratio = fmt.Sprintf("%5.2fx", float64(ev.raw)/float64(ev.packed))
	}
	return fmt.Sprintf("%s  top1 %5.1f%%  all32 %5.1f%%  prefix %5.1f%%",
		ratio, 100*float64(ev.top1)/float64(ev.prompts), 100*float64(ev.full)/float64(ev.prompts), 100*ev.matched)
}

// TestLossyExplore prints one row per method: size against the raw f16
// state, first token equal, all 32 tokens equal, mean matched prefix.
// Measured on 2026-12-02 (80 prompts, so a prompt is 1.25 points of "all
// 32"; the greedy paths are chaotic and the rows not monotone: 9 mantissa
// bits lose a prompt that 8 keep). Below a=0.02 the steps of most
// channels are widened so that codes fit a byte (a=0.01 and 0.005 give
// 1.98x, 96.2/96.7):
//
//	floor ±1 ulp               —      100.0  98.8  98.9
//	floor 9 mantissa bits      —      100.0  98.8  98.8
//	floor 8 mantissa bits      —      100.0 100.0 100.0
//	floor 7 mantissa bits      —      100.0  95.0  96.7
//	floor 5 mantissa bits      —      100.0  86.2  90.9
//	floor 3 mantissa bits      —       98.8  53.8  69.3
//	chan    a=0.02             2.00x  100.0  96.2  98.2   (best ratio with both ≥ 95%)
//	chan    a=0.03             2.10x  100.0  91.2  93.6
//	chan    a=0.04             2.23x  100.0  87.5  92.7
//	chan    a=0.05             2.33x  100.0  83.8  88.8
//	chan    a=0.10             2.72x   98.8  71.2  82.8
//	chan    a=0.20             3.27x   97.5  65.0  76.4   (KIVI 4-bit g32: 3.14x 95.0/65.0/76.2)
//	chan    a=0.35             3.91x   92.5  27.5  46.9
//	region  a=0.10 / 0.20      3.08x / 3.80x   97.5 / 78.8   42.5 / 10.0   61.3 / 21.4
//	a=0.35 K only / V only     1.79x / 1.65x   91.2 / 100.0  36.2 / 68.8   53.2 / 82.2
//	a=0.35 layer 0 / 2 / 4 only  1.19x  100.0 / 98.8 / 96.2   73.8 / 62.5 / 46.2   83.0 / 75.9 / 61.9
//	a=0.35 first cell exact    3.75x   96.2  33.8  52.1
//	a=0.35 last 8 cells exact  2.91x   98.8  46.2  65.8
//	K a=0.05, V a=0.20         2.55x  100.0  80.0  88.4
//	K a=0.10, V a=0.35         3.00x  100.0  60.0  79.6
//	K a=0.1, V per token a=0.1 2.60x   97.5  70.0  81.2
//
// No method reaches the gate: f16 cut to 7 of its 10 mantissa bits (a
// relative error up to 2^-8) is already at 95.0% / 96.7%, and the
// entropy-coded codes need a step of about 0.02 σ (about 8 bits a value)
// to stay above 95%. Key errors matter more than value errors, the last
// layer more than the first; keeping the sink or recent cells exact costs
// more size than it gains quality here.
func TestLossyExplore(t *testing.T) {
	if os.Getenv("MEMOSRT_LOSSY_EXPLORE") == "" {
		t.Skip("set MEMOSRT_LOSSY_EXPLORE")
	}
	o := runtime.Options{NCtx: 1024, NSeqMax: 2, Threads: 1}
	o.ModelPath = testmodels.Stories(t)
	e, err := runtime.Load(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	xs := exactRuns(t, e, 6, 32)
	// determinism: the exact state again
	ev := scoreRuns(t, e, xs, func(s []byte) ([]byte, int) { return s, len(s) })
	t.Logf("%-40s %s", "exact again", ev.row())
	cfgs := explorePlan()
	for _, c := range cfgs {
		rng := rand.New(rand.NewPCG(1, 2))
		ev := scoreRuns(t, e, xs, func(s []byte) ([]byte, int) { return simLossy(s, c, rng) })
		t.Logf("%-40s %s", c.name, ev.row())
	}
}

func explorePlan() []simCfg {
	which := os.Getenv("MEMOSRT_LOSSY_EXPLORE")
	var out []simCfg
	switch which {
	case "floor":
		out = append(out,
			simCfg{name: "ulp noise", noise: "ulp"},
			simCfg{name: "mant=9", noise: "mant=9"},
			simCfg{name: "mant=8", noise: "mant=8"},
			simCfg{name: "mant=7", noise: "mant=7"},
			simCfg{name: "mant=5", noise: "mant=5"},
			simCfg{name: "mant=3", noise: "mant=3"},
		)
	case "sens":
		b := simCfg{kMode: "chan", vMode: "chan", alpha: 0.35, center: true}
		add := func(name string, f func(*simCfg)) {
			c := b
			f(&c)
			c.name = name
			out = append(out, c)
		}
		add("chan a=.35 all", func(c *simCfg) {})
		add("K only", func(c *simCfg) { c.only = "K" })
		add("V only", func(c *simCfg) { c.only = "V" })
		for l := range 5 {
			add(fmt.Sprintf("layer %d only", l), func(c *simCfg) { c.only = fmt.Sprintf("L%d", l) })
		}
		add("keepFirst 1", func(c *simCfg) { c.keepFirst = 1 })
		add("keepLast 4", func(c *simCfg) { c.keepLast = 4 })
		add("keepLast 8", func(c *simCfg) { c.keepLast = 8 })
		add("keepFirst 1 keepLast 8", func(c *simCfg) { c.keepFirst = 1; c.keepLast = 8 })
	case "fine":
		for _, kv := range [][2]float64{{0.02, 0.02}, {0.01, 0.01}, {0.01, 0.05}, {0.005, 0.005}, {0.03, 0.03}, {0.04, 0.04}, {0.02, 0.05}} {
			out = append(out, simCfg{name: fmt.Sprintf("chan K a=%.3f V a=%.3f", kv[0], kv[1]), kMode: "chan", vMode: "chan", alpha: kv[0], vAlpha: kv[1], center: true})
		}
		out = append(out, simCfg{name: "chan a=.03 first=1", kMode: "chan", vMode: "chan", alpha: 0.03, center: true, keepFirst: 1})
	case "alloc":
		for _, kv := range [][2]float64{{0.05, 0.2}, {0.1, 0.35}, {0.025, 0.2}, {0.025, 0.5}} {
			out = append(out, simCfg{name: fmt.Sprintf("chan K a=%.3f V a=%.2f", kv[0], kv[1]), kMode: "chan", vMode: "chan", alpha: kv[0], vAlpha: kv[1], center: true})
		}
		out = append(out, simCfg{name: "chan K a=.1 tok V a=.1", kMode: "chan", vMode: "tok", alpha: 0.1, center: true})
		out = append(out, simCfg{name: "K .05 V .2 first=1 last=4", kMode: "chan", vMode: "chan", alpha: 0.05, vAlpha: 0.2, center: true, keepFirst: 1, keepLast: 4})
		for _, l := range []string{"L0", "L2", "L4"} {
			out = append(out, simCfg{name: "a=.35 only " + l, kMode: "chan", vMode: "chan", alpha: 0.35, center: true, only: l})
		}
	case "main":
		for _, a := range []float64{0.05, 0.1, 0.2, 0.35} {
			out = append(out, simCfg{name: fmt.Sprintf("chan/chan a=%.2f", a), kMode: "chan", vMode: "chan", alpha: a, center: true})
		}
		for _, a := range []float64{0.1, 0.2} {
			out = append(out, simCfg{name: fmt.Sprintf("region/region a=%.2f", a), kMode: "region", vMode: "region", alpha: a, center: true})
		}
		b := simCfg{kMode: "chan", vMode: "chan", alpha: 0.35, center: true}
		for _, f := range []func(*simCfg){
			func(c *simCfg) { c.only = "K" }, func(c *simCfg) { c.only = "V" },
			func(c *simCfg) { c.keepFirst = 1 }, func(c *simCfg) { c.keepLast = 8 },
		} {
			c := b
			f(&c)
			c.name = fmt.Sprintf("a=.35 only=%s first=%d last=%d", c.only, c.keepFirst, c.keepLast)
			out = append(out, c)
		}
	default:
		for _, a := range []float64{0.05, 0.1, 0.2, 0.35} {
			out = append(out,
				simCfg{name: fmt.Sprintf("chan/tok a=%.2f", a), kMode: "chan", vMode: "tok", alpha: a, center: true},
				simCfg{name: fmt.Sprintf("chan/chan a=%.2f", a), kMode: "chan", vMode: "chan", alpha: a, center: true},
				simCfg{name: fmt.Sprintf("region/region a=%.2f", a), kMode: "region", vMode: "region", alpha: a, center: true},
			)
		}
	}
	return out
}
