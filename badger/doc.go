// Package badger opens the one Badger v4 database that a memosrt data
// directory holds and fixes its key layout, so that every tier stores into
// the same transactional store.
//
// Key layout (byte prefixes, one per owner package):
//
//	t/<cube>/...   text tier (package textmem)
//	k/...          activation tier: KV pack blobs and their index (package kvcache)
//	s/...          scheduler state (package scheduler)
//	l/...          LoRA registry (package lora)
//	m/...          database metadata (format version)
//
// A *DB is safe for concurrent use, as Badger's own DB is.
package badger
