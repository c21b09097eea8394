package pipeline

import "github.com/memosrt/memosrt/toolcall"

// Tool is a function the model may call (OpenAI's and Ollama's "tools"):
// a Name of 1 to 64 of [A-Za-z0-9_-], a Description for the model, and
// the JSON schema of its arguments object as Parameters (nil: any
// object). It is package toolcall's Tool.
type Tool = toolcall.Tool

// ToolCall is one call the model made: an ID ("call_" and 24 hex digits),
// a Request.Tools Name, and Arguments, a compact JSON object valid under
// the tool's Parameters. It is package toolcall's Call.
type ToolCall = toolcall.Call

// Tool choices (Request.ToolChoice), as OpenAI's tool_choice names them.
const (
	ToolAuto     = toolcall.Auto     // the model answers in prose or calls tools ("" too)
	ToolNone     = toolcall.None     // no call: the tools are not shown to the model
	ToolRequired = toolcall.Required // at least one call (Request.ToolName: that tool only)
)

// DefaultMaxToolCalls bounds the calls of one answer when
// Request.MaxToolCalls is 0.
const DefaultMaxToolCalls = toolcall.DefaultMaxCalls

// CallsText is the text of an assistant turn that made calls, as the
// model writes it under the tool grammar: content (if any) then a JSON
// array of {"name", "arguments"}. Wire layers put a previous turn's
// tool_calls back into the conversation with it.
func CallsText(content string, calls []ToolCall) string { return toolcall.Text(content, calls) }

// toolSpec is what req asks of tool calling.
func (req *Request) toolSpec() toolcall.Spec {
	return toolcall.Spec{Tools: req.Tools, Choice: req.ToolChoice, Name: req.ToolName,
		MaxCalls: req.MaxToolCalls, Format: req.Sampling.Grammar != ""}
}

// toolsOn reports whether req lets the model call tools.
func (req *Request) toolsOn() bool { return req.toolSpec().On() }

// withTools returns msgs with the turn showing the tools
// (toolcall.Turn) after the leading system turns.
func withTools(msgs []Message, tools []Tool) []Message {
	i := 0
	for i < len(msgs) && msgs[i].Role == "system" {
		i++
	}
	out := make([]Message, 0, len(msgs)+1)
	out = append(out, msgs[:i]...)
	out = append(out, Message{Role: "system", Content: toolcall.Turn(tools)})
	return append(out, msgs[i:]...)
}
