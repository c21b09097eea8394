package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/runtime/grammar"
	"github.com/memosrt/memosrt/runtime/llama"
)

// TestGrammarConstrainsOutput: on stories260K, which has never seen JSON, a
// schema's grammar makes greedy decoding emit a document valid under the
// schema and then stop (end of generation), and the JSON grammar keeps
// every output a JSON object or a prefix of one.
func TestGrammarConstrainsOutput(t *testing.T) {
	e := openStories(t, Options{NCtx: 512})
	toks, err := e.Tokenize("Once upon a time, there was a little girl named Lily.", true)
	if err != nil {
		t.Fatal(err)
	}
	gen := func(g string, temp float32) Result {
		t.Helper()
		if err := e.ClearSeq(0); err != nil {
			t.Fatal(err)
		}
		r, err := e.Generate(context.Background(), Request{Seq: 0, Tokens: toks, MaxTokens: 300,
			Sampling: llama.SamplerParams{Grammar: g, Temperature: temp, TopK: 40, Seed: 3}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	schema := `{"type":"object","properties":{"name":{"enum":["Lily","Tom","Sue"]},"happy":{"type":"boolean"},"age":{"type":"integer"},"tags":{"type":"array","items":{"const":"cat"},"maxItems":2}},"required":["name","happy"]}`
	g, err := grammar.FromSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	for _, temp := range []float32{0, 0.8} {
		r := gen(g, temp)
		var doc struct {
			Name  string   `json:"name"`
			Happy *bool    `json:"happy"`
			Age   *int     `json:"age"`
			Tags  []string `json:"tags"`
		}
		d := json.NewDecoder(strings.NewReader(r.Text))
		d.DisallowUnknownFields()
		if r.DoneReason != "stop" || d.Decode(&doc) != nil {
			t.Fatalf("temperature %v: %q (done %q) is not a finished document", temp, r.Text, r.DoneReason)
		}
		if doc.Name != "Lily" && doc.Name != "Tom" && doc.Name != "Sue" || doc.Happy == nil || doc.Age == nil {
			t.Fatalf("temperature %v: %q does not follow the schema", temp, r.Text)
		}
		for _, tag := range doc.Tags {
			if tag != "cat" {
				t.Fatalf("temperature %v: tag %q", temp, tag)
			}
		}
		t.Logf("temperature %v: %s", temp, r.Text)
	}
	// any JSON object: the output is one (if finished) or a prefix of one
	r := gen(grammar.JSON, 0)
	text := strings.TrimSpace(r.Text)
	if !strings.HasPrefix(text, "{") || r.DoneReason == "stop" && !json.Valid([]byte(text)) {
		t.Fatalf("JSON mode: %q (done %q)", r.Text, r.DoneReason)
	}
	t.Logf("JSON mode (%s): %s", r.DoneReason, r.Text)
	// a grammar llama.cpp cannot parse is an error before anything runs
	if err := e.ClearSeq(0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), Request{Seq: 0, Tokens: toks, MaxTokens: 4,
		Sampling: llama.SamplerParams{Grammar: "root ::= undefined-rule"}}); !errors.Is(err, llama.ErrGrammar) {
		t.Fatalf("bad grammar: %v", err)
	}
	if n := e.SeqLen(0); n != 0 {
		t.Fatalf("seq 0 holds %d tokens after a refused request", n)
	}
}

// TestOrText: OrText's grammar parses in llama.cpp and, with "[" as the
// structured branch's first character, leaves prose free (the greedy
// output equals the unconstrained one when it does not open with "[")
// and its structured branch alone makes one finished call.
func TestOrText(t *testing.T) {
	e := openStories(t, Options{NCtx: 512})
	calls, err := grammar.FromSchema([]byte(`{"type":"array","minItems":1,"maxItems":1,"items":{"type":"object","properties":{"name":{"const":"f"}},"required":["name"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.OrText(calls, '[')
	if err != nil {
		t.Fatal(err)
	}
	gen := func(prompt, g string) Result {
		t.Helper()
		toks, err := e.Tokenize(prompt, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.ClearSeq(0); err != nil {
			t.Fatal(err)
		}
		r, err := e.Generate(context.Background(), Request{Seq: 0, Tokens: toks, MaxTokens: 40, Sampling: llama.SamplerParams{Grammar: g}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	prose := "Once upon a time, there was a little girl named Lily."
	free, constrained := gen(prose, ""), gen(prose, g)
	if strings.HasPrefix(strings.TrimSpace(free.Text), "[") || constrained.Text != free.Text {
		t.Fatalf("prose: free %q, under OrText %q", free.Text, constrained.Text)
	}
	// the structured branch alone, then: one finished call
	r := gen(prose, calls)
	var doc []struct{ Name string }
	if err := json.Unmarshal([]byte(r.Text), &doc); err != nil || len(doc) != 1 || doc[0].Name != "f" || r.DoneReason != "stop" {
		t.Fatalf("structured: %q (done %q): %v", r.Text, r.DoneReason, err)
	}
	for _, bad := range []rune{' ', '\n', 'é', 0} {
		if _, err := grammar.OrText(calls, bad); !errors.Is(err, grammar.ErrBadSchema) {
			t.Errorf("OrText first %q: %v", bad, err)
		}
	}
	if _, err := grammar.OrText("x ::= \"a\"", '['); !errors.Is(err, grammar.ErrBadSchema) {
		t.Errorf("OrText of a grammar without root first: %v", err)
	}
}
