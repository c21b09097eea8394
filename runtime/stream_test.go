package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Stream delivers every chunk in order on the caller's goroutine; a reader
// error cancels the generation with that cause and is returned; a reader
// that falls more than the limit behind fails the generation.
func TestStream(t *testing.T) {
	ctx := context.Background()
	chunks := []string{"Once", " upon", " a", " time", "…"}
	gen := func(ctx context.Context, onText func(string) error) error {
		for _, c := range chunks {
			if err := onText(c); err != nil {
				return err
			}
		}
		return nil
	}
	var got strings.Builder
	if err := Stream(ctx, func(t string) error { got.WriteString(t); return nil }, gen); err != nil {
		t.Fatal(err)
	}
	if got.String() != strings.Join(chunks, "") {
		t.Fatalf("got %q", got.String())
	}
	// nil reader: gen runs with a nil callback
	called := false
	if err := Stream(ctx, nil, func(_ context.Context, onText func(string) error) error { called = onText == nil; return nil }); err != nil || !called {
		t.Fatalf("nil reader: %v, callback nil %v", err, called)
	}
	// a reader error cancels gen with its cause
	stop := errors.New("client gone")
	var cause error
	err := Stream(ctx, func(string) error { return stop }, func(ctx context.Context, onText func(string) error) error {
		if err := onText("x"); err != nil {
			return err
		}
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !errors.Is(err, stop) || !errors.Is(cause, stop) {
		t.Fatalf("reader error: returned %v, gen's cause %v", err, cause)
	}
	// a reader that does not keep up: 10 bytes queued past a limit of 8
	block := make(chan struct{})
	err = stream(ctx, 8, func(string) error { <-block; return nil }, func(ctx context.Context, onText func(string) error) error {
		defer close(block)
		if err := onText("12345"); err != nil {
			return err
		}
		for {
			if err := onText("12345"); err != nil {
				return err
			}
		}
	})
	if !errors.Is(err, ErrSlowReader) {
		t.Fatalf("slow reader: %v, want ErrSlowReader", err)
	}
}
