package memosrt

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/memosrt/memosrt/runtime/grammar"
)

// Tool is a function the model may call (OpenAI's and Ollama's "tools").
type Tool struct {
	// Name is what the model calls: 1 to 64 of [A-Za-z0-9_-], as OpenAI
	// requires.
	Name string
	// Description tells the model what the tool does.
	Description string
	// Parameters is the JSON schema of the arguments object, within the
	// subset package runtime/grammar enforces; nil means any object.
	Parameters json.RawMessage
}

// ToolCall is one call the model made: Arguments is a JSON object valid
// under the tool's Parameters (the grammar enforced it while generating).
type ToolCall struct {
	ID        string          // "call_" and 24 hex digits, unique per call
	Name      string          // a Request.Tools name
	Arguments json.RawMessage // compact JSON object
}

// Tool choices (Request.ToolChoice), as OpenAI's tool_choice names them.
const (
	ToolAuto     = "auto"     // the model answers in prose or calls tools ("" too)
	ToolNone     = "none"     // no call: the tools are not shown to the model
	ToolRequired = "required" // at least one call (Request.ToolName: that tool only)
)

// DefaultMaxToolCalls bounds the calls of one answer when
// Request.MaxToolCalls is 0.
const DefaultMaxToolCalls = 8

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// toolsOn reports whether req lets the model call tools.
func (req *Request) toolsOn() bool {
	return len(req.Tools) > 0 && req.ToolChoice != ToolNone
}

// checkTools validates the tools of req and returns the grammar their
// calls are generated under: "" without tools; with ToolAuto prose or a
// JSON array of calls (runtime/grammar.OrText); with ToolRequired only the
// array, of req.ToolName's calls if set. Errors are *FieldError naming
// tools[i].function.* or tool_choice.
func checkTools(req *Request) (string, error) {
	switch req.ToolChoice {
	case "", ToolAuto, ToolNone, ToolRequired:
	default:
		return "", badField("tool_choice", "want auto, none or required, got %q", req.ToolChoice)
	}
	if req.ToolName != "" && req.ToolChoice != ToolRequired {
		return "", badField("tool_choice", "a named tool is a required choice, got %q", req.ToolChoice)
	}
	if len(req.Tools) == 0 {
		if req.ToolChoice == ToolRequired {
			return "", badField("tool_choice", "required without tools")
		}
		return "", nil
	}
	if req.MaxToolCalls < 0 {
		return "", badField("max_tool_calls", "%d < 0", req.MaxToolCalls)
	}
	seen := map[string]bool{}
	var branches []json.RawMessage
	for i, t := range req.Tools {
		field := fmt.Sprintf("tools[%d].function", i)
		if !toolName.MatchString(t.Name) {
			return "", badField(field+".name", "%q is not a tool name (1..64 of [A-Za-z0-9_-])", t.Name)
		}
		if seen[t.Name] {
			return "", badField(field+".name", "tool %q listed twice", t.Name)
		}
		seen[t.Name] = true
		params := bytes.TrimSpace(t.Parameters)
		if len(params) == 0 || string(params) == "null" {
			params = []byte(`{"type":"object"}`)
		}
		if _, err := grammar.FromSchema(params); err != nil {
			return "", badField(field+".parameters", "%v", err)
		}
		var p map[string]json.RawMessage
		if err := json.Unmarshal(params, &p); err != nil {
			return "", badField(field+".parameters", "want a JSON schema object")
		}
		if tp, ok := p["type"]; ok && string(tp) != `"object"` {
			return "", badField(field+".parameters", "the arguments must be an object, got type %s", tp)
		}
		if req.ToolName != "" && t.Name != req.ToolName {
			continue
		}
		name, _ := json.Marshal(t.Name)
		branches = append(branches, json.RawMessage(`{"type":"object","properties":{"name":{"const":`+string(name)+
			`},"arguments":`+string(params)+`},"required":["name","arguments"],"additionalProperties":false}`))
	}
	if req.ToolName != "" && len(branches) == 0 {
		return "", badField("tool_choice", "tool %q is not among the tools", req.ToolName)
	}
	if !req.toolsOn() {
		return "", nil
	}
	if req.Sampling.Grammar != "" {
		return "", badField("tools", "tools and a response format cannot be combined")
	}
	max := req.MaxToolCalls
	if max == 0 {
		max = DefaultMaxToolCalls
	}
	items, _ := json.Marshal(map[string]any{"anyOf": branches})
	schema := fmt.Sprintf(`{"type":"array","minItems":1,"maxItems":%d,"items":%s}`, max, items)
	g, err := grammar.FromSchema([]byte(schema))
	if err != nil {
		return "", badField("tools", "%v", err)
	}
	if req.ToolChoice == ToolRequired {
		return g, nil
	}
	g, err = grammar.OrText(g, '[')
	if err != nil {
		return "", badField("tools", "%v", err)
	}
	return g, nil
}

// toolTurn is the system turn that shows the tools to the model: the
// chat templates llama.cpp applies (llama_chat_apply_template) have no
// tool section, so every model sees the tools this way, in the format its
// calls are generated in.
func toolTurn(tools []Tool) Message {
	var b strings.Builder
	b.WriteString("You can call tools. To call them, answer with only a JSON array of calls, " +
		`[{"name": TOOL, "arguments": {...}}]` + ", and nothing else; their results come back as tool turns.\nTools:\n")
	for _, t := range tools {
		line, _ := json.Marshal(struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
		}{t.Name, t.Description, compactJSON(t.Parameters)})
		b.Write(line)
		b.WriteByte('\n')
	}
	return Message{Role: "system", Content: strings.TrimSuffix(b.String(), "\n")}
}

func compactJSON(b json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	if len(bytes.TrimSpace(b)) == 0 || json.Compact(&out, b) != nil {
		return nil
	}
	return out.Bytes()
}

// withTools returns msgs with the tool turn after the leading system
// turns.
func withTools(msgs []Message, tools []Tool) []Message {
	i := 0
	for i < len(msgs) && msgs[i].Role == "system" {
		i++
	}
	out := make([]Message, 0, len(msgs)+1)
	out = append(out, msgs[:i]...)
	out = append(out, toolTurn(tools))
	return append(out, msgs[i:]...)
}

// CallsText is the text of an assistant turn that made calls, as the
// model writes it under the tool grammar: content (if any) then a JSON
// array of {"name", "arguments"}. Wire layers put a previous turn's
// tool_calls back into the conversation with it.
func CallsText(content string, calls []ToolCall) string {
	if len(calls) == 0 {
		return content
	}
	type call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	cs := make([]call, len(calls))
	for i, c := range calls {
		args := compactJSON(c.Arguments)
		if args == nil {
			args = json.RawMessage(`{}`)
		}
		cs[i] = call{c.Name, args}
	}
	b, _ := json.Marshal(cs)
	if content != "" {
		return content + "\n" + string(b)
	}
	return string(b)
}

// parseCalls reads the calls of an answer generated under the tool
// grammar; ok is false for prose, or for calls cut short (done_reason
// length), which stay text.
func parseCalls(text string) ([]ToolCall, bool) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "[") {
		return nil, false
	}
	var raw []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(t), &raw); err != nil || len(raw) == 0 {
		return nil, false
	}
	calls := make([]ToolCall, len(raw))
	for i, c := range raw {
		calls[i] = ToolCall{ID: callID(), Name: c.Name, Arguments: compactJSON(c.Arguments)}
	}
	return calls, true
}

func callID() string {
	var b [12]byte
	rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// callFilter holds back the text of calls from a streamed answer: with
// ToolRequired all of it; with ToolAuto all of it once the first
// character that is not a space is "[", else none (prose streams as it
// comes). held is what was kept back.
type callFilter struct {
	next     func(string) error
	decided  bool
	calls    bool
	held     strings.Builder
	required bool
}

func (f *callFilter) onText(t string) error {
	if f.decided && !f.calls {
		return f.next(t)
	}
	f.held.WriteString(t)
	if f.decided {
		return nil
	}
	s := strings.TrimLeft(f.held.String(), " \t\n\r")
	switch {
	case f.required:
		f.decided, f.calls = true, true
	case s == "":
		return nil // only spaces so far
	case s[0] == '[':
		f.decided, f.calls = true, true
	default:
		f.decided = true
		h := f.held.String()
		f.held.Reset()
		return f.next(h)
	}
	return nil
}
