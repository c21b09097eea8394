package lora

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// distillSetting is one row of BenchmarkDistill.
type distillSetting struct {
	epochs  int
	lr      float32
	rank    int     // 0: full rank
	generic int     // generic datapoints (DistillOptions.Generic)
	output  int     // 1: train output.weight too
	threads int     // DistillOptions.Threads
	copies  int     // DistillOptions.Copies
	greedy  int     // DistillOptions.Greedy
	margin  float64 // DistillOptions.Margin (optional 9th field; 0: the default)
	anchor  float32 // DistillOptions.Anchor (optional 10th field)
	cue     int     // DistillOptions.Cue (optional 11th field; 0: the default)
}

// BenchmarkDistill distills 20 memories into a LoRA adapter for
// stories260K with Distill and prints the figures of issue 14 for each
// setting (MEMOSRT_DISTILL_SETTINGS="epochs,lr,rank,generic,output,threads,copies,greedy[,margin[,anchor[,cue]]];...",
// e.g. "40,5e-4,0,120,0,2,3,120,1,0,6", the defaults of DistillOptions):
//
//	go test -count=1 -timeout 60m -run '^$' -bench Distill -benchtime 1x -v ./lora/
//
// Memory NLL and recall (greedy completion of each memory's second half
// from its first half) are measured with the adapter attached and the
// memory not in the prompt; base behaviour as top-1 agreement and
// KL(base‖adapter) over 1,000 positions of the base's greedy stories from
// 8 openings no training text starts with. MEMOSRT_DISTILL_LOG=1 logs
// each epoch to stderr. MEMOSRT_DISTILL_TYPE=f16|q8_0|q4_0|... runs on
// stories260K written in that type by llama.Quantize (a training copy,
// figures measured on the quantized model with the adapter); run one
// type per process, as peak RSS is the process's.
func BenchmarkDistill(b *testing.B) {
	path := testmodels.Stories(b)
	llama.Init("")
	typ := "f32"
	if v := os.Getenv("MEMOSRT_DISTILL_TYPE"); v != "" && v != "f32" {
		typ, path = v, quantized(b, b.TempDir(), v)
	}
	m, ev := evalContext(b, path, 512)
	var err error
	mems := make([][]llama.Token, len(distillMemories))
	for i, s := range distillMemories {
		if mems[i], err = m.Tokenize(s, true, false); err != nil {
			b.Fatal(err)
		}
	}
	var generic [][]llama.Token
	for _, s := range distillOpenings[distillTrainOpenings:] {
		p, err := m.Tokenize(s, true, false)
		if err != nil {
			b.Fatal(err)
		}
		generic = append(generic, append(p, greedy(b, ev, p, 130-len(p), 0)...))
	}
	settings := []distillSetting{{40, 5e-4, 0, 120, 0, 2, 3, 120, 1, 0, 6}}
	if v := os.Getenv("MEMOSRT_DISTILL_SETTINGS"); v != "" {
		settings = nil
		for _, f := range strings.Split(v, ";") {
			var st distillSetting
			format := "%d,%g,%d,%d,%d,%d,%d,%d"
			args := []any{&st.epochs, &st.lr, &st.rank, &st.generic, &st.output, &st.threads, &st.copies, &st.greedy}
			if c := strings.Count(f, ","); c >= 8 {
				format, args = format+",%g", append(args, &st.margin)
				if c >= 9 {
					format, args = format+",%g", append(args, &st.anchor)
				}
				if c >= 10 {
					format, args = format+",%d", append(args, &st.cue)
				}
			}
			if _, err := fmt.Sscanf(f, format, args...); err != nil {
				b.Fatalf("MEMOSRT_DISTILL_SETTINGS %q: %v", f, err)
			}
			settings = append(settings, st)
		}
	}
	fmt.Println("| type | epochs | lr | rank | generic | output.weight | threads | copies | greedy | margin | anchor | cue | train loss first→last | memory NLL base→adapter | recalled | held-out top-1 | held-out KL | positions | steps (skipped) | s/memory (prepare+train) | peak RSS | adapter bytes | min kept |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, st := range settings {
		b.Run(fmt.Sprintf("epochs=%d,lr=%g,rank=%d,generic=%d,output=%d,threads=%d,copies=%d,greedy=%d,margin=%g,anchor=%g,cue=%d", st.epochs, st.lr, st.rank, st.generic, st.output, st.threads, st.copies, st.greedy, st.margin, st.anchor, st.cue), func(b *testing.B) {
			for b.Loop() {
				runDistill(b, typ, path, m, ev, mems, generic, st)
			}
		})
	}
}

// runDistill distills distillMemories with st and measures the adapter on
// mems and on the held-out generic text.
func runDistill(b *testing.B, typ, path string, m *llama.Model, ev *llama.Ctx, mems, generic [][]llama.Token, st distillSetting) {
	out := filepath.Join(b.TempDir(), "distilled.gguf")
	o := DistillOptions{Out: out, Epochs: st.epochs, LearningRate: st.lr, Rank: st.rank, Generic: st.generic, Threads: st.threads, Copies: st.copies, Greedy: st.greedy, Margin: st.margin, Anchor: st.anchor, Cue: st.cue}
	if os.Getenv("MEMOSRT_DISTILL_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if st.output == 0 {
		o.Weights = DistillWeights(4)
	}
	res, err := Distill(context.Background(), path, distillMemories, o)
	if err != nil {
		b.Fatal(err)
	}
	rss := peakRSS()
	a, err := llama.LoadAdapter(m, out)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	nllBase, nllAd, recalled := memoryFigures(b, ev, a, mems)
	agree, kl, pos := genericFigures(b, ev, a, generic, 1000)
	ev.ClearAdapters()
	sec := (res.Prepare + res.Train).Seconds() / float64(len(mems))
	fmt.Printf("| %s | %d | %g | %d | %d | %d | %d | %d | %d | %g | %g | %d | %.3f→%.3f | %.3f→%.3f (−%.0f%%) | %d/%d | %.1f%% | %.4f | %d | %d (%d) | %.2f (%.2f+%.2f) | %d MiB | %d | %.3f |\n",
		typ, st.epochs, st.lr, res.Rank, st.generic, st.output, st.threads, st.copies, st.greedy, st.margin, st.anchor, st.cue, res.LossFirst, res.LossLast, nllBase, nllAd, 100*(1-nllAd/nllBase), recalled, len(mems),
		100*agree, kl, pos, res.Steps, res.Skipped, sec, res.Prepare.Seconds()/float64(len(mems)), res.Train.Seconds()/float64(len(mems)), rss>>20, res.Bytes, res.MinKept)
}

// memoryFigures returns the mean NLL of mems (nats per token) without and
// with adapter a, and how many memories' second halves a's greedy decode
// reproduces from their first halves (BOS + ⌈(n−1)/2⌉ tokens of n).
func memoryFigures(b testing.TB, ev *llama.Ctx, a *llama.Adapter, mems [][]llama.Token) (nllBase, nllAd float64, recalled int) {
	for _, t := range mems {
		useAdapter(b, ev, nil)
		nllBase += nll(dists(b, ev, t), t)
		useAdapter(b, ev, a)
		nllAd += nll(dists(b, ev, t), t)
		h := 1 + (len(t)-1)/2
		if equalTokens(greedy(b, ev, t[:h], len(t)-h, 0), t[h:]) {
			recalled++
		}
	}
	return nllBase / float64(len(mems)), nllAd / float64(len(mems)), recalled
}

// genericFigures returns the share of positions whose argmax agrees with
// and without a, and the mean KL(base‖adapter) in nats, over the first
// limit next-token positions of texts. With MEMOSRT_DISTILL_LOG set it
// logs where the argmax changed (text:position) and the KL of each
// text's first 8 positions against the rest.
func genericFigures(b testing.TB, ev *llama.Ctx, a *llama.Adapter, texts [][]llama.Token, limit int) (agree, kl float64, pos int) {
	var same, early int
	var klEarly float64
	var flips []string
	for t, g := range texts {
		useAdapter(b, ev, nil)
		pb := dists(b, ev, g)
		useAdapter(b, ev, a)
		pa := dists(b, ev, g)
		for i := range pb {
			if pos == limit {
				break
			}
			pos++
			if argmax(pb[i]) == argmax(pa[i]) {
				same++
			} else {
				flips = append(flips, fmt.Sprintf("%d:%d", t, i))
			}
			var k float64
			for v := range pb[i] {
				if pb[i][v] > 0 {
					k += pb[i][v] * (math.Log(pb[i][v]) - math.Log(max(pa[i][v], 1e-30)))
				}
			}
			kl += k
			if i < 8 {
				early++
				klEarly += k
			}
		}
	}
	if os.Getenv("MEMOSRT_DISTILL_LOG") != "" {
		fmt.Fprintf(os.Stderr, "held-out: %d flips %v; KL first 8 positions of each text %.4f (%d positions), rest %.4f\n",
			len(flips), flips, klEarly/float64(max(early, 1)), early, (kl-klEarly)/float64(max(pos-early, 1)))
	}
	return float64(same) / float64(pos), kl / float64(pos), pos
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
		best := argmax(buf)
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

// BenchmarkDistillTime times distilling one memory into the model at
// MEMOSRT_BENCH_MODEL (skipped when unset) with a short setting: no
// generic datapoints, MEMOSRT_DISTILL_EPOCHS epochs (default 2) of the
// memory's one datapoint, 2 threads for training and sampling. It prints
// the training copy's size and time (a model whose last block is not
// f32), the preparation (load, copy, sampling the memory's datapoint and
// the base's soft labels), the seconds per optimizer step and the peak
// RSS:
//
//	MEMOSRT_BENCH_MODEL=models/1b-q4_0.gguf go test -run '^$' -bench DistillTime -benchtime 1x ./lora/
func BenchmarkDistillTime(b *testing.B) {
	path := os.Getenv("MEMOSRT_BENCH_MODEL")
	if path == "" {
		b.Skip("MEMOSRT_BENCH_MODEL not set")
	}
	llama.Init("")
	epochs := 2
	if v := os.Getenv("MEMOSRT_DISTILL_EPOCHS"); v != "" {
		fmt.Sscan(v, &epochs)
	}
	for b.Loop() {
		out := filepath.Join(b.TempDir(), "a.gguf")
		res, err := Distill(context.Background(), path, distillMemories[:1], DistillOptions{Out: out, Epochs: epochs, Generic: -1, Margin: -1,
			Threads: 2, SampleThreads: 2})
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("| %s | %s | %d MiB | %.1f | %.1f | %d | %.1f | %d MiB |\n", filepath.Base(path), res.BaseType, res.CopyBytes>>20, res.Copy.Seconds(),
			res.Prepare.Seconds(), res.Steps, res.Train.Seconds()/float64(max(res.Steps, 1)), peakRSS()>>20)
	}
}
