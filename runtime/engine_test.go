package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

func openStories(t *testing.T, o Options) *Engine {
	t.Helper()
	o.ModelPath = testmodels.Stories(t)
	if o.Threads == 0 {
		o.Threads = 2
	}
	e, err := Load(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		if err := e.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	return e
}

func greedy(t *testing.T, e *Engine, seq int, toks []Token, npast, n int) Result {
	t.Helper()
	r, err := e.Generate(context.Background(), Request{Seq: seq, Tokens: toks, NPast: npast, MaxTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGenerateGreedyDeterministic(t *testing.T) {
	e := openStories(t, Options{NCtx: 512})
	toks, err := e.Tokenize("Once upon a time, there was a little girl named Lily.", true)
	if err != nil {
		t.Fatal(err)
	}
	a := greedy(t, e, 0, toks, 0, 32)
	if a.EvalTokens != 32 || a.DoneReason != "length" || a.PromptTokens != len(toks) {
		t.Fatalf("got %d tokens, reason %q, prompt %d", a.EvalTokens, a.DoneReason, a.PromptTokens)
	}
	if strings.TrimSpace(a.Text) == "" {
		t.Fatal("empty output")
	}
	// same again from scratch
	if err := e.ClearSeq(0); err != nil {
		t.Fatal(err)
	}
	b := greedy(t, e, 0, toks, 0, 32)
	if a.Text != b.Text {
		t.Fatalf("greedy not deterministic:\n%q\n%q", a.Text, b.Text)
	}
	t.Logf("output: %q", a.Text)
}

func TestSaveRestoreMatchesColdPrefill(t *testing.T) {
	e := openStories(t, Options{NCtx: 512, NSeqMax: 2})
	prefix, _ := e.Tokenize("Lily had a red ball. Tom had a blue kite. They played in the park every day.", true)
	query, _ := e.Tokenize(" One day, Lily", false)
	all := append(append([]Token{}, prefix...), query...)

	cold := greedy(t, e, 0, all, 0, 40)

	// prefill prefix on seq 1, save, restore into seq 0, decode query only
	if err := e.Prefill(context.Background(), 1, prefix, 0); err != nil {
		t.Fatal(err)
	}
	state, err := e.SaveSeq(1)
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.RestoreSeq(0, state)
	if err != nil || n != len(prefix) {
		t.Fatalf("restore: %d cells, %v", n, err)
	}
	warm := greedy(t, e, 0, all, len(prefix), 40)
	if warm.CachedTokens != len(prefix) {
		t.Fatalf("cached %d, want %d", warm.CachedTokens, len(prefix))
	}
	if warm.Text != cold.Text {
		t.Fatalf("restored output differs:\ncold %q\nwarm %q", cold.Text, warm.Text)
	}
	// seq 1 untouched and equal to the saved state
	again, _ := e.SaveSeq(1)
	if string(again) != string(state) {
		t.Fatal("seq 1 changed")
	}
	// a prompt equal to the cached tokens still decodes its last token
	if _, err := e.RestoreSeq(0, state); err != nil {
		t.Fatal(err)
	}
	exact := greedy(t, e, 0, prefix, len(prefix), 20)
	e.ClearSeq(0)
	coldExact := greedy(t, e, 0, prefix, 0, 20)
	if exact.Text != coldExact.Text || exact.CachedTokens != len(prefix)-1 {
		t.Fatalf("exact-prefix: %q (cached %d) vs %q", exact.Text, exact.CachedTokens, coldExact.Text)
	}
}

func TestRestoreRejectsDamage(t *testing.T) {
	e := openStories(t, Options{NCtx: 256, NSeqMax: 2})
	toks, _ := e.Tokenize("The cat sat on the mat.", true)
	if err := e.Prefill(context.Background(), 1, toks, 0); err != nil {
		t.Fatal(err)
	}
	state, _ := e.SaveSeq(1)
	cases := map[string][]byte{
		"truncated": state[:len(state)-7],
		"extended":  append(append([]byte{}, state...), 0),
		"header":    append([]byte{9, 9, 9, 9}, state[4:]...),
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			// seq 0 holds something first: it must end empty
			e.Prefill(context.Background(), 0, toks[:3], 0)
			if _, err := e.RestoreSeq(0, bad); !errors.Is(err, ErrBadState) {
				t.Fatalf("err = %v", err)
			}
			if got := e.SeqLen(0); got != 0 {
				t.Fatalf("seq 0 holds %d positions after a refused restore", got)
			}
			if got := e.SeqLen(1); got != len(toks) {
				t.Fatalf("seq 1 holds %d, want %d", got, len(toks))
			}
		})
	}
}

func TestStopStringsAndStreaming(t *testing.T) {
	e := openStories(t, Options{NCtx: 256})
	toks, _ := e.Tokenize("Once upon a time", true)
	full := greedy(t, e, 0, toks, 0, 48)
	// pick a stop string from the middle of the greedy output
	words := strings.Fields(full.Text)
	if len(words) < 6 {
		t.Fatalf("short output %q", full.Text)
	}
	stop := words[4]
	var streamed strings.Builder
	e.ClearSeq(0)
	r, err := e.Generate(context.Background(), Request{Tokens: toks, MaxTokens: 48, Stop: []string{stop},
		OnText: func(s string) error { streamed.WriteString(s); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	want := full.Text[:strings.Index(full.Text, stop)]
	if r.Text != want || streamed.String() != want || r.DoneReason != "stop" {
		t.Fatalf("stop %q: got %q streamed %q reason %s, want %q", stop, r.Text, streamed.String(), r.DoneReason, want)
	}
}

func TestCancel(t *testing.T) {
	e := openStories(t, Options{NCtx: 256})
	toks, _ := e.Tokenize("Once upon a time", true)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := e.Generate(ctx, Request{Tokens: toks, MaxTokens: 200, OnText: func(string) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestPromptTooLong(t *testing.T) {
	e := openStories(t, Options{NCtx: 64})
	toks := make([]Token, e.NCtx())
	for i := range toks {
		toks[i] = 100
	}
	if _, err := e.Generate(context.Background(), Request{Tokens: toks}); !errors.Is(err, ErrPromptTooLong) {
		t.Fatalf("err = %v", err)
	}
}

func TestSampling(t *testing.T) {
	e := openStories(t, Options{NCtx: 256})
	toks, _ := e.Tokenize("Once upon a time", true)
	sp := llama.SamplerParams{Temperature: 0.9, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, Seed: 42}
	run := func() string {
		e.ClearSeq(0)
		r, err := e.Generate(context.Background(), Request{Tokens: toks, MaxTokens: 24, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		return r.Text
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("same seed, different output: %q vs %q", a, b)
	}
}

// Requests on different sequences run in one batch and give the same greedy
// output as when run alone.
func TestParallelSequences(t *testing.T) {
	e := openStories(t, Options{NCtx: 1024, NSeqMax: 4})
	prompts := []string{"Once upon a time", "Tom and his dog", "The sun was hot", "Lily saw a bird"}
	alone := make([]string, len(prompts))
	toks := make([][]Token, len(prompts))
	for i, p := range prompts {
		toks[i], _ = e.Tokenize(p, true)
		alone[i] = greedy(t, e, i, toks[i], 0, 40).Text
	}
	type out struct {
		i   int
		txt string
		err error
	}
	ch := make(chan out)
	for i := range prompts {
		go func() {
			r, err := e.Generate(context.Background(), Request{Seq: i, Tokens: toks[i], MaxTokens: 40})
			ch <- out{i, r.Text, err}
		}()
	}
	for range prompts {
		o := <-ch
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.txt != alone[o.i] {
			t.Errorf("seq %d batched %q, alone %q", o.i, o.txt, alone[o.i])
		}
	}
	// the same sequence twice at once is refused
	long := make([]Token, 0, 600)
	for len(long) < 600 {
		long = append(long, toks[0]...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := e.Generate(ctx, Request{Seq: 0, Tokens: long, MaxTokens: 300, OnText: func(string) error {
			select {
			case <-started:
			default:
				close(started)
			}
			return nil
		}})
		done <- err
	}()
	<-started
	if _, err := e.Generate(context.Background(), Request{Seq: 0, Tokens: toks[0], MaxTokens: 2}); !errors.Is(err, ErrSeqBusy) {
		t.Fatalf("err = %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
}

// CopySeq shares a prefix into another sequence: generation from the copy
// equals generation from the original.
func TestCopyAndShiftSeq(t *testing.T) {
	e := openStories(t, Options{NCtx: 512, NSeqMax: 3})
	prefix, _ := e.Tokenize("Ben found a shiny stone by the river.", true)
	query, _ := e.Tokenize(" He", false)
	all := append(append([]Token{}, prefix...), query...)
	cold := greedy(t, e, 0, all, 0, 30)
	if err := e.Prefill(context.Background(), 1, prefix, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.CopySeq(1, 2, 0, -1); err != nil {
		t.Fatal(err)
	}
	if got := e.SeqLen(2); got != len(prefix) {
		t.Fatalf("copy holds %d positions", got)
	}
	if got := greedy(t, e, 2, all, len(prefix), 30); got.Text != cold.Text {
		t.Fatalf("from shared cells %q, cold %q", got.Text, cold.Text)
	}
	if err := e.CopySeq(1, 7, 0, -1); err == nil {
		t.Fatal("copy into an out-of-range sequence accepted")
	}
	// shifting positions moves the sequence: its max position follows
	if err := e.ShiftSeq(1, 0, -1, 5); err != nil {
		t.Fatal(err)
	}
	if got := e.SeqLen(1); got != len(prefix)+5 {
		t.Fatalf("after shift max pos+1 = %d, want %d", got, len(prefix)+5)
	}
}

// Background prefill yields to foreground requests (its steps are skipped or
// aborted and retried) and still produces a sequence whose greedy
// continuation equals a cold prefill's.
func TestBackgroundYieldsToForeground(t *testing.T) {
	e := openStories(t, Options{NCtx: 2048, NSeqMax: 3})
	var long []Token
	for len(long) < 640 {
		more, _ := e.Tokenize(" Lily and Tom went to the park to play with a big red ball and a small blue kite.", len(long) == 0)
		long = append(long, more...)
	}
	bgDone := make(chan error, 1)
	go func() { bgDone <- e.PrefillRequest(context.Background(), 1, long, nil, true) }()
	for e.SeqLen(1) == 0 && len(bgDone) == 0 {
		goruntime.Gosched()
	}
	q, _ := e.Tokenize("Once upon a time", true)
	fg := greedy(t, e, 0, q, 0, 8)
	if fg.EvalTokens != 8 {
		t.Fatalf("foreground: %+v", fg)
	}
	if err := <-bgDone; err != nil {
		t.Fatal(err)
	}
	if got := e.SeqLen(1); got != len(long) {
		t.Fatalf("background prefill holds %d of %d", got, len(long))
	}
	all := append(append([]Token{}, long...), q[1:]...)
	warm := greedy(t, e, 1, all, len(long), 20)
	cold := greedy(t, e, 2, all, 0, 20)
	if warm.Text != cold.Text {
		t.Fatalf("after background prefill %q, cold %q", warm.Text, cold.Text)
	}
}

func TestEmbed(t *testing.T) {
	e := openStories(t, Options{NCtx: 256})
	toks, _ := e.Tokenize("Once upon a time", true)
	if err := e.Prefill(context.Background(), 0, toks, 0); err != nil {
		t.Fatal(err)
	}
	before, _ := e.SaveSeq(0)
	vs, err := e.Embed(context.Background(), []string{"Lily has a dog.", "Lily has a dog.", "The sun is hot today.", ""})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 4 || len(vs[0]) != e.Shape().NEmbd {
		t.Fatalf("%d vectors of %d", len(vs), len(vs[0]))
	}
	dot := func(a, b []float32) (s float64) {
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	if n := dot(vs[0], vs[0]); n < 0.9999 || n > 1.0001 {
		t.Fatalf("norm² %v", n)
	}
	if dot(vs[0], vs[1]) < 0.99999 {
		t.Fatal("same text, different embedding")
	}
	if d := dot(vs[0], vs[2]); d > 0.9999 {
		t.Fatalf("different texts, cosine %v", d)
	}
	if after, _ := e.SaveSeq(0); string(after) != string(before) {
		t.Fatal("embedding disturbed the generation context")
	}
}

// Streamed text never splits a UTF-8 character, never stalls behind an
// invalid byte, and adds up to the whole output byte for byte: pieces
// arrive as byte tokens do (a lead byte, then its continuation bytes in
// later pieces), with CJK, emoji, stray continuation bytes and a lone lead
// byte that is never completed.
func TestTextOutUTF8(t *testing.T) {
	cases := [][]string{
		{"a", "\xe4", "\xbd", "\xa0", "b"},            // 你 in three byte tokens
		{"\xf0\x9f", "\x98", "\x80!"},                 // 😀 split
		{"x", "\xff", "y", "z"},                       // an invalid byte: y and z still flow
		{"\xe4", "q", "r"},                            // a lead byte never completed
		{"東京", "\xe3\x81", "\xaf", "\x80\x80", " ok"}, // stray continuation bytes
		{"end", "\xe4\xbd"},                           // cut at the end: flushed
	}
	for _, pieces := range cases {
		var chunks []string
		o := newTextOut(nil, func(s string) error { chunks = append(chunks, s); return nil })
		var all string
		for i, p := range pieces {
			if _, err := o.add([]byte(p)); err != nil {
				t.Fatal(err)
			}
			all += p
			// what is emitted so far is all but at most an incomplete tail
			if held := len(all) - o.emitted; held > 3 {
				t.Fatalf("%q: after piece %d, %d bytes held back", pieces, i, held)
			}
		}
		if err := o.flush(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(chunks, ""); got != all || o.text() != all {
			t.Fatalf("%q: streamed %q, whole %q", pieces, got, all)
		}
		for _, c := range chunks[:max(0, len(chunks)-1)] {
			if n := utf8Cut([]byte(c), 0, len(c)); n != len(c) {
				t.Fatalf("%q: chunk %q ends inside a character", pieces, c)
			}
		}
	}
}

// One request's failure never fails its batch-mates: a prompt that does
// not fit the KV cache next to a running generation makes the shared
// decode fail; the engine retries each request alone, the running one
// goes on with the output it has alone, and only the newcomer fails.
func TestDecodeFailureStaysWithItsRequest(t *testing.T) {
	e := openStories(t, Options{NCtx: 256, NSeqMax: 2})
	long, _ := e.Tokenize(strings.Repeat("Once upon a time there was a dog. ", 12), true)
	long = long[:150]
	alone := greedy(t, e, 0, long, 0, 60)
	e.ClearSeq(0)
	big, _ := e.Tokenize(strings.Repeat("The sun was hot and the cat slept. ", 12), true)
	big = big[:160] // 150 + 60 + 160 > 256 cells: both cannot fit at once
	ctx := context.Background()
	started := make(chan struct{})
	var once sync.Once
	type out struct {
		r   Result
		err error
	}
	first := make(chan out, 1)
	go func() {
		r, err := e.Generate(ctx, Request{Seq: 0, Tokens: long, MaxTokens: 60, OnText: func(string) error {
			once.Do(func() { close(started) })
			return nil
		}})
		first <- out{r, err}
	}()
	<-started
	_, err := e.Generate(ctx, Request{Seq: 1, Tokens: big, MaxTokens: 4})
	if !errors.Is(err, llama.ErrNoKVSlot) {
		t.Fatalf("the prompt that cannot fit: %v, want ErrNoKVSlot", err)
	}
	got := <-first
	if got.err != nil || got.r.Text != alone.Text {
		t.Fatalf("the running request: %q, %v; alone %q", got.r.Text, got.err, alone.Text)
	}
}

// A context smaller than the default batch (n_ctx 64: llama.cpp caps its
// n_batch at 64 and pads n_ctx to 256) takes prompts longer than 64
// tokens in several batches instead of aborting the process.
func TestSmallContextBatches(t *testing.T) {
	e := openStories(t, Options{NCtx: 64})
	toks, _ := e.Tokenize(strings.Repeat("the dog ran in the park ", 12), true)
	if len(toks) <= 64 || len(toks) >= e.NCtx() {
		t.Fatalf("want a prompt of 65..%d tokens, got %d", e.NCtx()-1, len(toks))
	}
	r, err := e.Generate(context.Background(), Request{Tokens: toks, MaxTokens: 4})
	if err != nil || r.EvalTokens == 0 {
		t.Fatalf("%+v %v", r, err)
	}
}
