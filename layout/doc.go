// Package layout is the one prompt layout: it renders a cube's pack (the
// activation tier's members, served as restored KV state) as the leading
// system turn, retrieved memories of the text tier before the last user
// turn, and the conversation, so that the pack's tokens are a prefix of
// every prompt of the cube. The scheduler computes packs with it, the
// request pipeline assembles every prompt with it (the llama path renders
// the result with the model's chat template, the upstream backend sends
// it as messages).
//
// Main types: Layout (New; safe for concurrent use), Options, Input (a
// turn to assemble), Prompt (what was assembled: the pack's and the
// retrieved memories, the system text, the messages), Message.
package layout
