// Package memosrt is the memory OS: a local LLM runtime whose memory lives
// in tiers, the way an operating system pages data between RAM and disk.
// It is what `memosrt serve` and the CLI stand on, and what a Go program
// embeds:
//
//	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: "data", Model: "model.gguf"})
//	...
//	defer mos.Close(ctx)
//	mos.AddMemory(ctx, "lily", textmem.Memory{Text: "Lily has a dog named Max."})
//	res, err := mos.Chat(ctx, memosrt.Request{Cube: "lily",
//		Messages: []memosrt.Message{{Role: "user", Content: "What is my dog called?"}}})
//
// The tiers of a cube (one user's, agent's or project's namespace):
//
//   - text: plaintext memories (package textmem), found by hybrid
//     retrieval and put into prompts;
//   - activation: the cube's pack, its hot memories rendered as the
//     leading system turn, kept as KV-cache state (package kvcache) at one
//     of three levels: on disk (compressed, in Badger), in RAM
//     (decompressed), or resident (cells held in the llama KV cache and
//     shared into requests with llama_memory_seq_cp);
//   - parametric: LoRA adapters (package lora), attached per request.
//
// The scheduler (package scheduler) counts every use of a memory towards
// its heat (MemoryOS's formula): a memory retrieved into a chat prompt is a
// visit, a turn that carried it an interaction. Ticks run in the
// background on a period and after bursts of usage; they promote hot
// memories into the cube's pack (computed incrementally, at background
// priority, never ahead of foreground requests), demote cold ones, and put
// the hottest packs at the resident level, within the KV byte budget, the
// resident cell budget and the RAM budget.
//
// Every request goes through one pipeline (package pipeline; Chat,
// Generate): validate, assemble the prompt from the tiers, admit it (a
// slot and KV cells), choose and restore the KV source (the slot's own
// prefix, the cube's resident pack, a stored pack), prefill the rest and
// decode (continuous batching in package runtime), persist the
// conversation's state as a pack in the background, and record usage and
// the turn.
//
// Layers, imports pointing down (internal/lint's TestLayers holds the
// whole table):
//
//	cmd/memosrt → server (wire translation) → memosrt (this facade) → cubeio
//	  → pipeline → config → scheduler, conversation, modelsched
//	  → textmem, kvcache, lora, layout → runtime (llama.cpp), datadir
//
// An OS is safe for concurrent use. Methods that may block take a context
// first; after Close every method returns ErrClosed.
package memosrt
