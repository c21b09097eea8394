// Package cubearchive is the cube archive format: one cube's memories,
// KV pack blobs and activation-tier membership in a single tar stream, as
// written by memosrt's ExportCube and read by its ImportCube. The package
// knows the layout only; storing what it reads is the caller's.
//
// The tar holds, in this order:
//
//	manifest.json    Manifest: format "memosrt-cube", Version, the cube's
//	                 record, the memory count, the packs, tier membership
//	memories.jsonl   one textmem.Memory as JSON per line, in the order written
//	packs/<id>.mkvb  one entry per KV pack, its blob as kvcache encodes it
//	                 (self-describing and checksummed; not decoded here)
//
// Written with a key, the whole tar is sealed (package internal/sealed:
// AES-256-GCM records under a key derived from it with HKDF info
// "memosrt cube archive v1"). A Reader opens sealed and plain archives
// alike: a plain one also when given a key.
//
// Limits a Reader enforces: the manifest at most MaxManifestBytes, a memory
// line at most MaxMemoryBytes, a pack blob at most MaxPackBytes.
//
// Every way an archive can be bad (entries out of order or missing, an
// entry over its limit, a format or version this build does not read, a
// memory count unlike the manifest's, a truncated, altered or wrongly keyed
// stream, JSON that does not parse) is an error wrapping ErrBad; a sealed
// archive read without a key is ErrNeedKey, which wraps ErrBad too. Errors
// of the underlying reader are wrapped as well, so errors.Is finds them.
//
// A Reader is for one goroutine.
package cubearchive
