// Package lora is the parametric tier: LoRA adapters in GGUF (llama.cpp's
// adapter format), registered globally or per cube, validated against the
// base model before llama.cpp sees them, loaded on demand, lent to requests
// with a scale, and unloaded when cold under a memory budget.
//
// The pieces:
//
//   - Inspect reads an adapter file's metadata and tensor table (pure Go, no
//     llama.cpp); Base reads the base model's; Check compares the two and
//     refuses, with an error wrapping ErrBadAdapter, anything llama.cpp would
//     refuse or could abort the process on (wrong architecture, metadata of
//     the wrong GGUF type, tensors the base model lacks, wrong shapes or
//     ranks, unsupported tensor types, unpaired A/B halves).
//   - Registry stores adapter records in Badger under "l/" (see package
//     badger): name, scope (global or one cube), file path and its SHA-256,
//     rank, alpha, target tensors, whether the adapter is on by default.
//   - Manager loads adapters for one model (llama_adapter_lora_init through
//     llama.LoadAdapter) and lends them out as Refs inside a Lease; it frees
//     the least recently used unleased adapters when the loaded bytes would
//     pass Options.MaxBytes.
//   - Distill trains memories into a base model's last block (llama.Trainer,
//     with the base's own distribution as the label away from the memories)
//     and writes the weight change as an adapter: Extract cuts each delta
//     to rank r by SVD, WriteFactors writes the pairs. A base whose
//     weights to train are f16 or quantized trains on a temporary copy
//     with those weights dequantized to f32 (PlanTraining, TrainPlan);
//     the adapter applies to the original file.
//   - WriteRandom writes a random rank-r adapter for a base model (tests,
//     demos); WriteFile writes any adapter-shaped GGUF (including broken
//     ones, for tests of Check).
//
// A Ref's Name is "<name>@<first 12 hex digits of the file's SHA-256>", so a
// KV state keyed by the active adapter set (see Key, runtime.AdapterKey) is
// never reused after a file is replaced under the same name.
//
// Registry and Manager are safe for concurrent use.
package lora
