// Package request holds what a generation asks and what it answers, the
// values every surface (Ollama, OpenAI, MCP, the CLI, an app) fills and
// reads: Request (a chat turn's Messages or a completion's Prompt, the
// cube and the cubes it reads, sampling, limits, tools, adapters, what is
// recorded, the OnText stream), Response (the text, the done reason, the
// cache source, the memories the prompt carried, tool calls) with its
// Usage (token counts and timings), the record modes, the cache sources,
// the tool-calling names (package toolcall's), response ids
// (NewResponseID, CheckID), the checks every route's options get
// (CheckOptions, MaxStops, MaxStopBytes) and its read cubes (ReadCubes,
// MaxCubes), the turns a request's prompt is
// made of (Turns: with the tools' turn when ToolsOn) and what an
// embedding request answers (Embedding, MaxEmbedInputs).
//
// Package pipeline runs requests through its stages; package memosrt
// re-exports these types under the same names. The types are plain
// values; the functions keep no state and are safe for concurrent use.
package request
