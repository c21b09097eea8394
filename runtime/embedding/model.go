package embedding

import (
	"context"
	"fmt"
	"sync"

	"github.com/memosrt/memosrt/runtime/llama"
)

// ModelOptions are a standalone embedding model's load settings.
type ModelOptions struct {
	Options
	// NGPULayers is the layers offloaded to GPU devices; -1 all. Default
	// 0: the CPU.
	NGPULayers int
	// LibDir holds ggml backend modules to load (llama.Init). Default none.
	LibDir string
}

// Info describes a loaded embedding model.
type Info struct {
	Path      string // the GGUF file
	Name      string // general.name, e.g. "nomic-embed-text-v1.5"; "" when the GGUF has none
	Arch      string // general.architecture, e.g. "bert", "nomic-bert"
	Desc      string // llama_model_desc, e.g. "bert 33M F16"
	Dim       int    // n_embd: the length of every vector
	Pooling   int    // PoolingMean, PoolingCLS or PoolingLast
	MaxTokens int    // longest text embedded whole, tokens
}

// Model is an embedding model loaded from a GGUF file with an Encoder of
// its own, apart from any chat model. Safe for concurrent use: Embed calls
// are serialized.
type Model struct {
	info Info

	// mu guards m and enc (nil after Close) and every call on them.
	mu  sync.Mutex
	m   *llama.Model
	enc *Encoder
}

// Open loads the GGUF model at path and creates its Encoder. ctx ends the
// load early. Errors: ErrOptions, llama.ErrLoad (missing or unloadable
// file: runtime.CheckModelFile tells why before this is called),
// ErrPooling, llama.ErrContext, ctx's.
func Open(ctx context.Context, path string, o ModelOptions) (*Model, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	llama.Init(o.LibDir)
	m, err := llama.LoadModel(path, llama.ModelParams{NGPULayers: o.NGPULayers,
		Progress: func(float32) bool { return ctx.Err() == nil }})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("embedding: %w", err)
	}
	enc, err := NewEncoder(m, o.Options)
	if err != nil {
		m.Close()
		return nil, err
	}
	arch, _ := m.Meta("general.architecture")
	name, _ := m.Meta("general.name")
	sh := m.Shape()
	return &Model{m: m, enc: enc, info: Info{Path: path, Name: name, Arch: arch, Desc: sh.Desc, Dim: enc.Dim(),
		Pooling: enc.Pooling(), MaxTokens: enc.MaxTokens()}}, nil
}

// Info describes the model.
func (m *Model) Info() Info { return m.info }

// Dim is the length of every vector: the model's n_embd.
func (m *Model) Dim() int { return m.info.Dim }

// Embed returns one unit-length vector per text, [len(texts)][Dim()]float32,
// as Encoder.Embed. Errors: ErrClosed after Close, and Encoder.Embed's.
func (m *Model) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.enc == nil {
		return nil, ErrClosed
	}
	return m.enc.Embed(ctx, texts)
}

// Close frees the context, then the model; it waits for a running Embed.
// Idempotent.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.enc == nil {
		return nil
	}
	m.enc.Close()
	m.enc = nil
	err := m.m.Close()
	m.m = nil
	return err
}
