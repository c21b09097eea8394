package embedding

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrClosed is returned by Embed after Close.
	ErrClosed = errkind.New(errkind.Unavailable, "embedding: closed")
	// ErrNoEmbedding is returned when a decode yields no pooled vector
	// (llama_get_embeddings_seq returned none).
	ErrNoEmbedding = errors.New("embedding: model produced no embedding")
	// ErrPooling is returned by NewEncoder and Open for a model whose
	// <arch>.pooling_type is not one of 0 (none: mean is used), 1 (mean),
	// 2 (CLS) or 3 (last token): 4 (rank) is a reranker's.
	ErrPooling = errkind.New(errkind.NotSupported, "embedding: pooling type not usable for embeddings")
	// ErrOptions is returned by NewEncoder and Open for invalid Options.
	ErrOptions = errkind.New(errkind.Invalid, "embedding: invalid options")
)
