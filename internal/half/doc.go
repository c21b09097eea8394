// Package half converts between float32 and IEEE 754 binary16 (f16), the
// type of llama.cpp's default KV cache and of f16 GGUF tensors.
package half
