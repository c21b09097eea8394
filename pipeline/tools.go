package pipeline

import "github.com/memosrt/memosrt/toolcall"

// toolSpec is what req asks of tool calling.
func toolSpec(req *Request) toolcall.Spec {
	return toolcall.Spec{Tools: req.Tools, Choice: req.ToolChoice, Name: req.ToolName,
		MaxCalls: req.MaxToolCalls, Format: req.Sampling.Grammar != ""}
}

// toolsOn reports whether req lets the model call tools.
func toolsOn(req *Request) bool { return toolSpec(req).On() }

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
