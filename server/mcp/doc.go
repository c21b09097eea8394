// Package mcp is memosrt's MCP tool set (Model Context Protocol, over
// github.com/modelcontextprotocol/go-sdk, imported here as sdk): written
// once and served both over streamable HTTP at /mcp of a server.Server
// (NewHandler, behind the server's bearer token) and over stdio by
// `memosrt mcp` (New). The tools are add_memory, add_messages,
// search_memory, list_memories, delete_memory, get_profile and chat; each
// is a translation to one memosrt.OS call after checking the right it
// needs on its cube (write: add_memory, add_messages, delete_memory; read:
// the others; a chat with a key that may only read records nothing), and
// every failure (bad argument, unknown cube or memory, a cube or right the
// access key lacks, no model) is a tool error (CallToolResult.IsError with
// the message), never a protocol error.
//
// Main types: Options (the default cube, the version, the logger), Caller
// (an HTTP call's access: its access key and its cubes, the first the
// default), and
// the tools' structured results (Memory, SearchOut, ListOut, DeleteOut,
// ProfileOut, ChatOut, MessagesOut).
//
// Concurrency: the server of New and the handler of NewHandler are safe
// for concurrent use; tool calls run concurrently on the SDK's goroutines
// and go through the memosrt.OS's own locking. A tool that panics fails
// with a tool error and the stack logged.
package mcp
