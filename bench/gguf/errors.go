package gguf

import "errors"

var (
	// ErrBadSpec is returned by Spec.Validate and Write when a Spec is not a
	// valid llama shape (non-positive sizes, n_embd not a multiple of n_head,
	// n_head not a multiple of n_head_kv, odd head size, unknown file type).
	ErrBadSpec = errors.New("gguf: invalid spec")
	// ErrTokenizer is returned by Write when the tokenizer source file cannot
	// be read, has no tokenizer.ggml.tokens, or its vocabulary size differs
	// from a non-zero Spec.NVocab.
	ErrTokenizer = errors.New("gguf: tokenizer source unusable")
)
