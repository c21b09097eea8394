package pipeline

import (
	"context"
	"time"

	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
)

// Handles below the pipeline, for the OS's tests and tools that drive
// the parts directly (an adapter test generating on a sequence, a
// benchmark): writes through them bypass the pipeline's bookkeeping.
// Package memosrt hands none of them out.

// Primary are the primary model's parts while it is loaded.
type Primary struct {
	Engine   *runtime.Engine
	Adapters *lora.Manager
	// Seqs are the request sequences, then the resident ones; a caller
	// may generate on a request sequence while no request runs.
	Seqs []int
	// ConfigKey is kvcache.ConfigKey of the live KV config, no adapters:
	// the key conversation packs without adapters are stored under.
	ConfigKey string
}

// Primary returns the primary's parts; false when it is not loaded.
func (p *Pipeline) Primary() (Primary, bool) {
	l, done := p.hold()
	defer done()
	if l == nil {
		return Primary{}, false
	}
	return Primary{Engine: l.eng, Adapters: l.man, Seqs: l.seqs, ConfigKey: l.cfgKey}, true
}

// Use holds model name ("" the primary) loaded and in use, as a request
// does, until release is called: loaded first if needed, kept alive for
// keep afterwards (nil: Options.KeepAlive). Errors: ErrModelNotFound,
// ErrBusy when every loaded model is in use and another would pass the
// budget, load errors, ctx's error, ErrClosed.
func (p *Pipeline) Use(ctx context.Context, name string, keep *time.Duration) (release func(), err error) {
	_, release, err = p.use(ctx, name, keep)
	return release, err
}

// Scheduler returns the tier scheduler.
func (p *Pipeline) Scheduler() *scheduler.Tiers { return p.tiers }
