package request

import (
	"fmt"
	"math"

	"github.com/memosrt/memosrt/errkind"
)

// Stop string limits, the same on every route (Ollama's options.stop,
// OpenAI's stop, the native request's stop). Ollama sets none and OpenAI's
// API allows 4; 16 leaves room for the several stop parameters of a
// Modelfile while bounding the matching each generated token costs (every
// stop string is compared against the text's tail).
const (
	// MaxStops is the most stop strings a request may give.
	MaxStops = 16
	// MaxStopBytes is the longest stop string, bytes.
	MaxStopBytes = 256
)

// CheckOptions checks the per-request options' ranges, once for every
// route, and returns a *FieldError naming the first one out of range
// (field names as Ollama's options have them: "options.top_k"). Ranges:
// num_ctx >= 0 (0: the loaded n_ctx); top_k >= 0 (0: off); temperature and
// repeat_penalty in [0, 100] (Ollama's ranges); top_p and min_p in [0, 1];
// at most MaxStops stop strings of at most MaxStopBytes bytes each.
// num_predict and repeat_last_n are checked where the context is known
// (the validate stage).
func CheckOptions(req *Request) error {
	sp := req.Sampling
	in := func(field string, v float32, lo, hi float64) error {
		f := float64(v)
		if math.IsNaN(f) || f < lo || f > hi {
			return badField(field, "%v not in [%v, %v]", v, lo, hi)
		}
		return nil
	}
	switch {
	case req.NumCtx < 0:
		return badField("options.num_ctx", "%d < 0 (0: the loaded n_ctx)", req.NumCtx)
	case sp.TopK < 0:
		return badField("options.top_k", "%d < 0 (0: off)", sp.TopK)
	case len(req.Stop) > MaxStops:
		return badField("options.stop", "at most %d stop sequences, got %d", MaxStops, len(req.Stop))
	}
	for i, s := range req.Stop {
		if len(s) > MaxStopBytes {
			return badField(fmt.Sprintf("options.stop[%d]", i), "%d bytes, at most %d", len(s), MaxStopBytes)
		}
	}
	for _, c := range []struct {
		field  string
		v      float32
		lo, hi float64
	}{
		{"options.temperature", sp.Temperature, 0, 100},
		{"options.top_p", sp.TopP, 0, 1},
		{"options.min_p", sp.MinP, 0, 1},
		{"options.repeat_penalty", sp.RepeatPenalty, 0, 100},
	} {
		if err := in(c.field, c.v, c.lo, c.hi); err != nil {
			return err
		}
	}
	return nil
}

// badField is a *errkind.FieldError naming the request field at fault.
func badField(field, format string, args ...any) error {
	return &errkind.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
