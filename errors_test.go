package memosrt

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

func TestErrorKindOf(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want ErrorKind
	}{
		{"nil", nil, KindInternal},
		{"plain", errors.New("boom"), KindInternal},
		{"bad options", ErrBadOptions, KindInternal},
		{"no room", ErrNoRoom, KindInternal},
		{"closed", ErrClosed, KindUnavailable},
		{"no model", ErrNoModel, KindUnavailable},
		{"busy wrapping the scheduler's", fmt.Errorf("%w: %w", ErrBusy, scheduler.ErrBusy), KindBusy},
		{"unknown cube", fmt.Errorf("%w: %q", ErrUnknownCube, "c"), KindNotFound},
		{"cube exists", ErrCubeExists, KindConflict},
		{"job state", ErrJobState, KindConflict},
		{"not supported", ErrNotSupported, KindNotSupported},
		{"upstream over deadline", fmt.Errorf("%w: %w", ErrUpstream, context.DeadlineExceeded), KindUpstream},
		{"model not found", ErrModelNotFound, KindNotFound},
		{"bad archive over corrupt pack", fmt.Errorf("%w: %w", ErrBadArchive, kvcache.ErrCorrupt), KindInvalid},
		{"no space is badger's", fmt.Errorf("%w: /data: 1 bytes free, 2 needed", datadir.ErrNoSpace), KindNoSpace},
		{"field error", &FieldError{Field: "messages", Msg: "empty"}, KindInvalid},
		{"wrapped field error", fmt.Errorf("chat: %w", &FieldError{Field: "adapters", Msg: "bad"}), KindInvalid},
		{"text too large", textmem.ErrTooLarge, KindTooLarge},
		{"store unavailable", textmem.ErrUnavailable, KindUnavailable},
		{"memory not found", textmem.ErrNotFound, KindNotFound},
		{"adapter budget", lora.ErrBudget, KindUnavailable},
		{"prompt too long", runtime.ErrPromptTooLong, KindInvalid},
		{"no KV slot", runtime.ErrNoKVSlot, KindUnavailable},
		{"KV budget", scheduler.ErrKVBudget, KindNoSpace},
		{"canceled", fmt.Errorf("chat: %w", context.Canceled), KindCanceled},
		{"deadline", context.DeadlineExceeded, KindTimeout},
	}
	for _, c := range cases {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("%s: KindOf = %v, want %v", c.name, got, c.want)
		}
	}
	if ErrNoSpace != datadir.ErrNoSpace {
		t.Fatal("ErrNoSpace is not datadir.ErrNoSpace")
	}
	if got := ErrNoSpace.Error(); got != "badger: not enough free disk space" {
		t.Fatalf("ErrNoSpace text %q", got)
	}
	if got := (&FieldError{Field: "context[3]", Msg: "not a string"}).Error(); got != "context[3]: not a string" {
		t.Fatalf("FieldError text %q", got)
	}
}
