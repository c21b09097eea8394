// Package kvcache is the activation tier: persisted, compressed KV-cache
// states of token prefixes ("packs"), restored into a llama sequence so that
// generation skips their prefill.
//
// A pack is the serialized state of one sequence holding tokens [0, n)
// (llama_state_seq_get_data), wrapped in a versioned blob (see Encode): a
// header that records what makes the state valid (model fingerprint, KV
// layout, adapter set, tokens), a zstd payload of the byte-shuffled state
// (or the state itself, when Put measures that reading it raw costs less
// than reading the compressed payload and decoding it), and a checksum.
// Blobs persist in Badger (keys under "k/") and are cached decompressed in
// a RAM LRU bounded in bytes. Restore decodes a pack that is not in RAM
// straight from the Badger values into state buffers the cache keeps for
// the next such restore (at most two, together at most Options.RAMBytes)
// and does not cache it in RAM: a fresh buffer would cost its page faults
// on the request path, and the page cache holds the blob. A lossy pack (Header.Lossy, set by the caller
// where the calibration gate of package kvgate allows it) is a format
// version 2 blob whose payload is Quantize's stream; it is dequantized on
// decode, so the RAM LRU and every restore hold the f16 state. A composed
// pack (Header.Composed) is a format version 3 blob, which builds that read
// versions 1 and 2 only refuse instead of restoring it as exact. Exact
// packs stay format version 1.
//
// Lookup finds the longest cached prefix of a request's tokens through a hash
// chain over 64-token blocks seeded with the KV config key, so packs are only
// ever matched under the config they were computed with. A blob that fails
// its checksum, does not parse, or does not match the live context is refused
// before llama.cpp sees it, dropped from the store, and the target sequence is
// left empty: the caller falls back to plain prefill.
//
// A *Cache is safe for concurrent use.
package kvcache
