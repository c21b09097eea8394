package server

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ollama/ollama/api"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/wire"
)

// Tool calling on both APIs: the wire shapes become memosrt.Tool and
// memosrt.ToolCall; package toolcall validates the tools, renders them
// for the model, builds the grammar the calls are generated under and
// parses them, and the root package's pipeline runs it.

// ollamaTools converts /api/chat "tools" (only type "function"; an empty
// type is taken as it). The parameters are read as the client sent them,
// not through api.Tools, whose fixed property struct drops the JSON schema
// keywords it does not know (pattern, minimum, ...): the grammar refuses
// those with a 400 here as on /v1/chat/completions, instead of generating
// unconstrained. Top-level null members of the parameters are dropped
// (dropNulls), as Ollama's own struct decoding does.
func ollamaTools(raw []json.RawMessage) ([]memosrt.Tool, error) {
	return rawTools(raw, true)
}

// rawTools converts the "tools" of a chat request on either API: each an
// {"type": "function", "function": {...}}; with ollama an empty type is
// taken as "function" and the parameters go through dropNulls.
func rawTools(raw []json.RawMessage, ollama bool) ([]memosrt.Tool, error) {
	out := make([]memosrt.Tool, 0, len(raw))
	for i, r := range raw {
		var t oaiTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, wire.BadField(fmt.Sprintf("tools[%d]", i), "want {\"type\": \"function\", \"function\": {...}}: %v", err)
		}
		if t.Type != "function" && (!ollama || t.Type != "") {
			return nil, wire.BadField(fmt.Sprintf("tools[%d].type", i), "want function, got %q", t.Type)
		}
		p := t.Function.Parameters
		if ollama && len(p) > 0 {
			p = dropNulls(p)
		}
		out = append(out, memosrt.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: p})
	}
	return out, nil
}

// dropNulls removes the top-level null and empty members api's parameter
// struct writes for fields a client never sent ("properties": null,
// "type": ""); nil if nothing is left.
func dropNulls(b []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	for k, v := range m {
		if s := string(v); s == "null" || s == `""` {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	if _, ok := m["type"]; !ok {
		m["type"] = json.RawMessage(`"object"`)
	}
	out, _ := json.Marshal(m)
	return out
}

// ollamaCalls converts calls to api.ToolCall (index from 0, as Ollama
// numbers them).
func ollamaCalls(calls []memosrt.ToolCall) []api.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]api.ToolCall, len(calls))
	for i, c := range calls {
		args := api.NewToolCallFunctionArguments()
		_ = args.UnmarshalJSON(c.Arguments) // an object: the grammar made it
		out[i] = api.ToolCall{ID: c.ID, Function: api.ToolCallFunction{Index: i, Name: c.Name, Arguments: args}}
	}
	return out
}

// ollamaMessageText is a message's content with its tool calls appended
// as the model writes them (memosrt.CallsText).
func ollamaMessageText(m api.Message) string {
	if len(m.ToolCalls) == 0 {
		return m.Content
	}
	calls := make([]memosrt.ToolCall, len(m.ToolCalls))
	for i, c := range m.ToolCalls {
		args, _ := json.Marshal(c.Function.Arguments)
		calls[i] = memosrt.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args}
	}
	return memosrt.CallsText(m.Content, calls)
}

// OpenAI shapes.

type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"` // accepted; the schema is always enforced
	} `json:"function"`
}

type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// openAITools fills g's tools from a chat request's tools, tool_choice
// ("auto", "none", "required" or {"type": "function", "function":
// {"name": ...}}) and parallel_tool_calls.
func openAITools(g *memosrt.Request, raw []json.RawMessage, choice json.RawMessage, parallel *bool) error {
	tools, err := rawTools(raw, false)
	if err != nil {
		return err
	}
	g.Tools = append(g.Tools, tools...)
	if c := strings.TrimSpace(string(choice)); c != "" && c != "null" {
		var mode string
		if json.Unmarshal(choice, &mode) == nil {
			g.ToolChoice = mode
		} else {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(choice, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
				return wire.BadField("tool_choice", `want "auto", "none", "required" or {"type": "function", "function": {"name": NAME}}`)
			}
			g.ToolChoice, g.ToolName = memosrt.ToolRequired, named.Function.Name
		}
	}
	if parallel != nil && !*parallel {
		g.MaxToolCalls = 1
	}
	return nil
}

// openAIMessageText is an assistant message's text with its tool_calls
// appended as the model writes them.
func openAIMessageText(field, content string, tcs []oaiToolCall) (string, error) {
	if len(tcs) == 0 {
		return content, nil
	}
	calls := make([]memosrt.ToolCall, len(tcs))
	for i, c := range tcs {
		var args json.RawMessage
		if a := strings.TrimSpace(c.Function.Arguments); a != "" {
			if !json.Valid([]byte(a)) {
				return "", wire.BadField(fmt.Sprintf("%s[%d].function.arguments", field, i), "not JSON")
			}
			args = json.RawMessage(a)
		}
		calls[i] = memosrt.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args}
	}
	return memosrt.CallsText(content, calls), nil
}

// openAICalls are calls as a message's tool_calls (index set for
// streamed deltas only).
func openAICalls(calls []memosrt.ToolCall) []oaiToolCall {
	out := make([]oaiToolCall, len(calls))
	for i, c := range calls {
		out[i] = oaiToolCall{ID: c.ID, Type: "function"}
		out[i].Function.Name, out[i].Function.Arguments = c.Name, string(c.Arguments)
	}
	return out
}

// openAIFinish is finish_reason for res: tool_calls when it made calls.
func openAIFinish(res *memosrt.Response) string {
	if len(res.ToolCalls) > 0 {
		return "tool_calls"
	}
	return finishReason(res.DoneReason)
}

// openAIMessage is the assistant message of a chat completion: content
// null and tool_calls when the model made calls.
func openAIMessage(res *memosrt.Response) map[string]any {
	if len(res.ToolCalls) == 0 {
		return map[string]any{"role": "assistant", "content": res.Text}
	}
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": openAICalls(res.ToolCalls)}
}
