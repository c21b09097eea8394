// Package toolcall is tool calling apart from any wire format: the model
// is shown the tools in a system turn (Turn), generates its calls as a
// JSON array under a grammar that admits only calls valid under the
// tools' parameter schemas (Spec.Grammar), and the answer is read back
// into calls (Parse). The server's Ollama and OpenAI handlers convert
// their JSON shapes to and from Tool and Call; package memosrt's request
// pipeline calls this package and re-exports its types (memosrt.Tool,
// memosrt.ToolCall).
//
// Main types: Tool, a function the model may call; Call, one call it
// made; Spec, what one request asks of tool calling (its tools, the
// choice among Auto, None and Required, the call cap); Filter, which
// holds back the streamed text of an answer that is calls.
//
// Concurrency: the functions and Spec's methods keep no state and may be
// called from any goroutine. A Filter belongs to one streamed answer and
// is not safe for concurrent use.
//
// The package imports only errkind and runtime/grammar.
package toolcall
