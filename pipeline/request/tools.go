package request

import "github.com/memosrt/memosrt/toolcall"

// ToolSpec is what req asks of tool calling (package toolcall).
func ToolSpec(req *Request) toolcall.Spec {
	return toolcall.Spec{Tools: req.Tools, Choice: req.ToolChoice, Name: req.ToolName,
		MaxCalls: req.MaxToolCalls, Format: req.Sampling.Grammar != ""}
}

// ToolsOn reports whether req lets the model call tools.
func ToolsOn(req *Request) bool { return ToolSpec(req).On() }

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

// PromptField is the request field that holds req's prompt, for errors:
// "messages" (a chat) or "prompt" (a completion).
func PromptField(req *Request) string {
	if req.Messages != nil {
		return "messages"
	}
	return "prompt"
}

// Turns returns the request's turns: the chat messages, or for a
// completion an optional system turn and one user turn.
func Turns(req *Request) []Message {
	msgs := req.Messages
	if msgs == nil {
		if req.System != "" {
			msgs = append(msgs, Message{Role: "system", Content: req.System})
		}
		msgs = append(msgs, Message{Role: "user", Content: req.Prompt})
	}
	if ToolsOn(req) {
		msgs = withTools(msgs, req.Tools)
	}
	return msgs
}
