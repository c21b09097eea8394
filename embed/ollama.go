package embed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/ollama/ollama/api"
)

// OllamaOptions configure NewOllama. The zero value of each field means its
// default.
type OllamaOptions struct {
	// URL is the Ollama server. Default "http://127.0.0.1:11434".
	URL string
	// Model is the embedding model, e.g. "nomic-embed-text". Required.
	Model string
	// Dim is the vector length. Default 0: probed with one Embed call in
	// NewOllama.
	Dim int
	// BatchSize is the most texts sent in one request. Default 64.
	BatchSize int
	// KeepAlive is how long Ollama keeps the model loaded after a request.
	// Default 0: Ollama's own default.
	KeepAlive time.Duration
	// HTTPClient sends the requests. Default: a client with a 2 minute
	// timeout.
	HTTPClient *http.Client
}

// Validate reports every problem at once.
func (o OllamaOptions) Validate() error {
	var errs []error
	if o.Model == "" {
		errs = append(errs, fmt.Errorf("%w: Model is empty", ErrOptions))
	}
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("%w: URL %q is not an absolute URL", ErrOptions, o.URL))
		}
	}
	if o.Dim < 0 {
		errs = append(errs, fmt.Errorf("%w: Dim is %d, want >= 0", ErrOptions, o.Dim))
	}
	if o.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("%w: BatchSize is %d, want >= 0", ErrOptions, o.BatchSize))
	}
	return errors.Join(errs...)
}

// Ollama embeds through an Ollama server's /api/embed. Safe for concurrent
// use.
type Ollama struct {
	client *api.Client
	opts   OllamaOptions
	dim    int
}

// NewOllama returns an Ollama embedder. When opts.Dim is 0 it embeds one
// probe text to learn the dimension, so the server must be reachable.
func NewOllama(ctx context.Context, opts OllamaOptions) (*Ollama, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.URL == "" {
		opts.URL = "http://127.0.0.1:11434"
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = 64
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
	}
	u, _ := url.Parse(opts.URL)
	o := &Ollama{client: api.NewClient(u, opts.HTTPClient), opts: opts, dim: opts.Dim}
	if o.dim == 0 {
		v, err := o.embed(ctx, []string{"dimension probe"})
		if err != nil {
			return nil, fmt.Errorf("embed: probe %s: %w", opts.Model, err)
		}
		if len(v) != 1 || len(v[0]) == 0 {
			return nil, fmt.Errorf("%w: probe of %s returned %d vectors", ErrShape, opts.Model, len(v))
		}
		o.dim = len(v[0])
	}
	return o, nil
}

// Name implements Embedder: "ollama:<model>".
func (o *Ollama) Name() string { return "ollama:" + o.opts.Model }

// Dim implements Embedder.
func (o *Ollama) Dim() int { return o.dim }

// Embed implements Embedder, sending at most BatchSize texts per request.
func (o *Ollama) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for i := 0; i < len(texts); i += o.opts.BatchSize {
		j := min(i+o.opts.BatchSize, len(texts))
		v, err := o.embed(ctx, texts[i:j])
		if err != nil {
			return nil, err
		}
		if err := check(o.Name(), j-i, o.dim, v); err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

func (o *Ollama) embed(ctx context.Context, texts []string) ([][]float32, error) {
	truncate := true
	req := &api.EmbedRequest{Model: o.opts.Model, Input: texts, Truncate: &truncate}
	if o.opts.KeepAlive != 0 {
		req.KeepAlive = &api.Duration{Duration: o.opts.KeepAlive}
	}
	resp, err := o.client.Embed(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("embed: ollama %s: %w", o.opts.Model, err)
	}
	return resp.Embeddings, nil
}
