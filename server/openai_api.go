package server

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/defaults"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// OpenAI wire shapes (the subset memosrt serves), as the official clients
// send and read them.

type oaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaiToolCall   `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type oaiStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// oaiSampling are the sampling fields shared by chat and completions, plus
// memosrt's extensions (top_k, min_p, repeat_penalty, num_ctx, cube).
type oaiSampling struct {
	Model               string            `json:"model"`
	Stream              bool              `json:"stream"`
	StreamOptions       *oaiStreamOptions `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Temperature         *float64          `json:"temperature"`
	TopP                *float64          `json:"top_p"`
	Seed                *int              `json:"seed"`
	Stop                any               `json:"stop"`
	N                   *int              `json:"n"`
	TopK                *int              `json:"top_k"`
	MinP                *float64          `json:"min_p"`
	RepeatPenalty       *float64          `json:"repeat_penalty"`
	NumCtx              *int              `json:"num_ctx"`
	Cube                string            `json:"cube"`
	Adapters            any               `json:"adapters"`
	Metadata            map[string]any    `json:"metadata"`
	Logprobs            any               `json:"logprobs"` // chat: bool; completions: int
	TopLogprobs         *int              `json:"top_logprobs"`
	// KeepAlive is memosrt's extension, Ollama's keep_alive: how long the
	// model stays loaded after the request.
	KeepAlive *keepAliveField `json:"keep_alive"`
}

// oaiJSONSchema is response_format.json_schema.
type oaiJSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"` // accepted; the schema is always enforced
}

type oaiChatRequest struct {
	oaiSampling
	Messages          []oaiMessage      `json:"messages"`
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	MaxToolCalls      *int              `json:"max_tool_calls"` // as OpenAI's Responses API has it
	ResponseFormat    *struct {
		Type       string         `json:"type"` // text, json_object, json_schema
		JSONSchema *oaiJSONSchema `json:"json_schema"`
	} `json:"response_format"`
	// Record is memosrt's extension, as cube is (also metadata.record):
	// what the turn leaves in the cube's memory (see memosrt.ParseRecordMode).
	Record string `json:"record"`
}

type oaiCompletionRequest struct {
	oaiSampling
	Prompt any  `json:"prompt"`
	Echo   bool `json:"echo"`
	Suffix any  `json:"suffix"`
}

type oaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		// memosrt's: prompt tokens placed from memory chunks, and those
		// of them decoded again (clients ignore fields they do not know)
		ComposedTokens   int `json:"composed_tokens"`
		RecomputedTokens int `json:"recomputed_tokens"`
	} `json:"prompt_tokens_details"`
	// CubeMemories is memosrt's extension: the prompt's memories counted
	// by the cube each lives in (memosrt.Response.CubeMemories).
	CubeMemories map[string]int `json:"cube_memories,omitempty"`
}

func usageOf(res *memosrt.Response) *oaiUsage {
	r := res.Usage
	u := &oaiUsage{PromptTokens: r.PromptTokens, CompletionTokens: r.EvalTokens, TotalTokens: r.PromptTokens + r.EvalTokens}
	u.PromptTokensDetails.CachedTokens = r.CachedTokens
	u.CubeMemories = res.CubeMemories
	u.PromptTokensDetails.ComposedTokens, u.PromptTokensDetails.RecomputedTokens = r.ComposedTokens, r.RecomputedTokens
	return u
}

func finishReason(r string) string {
	if r == "length" {
		return "length"
	}
	return "stop"
}

// apply validates the shared fields and fills g (OpenAI defaults:
// temperature 1, top_p 1, no top-k, no repeat penalty).
func (s *Server) applyOpenAI(r *http.Request, o *oaiSampling, g *memosrt.Request) error {
	mi, err := s.model(o.Model)
	if err != nil {
		return err
	}
	if o.Model == "" {
		return wire.BadField("model", "missing model name")
	}
	g.Model, g.KeepAlive = mi.Name, keepAlive(o.KeepAlive)
	if lp := o.Logprobs; lp != nil && lp != false && lp != 0.0 || o.TopLogprobs != nil && *o.TopLogprobs > 0 {
		return wire.BadField("logprobs", "log probabilities are not served")
	}
	if o.N != nil && *o.N != 1 {
		return wire.BadField("n", "only n=1 is supported, got %d", *o.N)
	}
	if o.Temperature != nil && (*o.Temperature < 0 || *o.Temperature > 2 || math.IsNaN(*o.Temperature)) {
		return wire.BadField("temperature", "%v not in [0, 2]", *o.Temperature)
	}
	if o.TopP != nil && (*o.TopP < 0 || *o.TopP > 1) {
		return wire.BadField("top_p", "%v not in [0, 1]", *o.TopP)
	}
	if o.MinP != nil && (*o.MinP < 0 || *o.MinP > 1) {
		return wire.BadField("min_p", "%v not in [0, 1]", *o.MinP)
	}
	mt := o.MaxCompletionTokens
	if mt == nil {
		mt = o.MaxTokens
	}
	if mt != nil {
		if *mt < 1 {
			return wire.BadField("max_tokens", "%d < 1", *mt)
		}
		g.NumPredict = *mt
	}
	if o.NumCtx != nil {
		g.NumCtx = *o.NumCtx
	}
	// ranges (num_ctx, top_k, stop's count and length, ...) are checked
	// by pipeline/request's CheckOptions for every route alike
	stop, err := stringList("stop", o.Stop)
	if err != nil {
		return err
	}
	g.Stop = stop
	sp := sampling{Temperature: o.Temperature, TopP: o.TopP, MinP: o.MinP, RepeatPenalty: o.RepeatPenalty, TopK: o.TopK, Seed: o.Seed}
	g.Sampling = sp.params(defaults.OpenAI)
	if g.Adapters, err = adapterSpecs("adapters", o.Adapters); err != nil {
		return err
	}
	cube := o.Cube
	if c, ok := o.Metadata["cube"].(string); ok && cube == "" {
		cube = c
	}
	if cube != "" && !textmem.ValidCube(cube) {
		return wire.BadField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", cube)
	}
	var list []string
	if v, ok := o.Metadata["cubes"]; ok {
		if list, err = cubeListOf("metadata.cubes", v); err != nil {
			return err
		}
	}
	g.Cube, g.ReadCubes, err = s.cubes(r, "metadata.cubes", cube, list)
	return err
}

// messageText reads a message content: a string, null, or an array of
// text parts.
func messageText(field string, raw json.RawMessage) (string, error) {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", wire.BadField(field, "want a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", wire.BadField(fmt.Sprintf("%s[%d].type", field, i), "content part %q is not supported (text only)", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (s *Server) handleOpenAIChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req oaiChatRequest
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	g := &memosrt.Request{Start: start, Messages: []memosrt.Message{}}
	err := s.applyOpenAI(r, &req.oaiSampling, g)
	if err == nil {
		field, rec := "record", req.Record
		if m, ok := req.Metadata["record"].(string); ok && rec == "" {
			field, rec = "metadata.record", m
		}
		g.Record, err = memosrt.ParseRecordMode(field, rec)
	}
	if err == nil {
		err = openAITools(g, req.Tools, req.ToolChoice, req.ParallelToolCalls)
	}
	if mt := req.MaxToolCalls; err == nil && mt != nil {
		if *mt < 1 {
			err = wire.BadField("max_tool_calls", "%d < 1", *mt)
		} else if g.MaxToolCalls == 0 || *mt < g.MaxToolCalls {
			g.MaxToolCalls = *mt
		}
	}
	if rf := req.ResponseFormat; err == nil && rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			err = setFormat(g, "response_format", json.RawMessage(`"json"`))
		case "json_schema":
			err = setSchema(g, rf.JSONSchema)
		default:
			err = wire.BadField("response_format.type", "want text, json_object or json_schema, got %q", rf.Type)
		}
	}
	if err == nil && len(req.Messages) == 0 {
		err = wire.BadField("messages", "at least one message is required")
	}
	for i, m := range req.Messages {
		if err != nil {
			break
		}
		role := strings.ToLower(m.Role)
		if role == "developer" {
			role = "system"
		}
		err = memosrt.CheckRole(fmt.Sprintf("messages[%d].role", i), role)
		var text string
		if err == nil {
			text, err = messageText(fmt.Sprintf("messages[%d].content", i), m.Content)
		}
		if err == nil {
			text, err = openAIMessageText(fmt.Sprintf("messages[%d].tool_calls", i), text, m.ToolCalls)
		}
		g.Messages = append(g.Messages, memosrt.Message{Role: role, Content: text})
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// the response's own id (memosrt.Response.ID), made now: the chunks
	// carry it before the answer
	g.ID = memosrt.NewResponseID()
	id, created, name := g.ID, s.opts.Now().Unix(), g.Model
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": name,
			"system_fingerprint": "memosrt", "choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
	}
	var st *wire.Streamer
	if req.Stream {
		st = wire.NewStreamer(w, true)
	}
	first := true
	res, err := s.generate(r, g, true, st, func(t string) any {
		d := map[string]any{"content": t}
		if first {
			d["role"], first = "assistant", false
		}
		return chunk(d, nil)
	})
	if err != nil {
		wire.StreamError(s.log, w, r, st, err)
		return
	}
	if st != nil {
		// each call: its id, type and name, then its arguments
		for i, c := range openAICalls(res.ToolCalls) {
			head := c
			head.Index, head.Function.Arguments = &i, ""
			d := map[string]any{"tool_calls": []oaiToolCall{head}}
			if first {
				d["role"], first = "assistant", false
			}
			args := oaiToolCall{Index: &i}
			args.Function.Arguments = c.Function.Arguments
			if st.Send(chunk(d, nil)) != nil || st.Send(chunk(map[string]any{"tool_calls": []oaiToolCall{args}}, nil)) != nil {
				return
			}
		}
		if err := st.Send(chunk(map[string]any{}, openAIFinish(res))); err != nil {
			return
		}
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			st.Send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": name,
				"system_fingerprint": "memosrt", "choices": []any{}, "usage": usageOf(res)})
		}
		st.SendRaw([]byte("[DONE]"))
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": name,
		"system_fingerprint": "memosrt",
		"choices": []any{map[string]any{"index": 0, "message": openAIMessage(res),
			"finish_reason": openAIFinish(res), "logprobs": nil}},
		"usage": usageOf(res)})
}

func (s *Server) handleOpenAICompletion(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req oaiCompletionRequest
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	g := &memosrt.Request{Start: start, NumPredict: 16}
	err := s.applyOpenAI(r, &req.oaiSampling, g)
	var prompts []string
	if err == nil {
		prompts, err = stringList("prompt", req.Prompt)
	}
	switch {
	case err != nil:
	case len(prompts) != 1:
		err = wire.BadField("prompt", "exactly one prompt is supported, got %d", len(prompts))
	case prompts[0] == "":
		err = wire.BadField("prompt", "empty prompt")
	case req.Echo:
		err = wire.BadField("echo", "echo is not supported")
	case req.Suffix != nil && req.Suffix != "":
		err = wire.BadField("suffix", "suffix is not supported")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	g.Prompt, g.Raw = prompts[0], g.Cube == ""
	g.ID = memosrt.NewResponseID()
	id, created, name := g.ID, s.opts.Now().Unix(), g.Model
	chunk := func(text string, finish any) map[string]any {
		return map[string]any{"id": id, "object": "text_completion", "created": created, "model": name,
			"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": finish, "logprobs": nil}}}
	}
	var st *wire.Streamer
	if req.Stream {
		st = wire.NewStreamer(w, true)
	}
	res, err := s.generate(r, g, false, st, func(t string) any { return chunk(t, nil) })
	if err != nil {
		wire.StreamError(s.log, w, r, st, err)
		return
	}
	if st != nil {
		if err := st.Send(chunk("", finishReason(res.DoneReason))); err != nil {
			return
		}
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			st.Send(map[string]any{"id": id, "object": "text_completion", "created": created, "model": name,
				"choices": []any{}, "usage": usageOf(res)})
		}
		st.SendRaw([]byte("[DONE]"))
		return
	}
	out := chunk(res.Text, finishReason(res.DoneReason))
	out["usage"] = usageOf(res)
	wire.WriteJSON(w, http.StatusOK, out)
}

type oaiEmbeddingRequest struct {
	Model          string `json:"model"`
	Input          any    `json:"input"`
	EncodingFormat string `json:"encoding_format"`
	Dimensions     int    `json:"dimensions"`
	// KeepAlive is memosrt's extension, as on the chat and completion
	// routes: how long the model stays loaded after this request.
	KeepAlive *keepAliveField `json:"keep_alive"`
}

func (s *Server) handleOpenAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req oaiEmbeddingRequest
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	var in []string
	var err error
	switch {
	case req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64":
		err = wire.BadField("encoding_format", "want float or base64, got %q", req.EncodingFormat)
	case req.Dimensions < 0:
		err = wire.BadField("dimensions", "%d < 0", req.Dimensions)
	default:
		in, err = embedInputs("input", req.Input)
		if err == nil && len(in) == 0 {
			err = wire.BadField("input", "no input")
		}
	}
	var vecs [][]float32
	n := 0
	var model string
	if err == nil {
		model, err = s.embedModel(req.Model)
	}
	if err == nil {
		var emb memosrt.Embedding
		emb, err = s.os.EmbedWith(r.Context(), model, keepAlive(req.KeepAlive), in)
		vecs, n = emb.Vectors, emb.Tokens
	}
	if err == nil {
		vecs, err = truncateDims(vecs, req.Dimensions)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	data := make([]any, len(vecs))
	for i, v := range vecs {
		var emb any = v
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	name := req.Model
	switch {
	case model != "":
		name = model
	case name == "":
		name = s.os.Model().Name
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": name,
		"usage": map[string]int{"prompt_tokens": n, "total_tokens": n}})
}

func oaiModel(mi memosrt.ModelInfo) map[string]any {
	return map[string]any{"id": mi.Name, "object": "model", "created": mi.Modified.Unix(), "owned_by": "memosrt"}
}

func (s *Server) handleOpenAIModels(w http.ResponseWriter, r *http.Request) {
	data := []any{}
	for _, m := range s.os.Models() {
		data = append(data, oaiModel(m.ModelInfo))
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) handleOpenAIModel(w http.ResponseWriter, r *http.Request) {
	var mi memosrt.ModelInfo
	err := wire.BadField("model", "missing model name")
	if r.PathValue("model") != "" {
		mi, err = s.model(r.PathValue("model"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, oaiModel(mi))
}

// setSchema puts response_format.json_schema.schema (a JSON schema: an
// object or a boolean) on g, as setFormat does for Ollama's format.
func setSchema(g *memosrt.Request, js *oaiJSONSchema) error {
	const field = "response_format.json_schema.schema"
	var t []byte
	if js != nil {
		t = bytes.TrimSpace(js.Schema)
	}
	if len(t) == 0 || t[0] != '{' && string(t) != "true" && string(t) != "false" {
		return wire.BadField(field, "a JSON schema (an object or a boolean) is required")
	}
	return useSchema(g, field, t)
}
