package server

import (
	"net/http"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/server/wire"
)

// NativeSampling is the sampler of a native generate request, memosrt's
// own names (memosrt.Sampling); zero values mean off, temperature 0 greedy.
type NativeSampling struct {
	Temperature   float32 `json:"temperature"`
	TopK          int     `json:"top_k"`
	TopP          float32 `json:"top_p"`
	MinP          float32 `json:"min_p"`
	RepeatPenalty float32 `json:"repeat_penalty"`
	RepeatLastN   int     `json:"repeat_last_n"`
	Seed          uint32  `json:"seed"`
	Grammar       string  `json:"grammar,omitempty"`
}

// NativeRequest is the body of POST /v1/generate: one memosrt.Request as
// JSON, what `memosrt run` sends to a running server.
type NativeRequest struct {
	// Model is a model the server serves, by a name GET /api/tags lists;
	// "" is its primary model.
	Model string `json:"model,omitempty"`
	Cube  string `json:"cube"`
	// Cubes names several cubes: the first is written to (as cube, which
	// may be left out or must be the same), the others are read
	// (memosrt.Request.ReadCubes); at most memosrt.MaxCubes.
	Cubes    []string          `json:"cubes,omitempty"`
	Prompt   string            `json:"prompt"`
	Messages []memosrt.Message `json:"messages,omitempty"` // a chat turn when set
	System   string            `json:"system,omitempty"`
	// Raw sends Prompt as is: no template, no memories; the cube's
	// default adapters are still attached (memosrt.Request.Raw).
	Raw        bool           `json:"raw,omitempty"`
	Sampling   NativeSampling `json:"sampling"`
	NumPredict int            `json:"num_predict"`
	NumCtx     int            `json:"num_ctx"`
	Stop       []string       `json:"stop,omitempty"`
	// Adapters is "NAME[:SCALE],..." or "none"; absent: the cube's defaults.
	Adapters  *string `json:"adapters,omitempty"`
	NoCache   bool    `json:"no_cache"`
	NoPersist bool    `json:"no_persist"` // a chat turn: do not save its state as a conversation pack
	Stream    bool    `json:"stream"`
	// Record is what a chat turn in a cube leaves in its memory: "" the
	// turn, "user" the message alone, "none" nothing (memosrt.Request.Record).
	Record string `json:"record,omitempty"`
}

// NativeChunk is one streamed line of POST /v1/generate: text, then a last
// line with Done and the whole Response (its Text empty), or Error.
type NativeChunk struct {
	Text     string            `json:"text,omitempty"`
	Done     bool              `json:"done,omitempty"`
	Response *memosrt.Response `json:"result,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// handleNativeGenerate answers POST /v1/generate: memosrt.OS.Generate (or
// Chat with messages) with every field of its Response, streamed as
// NativeChunk lines or, without stream, one memosrt.Response.
func (s *Server) handleNativeGenerate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req NativeRequest
	if err := wire.DecodeStrict(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	mi, err := s.model(req.Model)
	g := &memosrt.Request{Start: start, Model: mi.Name, Cube: req.Cube, Prompt: req.Prompt, Raw: req.Raw, Messages: req.Messages, System: req.System,
		NumPredict: req.NumPredict, NumCtx: req.NumCtx, Stop: req.Stop, NoCache: req.NoCache, NoPersist: req.NoPersist,
		Sampling: memosrt.Sampling{Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK, TopP: req.Sampling.TopP,
			MinP: req.Sampling.MinP, RepeatPenalty: req.Sampling.RepeatPenalty, RepeatLastN: req.Sampling.RepeatLastN,
			Seed: req.Sampling.Seed, Grammar: req.Sampling.Grammar}}
	if err == nil {
		g.Record, err = memosrt.ParseRecordMode("record", req.Record)
	}
	if err == nil && req.Adapters != nil {
		g.Adapters, err = lora.ParseSpecs(*req.Adapters)
		if err != nil {
			err = wire.BadField("adapters", "%v", err)
		}
	}
	if err == nil {
		g.Cube, g.ReadCubes, err = s.cubes(r, "cubes", req.Cube, req.Cubes)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var st *wire.Streamer
	if req.Stream {
		st = wire.NewStreamer(w, false)
	}
	res, err := s.generate(r, g, req.Messages != nil, st, func(t string) any { return NativeChunk{Text: t} })
	if err != nil {
		wire.StreamError(s.log, w, r, st, err)
		return
	}
	if st != nil {
		text := res.Text
		res.Text = ""
		st.Send(NativeChunk{Done: true, Response: res})
		res.Text = text
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}
