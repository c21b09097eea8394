package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/internal/defaults"
	"github.com/memosrt/memosrt/internal/ollamastore"
	"github.com/memosrt/memosrt/runtime/grammar"
	"github.com/memosrt/memosrt/server/wire"
)

// generate runs g (a chat turn or a completion) on the OS and records
// metrics and a log line. With st set the output is streamed, each text
// chunk as chunk(text) makes it; a failed write (client gone) ends the
// generation.
func (s *Server) generate(r *http.Request, g *memosrt.Request, chat bool, st *wire.Streamer, chunk func(string) any) (*memosrt.Response, error) {
	if st != nil {
		g.OnText = func(t string) error { return st.Send(chunk(t)) }
	}
	if wire.ReadOnly(r.Context(), g.Cube) {
		// a key that may read the cube, not write it: its chats leave the
		// cube as it was (no turn recorded, no extraction, no conversation pack)
		g.Record, g.NoPersist = memosrt.RecordNone, true
	}
	for _, c := range g.ReadCubes {
		// extraction writes an assistant's procedures only where the key may
		g.NoAssistantWrite = g.NoAssistantWrite || wire.ReadOnly(r.Context(), c)
	}
	var res *memosrt.Response
	var err error
	if chat {
		res, err = s.os.Chat(r.Context(), *g)
	} else {
		res, err = s.os.Generate(r.Context(), *g)
	}
	if res == nil {
		res = &memosrt.Response{}
	}
	err = wireField(r.URL.Path, err)
	switch {
	case errors.Is(err, memosrt.ErrBusy):
		s.m.rejected.Inc()
	case err != nil && r.Context().Err() != nil:
		s.m.canceled.Inc()
	}
	if !g.RenderOnly && res.Usage.EvalTokens > 0 {
		s.m.observe(res)
	}
	s.log.Debug("generation", "path", r.URL.Path, "cube", g.Cube, "prompt_tokens", res.Usage.PromptTokens,
		"cached_tokens", res.Usage.CachedTokens, "cache", res.CacheSource, "memories", res.PackMemories+res.Retrieved,
		"ttft_ms", res.Usage.TTFT.Milliseconds(), "eval_tokens", res.Usage.EvalTokens, "err", err)
	return res, err
}

func ollamaMetrics(res *memosrt.Response, start time.Time) api.Metrics {
	u := res.Usage
	// Ollama counts the whole prompt; the cached part is reported in
	// addition (prompt_cached_count, withCached)
	return api.Metrics{TotalDuration: time.Since(start), LoadDuration: u.LoadDuration, PromptEvalCount: u.PromptTokens,
		PromptEvalDuration: u.PromptDuration, EvalCount: u.EvalTokens, EvalDuration: u.EvalDuration}
}

// setFormat validates Ollama's "format" (absent, "json", or a JSON schema
// object) and puts it on g: as is for the ollama backend, as a grammar
// (runtime/grammar) for the llama backend. A schema outside the supported
// subset is a 400 naming the keyword.
func setFormat(g *memosrt.Request, field string, f json.RawMessage) error {
	t := bytes.TrimSpace(f)
	switch {
	case len(t) == 0 || string(t) == `""` || string(t) == "null":
		return nil
	case string(t) == `"json"`:
		g.Format, g.Sampling.Grammar = json.RawMessage(`"json"`), grammar.JSON
		return nil
	case t[0] == '{':
		return useSchema(g, field, t)
	}
	return wire.BadField(field, `want "json" or a JSON schema object, got %.40s`, t)
}

// useSchema puts JSON schema t on g: as is for the ollama backend, as a
// grammar for the llama backend; a schema outside runtime/grammar's subset
// is a 400 on field.
func useSchema(g *memosrt.Request, field string, t []byte) error {
	gr, err := grammar.FromSchema(t)
	if err != nil {
		return wire.BadField(field, "%v", err)
	}
	g.Format, g.Sampling.Grammar = json.RawMessage(t), gr
	return nil
}

// ollamaChatRequest is Ollama's chat request with memosrt's top-level
// extension "record" (see memosrt.ParseRecordMode).
type ollamaChatRequest struct {
	api.ChatRequest
	// Tools shadows api.ChatRequest.Tools: the tools as sent (see
	// ollamaTools).
	Tools     []json.RawMessage `json:"tools"`
	Record    string            `json:"record"`
	KeepAlive *keepAliveField   `json:"keep_alive"`
}

// ollamaGenerateRequest is Ollama's generate request, its keep_alive
// refused by name when bad (keepAliveField).
type ollamaGenerateRequest struct {
	api.GenerateRequest
	KeepAlive *keepAliveField `json:"keep_alive"`
}

func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req ollamaChatRequest
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	mi, err := s.model(req.Model)
	g := &memosrt.Request{Start: start, Model: mi.Name, KeepAlive: keepAlive(req.KeepAlive), Messages: []memosrt.Message{}, RenderOnly: req.DebugRenderOnly}
	if err == nil {
		err = setFormat(g, "format", req.Format)
	}
	if err == nil {
		err = refuseOllamaExtras(req.Model, req.Think, req.Logprobs, req.TopLogprobs)
	}
	if err == nil && len(req.Tools) > 0 {
		g.Tools, err = ollamaTools(req.Tools)
	}
	for i, m := range req.Messages {
		if err != nil {
			break
		}
		err = memosrt.CheckRole(fmt.Sprintf("messages[%d].role", i), m.Role)
		if err == nil && len(m.Images) > 0 {
			err = wire.BadField(fmt.Sprintf("messages[%d].images", i), "images are not supported")
		}
		g.Messages = append(g.Messages, memosrt.Message{Role: m.Role, Content: ollamaMessageText(m)})
	}
	var sp sampling
	if err == nil {
		sp, err = parseOllamaOptions(req.Options)
	}
	if err == nil {
		g.Cube, g.ReadCubes, err = s.cubes(r, "options.cubes", sp.Cube, sp.Cubes)
	}
	if err == nil {
		field, rec := "record", req.Record
		if rec == "" && sp.Record != "" {
			field, rec = "options.record", sp.Record
		}
		g.Record, err = memosrt.ParseRecordMode(field, rec)
	}
	switch c := sp.ToolChoice; c {
	case "", memosrt.ToolAuto, memosrt.ToolNone, memosrt.ToolRequired:
		g.ToolChoice = c
	default:
		g.ToolChoice, g.ToolName = memosrt.ToolRequired, c
	}
	if sp.MaxToolCalls != nil {
		g.MaxToolCalls = *sp.MaxToolCalls
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	name := ollamaName(mi.Name)
	if len(req.Messages) == 0 {
		s.loadOrUnload(w, r, mi.Name, req.KeepAlive, func(reason string) any {
			return api.ChatResponse{Model: name, CreatedAt: s.opts.Now().UTC(), Message: api.Message{Role: "assistant"}, Done: true, DoneReason: reason}
		})
		return
	}
	s.ollamaRun(w, r, g, true, sp, req.Stream, start, func(t string) any {
		return api.ChatResponse{Model: name, CreatedAt: s.opts.Now().UTC(), Message: api.Message{Role: "assistant", Content: t}}
	}, func(res *memosrt.Response, text string, m api.Metrics, dbg *api.DebugInfo) any {
		return ollamaChatDone{ChatResponse: api.ChatResponse{Model: name, CreatedAt: s.opts.Now().UTC(),
			Message: api.Message{Role: "assistant", Content: text, ToolCalls: ollamaCalls(res.ToolCalls)},
			Done:    true, DoneReason: res.DoneReason, Metrics: m, DebugInfo: dbg}, ID: res.ID}
	})
}

// ollamaChatDone and ollamaGenerateDone are Ollama's last answer of a
// chat or generate with one field of memosrt's own: ID, the response's id
// (memosrt.Response.ID), which feedback names. Ollama's clients ignore a
// field they do not know.
type (
	ollamaChatDone struct {
		api.ChatResponse
		ID string `json:"id,omitempty"`
	}
	ollamaGenerateDone struct {
		api.GenerateResponse
		ID string `json:"id,omitempty"`
	}
)

// ollamaName is a model's name as the Ollama API lists it, with its tag
// ("stories260K" is "stories260K:latest"; ollamastore.DisplayName); a name
// that is not an Ollama name stays as it is. Requests match either form
// (sameModel).
func ollamaName(name string) string {
	if d := ollamastore.DisplayName(name); d != "" {
		return d
	}
	return name
}

// loadOrUnload answers an Ollama chat or generate without input: keep_alive
// 0 unloads the model (done_reason "unload", what `ollama stop` sends),
// anything else loads it and sets its keep-alive ("load").
func (s *Server) loadOrUnload(w http.ResponseWriter, r *http.Request, name string, keep *keepAliveField, answer func(reason string) any) {
	reason := "load"
	var err error
	if keep != nil && keep.Duration.Duration == 0 {
		reason, err = "unload", s.os.Unload(r.Context(), name)
	} else {
		_, err = s.os.Load(r.Context(), name, keepAlive(keep))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, answer(reason))
}

// ollamaRun generates g for an Ollama chat or generate request: Ollama's
// sampling defaults, streamed unless stream is false (never with
// _debug_render_only), each chunk as chunk(text) makes it. The last line,
// or the whole answer when not streamed, is final(res, text, metrics,
// debug), text being the full output only when not streamed.
func (s *Server) ollamaRun(w http.ResponseWriter, r *http.Request, g *memosrt.Request, chat bool, sp sampling, stream *bool,
	start time.Time, chunk func(text string) any, final func(res *memosrt.Response, text string, m api.Metrics, dbg *api.DebugInfo) any) {
	s.ollamaSampling(g, sp)
	var st *wire.Streamer
	if (stream == nil || *stream) && !g.RenderOnly {
		st = wire.NewStreamer(w, false)
	}
	res, err := s.generate(r, g, chat, st, chunk)
	if err != nil {
		wire.StreamError(s.log, w, r, st, err)
		return
	}
	m, dbg := ollamaMetrics(res, start), (*api.DebugInfo)(nil)
	if g.RenderOnly {
		m, dbg = api.Metrics{PromptEvalCount: res.Usage.PromptTokens}, &api.DebugInfo{RenderedTemplate: res.Rendered}
	}
	if st != nil {
		st.Send(withCached(final(res, "", m, dbg), res))
		return
	}
	wire.WriteJSON(w, http.StatusOK, withCached(final(res, res.Text, m, dbg), res))
}

// withCached adds memosrt's "prompt_cached_count" (prompt tokens not
// decoded: slot, resident or restored KV), "prompt_composed_count" and
// "prompt_recomputed_count" (placed from memory chunks; of them, decoded
// again) to an Ollama final response, whose prompt_eval_count is the
// whole prompt as Ollama counts it, and "cube_memories" (the prompt's
// memories by cube) when it carried any.
func withCached(v any, res *memosrt.Response) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return b
	}
	u := res.Usage
	head := fmt.Sprintf(`{"prompt_cached_count":%d,"prompt_composed_count":%d,"prompt_recomputed_count":%d`,
		u.CachedTokens, u.ComposedTokens, u.RecomputedTokens)
	if len(res.CubeMemories) > 0 {
		cm, _ := json.Marshal(res.CubeMemories)
		head += `,"cube_memories":` + string(cm)
	}
	if b[1] != '}' {
		head += ","
	}
	return append([]byte(head), b[1:]...)
}

// ollamaSampling applies Ollama's defaults (defaults.Ollama) to what sp
// leaves out.
func (s *Server) ollamaSampling(g *memosrt.Request, sp sampling) {
	grammar := g.Sampling.Grammar
	g.Sampling = sp.params(defaults.Ollama)
	g.Sampling.Grammar = grammar
	g.Adapters = sp.Adapters
	if sp.NumPredict != nil {
		g.NumPredict = *sp.NumPredict
	}
	if sp.NumCtx != nil {
		g.NumCtx = *sp.NumCtx
	}
	g.Stop = sp.Stop
}

func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req ollamaGenerateRequest
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	mi, err := s.model(req.Model)
	g := &memosrt.Request{Start: start, Model: mi.Name, KeepAlive: keepAlive(req.KeepAlive), Prompt: req.Prompt, System: req.System, Raw: req.Raw, RenderOnly: req.DebugRenderOnly}
	if err == nil {
		err = setFormat(g, "format", req.Format)
	}
	if err == nil {
		err = refuseOllamaExtras(req.Model, req.Think, req.Logprobs, req.TopLogprobs)
	}
	switch {
	case err != nil:
	case len(req.Images) > 0:
		err = wire.BadField("images", "images are not supported")
	case req.Suffix != "":
		err = wire.BadField("suffix", "fill-in-the-middle (suffix) is not supported")
	case req.Template != "":
		err = wire.BadField("template", "a request template is not supported; use raw with a rendered prompt")
	}
	var sp sampling
	if err == nil {
		sp, err = parseOllamaOptions(req.Options)
	}
	for _, t := range req.Context {
		g.Context = append(g.Context, int32(t))
	}
	if err == nil {
		g.Cube, g.ReadCubes, err = s.cubes(r, "options.cubes", sp.Cube, sp.Cubes)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	name := ollamaName(mi.Name)
	if req.Prompt == "" && len(req.Context) == 0 {
		s.loadOrUnload(w, r, mi.Name, req.KeepAlive, func(reason string) any {
			return api.GenerateResponse{Model: name, CreatedAt: s.opts.Now().UTC(), Done: true, DoneReason: reason}
		})
		return
	}
	s.ollamaRun(w, r, g, false, sp, req.Stream, start, func(t string) any {
		return api.GenerateResponse{Model: name, CreatedAt: s.opts.Now().UTC(), Response: t}
	}, func(res *memosrt.Response, text string, m api.Metrics, dbg *api.DebugInfo) any {
		ctx := make([]int, len(res.Context))
		for i, t := range res.Context {
			ctx[i] = int(t)
		}
		return ollamaGenerateDone{GenerateResponse: api.GenerateResponse{Model: name, CreatedAt: s.opts.Now().UTC(), Response: text, Done: true,
			DoneReason: res.DoneReason, Context: ctx, Metrics: m, DebugInfo: dbg}, ID: res.ID}
	})
}

// embedInputs reads Ollama's input: a string or an array of strings.
func embedInputs(field string, v any) ([]string, error) {
	in, err := stringList(field, v)
	if err != nil {
		return nil, err
	}
	for i, t := range in {
		if t == "" {
			return nil, wire.BadField(fmt.Sprintf("%s[%d]", field, i), "empty text")
		}
	}
	return in, nil
}

// truncateDims cuts each vector to dims and renormalises it (Matryoshka
// truncation, as Ollama does for "dimensions").
func truncateDims(vecs [][]float32, dims int) ([][]float32, error) {
	if dims <= 0 {
		return vecs, nil
	}
	for i, v := range vecs {
		if dims > len(v) {
			return nil, wire.BadField("dimensions", "%d > model dimension %d", dims, len(v))
		}
		vecs[i] = embed.Normalize(v[:dims])
	}
	return vecs, nil
}

func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req struct {
		api.EmbedRequest
		KeepAlive *keepAliveField `json:"keep_alive"`
	}
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	var in []string
	in, err := embedInputs("input", req.Input)
	if err == nil && req.Dimensions < 0 {
		err = wire.BadField("dimensions", "%d < 0", req.Dimensions)
	}
	var vecs [][]float32
	var emb memosrt.Embedding
	var model string
	if err == nil {
		model, err = s.embedModel(req.Model)
	}
	if err == nil && len(in) > 0 {
		emb, err = s.os.EmbedWith(r.Context(), model, keepAlive(req.KeepAlive), in)
		vecs = emb.Vectors
	}
	if err == nil {
		vecs, err = truncateDims(vecs, req.Dimensions)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if vecs == nil {
		vecs = [][]float32{}
	}
	name := req.Model
	switch {
	case model != "":
		name = ollamaName(model)
	case name == "":
		name = ollamaName(s.os.Model().Name)
	}
	wire.WriteJSON(w, http.StatusOK, api.EmbedResponse{Model: name, Embeddings: vecs, TotalDuration: time.Since(start),
		LoadDuration: emb.LoadDuration, PromptEvalCount: emb.Tokens})
}

func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		api.EmbeddingRequest
		KeepAlive *keepAliveField `json:"keep_alive"`
	}
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Prompt == "" {
		wire.WriteJSON(w, http.StatusOK, api.EmbeddingResponse{Embedding: []float64{}})
		return
	}
	model, err := s.embedModel(req.Model)
	var vecs [][]float32
	if err == nil {
		var emb memosrt.Embedding
		emb, err = s.os.EmbedWith(r.Context(), model, keepAlive(req.KeepAlive), []string{req.Prompt})
		vecs = emb.Vectors
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]float64, len(vecs[0]))
	for i, x := range vecs[0] {
		out[i] = float64(x)
	}
	wire.WriteJSON(w, http.StatusOK, api.EmbeddingResponse{Embedding: out})
}

func ollamaDetails(mi memosrt.ModelInfo) api.ModelDetails {
	d := api.ModelDetails{Format: "gguf", Family: mi.Family, ParameterSize: mi.ParamSize, QuantizationLevel: mi.Quant}
	if mi.Family != "" {
		d.Families = []string{mi.Family}
	}
	return d
}

func (s *Server) handleOllamaTags(w http.ResponseWriter, r *http.Request) {
	out := api.ListResponse{Models: []api.ListModelResponse{}}
	for _, m := range s.os.Models() {
		mi := m.ModelInfo
		out.Models = append(out.Models, api.ListModelResponse{Name: ollamaName(mi.Name), Model: ollamaName(mi.Name), ModifiedAt: mi.Modified,
			Size: mi.Size, Digest: mi.Digest, Details: ollamaDetails(mi)})
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req api.ShowRequest
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	var err error
	if name == "" {
		err = wire.BadField("model", "missing model name")
	}
	var mi memosrt.ModelInfo
	if err == nil {
		mi, err = s.model(name)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// As Ollama reports them: a generative model is "completion", and
	// "tools" as every model here calls tools under a grammar.
	// The v0.17.4 CLI runs any model listing "embedding" as an embedder
	// (cmd/cmd.go: slices.Contains(info.Capabilities, CapabilityEmbedding)),
	// so `ollama run` printed a vector. /api/embed still works, as it does
	// for generative models in Ollama.
	caps := []model.Capability{model.CapabilityCompletion, model.CapabilityTools}
	wire.WriteJSON(w, http.StatusOK, api.ShowResponse{Modelfile: "# served by memosrt\nFROM " + mi.Name + "\n",
		Parameters: fmt.Sprintf("num_ctx %d", mi.NCtx), Template: mi.Template, Details: ollamaDetails(mi),
		ModelInfo: mi.Info, Capabilities: caps, ModifiedAt: mi.Modified})
}

// forever is how Ollama reports a model kept loaded without end: its
// api.Duration turns a negative keep_alive into the largest duration.
func forever(now time.Time) time.Time { return now.Add(time.Duration(math.MaxInt64)) }

func (s *Server) handleOllamaPS(w http.ResponseWriter, r *http.Request) {
	out := api.ProcessResponse{Models: []api.ProcessModelResponse{}}
	now := s.opts.Now()
	for _, m := range s.os.Models() {
		if !m.Loaded {
			continue
		}
		mi := m.ModelInfo
		exp := m.ExpiresAt
		if exp.IsZero() {
			exp = forever(now)
		}
		out.Models = append(out.Models, api.ProcessModelResponse{Name: ollamaName(mi.Name), Model: ollamaName(mi.Name), Size: mi.Size,
			Digest: mi.Digest, Details: ollamaDetails(mi), ExpiresAt: exp, ContextLength: mi.NCtx})
	}
	// as Ollama lists them: the latest to expire first
	slices.SortStableFunc(out.Models, func(a, b api.ProcessModelResponse) int { return b.ExpiresAt.Compare(a.ExpiresAt) })
	wire.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) handleOllamaVersion(w http.ResponseWriter, r *http.Request) {
	// "version" is the Ollama API memosrt speaks (clients gate features on
	// it: the v0.17.4 sources the wire types come from); "memosrt" is ours
	wire.WriteJSON(w, http.StatusOK, map[string]string{"version": OllamaAPIVersion, "memosrt": s.opts.Version})
}

// OllamaAPIVersion is the Ollama release whose API (api/types.go,
// server/routes.go of github.com/ollama/ollama v0.17.4) the server follows.
const OllamaAPIVersion = "0.17.4"

// handleServerInfo answers GET /v1/server: {"version", "instance"}.
func (s *Server) handleServerInfo(w http.ResponseWriter, r *http.Request) {
	wire.WriteJSON(w, http.StatusOK, map[string]string{"version": s.opts.Version, "instance": s.opts.Instance})
}

// handleOllamaModelStore answers Ollama's model management (pull, push,
// copy, delete, create, blobs) with a 501 saying what memosrt does
// instead: it serves GGUF files it is given and never changes a store.
func (s *Server) handleOllamaModelStore(w http.ResponseWriter, r *http.Request) {
	what := strings.TrimPrefix(r.URL.Path, "/api/")
	if i := strings.IndexByte(what, '/'); i >= 0 {
		what = what[:i]
	}
	s.writeError(w, r, fmt.Errorf("%w: /api/%s: memosrt does not manage models; it serves the GGUF files given with "+
		"serve --model and --models-dir and the models of Ollama's store (read at start); pull, create or copy models with ollama itself",
		memosrt.ErrNotSupported, what))
}

// refuseOllamaExtras refuses what memosrt does not serve on Ollama's
// generation routes, as Ollama refuses it for models without it: think
// (no model here has a thinking template) and logprobs.
func refuseOllamaExtras(model string, think *api.ThinkValue, logprobs bool, top int) error {
	switch {
	case think != nil && think.Bool():
		return wire.BadField("think", "%q does not support thinking", model)
	case logprobs || top > 0:
		return wire.BadField("logprobs", "log probabilities are not served")
	}
	return nil
}
