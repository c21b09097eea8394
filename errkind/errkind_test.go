package errkind

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestNewKeepsTextAndIdentity(t *testing.T) {
	a := New(NotFound, "pkg: not found")
	b := New(NotFound, "pkg: not found")
	if got := a.Error(); got != "pkg: not found" {
		t.Fatalf("Error() = %q, want %q", got, "pkg: not found")
	}
	if errors.Is(a, b) || errors.Is(b, a) {
		t.Fatal("two New errors with one text are the same error under errors.Is")
	}
	w := fmt.Errorf("get %q: %w", "x", a)
	if !errors.Is(w, a) {
		t.Fatal("errors.Is does not find the sentinel through %w")
	}
	if got := w.Error(); got != `get "x": pkg: not found` {
		t.Fatalf("wrapped Error() = %q", got)
	}
}

type fieldErr struct{ field string }

func (e *fieldErr) Error() string { return e.field + ": bad" }
func (e *fieldErr) Kind() Kind    { return Invalid }

func TestOf(t *testing.T) {
	busy := New(Busy, "q: full")
	space := New(NoSpace, "disk: full")
	plain := errors.New("plain")
	cases := []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Internal},
		{"plain", plain, Internal},
		{"sentinel", busy, Busy},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", busy)), Busy},
		{"kinded type", &fieldErr{"x"}, Invalid},
		{"wrapped kinded type", fmt.Errorf("add: %w", &fieldErr{"x"}), Invalid},
		{"first of two", fmt.Errorf("%w: %w", space, busy), NoSpace},
		{"unkinded then kinded", fmt.Errorf("%w: %w", plain, busy), Busy},
		{"joined", errors.Join(plain, busy), Busy},
		{"canceled", context.Canceled, Canceled},
		{"wrapped canceled", fmt.Errorf("read: %w", context.Canceled), Canceled},
		{"deadline", context.DeadlineExceeded, Timeout},
		{"kind over canceled", fmt.Errorf("%w: %w", busy, context.Canceled), Busy},
		{"canceled before kind", fmt.Errorf("%w: %w", context.Canceled, space), NoSpace},
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("%s: Of = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		Internal: "internal", Invalid: "invalid", NotFound: "not_found", Conflict: "conflict",
		Busy: "busy", Unavailable: "unavailable", NoSpace: "no_space", TooLarge: "too_large",
		NotSupported: "not_supported", Upstream: "upstream", Canceled: "canceled", Timeout: "timeout",
		Kind(42): "kind(42)", Kind(-1): "kind(-1)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestFieldError(t *testing.T) {
	err := fmt.Errorf("chat: %w", &FieldError{Field: "tools[0].function.name", Msg: "bad"})
	if got := err.Error(); got != "chat: tools[0].function.name: bad" {
		t.Fatalf("Error() = %q", got)
	}
	if got := Of(err); got != Invalid {
		t.Fatalf("Of = %v, want %v", got, Invalid)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "tools[0].function.name" || fe.Msg != "bad" {
		t.Fatalf("errors.As: %+v", fe)
	}
}
