package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// Stream runs gen, handing the text gen passes to its callback to onText
// on the caller's goroutine. gen's callback (a Request.OnText) runs on the
// engine's batch goroutine and must not block, so it only queues text;
// the caller's goroutine delivers what queued meanwhile as one chunk, in
// order. An onText error cancels gen's context with that cause and is
// returned; more than MaxPendingText bytes waiting for onText fails gen
// with ErrSlowReader. With onText nil, gen runs with a nil callback.
func Stream(ctx context.Context, onText func(string) error, gen func(context.Context, func(string) error) error) error {
	return stream(ctx, MaxPendingText, onText, gen)
}

func stream(ctx context.Context, limit int, onText func(string) error, gen func(context.Context, func(string) error) error) error {
	if onText == nil {
		return gen(ctx, nil)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := newTextPipe(limit)
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = gen(ctx, p.push)
	}()
	var werr error
	write := func() {
		if t, ok := p.take(); ok && werr == nil {
			if werr = onText(t); werr != nil {
				p.fail(werr)
				cancel(werr)
			}
		}
	}
	for running := true; running; {
		select {
		case <-p.signal:
			write()
		case <-done:
			write()
			running = false
		}
	}
	if werr != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return werr
	}
	return err
}

// MaxPendingText bounds the text Stream queues for a slow reader, bytes;
// beyond it the generation fails rather than buffer without limit.
const MaxPendingText = 4 << 20

// ErrSlowReader ends a generation whose reader does not keep up (more
// than MaxPendingText bytes of text queued; Stream).
var ErrSlowReader = errors.New("memosrt: OnText reads too slowly")

// textPipe hands generated text from the engine's goroutine to the
// caller's without blocking the engine. Safe for concurrent use.
type textPipe struct {
	signal chan struct{} // capacity 1: text is waiting
	limit  int

	// mu guards buf and err.
	mu  sync.Mutex
	buf strings.Builder
	err error
}

func newTextPipe(limit int) *textPipe {
	return &textPipe{signal: make(chan struct{}, 1), limit: limit}
}

// push queues t; it returns the reader's error once reading failed.
func (p *textPipe) push(t string) error {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return p.err
	}
	if p.buf.Len()+len(t) > p.limit {
		p.err = ErrSlowReader
		p.mu.Unlock()
		return ErrSlowReader
	}
	p.buf.WriteString(t)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
	return nil
}

// take returns everything queued, coalesced.
func (p *textPipe) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buf.Len() == 0 {
		return "", false
	}
	t := p.buf.String()
	p.buf.Reset()
	return t, true
}

func (p *textPipe) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}
