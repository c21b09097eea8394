package llamaembed

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/embedding"
)

var _ embed.Embedder = (*Llama)(nil)

// Options are a Llama's load settings; zero values mean the defaults.
type Options struct {
	// MaxTokens bounds one text, in tokens; longer texts are truncated.
	// Default embedding.DefaultMaxTokens (512), capped at the model's
	// training context.
	MaxTokens int
	// Threads is the CPU threads a decode uses. Default: all CPUs.
	Threads int
	// NGPULayers is the layers offloaded to GPU devices; -1 all. Default
	// 0: the CPU.
	NGPULayers int
	// LibDir holds ggml backend modules to load (GPU builds). Default none.
	LibDir string
}

// Llama embeds in process with a GGUF embedding model. Safe for
// concurrent use.
type Llama struct {
	m    *embedding.Model
	name string
}

// Open checks and loads the GGUF model at path. Errors:
// runtime.ErrModelFile (not GGUF, truncated, vocab-only: the message says
// which), the file's open error (a missing file: os.ErrNotExist),
// embedding.ErrPooling (a reranker), embedding.ErrOptions, ctx's.
func Open(ctx context.Context, path string, o Options) (*Llama, error) {
	if _, err := runtime.CheckModelFile(path); err != nil {
		return nil, err
	}
	fp, err := runtime.Fingerprint(path)
	if err != nil {
		return nil, err
	}
	m, err := embedding.Open(ctx, path, embedding.ModelOptions{
		Options:    embedding.Options{MaxTokens: o.MaxTokens, Threads: o.Threads},
		NGPULayers: o.NGPULayers, LibDir: o.LibDir})
	if err != nil {
		return nil, err
	}
	name := m.Info().Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), ".gguf")
	}
	return &Llama{m: m, name: name + "@" + fp[:12]}, nil
}

// Embed returns one [Dim()]float32 unit vector per text, in order. Errors:
// embedding.ErrClosed after Close, embedding.Model.Embed's.
func (l *Llama) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return l.m.Embed(ctx, texts)
}

// Dim is the model's n_embd.
func (l *Llama) Dim() int { return l.m.Dim() }

// Name is "llama:<name>@<digest>": the GGUF's general.name (else the
// file's base name without .gguf) and the first 12 hex digits of
// runtime.Fingerprint of the file. Stored vectors are compared only with
// vectors of the same model file, whatever path or Ollama name it is
// opened under.
func (l *Llama) Name() string { return "llama:" + l.name }

// Info describes the loaded model (architecture, pooling, dimension).
func (l *Llama) Info() embedding.Info { return l.m.Info() }

// Close frees the model. Idempotent.
func (l *Llama) Close() error { return l.m.Close() }
