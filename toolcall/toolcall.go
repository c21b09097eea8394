package toolcall

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/memosrt/memosrt/errkind"
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

// Call is one call the model made: Arguments is a JSON object valid
// under the tool's Parameters (the grammar enforced it while generating).
type Call struct {
	ID        string          // "call_" and 24 hex digits, unique per call
	Name      string          // a Tool's Name
	Arguments json.RawMessage // compact JSON object
}

// Tool choices (Spec.Choice), as OpenAI's tool_choice names them.
const (
	Auto     = "auto"     // the model answers in prose or calls tools ("" too)
	None     = "none"     // no call: the tools are not shown to the model
	Required = "required" // at least one call (Spec.Name: that tool only)
)

// DefaultMaxCalls bounds the calls of one answer when Spec.MaxCalls is 0.
const DefaultMaxCalls = 8

// Spec is what one request asks of tool calling.
type Spec struct {
	Tools  []Tool
	Choice string // Auto ("" too), None or Required
	// Name, with Required, is the one tool the model must call.
	Name string
	// MaxCalls caps the calls of one answer; 0 means DefaultMaxCalls.
	MaxCalls int
	// Format is whether the request constrains its answer with a grammar
	// of its own (a response format), which tools cannot be combined with.
	Format bool
}

// On reports whether s lets the model call tools: it has tools and its
// choice is not None.
func (s Spec) On() bool {
	return len(s.Tools) > 0 && s.Choice != None
}

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Grammar validates s and returns the grammar (runtime/grammar's GBNF)
// its calls are generated under: "" when tool calling is not On; with
// Auto prose or a JSON array of 1 to MaxCalls calls (grammar.OrText);
// with Required only the array, of Name's calls if set. Errors are
// *errkind.FieldError naming tools[i].function.name,
// tools[i].function.parameters, tools, tool_choice or max_tool_calls (the
// fields of an OpenAI chat request).
func (s Spec) Grammar() (string, error) {
	switch s.Choice {
	case "", Auto, None, Required:
	default:
		return "", badField("tool_choice", "want auto, none or required, got %q", s.Choice)
	}
	if s.Name != "" && s.Choice != Required {
		return "", badField("tool_choice", "a named tool is a required choice, got %q", s.Choice)
	}
	if len(s.Tools) == 0 {
		if s.Choice == Required {
			return "", badField("tool_choice", "required without tools")
		}
		return "", nil
	}
	if s.MaxCalls < 0 {
		return "", badField("max_tool_calls", "%d < 0", s.MaxCalls)
	}
	seen := map[string]bool{}
	var branches []json.RawMessage
	for i, t := range s.Tools {
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
		if s.Name != "" && t.Name != s.Name {
			continue
		}
		name, _ := json.Marshal(t.Name)
		branches = append(branches, json.RawMessage(`{"type":"object","properties":{"name":{"const":`+string(name)+
			`},"arguments":`+string(params)+`},"required":["name","arguments"],"additionalProperties":false}`))
	}
	if s.Name != "" && len(branches) == 0 {
		return "", badField("tool_choice", "tool %q is not among the tools", s.Name)
	}
	if !s.On() {
		return "", nil
	}
	if s.Format {
		return "", badField("tools", "tools and a response format cannot be combined")
	}
	max := s.MaxCalls
	if max == 0 {
		max = DefaultMaxCalls
	}
	items, _ := json.Marshal(map[string]any{"anyOf": branches})
	schema := fmt.Sprintf(`{"type":"array","minItems":1,"maxItems":%d,"items":%s}`, max, items)
	g, err := grammar.FromSchema([]byte(schema))
	if err != nil {
		return "", badField("tools", "%v", err)
	}
	if s.Choice == Required {
		return g, nil
	}
	g, err = grammar.OrText(g, '[')
	if err != nil {
		return "", badField("tools", "%v", err)
	}
	return g, nil
}

func badField(field, format string, args ...any) error {
	return &errkind.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Turn is the content of the system turn that shows tools to the model:
// the chat templates llama.cpp applies (llama_chat_apply_template) have
// no tool section, so every model sees the tools this way, in the format
// its calls are generated in. Each tool is one JSON line of name,
// description and compact parameters.
func Turn(tools []Tool) string {
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
	return strings.TrimSuffix(b.String(), "\n")
}

// compactJSON is b without insignificant spaces; nil for empty or
// invalid JSON.
func compactJSON(b json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	if len(bytes.TrimSpace(b)) == 0 || json.Compact(&out, b) != nil {
		return nil
	}
	return out.Bytes()
}

// Text is the text of an assistant turn that made calls, as the model
// writes it under the tool grammar: content (if any), a newline, then a
// JSON array of {"name", "arguments"} (arguments compacted; {} for none
// or invalid JSON). Without calls it is content. Wire layers put a
// previous turn's tool calls back into the conversation with it.
func Text(content string, calls []Call) string {
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

// Parse reads the calls of an answer generated under the tool grammar,
// each with a fresh ID (NewID); ok is false for prose, or for calls cut
// short (done_reason length), which stay text.
func Parse(text string) (calls []Call, ok bool) {
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
	calls = make([]Call, len(raw))
	for i, c := range raw {
		calls[i] = Call{ID: NewID(), Name: c.Name, Arguments: compactJSON(c.Arguments)}
	}
	return calls, true
}

// NewID returns a call id: "call_" and 24 random hex digits, the form
// OpenAI's ids take.
func NewID() string {
	var b [12]byte
	rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// Filter holds back the text of calls from a streamed answer: with
// Required all of it; with Auto all of it once the first character that
// is not a space is "[", else none (prose streams as it comes). Held is
// what was kept back, for the caller to send when the answer turns out
// not to be calls after all (Parse refuses it).
type Filter struct {
	next     func(string) error
	decided  bool
	calls    bool
	held     strings.Builder
	required bool
}

// NewFilter returns a Filter passing the text it lets through to next;
// required is whether the choice is Required (the answer is calls only).
func NewFilter(next func(string) error, required bool) *Filter {
	return &Filter{next: next, required: required}
}

// OnText takes the next piece of the streamed answer; it returns next's
// error for text it passes on, else nil.
func (f *Filter) OnText(t string) error {
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

// Held is the text held back and not passed on; "" once the answer
// streams as prose.
func (f *Filter) Held() string { return f.held.String() }
