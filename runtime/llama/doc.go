// Package llama is memosrt's own binding against llama.h and ggml.h, and
// the only package in the module that imports "C". llama.cpp and ggml are
// compiled into the binary from the pinned github.com/ollama/ollama module
// (its llama/llama.cpp/src and ml/backend/ggml/ggml/src packages); the
// headers come through third_party/ (`make links`).
//
// Main types, each a thin owner of one C object:
//   - Model (LoadModel): a loaded GGUF model and its vocabulary; safe for
//     concurrent use after load, except Close.
//   - Ctx (NewContext): a llama_context with its KV cache, threadpool and
//     optional eval callback ("tap"); not safe for concurrent use: package
//     runtime's Engine owns one and serializes every call.
//   - Batch (NewBatch): a llama_batch of tokens over sequences.
//   - Sampler (NewSampler): a llama_sampler chain in llama.cpp's
//     common_sampler order, with an optional grammar; not safe for
//     concurrent use.
//   - Adapter (LoadAdapter): a LoRA adapter of a Model.
//   - Trainer (NewTrainer): ggml-opt training of chosen F32 weights (the
//     parametric tier's distillation); not safe for concurrent use.
//
// Files: Quantize writes a model in another type with llama.cpp's
// llama_model_quantize (memosrt quantize); ConvertGGUF copies a GGUF with
// chosen tensors converted through ggml's dequantizers and row
// quantizers (the training copy of an f16 or quantized base);
// ReadTensors lists a GGUF's tensor table. They are plain functions, safe
// for concurrent use on different files.
//
// Init loads the backends once per process; SetLogger routes llama.cpp's
// and ggml's log lines (warnings and errors) to slog. After Close every
// method of a type is a no-op, those returning an error return ErrClosed.
// Memory owned by C is freed by Close, never by a finalizer.
package llama
