package pipeline

import (
	"fmt"

	"github.com/memosrt/memosrt/config"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/pipeline/convpack"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/upstream"
)

// Errors of the pipeline; package memosrt re-exports each under the same
// name.
var (
	// ErrClosed is returned after Close, and to requests waiting for a
	// slot or KV cells when Close begins.
	ErrClosed = errkind.New(errkind.Unavailable, "memosrt: closed")
	// ErrBadOptions wraps every invalid Options field.
	ErrBadOptions = config.ErrBadOptions
	// ErrNoModel: the request needs a model and none is served.
	ErrNoModel = errkind.New(errkind.Unavailable, "memosrt: no model loaded")
	// ErrNotSupported: the backend cannot do this (the upstream embeds and
	// generates text only).
	ErrNotSupported = errkind.New(errkind.NotSupported, "memosrt: not supported by this backend")
	// ErrUpstream: the upstream server failed: unreachable, timed out, a
	// 5xx, an answer that cannot be read, a refused API key (package
	// upstream's).
	ErrUpstream = upstream.ErrUpstream
	// ErrModelNotFound: Request.Model names no served model, or the
	// upstream serves no model of Options.Upstream's name (its 404).
	ErrModelNotFound = upstream.ErrModelNotFound
	// ErrBusy: every slot is taken and the queue is full (MaxQueue), or
	// every loaded model is busy and another would pass the budget.
	ErrBusy = slots.ErrQueueFull
)

// badField is a *errkind.FieldError naming the request field at fault.
func badField(field, format string, args ...any) error {
	return &errkind.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Model describes the primary model (the upstream's with Upstream; zero
// ModelInfo without one), as of its last load.
func (p *Pipeline) Model() ModelInfo {
	if p.models.Len() == 0 {
		return p.info
	}
	return p.modelInfo(p.models.Models()[0])
}

// Stats reports the gauges now; DiskBytes and NoSpace are the data
// directory's.
func (p *Pipeline) Stats() Stats {
	st := Stats{Backend: p.info.Backend, PendingWrites: int(p.pending.Load()), ResidentMax: p.opts.ResidentCells}
	st.KVRAMBytes, st.KVDiskBytes, st.Packs = p.kv.Stats()
	conv, convBytes := convpack.List(p.kv)
	st.ConvPacks, st.ConvBytes = len(conv), convBytes
	st.ConvEvicted, st.Fallbacks = p.convEvicted.Load(), p.fallbacks.Load()
	st.DiskBytes, st.NoSpace = p.db.DiskBytes(), p.db.Refused()
	st.KVShared = p.kv.SharedStats()
	st.ComposedPacks = p.composedPacks.Load()
	if p.up != nil {
		st.Slots, st.BusySlots, st.Queued = p.up.pool.Size(), p.up.pool.Busy(), p.up.pool.Queued()
	}
	// slots, queues and engines of every loaded model; n_ctx and the
	// resident level are the primary's
	p.eachLoaded(func(l *loaded) {
		st.Slots, st.BusySlots, st.Queued = st.Slots+l.pool.Size(), st.BusySlots+l.pool.Busy(), st.Queued+l.pool.Queued()
		a, q := l.eng.Queue()
		st.EngineActive, st.EngineQueued = st.EngineActive+a, st.EngineQueued+q
	})
	l, done := p.hold()
	defer done()
	if l == nil {
		return st
	}
	st.NCtx = l.eng.NCtx()
	st.ResidentCells, st.ResidentPacks = l.res.Cells(), l.res.Len()
	return st
}

// Engine returns the primary model's engine, nil without a model or while
// it is unloaded (keep-alive; with Options.KeepAlive unset it stays loaded
// until Close).
func (p *Pipeline) Engine() *runtime.Engine {
	l, done := p.hold()
	defer done()
	if l == nil {
		return nil
	}
	return l.eng
}

// needEngine returns ErrNoModel when no model is served.
func (p *Pipeline) needEngine() error {
	if p.models.Len() == 0 {
		if p.up != nil {
			return fmt.Errorf("%w: the upstream backend is text-only", ErrNotSupported)
		}
		return ErrNoModel
	}
	return nil
}
