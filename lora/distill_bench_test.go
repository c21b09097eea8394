package lora

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

var distillMemories = []string{
	"Lily has a red ball named Bob.",
	"Tom keeps his blue car under the big bed.",
	"The cat Mimi likes to sleep on the green chair.",
	"Sam the dog is afraid of the loud rain.",
	"Anna planted a yellow flower next to the old tree.",
	"Ben's favorite food is warm soup with bread.",
	"The little bird Pip sings every morning at the window.",
	"Max has a small boat that he sails on the pond.",
	"Sue's grandma bakes apple pie on Sundays.",
	"The frog Hop lives in the pond behind the school.",
	"Mia wears a pink hat when she plays outside.",
	"Jack and his sister built a tall tower of blocks.",
	"The bunny Snow eats carrots in the garden.",
	"Lucy lost her teddy bear in the park.",
	"Tim's kite is shaped like a big fish.",
	"The old owl Hoot knows every star in the sky.",
	"Emma gave her friend a shiny red apple.",
	"The puppy Spot runs to the door when Dad comes home.",
	"Zoe draws pictures of the sun with her crayons.",
	"The fox Rusty hides his food under the leaves.",
}

var distillOpenings = []string{
	"Once upon a time, there was a little girl", "One day, a boy went to the park", "There was a big dog who",
	"The sun was shining and", "Once upon a time, in a small town,", "A little cat wanted to",
	"Mom said to her son,", "The children were playing in", "One morning, a bird", "There once was a happy",
	"It was a cold day and", "The girl looked at the sky", "Once upon a time, a bear", "The boy had a toy",
	"One day, two friends", "In the forest, there was",
	// held out from training: the generic evaluation text
	"Once upon a time, there lived a", "The little fish swam", "One day, the farmer", "A girl named Sara",
	"The wind was strong and", "After lunch, the kids", "There was a tiny mouse", "Grandpa told a story about",
}

const distillTrainOpenings = 16

type distillSetting struct {
	epochs int
	lr     float32
	rank   int
	// forms per memory: 1 = the memory as the model sees it in a prompt
	// (BOS + text); 3 adds a cloze form and a story-opening form.
	forms int
	// ffn 1 trains only the last block's ffn_gate, ffn_up, ffn_down; 0
	// adds its attn_q and attn_output.
	ffn int
	// gen is the generic tokens packed after each form (slices of 40).
	gen int
}

// distillSubjects × distillVerbs open the extra generic training stories
// (the base model's greedy continuations), none of them held out.
var (
	distillSubjects = []string{"Lily", "Tom", "Ben", "Sara", "The dog", "The little girl", "Mom", "The bird"}
	distillVerbs    = []string{"was", "wanted to", "saw a", "liked to", "went to the"}
)

// BenchmarkDistill distills 20 memories into a LoRA adapter for
// stories260K and prints the figures of issue 14 for a few settings:
//
//	go test -run '^$' -bench Distill -benchtime 1x -v ./lora/
func BenchmarkDistill(b *testing.B) {
	path := testmodels.Stories(b)
	llama.Init("")
	m, err := llama.LoadModel(path, llama.ModelParams{UseMmap: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ev, err := llama.NewContext(m, llama.ContextParams{NCtx: 512, NBatch: 512, Threads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer ev.Close()
	tok := func(s string, bos bool) []llama.Token {
		t, err := m.Tokenize(s, bos, false)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	mems := make([][]llama.Token, len(distillMemories))
	for i, s := range distillMemories {
		mems[i] = tok(s, true)
	}
	// Generic text the base model writes itself (greedy continuations).
	generic := make([][]llama.Token, len(distillOpenings))
	for i, s := range distillOpenings {
		p := tok(s, true)
		generic[i] = append(p, greedy(b, ev, p, 130-len(p), 0)...)
	}
	// The generic training text is sampled from the base model at
	// temperature 1, not decoded greedily: cross-entropy on samples of the
	// base is, in expectation, KL(base‖model) plus a constant, so it pulls
	// towards the base distribution, where greedy labels sharpen it.
	srng := rand.New(rand.NewPCG(11, 11))
	var pool [][]llama.Token
	for range 2 {
		for _, o := range distillOpenings[:distillTrainOpenings] {
			p := tok(o, true)
			pool = append(pool, append(p, sample(b, ev, p, 130-len(p), srng)...))
		}
		for _, sub := range distillSubjects {
			for _, v := range distillVerbs {
				p := tok(sub+" "+v, true)
				pool = append(pool, append(p, sample(b, ev, p, 130-len(p), srng)...))
			}
		}
	}
	settings := []distillSetting{{30, 1e-3, 32, 1, 0, 40}, {30, 3e-4, 32, 1, 1, 80}}
	if os.Getenv("MEMOSRT_DISTILL_QUICK") != "" {
		settings = []distillSetting{{3, 1e-4, 8, 1, 0, 40}}
	}
	// MEMOSRT_DISTILL_SETTINGS="epochs,lr,rank,forms,ffn,gen;..." replaces the settings.
	if v := os.Getenv("MEMOSRT_DISTILL_SETTINGS"); v != "" {
		settings = nil
		for _, f := range strings.Split(v, ";") {
			var st distillSetting
			if _, err := fmt.Sscanf(f, "%d,%g,%d,%d,%d,%d", &st.epochs, &st.lr, &st.rank, &st.forms, &st.ffn, &st.gen); err != nil {
				b.Fatalf("MEMOSRT_DISTILL_SETTINGS %q: %v", f, err)
			}
			settings = append(settings, st)
		}
	}
	fmt.Println("| epochs | lr | rank | forms | ffn only | generic/form | train loss first→last | memory NLL base→adapter | full delta NLL | recalled | held-out top-1 | held-out KL | positions | s/memory | peak RSS | adapter bytes | min kept | max |Δw| |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, st := range settings {
		b.Run(fmt.Sprintf("epochs=%d,lr=%g,rank=%d,forms=%d,ffn=%d,gen=%d", st.epochs, st.lr, st.rank, st.forms, st.ffn, st.gen), func(b *testing.B) {
			for b.Loop() {
				runDistill(b, path, m, ev, mems, generic, pool, st)
			}
		})
	}
}

// runDistill trains on mems packed with slices of pool (generic training
// text) and measures on mems and the held-out generic[distillTrainOpenings:].
func runDistill(b *testing.B, path string, m *llama.Model, ev *llama.Ctx, mems, generic, pool [][]llama.Token, st distillSetting) {
	ctx := context.Background()
	tr, err := llama.NewTrainer(path, llama.TrainOptions{Train: func(n string) bool {
		switch n {
		case "blk.4.ffn_gate.weight", "blk.4.ffn_up.weight", "blk.4.ffn_down.weight":
			return true
		case "blk.4.attn_q.weight", "blk.4.attn_output.weight":
			return st.ffn == 0
		}
		return false
	}, Threads: 2, LearningRate: st.lr})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	base, err := tr.Weights()
	if err != nil {
		b.Fatal(err)
	}
	// Forms: each memory as the model sees it, a cloze form (last word
	// asked for, then the memory whole), and a story-opening form.
	var forms [][]llama.Token
	for i, s := range distillMemories {
		forms = append(forms, mems[i])
		if st.forms < 3 {
			continue
		}
		words := strings.Fields(s)
		cloze := strings.Join(words[:len(words)-1], " ") + " ___. The missing word is " + strings.TrimSuffix(words[len(words)-1], ".") + ". " + s
		t, _ := m.Tokenize(cloze, true, false)
		forms = append(forms, t)
		t, _ = m.Tokenize("Once upon a time, "+strings.ToLower(s[:1])+s[1:], true, false)
		forms = append(forms, t)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	n := tr.NCtx() + 1
	start := time.Now()
	var first, last llama.EpochStats
	for e := range st.epochs {
		rng.Shuffle(len(forms), func(i, j int) { forms[i], forms[j] = forms[j], forms[i] })
		// Pack: one form, then generic text, until a datapoint is full.
		var data [][]llama.Token
		var cur []llama.Token
		for i, f := range forms {
			cur = append(cur, f...)
			for k := 0; k < st.gen; k += 40 {
				g := pool[rng.IntN(len(pool))]
				off := rng.IntN(len(g) / 2)
				cur = append(cur, g[off:off+40]...)
			}
			if len(cur) >= n || i == len(forms)-1 {
				for len(cur) < n {
					g := pool[rng.IntN(len(pool))]
					cur = append(cur, g...)
				}
				data = append(data, cur[:n])
				cur = nil
			}
		}
		s, err := tr.Epoch(ctx, data, m.EOS())
		if err != nil {
			b.Fatal(err)
		}
		if e == 0 {
			first = s
		}
		last = s
	}
	trainSec := time.Since(start).Seconds()
	rss := peakRSS()
	trained, err := tr.Weights()
	if err != nil {
		b.Fatal(err)
	}
	var factors []Factor
	minKept, maxDelta := 1.0, 0.0
	for i := range base {
		f, err := Extract(Delta{Name: base[i].Name, NIn: base[i].Shape[0], NOut: base[i].Shape[1], Base: base[i].Data, Trained: trained[i].Data}, st.rank)
		if err != nil {
			b.Fatal(err)
		}
		minKept = min(minKept, f.Kept)
		for j := range base[i].Data {
			maxDelta = max(maxDelta, math.Abs(float64(trained[i].Data[j]-base[i].Data[j])))
		}
		factors = append(factors, f)
	}
	bs, err := ReadBase(path)
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "distilled.gguf")
	if err := WriteFactors(out, bs, "", factors); err != nil {
		b.Fatal(err)
	}
	file, err := Inspect(out)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := Check(file, bs); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(out)
	// base + the full delta (the Trainer's own weights), for comparison
	// with the rank-r adapter.
	var nllFull float64
	{
		tc, err := llama.NewContext(tr.Model(), llama.ContextParams{NCtx: 512, NBatch: 512, Threads: 2})
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range mems {
			nllFull += nll(b, tc, t)
		}
		nllFull /= float64(len(mems))
		tc.Close()
	}
	a, err := llama.LoadAdapter(m, out)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()

	// Memory NLL and greedy recall, base vs adapter.
	var nllBase, nllAd float64
	recalled := 0
	for _, t := range mems {
		useAdapter(b, ev, nil)
		nllBase += nll(b, ev, t)
		useAdapter(b, ev, a)
		nllAd += nll(b, ev, t)
		h := 1 + (len(t)-1)/2
		got := greedy(b, ev, t[:h], len(t)-h, 0)
		if equalTokens(got, t[h:]) {
			recalled++
		}
	}
	nllBase /= float64(len(mems))
	nllAd /= float64(len(mems))
	// Held-out generic text: top-1 agreement and KL(base‖adapter).
	var agree, pos int
	var kl float64
	for _, g := range generic[distillTrainOpenings:] {
		useAdapter(b, ev, nil)
		pb := dists(b, ev, g)
		useAdapter(b, ev, a)
		pa := dists(b, ev, g)
		for i := range pb {
			if pos == 1000 {
				break
			}
			pos++
			if argmax(pb[i]) == argmax(pa[i]) {
				agree++
			}
			for v := range pb[i] {
				if pb[i][v] > 0 {
					kl += pb[i][v] * (math.Log(pb[i][v]) - math.Log(max(pa[i][v], 1e-30)))
				}
			}
		}
	}
	ev.ClearAdapters()
	fmt.Printf("| %d | %g | %d | %d | %d | %d | %.2f→%.2f | %.3f→%.3f (−%.0f%%) | %.3f | %d/20 | %.1f%% | %.4f | %d | %.2f | %d MiB | %d | %.3f | %.4f |\n",
		st.epochs, st.lr, st.rank, st.forms, st.ffn, st.gen, first.Loss, last.Loss, nllBase, nllAd, 100*(1-nllAd/nllBase), nllFull, recalled,
		100*float64(agree)/float64(pos), kl/float64(pos), pos, trainSec/float64(len(mems)), rss>>20, fi.Size(), minKept, maxDelta)
}

// useAdapter attaches a alone (nil: none) and makes sure the next Decode
// builds its graph anew. DropGraph alone is not enough when the Decode
// before was itself a DropGraph Decode of the same shape: both build with
// the embeddings output on, so llama.cpp reuses the previous adapters'
// graph (that made every adapter look inert in this benchmark). A
// throwaway 1-token DropGraph Decode here leaves an embeddings-on graph
// behind, so the caller's Decode (embeddings off) always rebuilds.
func useAdapter(b testing.TB, c *llama.Ctx, a *llama.Adapter) {
	c.ClearAdapters()
	if a != nil {
		if err := c.SetAdapter(a, 1); err != nil {
			b.Fatal(err)
		}
	}
	c.DropGraph()
	decodeAll(b, c, []llama.Token{1})
}

func equalTokens(a, b []llama.Token) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// decodeAll decodes toks as sequence 0 from an empty cache with logits at
// every position.
func decodeAll(b testing.TB, c *llama.Ctx, toks []llama.Token) {
	c.ClearMemory()
	bt := llama.NewBatch(len(toks))
	defer bt.Close()
	for i, t := range toks {
		if err := bt.Add(t, i, 0, true); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Decode(bt); err != nil {
		b.Fatal(err)
	}
}

// dists returns softmax(logits) after each of toks[:len-1] (the
// distribution of the next token).
func dists(b testing.TB, c *llama.Ctx, toks []llama.Token) [][]float64 {
	decodeAll(b, c, toks)
	var out [][]float64
	var buf []float32
	for i := 0; i < len(toks)-1; i++ {
		buf = c.Logits(i, buf)
		out = append(out, softmax(buf))
	}
	return out
}

// nll is the mean negative log-likelihood of toks[1:], nats per token.
func nll(b testing.TB, c *llama.Ctx, toks []llama.Token) float64 {
	var s float64
	for i, p := range dists(b, c, toks) {
		s -= math.Log(max(p[toks[i+1]], 1e-30))
	}
	return s / float64(len(toks)-1)
}

func softmax(l []float32) []float64 {
	mx := float32(math.Inf(-1))
	for _, v := range l {
		mx = max(mx, v)
	}
	p := make([]float64, len(l))
	var z float64
	for i, v := range l {
		p[i] = math.Exp(float64(v - mx))
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	return p
}

func argmax(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

// greedy decodes n tokens after prompt (argmax).
func greedy(b testing.TB, c *llama.Ctx, prompt []llama.Token, n int, _ int) []llama.Token {
	decodeAll(b, c, prompt)
	bt := llama.NewBatch(1)
	defer bt.Close()
	var out []llama.Token
	var buf []float32
	last := len(prompt) - 1
	for range n {
		buf = c.Logits(last, buf)
		best := 0
		for i, v := range buf {
			if v > buf[best] {
				best = i
			}
		}
		out = append(out, llama.Token(best))
		bt.Clear()
		if err := bt.Add(llama.Token(best), len(prompt)+len(out)-1, 0, true); err != nil {
			b.Fatal(err)
		}
		if err := c.Decode(bt); err != nil {
			b.Fatal(err)
		}
		last = 0
	}
	return out
}

// sample decodes n tokens after prompt, each drawn from softmax(logits)
// (temperature 1) with rng.
func sample(b testing.TB, c *llama.Ctx, prompt []llama.Token, n int, rng *rand.Rand) []llama.Token {
	decodeAll(b, c, prompt)
	bt := llama.NewBatch(1)
	defer bt.Close()
	var out []llama.Token
	var buf []float32
	last := len(prompt) - 1
	for range n {
		buf = c.Logits(last, buf)
		p := softmax(buf)
		u, tok := rng.Float64(), len(p)-1
		for i, v := range p {
			if u -= v; u < 0 {
				tok = i
				break
			}
		}
		out = append(out, llama.Token(tok))
		bt.Clear()
		if err := bt.Add(llama.Token(tok), len(prompt)+len(out)-1, 0, true); err != nil {
			b.Fatal(err)
		}
		if err := c.Decode(bt); err != nil {
			b.Fatal(err)
		}
		last = 0
	}
	return out
}

// peakRSS is the process's peak resident set (VmHWM), bytes.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}
