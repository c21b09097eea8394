package llamaembed

import (
	"context"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/runtime"
)

var _ embed.Embedder = (*Llama)(nil)

// Llama embeds in process with a loaded llama.cpp model
// (runtime.Engine.Embed): the model's pooling for embedding models (BERT:
// CLS or mean as its GGUF says), mean pooling for decoder models;
// L2-normalized. Safe for concurrent use.
type Llama struct {
	eng  *runtime.Engine
	name string
}

// New returns an Embedder over eng; name identifies the model (it is
// part of Name, which tags stored vectors).
func New(eng *runtime.Engine, name string) *Llama { return &Llama{eng: eng, name: name} }

// Embed returns one [Dim()]float32 unit vector per text.
func (l *Llama) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return l.eng.Embed(ctx, texts)
}

// Dim is the model's n_embd.
func (l *Llama) Dim() int { return l.eng.Shape().NEmbd }

// Name is "llama:<name>".
func (l *Llama) Name() string { return "llama:" + l.name }
