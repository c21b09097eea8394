// Package ollamastore finds the GGUF file of a model pulled with Ollama in
// Ollama's local model store, so that --model llama3.2:1b works without the
// user looking for the blob by hand.
//
// The store (OLLAMA_MODELS, default ~/.ollama/models; the caller passes the
// directory, this package reads no environment) is laid out as Ollama
// v0.17.4 writes it (manifest/paths.go PathForName and BlobsPath,
// manifest/manifest.go Manifest and Layer, server/images.go GetModel):
//
//	<store>/manifests/<host>/<namespace>/<model>/<tag>   JSON manifest
//	<store>/blobs/sha256-<64 hex>                        content by digest
//
// A manifest is {"schemaVersion": 2, "config": {...}, "layers": [{"mediaType",
// "digest": "sha256:<hex>", "size"}, ...]}; the weights are the layer of
// media type application/vnd.ollama.image.model, and its blob is the digest
// with ':' replaced by '-'. Names are parsed with Ollama's own
// types/model.ParseName, with its defaults: host registry.ollama.ai,
// namespace library, tag latest.
//
// The package only reads the store; it never writes, pulls or locks it, and
// its functions are safe for concurrent use.
package ollamastore
