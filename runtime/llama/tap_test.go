package llama

import (
	"errors"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// The tap captures layer 1's V ([n_tokens][n_embd_v_gqa] float32: 4 KV
// heads of 8 on stories260K) of a 5-token batch, and stops the graph
// there; a context made without Tap refuses it.
func TestTap(t *testing.T) {
	Init("")
	m, err := LoadModel(testmodels.Stories(t), ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if a := m.Attention(); a.Arch != "llama" || a.RopeType != RopeTypeNorm || a.NSWA != 0 || a.Hybrid || a.KVLoraRank != 0 {
		t.Fatalf("stories260K attention %+v", a)
	}
	for _, tap := range []bool{false, true} {
		c, err := NewContext(m, ContextParams{NCtx: 64, Threads: 1, Tap: tap})
		if err != nil {
			t.Fatal(err)
		}
		if !c.CanShift() {
			t.Error("stories260K cache cannot shift")
		}
		err = c.TapStart("Vcur-1")
		if !tap {
			if !errors.Is(err, ErrTap) {
				t.Errorf("TapStart without Tap: %v", err)
			}
			c.Close()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b := NewBatch(8)
		for i, tok := range []Token{1, 400, 300, 200, 100} {
			b.Add(tok, i, 0, false)
		}
		if err := c.Decode(b); err != nil {
			t.Fatal(err)
		}
		vals, err := c.TapStop()
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != 5*32 {
			t.Fatalf("captured %d values, want 5 tokens × 32", len(vals))
		}
		nonzero := 0
		for _, v := range vals {
			if v != 0 {
				nonzero++
			}
		}
		if nonzero < len(vals)/2 {
			t.Fatalf("%d of %d captured values are non-zero", nonzero, len(vals))
		}
		b.Close()
		c.Close()
		if _, err := c.TapStop(); !errors.Is(err, ErrClosed) {
			t.Errorf("TapStop after Close: %v", err)
		}
	}
}
