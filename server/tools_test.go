package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"
)

// The tools of the tool-calling tests: enums keep a toy model's arguments
// short; only the grammar makes stories260K call them at all.
var (
	weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"enum": []string{"Paris", "Rome"}}}, "required": []string{"city"}}
	timeSchema    = map[string]any{"type": "object", "properties": map[string]any{"zone": map[string]any{"enum": []string{"UTC", "CET"}}}, "required": []string{"zone"}}
	toolQuestion  = "What is the weather in Paris and the time in CET?"
)

// checkCall fails unless name and args are one valid call of the test
// tools: exactly the tool's one required argument, with an enum value.
func checkCall(t *testing.T, name, args string) {
	t.Helper()
	var a map[string]string
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		t.Fatalf("call %s arguments %q: %v", name, args, err)
	}
	switch name {
	case "get_weather":
		if len(a) != 1 || a["city"] != "Paris" && a["city"] != "Rome" {
			t.Fatalf("get_weather arguments %q", args)
		}
	case "get_time":
		if len(a) != 1 || a["zone"] != "UTC" && a["zone"] != "CET" {
			t.Fatalf("get_time arguments %q", args)
		}
	default:
		t.Fatalf("call of unknown tool %q", name)
	}
}

func TestToolCallsOpenAI(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024})
	c := openaiClient(e.url())
	ctx := context.Background()
	tools := []openai.ChatCompletionToolParam{
		{Function: shared.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("Weather of a city"), Parameters: weatherSchema}},
		{Function: shared.FunctionDefinitionParam{Name: "get_time", Description: openai.String("Time in a zone"), Parameters: timeSchema}},
	}
	params := func(choice openai.ChatCompletionToolChoiceOptionUnionParam) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(toolQuestion)},
			Tools: tools, ToolChoice: choice, Temperature: openai.Float(0), MaxTokens: openai.Int(256)}
	}
	required := openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	two := option.WithJSONSet("max_tool_calls", 2)

	t.Run("streamed two calls", func(t *testing.T) {
		whole, err := c.Chat.Completions.New(ctx, params(required), two)
		if err != nil {
			t.Fatal(err)
		}
		ch := whole.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 2 || ch.Message.Content != "" {
			t.Fatalf("non-streamed: finish %q, calls %+v, content %q", ch.FinishReason, ch.Message.ToolCalls, ch.Message.Content)
		}
		for _, tc := range ch.Message.ToolCalls {
			if !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" {
				t.Fatalf("call %+v", tc)
			}
			checkCall(t, tc.Function.Name, tc.Function.Arguments)
		}
		if ch.Message.ToolCalls[0].ID == ch.Message.ToolCalls[1].ID {
			t.Fatalf("two calls with one id %q", ch.Message.ToolCalls[0].ID)
		}

		s := c.Chat.Completions.NewStreaming(ctx, params(required), two)
		var acc openai.ChatCompletionAccumulator
		seen := map[int64]bool{}
		var finish string
		for s.Next() {
			chunk := s.Current()
			acc.AddChunk(chunk)
			if len(chunk.Choices) == 0 {
				continue
			}
			if f := chunk.Choices[0].FinishReason; f != "" {
				finish = f
			}
			for _, d := range chunk.Choices[0].Delta.ToolCalls {
				// a call's first delta carries its index, id, type and name
				if !seen[d.Index] {
					if d.Index != int64(len(seen)) || d.ID == "" || d.Type != "function" || d.Function.Name == "" {
						t.Fatalf("first delta of call %d: %+v", d.Index, d)
					}
					seen[d.Index] = true
				} else if d.ID != "" || d.Function.Name != "" {
					t.Fatalf("a later delta of call %d repeats its id or name: %+v", d.Index, d)
				}
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		got := acc.Choices[0].Message.ToolCalls
		if finish != "tool_calls" || len(got) != 2 {
			t.Fatalf("streamed: finish %q, calls %+v", finish, got)
		}
		// greedy: the stream's calls are the non-streamed ones (ids aside)
		for i, tc := range got {
			want := ch.Message.ToolCalls[i]
			if tc.Function.Name != want.Function.Name || tc.Function.Arguments != want.Function.Arguments {
				t.Fatalf("streamed call %d %s(%s), non-streamed %s(%s)", i, tc.Function.Name, tc.Function.Arguments, want.Function.Name, want.Function.Arguments)
			}
		}
	})
	t.Run("named tool, one call", func(t *testing.T) {
		p := params(openai.ChatCompletionToolChoiceOptionParamOfChatCompletionNamedToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"}))
		p.ParallelToolCalls = openai.Bool(false)
		r, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		calls := r.Choices[0].Message.ToolCalls
		if r.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_time" {
			t.Fatalf("finish %q, calls %+v", r.Choices[0].FinishReason, calls)
		}
		checkCall(t, calls[0].Function.Name, calls[0].Function.Arguments)
	})
	t.Run("none", func(t *testing.T) {
		p := params(openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")})
		p.MaxTokens = openai.Int(12)
		r, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Choices[0].Message.ToolCalls) != 0 || r.Choices[0].Message.Content == "" || r.Choices[0].FinishReason == "tool_calls" {
			t.Fatalf("tool_choice none: %+v", r.Choices[0])
		}
		// the tools are not shown: the prompt is the plain conversation's
		plain, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Temperature: openai.Float(0), MaxTokens: openai.Int(12),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(toolQuestion)}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Usage.PromptTokens != plain.Usage.PromptTokens || r.Choices[0].Message.Content != plain.Choices[0].Message.Content {
			t.Fatalf("none: %d tokens %q; no tools: %d tokens %q", r.Usage.PromptTokens, r.Choices[0].Message.Content,
				plain.Usage.PromptTokens, plain.Choices[0].Message.Content)
		}
	})
	t.Run("results back", func(t *testing.T) {
		first, err := c.Chat.Completions.New(ctx, params(required), two)
		if err != nil {
			t.Fatal(err)
		}
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(toolQuestion), first.Choices[0].Message.ToParam()}
		for _, tc := range first.Choices[0].Message.ToolCalls {
			msgs = append(msgs, openai.ToolMessage("sunny, 21 C", tc.ID))
		}
		r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, Tools: tools,
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, Temperature: openai.Float(0), MaxTokens: openai.Int(8)})
		if err != nil {
			t.Fatal(err)
		}
		// the second turn carries the first's calls as the model wrote
		// them: the sequence's tokens are reused up to the first answer
		if r.Choices[0].Message.Content == "" || r.Usage.PromptTokensDetails.CachedTokens == 0 {
			t.Fatalf("answer after the results: %q, cached %d", r.Choices[0].Message.Content, r.Usage.PromptTokensDetails.CachedTokens)
		}
	})
	t.Run("refused", func(t *testing.T) {
		base := func() map[string]any {
			return map[string]any{"model": testModel, "messages": []map[string]any{{"role": "user", "content": "Hi"}},
				"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": weatherSchema}}}}
		}
		for _, c := range []struct {
			set   map[string]any
			field string
		}{
			{map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}}, "tool_choice"},
			{map[string]any{"tool_choice": "sometimes"}, "tool_choice"},
			{map[string]any{"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "pattern": "^a"}}}}}}}, "tools[0].function.parameters"},
			{map[string]any{"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "bad name"}}}}, "tools[0].function.name"},
			{map[string]any{"tools": []map[string]any{{"type": "retrieval"}}}, "tools[0].type"},
			{map[string]any{"response_format": map[string]any{"type": "json_object"}}, "tools"},
			{map[string]any{"max_tool_calls": 0}, "max_tool_calls"},
		} {
			body := base()
			for k, v := range c.set {
				body[k] = v
			}
			var out struct {
				Error struct{ Message, Param string }
			}
			if code := do(t, "POST", e.url()+"/v1/chat/completions", body, &out); code != http.StatusBadRequest || !strings.Contains(out.Error.Message, c.field) {
				t.Errorf("%v: %d %+v, want 400 naming %s", c.set, code, out, c.field)
			}
		}
	})
}

func TestToolCallsOllama(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024})
	c := ollamaClient(t, e.url())
	ctx := context.Background()
	var tools api.Tools
	for _, f := range []struct {
		name, desc string
		schema     map[string]any
	}{{"get_weather", "Weather of a city", weatherSchema}, {"get_time", "Time in a zone", timeSchema}} {
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{"name": f.name, "description": f.desc, "parameters": f.schema}})
		var tl api.Tool
		if err := json.Unmarshal(b, &tl); err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tl)
	}
	msgs := []api.Message{{Role: "user", Content: toolQuestion}}
	chat := func(t *testing.T, stream bool, opts map[string]any) (content string, calls []api.ToolCall, last api.ChatResponse) {
		t.Helper()
		var b strings.Builder
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: msgs, Tools: tools, Stream: &stream, Options: opts},
			func(r api.ChatResponse) error {
				b.WriteString(r.Message.Content)
				calls = append(calls, r.Message.ToolCalls...)
				last = r
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), calls, last
	}
	t.Run("show lists tools", func(t *testing.T) {
		s, err := c.Show(ctx, &api.ShowRequest{Model: testModel})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(s.Capabilities, model.CapabilityTools) || slices.Contains(s.Capabilities, model.CapabilityEmbedding) {
			t.Fatalf("capabilities %v", s.Capabilities)
		}
	})
	t.Run("streamed two calls", func(t *testing.T) {
		opts := map[string]any{"temperature": 0, "num_predict": 256, "tool_choice": "required", "max_tool_calls": 2}
		text, whole, last := chat(t, false, opts)
		if len(whole) != 2 || text != "" || last.DoneReason != "stop" {
			t.Fatalf("non-streamed: calls %+v, content %q, done %q", whole, text, last.DoneReason)
		}
		text, got, last := chat(t, true, opts)
		if len(got) != 2 || text != "" || !last.Done {
			t.Fatalf("streamed: calls %+v, content %q", got, text)
		}
		for i, tc := range got {
			if tc.Function.Index != i || !strings.HasPrefix(tc.ID, "call_") {
				t.Fatalf("call %d: %+v", i, tc)
			}
			checkCall(t, tc.Function.Name, tc.Function.Arguments.String())
			if tc.Function.Name != whole[i].Function.Name || tc.Function.Arguments.String() != whole[i].Function.Arguments.String() {
				t.Fatalf("streamed call %d %+v, non-streamed %+v", i, tc.Function, whole[i].Function)
			}
		}
	})
	t.Run("auto streams prose as is", func(t *testing.T) {
		opts := map[string]any{"temperature": 0, "num_predict": 24}
		whole, wcalls, _ := chat(t, false, opts)
		streamed, scalls, _ := chat(t, true, opts)
		if whole != streamed || len(wcalls) != len(scalls) || whole == "" && len(wcalls) == 0 {
			t.Fatalf("auto: non-streamed %q %d calls, streamed %q %d calls", whole, len(wcalls), streamed, len(scalls))
		}
	})
	t.Run("unsupported schema keyword refused", func(t *testing.T) {
		// api.Tools drops keywords its property struct lacks: the schema is
		// read as sent, so /api/chat refuses what it cannot enforce, as
		// /v1/chat/completions does (it once generated unconstrained prose)
		body := map[string]any{"model": testModel, "stream": false, "messages": []map[string]any{{"role": "user", "content": "Hi"}},
			"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "pattern": "^a"}}}}}}}
		var out struct{ Error string }
		if code := do(t, "POST", e.url()+"/api/chat", body, &out); code != http.StatusBadRequest ||
			!strings.Contains(out.Error, "tools[0].function.parameters") || !strings.Contains(out.Error, "pattern") {
			t.Fatalf("/api/chat with a pattern keyword: %d %q, want 400 naming tools[0].function.parameters", code, out.Error)
		}
	})
	t.Run("results back in the prompt", func(t *testing.T) {
		args := api.NewToolCallFunctionArguments()
		args.Set("city", "Paris")
		hist := []api.Message{{Role: "user", Content: toolQuestion},
			{Role: "assistant", ToolCalls: []api.ToolCall{{ID: "call_1", Function: api.ToolCallFunction{Name: "get_weather", Arguments: args}}}},
			{Role: "tool", ToolName: "get_weather", Content: "sunny, 21 C"}}
		f := false
		var r api.ChatResponse
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: hist, Tools: tools, Stream: &f, DebugRenderOnly: true},
			func(x api.ChatResponse) error { r = x; return nil })
		if err != nil || r.DebugInfo == nil {
			t.Fatalf("render: %v %+v", err, r)
		}
		p := r.DebugInfo.RenderedTemplate
		for _, want := range []string{`[{"name":"get_weather","arguments":{"city":"Paris"}}]`, "sunny, 21 C", `{"name":"get_time","description":"Time in a zone"`} {
			if !strings.Contains(p, want) {
				t.Fatalf("rendered prompt lacks %s:\n%s", want, p)
			}
		}
	})
}
