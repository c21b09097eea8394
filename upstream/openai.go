package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/packages/param"
	"github.com/openai/openai-go/shared"

	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/toolcall"
)

// openAI is an OpenAI-compatible server through the official client
// github.com/openai/openai-go: chats (and completions in a cube) through
// /v1/chat/completions, raw completions through /v1/completions,
// embeddings through /v1/embeddings; streamed over SSE when the caller
// streams (with stream_options.include_usage), one JSON answer when not.
//
// Passed: temperature, top_p, seed, max_tokens, stop, the format (as
// response_format), tools, tool_choice and parallel_tool_calls (false
// for MaxToolCalls 1). Dropped, the OpenAI API having no such field:
// top_k, min_p, repeat_penalty, num_ctx, MaxToolCalls above 1. Refused
// (*errkind.FieldError): Ollama's token context and render-only.
//
// The client reads no environment variable (the services are built
// without openai.NewClient's defaults) and does not retry: a 429 or 5xx
// reaches the caller at once, as memosrt's own errors do.
type openAI struct {
	opts Options
	chat openai.ChatCompletionService
	comp openai.CompletionService
	emb  openai.EmbeddingService
}

func newOpenAI(o Options) *openAI {
	ro := []option.RequestOption{option.WithBaseURL(apiBase(o.URL)), option.WithHTTPClient(&http.Client{Timeout: o.Timeout}),
		option.WithMaxRetries(0)}
	if o.APIKey != "" {
		ro = append(ro, option.WithAPIKey(o.APIKey))
	}
	return &openAI{opts: o, chat: openai.NewChatCompletionService(ro...), comp: openai.NewCompletionService(ro...),
		emb: openai.NewEmbeddingService(ro...)}
}

// apiBase is the API base of an Options.URL: as is when its path ends in
// /v1, else with /v1 appended; always with a trailing slash.
func apiBase(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw // Validate refused it
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + "/"
	return u.String()
}

func (b *openAI) API() string { return APIOpenAI }

// openAIErr maps a client error: the upstream's HTTP statuses as
// statusErr maps them, the caller's cancellation as itself, the rest
// (refused connections, timeouts, broken streams) ErrUpstream.
func openAIErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var ae *openai.Error
	if errors.As(err, &ae) {
		msg := ae.Message
		if msg == "" {
			msg = strings.TrimSpace(ae.RawJSON())
		}
		if msg == "" {
			msg = http.StatusText(ae.StatusCode)
		}
		return statusErr(APIOpenAI, ae.StatusCode, msg)
	}
	return fmt.Errorf("%w: %w", ErrUpstream, err)
}

// Generate answers req: a raw completion through /v1/completions, the
// rest through /v1/chat/completions (a completion as a system turn and a
// user turn, or the messages the pipeline assembled).
func (b *openAI) Generate(ctx context.Context, req *Request) (*Result, error) {
	switch {
	case req.RenderOnly:
		return nil, badField("_debug_render_only", "the openai backend cannot render a prompt without generating")
	case len(req.Context) > 0:
		return nil, badField("context", "the openai backend does not continue a token context")
	case !req.Chat && req.Raw:
		return b.complete(ctx, req)
	}
	msgs := req.Messages
	if !req.Chat && len(msgs) == 0 {
		if req.System != "" {
			msgs = append(msgs, layout.Message{Role: "system", Content: req.System})
		}
		msgs = append(msgs, layout.Message{Role: "user", Content: req.Prompt})
	}
	p, err := b.chatParams(req, msgs)
	if err != nil {
		return nil, err
	}
	if req.OnText == nil {
		res, err := b.chat.New(ctx, p)
		if err != nil {
			return nil, openAIErr(ctx, err)
		}
		if len(res.Choices) == 0 {
			return nil, fmt.Errorf("%w: %s answered no choice", ErrUpstream, b.opts.URL)
		}
		ch := res.Choices[0]
		out := &Result{Text: ch.Message.Content, DoneReason: doneReason(ch.FinishReason)}
		usage(out, res.Usage)
		for _, c := range ch.Message.ToolCalls {
			if err := addCall(out, c.ID, c.Function.Name, c.Function.Arguments); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	p.StreamOptions.IncludeUsage = openai.Bool(true)
	st := b.chat.NewStreaming(ctx, p)
	defer st.Close()
	out := &Result{}
	var text strings.Builder
	type call struct{ id, name, args strings.Builder }
	var calls []*call
	finish := ""
	for st.Next() {
		ch := st.Current()
		if ch.JSON.Usage.Valid() {
			usage(out, ch.Usage)
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
			for _, d := range c.Delta.ToolCalls {
				if d.Index < 0 || d.Index > 1024 {
					return out, fmt.Errorf("%w: tool call index %d", ErrUpstream, d.Index)
				}
				for int(d.Index) >= len(calls) {
					calls = append(calls, &call{})
				}
				tc := calls[d.Index]
				tc.id.WriteString(d.ID)
				tc.name.WriteString(d.Function.Name)
				tc.args.WriteString(d.Function.Arguments)
			}
			if t := c.Delta.Content; t != "" {
				text.WriteString(t)
				if err := req.OnText(t); err != nil {
					out.Text = text.String()
					return out, err
				}
			}
		}
	}
	out.Text = text.String()
	if err := st.Err(); err != nil {
		return out, openAIErr(ctx, err)
	}
	if finish == "" {
		return out, fmt.Errorf("%w: stream from %s ended without a finish_reason", ErrUpstream, b.opts.URL)
	}
	out.DoneReason = doneReason(finish)
	for _, c := range calls {
		if err := addCall(out, c.id.String(), c.name.String(), c.args.String()); err != nil {
			return out, err
		}
	}
	return out, nil
}

// chatParams is req as a chat completion request over msgs.
func (b *openAI) chatParams(req *Request, msgs []layout.Message) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: b.opts.Model, Messages: chatMessages(msgs)}
	s := req.Sampling
	p.Temperature, p.Seed = openai.Float(float64(s.Temperature)), openai.Int(int64(s.Seed))
	if s.TopP > 0 {
		p.TopP = openai.Float(float64(s.TopP))
	}
	if req.NumPredict > 0 {
		p.MaxTokens = openai.Int(int64(req.NumPredict))
	}
	if len(req.Stop) > 0 {
		p.Stop.OfStringArray = req.Stop
	}
	if f := bytes.TrimSpace(req.Format); len(f) > 0 && string(f) != "null" {
		switch {
		case string(f) == `"json"`:
			p.ResponseFormat.OfJSONObject = &shared.ResponseFormatJSONObjectParam{}
		default:
			var schema map[string]any
			if err := json.Unmarshal(f, &schema); err != nil {
				return p, badField("format", `want "json" or a JSON schema object`)
			}
			p.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name: "response", Schema: schema, Strict: openai.Bool(true)}}
		}
	}
	for i, t := range req.Tools {
		fp := shared.FunctionParameters{"type": "object"}
		if pr := bytes.TrimSpace(t.Parameters); len(pr) > 0 && string(pr) != "null" {
			fp = nil
			if err := json.Unmarshal(pr, &fp); err != nil {
				return p, badField(fmt.Sprintf("tools[%d].function.parameters", i), "want a JSON schema object")
			}
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: fp}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionToolParam{Function: fd})
	}
	if len(req.Tools) > 0 {
		switch {
		case req.ToolName != "":
			p.ToolChoice.OfChatCompletionNamedToolChoice = &openai.ChatCompletionNamedToolChoiceParam{
				Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: req.ToolName}}
		case req.ToolChoice == toolcall.None || req.ToolChoice == toolcall.Required:
			p.ToolChoice.OfAuto = openai.String(req.ToolChoice)
		}
		if req.MaxToolCalls == 1 {
			p.ParallelToolCalls = openai.Bool(false)
		}
	}
	return p, nil
}

// chatMessages converts the pipeline's messages. An assistant turn that
// made calls (its text ends in the JSON array toolcall.Text writes) goes
// as content and tool_calls, each call with an id of this request
// ("call_1", ...); each tool turn after it gets the id of the next call
// not yet answered, in order, as tool_call_id (the pipeline's messages
// keep no ids).
func chatMessages(msgs []layout.Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs))
	var pending []string
	n := 0
	for _, m := range msgs {
		switch m.Role {
		case "system":
			out = append(out, openai.SystemMessage(m.Content))
		case "assistant":
			content, calls := splitCalls(m.Content)
			if len(calls) == 0 {
				out = append(out, openai.AssistantMessage(m.Content))
				continue
			}
			var a openai.ChatCompletionAssistantMessageParam
			if content != "" {
				a.Content.OfString = param.NewOpt(content)
			}
			pending = pending[:0]
			for _, c := range calls {
				n++
				id := fmt.Sprintf("call_%d", n)
				pending = append(pending, id)
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallParam{ID: id,
					Function: openai.ChatCompletionMessageToolCallFunctionParam{Name: c.Name, Arguments: string(c.Arguments)}})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case "tool":
			id := ""
			if len(pending) > 0 {
				id, pending = pending[0], pending[1:]
			}
			out = append(out, openai.ToolMessage(m.Content, id))
		default: // "user"; roles were checked before
			out = append(out, openai.UserMessage(m.Content))
		}
	}
	return out
}

// splitCalls splits an assistant turn written by toolcall.Text into its
// content and calls; no calls when text does not end in such an array.
func splitCalls(text string) (string, []toolcall.Call) {
	content, arr := "", text
	if !strings.HasPrefix(strings.TrimSpace(text), "[") {
		i := strings.LastIndex(text, "\n[")
		if i < 0 {
			return text, nil
		}
		content, arr = text[:i], text[i+1:]
	}
	calls, ok := toolcall.Parse(arr)
	if !ok {
		return text, nil
	}
	for i, c := range calls {
		if c.Name == "" {
			return text, nil
		}
		if c.Arguments == nil {
			calls[i].Arguments = json.RawMessage(`{}`)
		}
	}
	return content, calls
}

// addCall appends the upstream's call to out: its id (a new one if it
// sent none), name, and arguments compacted ("" is {}); arguments that
// are not a JSON object are ErrUpstream.
func addCall(out *Result, id, name, args string) error {
	if id == "" {
		id = toolcall.NewID()
	}
	a := strings.TrimSpace(args)
	if a == "" {
		a = "{}"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(a)); err != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return fmt.Errorf("%w: tool call %q: arguments %.80q are not a JSON object", ErrUpstream, name, args)
	}
	out.ToolCalls = append(out.ToolCalls, toolcall.Call{ID: id, Name: name, Arguments: buf.Bytes()})
	return nil
}

// usage copies the upstream's counts into out.
func usage(out *Result, u openai.CompletionUsage) {
	out.PromptTokens, out.EvalTokens = int(u.PromptTokens), int(u.CompletionTokens)
	out.CachedTokens = int(u.PromptTokensDetails.CachedTokens)
}

// doneReason is an OpenAI finish_reason as memosrt's: "length" or "stop"
// (stop, tool_calls, content_filter and the rest).
func doneReason(finish string) string {
	if finish == "length" {
		return "length"
	}
	return "stop"
}

// complete answers a raw completion through /v1/completions. Without a
// NumPredict cap the upstream's default applies (OpenAI's: 16 tokens).
func (b *openAI) complete(ctx context.Context, req *Request) (*Result, error) {
	s := req.Sampling
	p := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(b.opts.Model),
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(req.Prompt)},
		Temperature: openai.Float(float64(s.Temperature)), Seed: openai.Int(int64(s.Seed))}
	if s.TopP > 0 {
		p.TopP = openai.Float(float64(s.TopP))
	}
	if req.NumPredict > 0 {
		p.MaxTokens = openai.Int(int64(req.NumPredict))
	}
	if len(req.Stop) > 0 {
		p.Stop.OfStringArray = req.Stop
	}
	if len(bytes.TrimSpace(req.Format)) > 0 && string(bytes.TrimSpace(req.Format)) != "null" {
		return nil, badField("format", "the openai backend takes a format only with a chat template (not raw)")
	}
	out := &Result{}
	if req.OnText == nil {
		res, err := b.comp.New(ctx, p)
		if err != nil {
			return nil, openAIErr(ctx, err)
		}
		if len(res.Choices) == 0 {
			return nil, fmt.Errorf("%w: %s answered no choice", ErrUpstream, b.opts.URL)
		}
		out.Text, out.DoneReason = res.Choices[0].Text, doneReason(string(res.Choices[0].FinishReason))
		usage(out, res.Usage)
		return out, nil
	}
	p.StreamOptions.IncludeUsage = openai.Bool(true)
	st := b.comp.NewStreaming(ctx, p)
	defer st.Close()
	var text strings.Builder
	finish := ""
	for st.Next() {
		ch := st.Current()
		if ch.JSON.Usage.Valid() {
			usage(out, ch.Usage)
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
			if c.Text != "" {
				text.WriteString(c.Text)
				if err := req.OnText(c.Text); err != nil {
					out.Text = text.String()
					return out, err
				}
			}
		}
	}
	out.Text = text.String()
	if err := st.Err(); err != nil {
		return out, openAIErr(ctx, err)
	}
	if finish == "" {
		return out, fmt.Errorf("%w: stream from %s ended without a finish_reason", ErrUpstream, b.opts.URL)
	}
	out.DoneReason = doneReason(finish)
	return out, nil
}

// Embed embeds texts through /v1/embeddings with Options.EmbedModel.
func (b *openAI) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	res, err := b.emb.New(ctx, openai.EmbeddingNewParams{Model: openai.EmbeddingModel(b.opts.EmbedModel),
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat})
	if err != nil {
		return nil, 0, openAIErr(ctx, err)
	}
	if len(res.Data) != len(texts) {
		return nil, 0, fmt.Errorf("%w: %d embeddings for %d inputs", ErrUpstream, len(res.Data), len(texts))
	}
	data := res.Data
	sort.SliceStable(data, func(i, j int) bool { return data[i].Index < data[j].Index })
	out := make([][]float32, len(data))
	for i, d := range data {
		if d.Index != int64(i) {
			return nil, 0, fmt.Errorf("%w: embedding indexes are not 0..%d", ErrUpstream, len(texts)-1)
		}
		v := make([]float32, len(d.Embedding))
		for j, x := range d.Embedding {
			v[j] = float32(x)
		}
		out[i] = v
	}
	return out, int(res.Usage.PromptTokens), nil
}
