package ollamastore

import "errors"

var (
	// ErrInvalidName is returned by Resolve and ManifestPath when the name
	// is not an Ollama model name ([host/][namespace/]model[:tag]).
	ErrInvalidName = errors.New("ollamastore: not an ollama model name")
	// ErrNoManifest is returned by Resolve when the store has no manifest
	// for the name (not pulled, or another store); the error names the
	// manifest path searched.
	ErrNoManifest = errors.New("ollamastore: no manifest")
	// ErrBadManifest is returned by Resolve when the manifest is not
	// readable JSON of schemaVersion 2, or its model layer's digest is not
	// sha256:<64 hex>.
	ErrBadManifest = errors.New("ollamastore: bad manifest")
	// ErrNoModelLayer is returned by Resolve when the manifest lists no
	// layer of media type application/vnd.ollama.image.model.
	ErrNoModelLayer = errors.New("ollamastore: no model layer")
	// ErrBlobMissing is returned by Resolve when the model layer's blob is
	// not in the store (an interrupted pull or a pruned blob).
	ErrBlobMissing = errors.New("ollamastore: blob missing")
	// ErrBlobSize is returned by Resolve when the blob's size differs from
	// the size the manifest gives (a partial or replaced file).
	ErrBlobSize = errors.New("ollamastore: blob size differs from the manifest")
)
