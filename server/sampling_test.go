package server

import (
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/defaults"
)

// TestSamplingDefaults: a request that sets no sampler option samples with
// its API's documented defaults (defaults.Ollama on the Ollama routes,
// defaults.OpenAI on the OpenAI ones), and an option it sets wins.
func TestSamplingDefaults(t *testing.T) {
	var s Server
	var g memosrt.Request
	s.ollamaSampling(&g, sampling{})
	if p := g.Sampling; p.Temperature != 0.8 || p.TopP != 0.9 || p.TopK != 40 || p.MinP != 0 || p.RepeatPenalty != 1.1 {
		t.Errorf("Ollama defaults: temperature %v top_p %v top_k %d min_p %v repeat_penalty %v, want 0.8 0.9 40 0 1.1",
			p.Temperature, p.TopP, p.TopK, p.MinP, p.RepeatPenalty)
	}

	sp, err := parseOllamaOptions(map[string]any{"temperature": 0.0, "top_k": 5.0, "top_p": 0.5, "min_p": 0.1, "repeat_penalty": 1.3})
	if err != nil {
		t.Fatal(err)
	}
	s.ollamaSampling(&g, sp)
	if p := g.Sampling; p.Temperature != 0 || p.TopP != 0.5 || p.TopK != 5 || p.MinP != 0.1 || p.RepeatPenalty != 1.3 {
		t.Errorf("Ollama options: temperature %v top_p %v top_k %d min_p %v repeat_penalty %v, want 0 0.5 5 0.1 1.3",
			p.Temperature, p.TopP, p.TopK, p.MinP, p.RepeatPenalty)
	}

	p := sampling{}.params(defaults.OpenAI)
	if p.Temperature != 1 || p.TopP != 1 || p.TopK != 0 || p.MinP != 0 || p.RepeatPenalty != 1 {
		t.Errorf("OpenAI defaults: temperature %v top_p %v top_k %d min_p %v repeat_penalty %v, want 1 1 0 0 1",
			p.Temperature, p.TopP, p.TopK, p.MinP, p.RepeatPenalty)
	}
}
