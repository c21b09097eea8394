package kvcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memosrt/memosrt/runtime"
)

// fuzzSeeds returns well-formed blobs and near misses for the decoders.
func fuzzSeeds(t testing.TB) [][]byte {
	h := Header{KV: runtime.KVConfig{ModelFingerprint: "m", NLayer: 2, KRowBytes: 8, VRowBytes: 8, TypeK: "f16", TypeV: "f16", NStream: 1, NCtx: 64},
		Tokens: []int32{1, 2, 3}, Label: "cube", Created: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	var seeds [][]byte
	for _, state := range [][]byte{nil, {1}, bytes.Repeat([]byte{0, 60}, 100)} {
		b, err := Encode(h, state)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b, b[:len(b)-1], b[:20])
	}
	seeds = append(seeds, segBlob(t, h, bytes.Repeat([]byte{7, 60, 9, 61}, 100), 96)) // small segments
	return append(seeds, nil, []byte(magic), []byte("MKVB\x01\x00\xff\xff\xff\xff"))
}

// FuzzDecode feeds arbitrary bytes to DecodeHeader and Decode: they return
// an error wrapping ErrCorrupt or ErrVersion, or a header and state that
// encode back to a blob decoding to the same values; never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, blob []byte) {
		checkParts(t, blob, 1, 7, len(blob)/2+1) // what Cache.State reads from Badger chunks
		h, payload, err := DecodeHeader(blob)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("DecodeHeader: unexpected error class: %v", err)
			}
			if _, _, err2 := Decode(blob); err2 == nil {
				t.Fatal("Decode accepts what DecodeHeader refuses")
			}
			return
		}
		if h.NTokens != len(h.Tokens) || TokensHash(h.Tokens) != h.TokensHash || int64(len(payload)) > int64(len(blob)) {
			t.Fatalf("accepted inconsistent header %+v", h)
		}
		h2, state, err := Decode(blob)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("Decode: unexpected error class: %v", err)
			}
			return
		}
		if int64(len(state)) != stateLen(h2) {
			t.Fatalf("state of %d bytes, header says %d", len(state), stateLen(h2))
		}
		re, err := Encode(h2, state)
		if err != nil {
			t.Fatal(err)
		}
		h3, state3, err := Decode(re)
		if err != nil || !bytes.Equal(state3, state) || h3.TokensHash != h2.TokensHash || h3.RawXXHash != h2.RawXXHash {
			t.Fatalf("re-encoded blob differs: %v", err)
		}
	})
}

// stateLen is the length of the state a blob with header h decodes to.
func stateLen(h Header) int64 {
	if h.Lossy != nil {
		return h.StateBytes
	}
	return h.RawBytes
}

// FuzzDecodeFramed fuzzes the header JSON and the zstd payload inside valid
// framing and checksum (which FuzzDecode's mutations rarely get past): the
// header checks, the zstd decoder and the raw-state checks see hostile
// contents. A refusal wraps ErrCorrupt or ErrVersion; an accepted blob
// holds exactly RawBytes of state matching its checksum.
func FuzzDecodeFramed(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		h, payload, err := DecodeHeader(s)
		if err != nil {
			continue
		}
		hj, _ := json.Marshal(h)
		f.Add(hj, payload)
	}
	f.Add([]byte(`{"tokens":[],"tokens_hash":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","codec":"zstd+shuffle2","raw_bytes":0}`), []byte{})
	f.Fuzz(func(t *testing.T, hj, payload []byte) {
		v := uint16(FormatVersionExact)
		if bytes.Contains(hj, []byte(`"lossy"`)) {
			v = FormatVersionLossy // a lossy header in the lossy format
		}
		if bytes.Contains(hj, []byte(`"composed"`)) {
			v = FormatVersionComposed
		}
		blob := frameBlob(hj, payload, v)
		checkParts(t, blob, 1, 7, len(blob)/2+1)
		h, state, err := Decode(blob)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if int64(len(state)) != stateLen(h) || (h.Lossy == nil && xxhash.Sum64(state) != h.RawXXHash) || h.NTokens != len(h.Tokens) {
			t.Fatalf("accepted state of %d bytes for header %+v", len(state), h)
		}
	})
}
