// Package pipeline is the one request pipeline of memosrt and the models
// it serves: every chat turn and completion, whatever surface it came
// from (Ollama, OpenAI, MCP, the CLI, an app), goes through Pipeline.Do's
// stages, in order:
//
//   - validate: sampling options, roles, record mode, tools, the cube;
//   - assemble: the model (loaded on first use, package modelsched), the
//     prompt from the tiers (package layout), fitted to the context;
//   - admit: adapters (package lora), a request slot and KV cells
//     (package runtime/slots);
//   - KV source: the longest cached prefix of the prompt, from the slot,
//     the cube's resident pack or a stored pack (package kvcache);
//   - decode: runtime.Engine.Generate, streamed;
//   - persist: the conversation's KV state, stored as a conversation pack
//     in the background;
//   - record: the memories used count towards their heat (package
//     scheduler), and the Deps.OnChat hook records the turn.
//
// The pipeline also keeps the primary model's resident level (hot packs
// held in KV cells, shared into requests), lends the tier scheduler the
// primary's engine for its jobs, and answers through an upstream server
// (Options.Upstream) with the same prompt layout when no model is loaded.
//
// Main types: Pipeline (New, Chat, Generate),
// Options (what package memosrt's Open takes), Request and Response (package
// pipeline/request).
// Package memosrt is the facade over it: it opens the stores, admits
// calls and re-exports the types; a Pipeline is safe for concurrent use.
// Lock order: a model's applyMu, then kvMu, then genMu.
package pipeline
