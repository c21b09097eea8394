package kvcache

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cespare/xxhash/v2"
	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/runtime"
)

// split cuts b into parts of size n (the last shorter).
func split(b []byte, n int) [][]byte {
	var parts [][]byte
	for len(b) > n {
		parts, b = append(parts, b[:n]), b[n:]
	}
	return append(parts, b)
}

// checkParts decodes blob from parts of several sizes and compares with
// Decode: both accept it with the same state, or both refuse it with
// ErrCorrupt or ErrVersion.
func checkParts(t *testing.T, blob []byte, sizes ...int) {
	t.Helper()
	wh, want, werr := Decode(blob)
	if len(sizes) == 0 {
		sizes = []int{1, 3, 17, 64, 1000, len(blob)/2 + 1, len(blob) + 1}
	}
	for _, n := range sizes {
		h, got, err := decodeParts(split(blob, max(n, 1)), len(blob), nil)
		if (err == nil) != (werr == nil) {
			t.Fatalf("parts of %d: err %v, Decode %v", n, err, werr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("parts of %d: unexpected error class: %v", n, err)
			}
			continue
		}
		if !bytes.Equal(got, want) || h.RawXXHash != wh.RawXXHash || h.TokensHash != wh.TokensHash || h.Codec != wh.Codec {
			t.Fatalf("parts of %d: state or header differs from Decode", n)
		}
	}
}

// segBlob encodes state as CodecZstdShuffle2Seg in segments of seg bytes.
func segBlob(t testing.TB, h Header, state []byte, seg int) []byte {
	e, _ := codecs()
	h.Codec, h.RawBytes, h.RawXXHash = CodecZstdShuffle2Seg, int64(len(state)), xxhash.Sum64(state)
	h.NTokens, h.TokensHash = len(h.Tokens), TokensHash(h.Tokens)
	return frame(t, h, encodeSegments(e, state, seg))
}

// A blob read in parts of any size, every codec, equals Decode's result,
// and damage anywhere is refused as Decode refuses it.
func TestDecodeParts(t *testing.T) {
	h := Header{KV: runtime.KVConfig{ModelFingerprint: "ab", NLayer: 5, TypeK: "f16", TypeV: "f16", NStream: 1}, Tokens: []int32{1, 2, 3}}
	f16 := make([]byte, 5000)
	noise := make([]byte, 5000)
	x := uint32(7)
	for i := 0; i+1 < len(f16); i += 2 {
		x = x*1664525 + 1013904223
		f16[i], f16[i+1] = byte(x>>24)&0x3f, 0x30+byte(x>>8)%4
		noise[i], noise[i+1] = byte(x>>16), byte(x>>24)
	}
	blobs := map[string][]byte{
		"raw":        mustEncode(t, h, noise),
		"zstd":       mustEncode(t, h, f16),
		"empty":      mustEncode(t, h, nil),
		"seg-64":     segBlob(t, h, f16, 64),
		"seg-999":    segBlob(t, h, f16, 999),
		"seg-whole":  segBlob(t, h, f16, len(f16)),
		"seg-noise":  segBlob(t, h, noise, 1000),
		"odd-length": segBlob(t, h, f16[:4999], 128),
	}
	wantCodec := map[string]string{"raw": CodecRaw, "zstd": CodecZstdShuffle2, "seg-64": CodecZstdShuffle2Seg, "seg-noise": CodecZstdShuffle2Seg}
	for name, blob := range blobs {
		t.Run(name, func(t *testing.T) {
			gh, _, err := Decode(blob)
			if err != nil {
				t.Fatal(err)
			}
			if c := wantCodec[name]; c != "" && gh.Codec != c {
				t.Fatalf("codec %q, want %q", gh.Codec, c)
			}
			checkParts(t, blob)
			for i := 0; i < len(blob); i += 1 + len(blob)/41 {
				bad := bytes.Clone(blob)
				bad[i] ^= 0x10
				checkParts(t, bad, 7, 100, len(blob)/2+1)
				checkParts(t, blob[:i], 7, 100, len(blob)/2+1)
			}
			// the pack record's header must agree before the state is allocated
			other := gh
			other.RawBytes++
			if _, _, err := decodeParts(split(blob, 100), len(blob), &other); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("header unlike its record: %v", err)
			}
			if _, st, err := decodeParts(split(blob, 100), len(blob), &gh); err != nil || int64(len(st)) != gh.RawBytes {
				t.Fatalf("with its record: %v", err)
			}
			// parts longer or shorter than the blob
			if _, _, err := decodeParts([][]byte{blob, {0}}, len(blob), nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("overrun: %v", err)
			}
			if _, _, err := decodeParts([][]byte{blob}, len(blob)+1, nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("short: %v", err)
			}
		})
	}
}

// TestRawPackReadAgainstRecord: a pack stored raw and read back from
// Badger for its record (restoreState) is not summed a second time over
// its state (partsDecoder.rawByBlob), so its blob checksum alone must
// catch a damaged payload. The damage is written through Badger, so
// Badger's own CRC-32C of the value is valid and only the blob checksum
// can refuse it.
func TestRawPackReadAgainstRecord(t *testing.T) {
	state := make([]byte, 3<<20+5)
	for i := range state {
		state[i] = byte(i*7 + i>>9)
	}
	cases := []struct {
		name   string
		damage func(blob []byte) []byte
		want   error // nil: the state restores byte for byte
	}{
		{"intact", func(b []byte) []byte { return b }, nil},
		{"payload-bit", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }, ErrCorrupt},
		{"payload-last-byte", func(b []byte) []byte { b[len(b)-9] ^= 0x01; return b }, ErrCorrupt},
		{"checksum", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(testenv.DB(t, t.TempDir()), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.keepRaw = func([]byte, []byte, string) bool { return true }
			info, err := c.Put(context.Background(), Header{Tokens: []int32{1, 2, 3}}, state)
			if err != nil {
				t.Fatal(err)
			}
			blob, err := c.Blob(info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if h, _, err := DecodeHeader(blob); err != nil || h.Codec != CodecRaw {
				t.Fatalf("stored codec %q (%v), want %q", h.Codec, err, CodecRaw)
			}
			bad := tc.damage(bytes.Clone(blob))
			if err := c.db.Badger().Update(func(txn *bg.Txn) error { return txn.Set(chunkKey(info.ID, 0), bad) }); err != nil {
				t.Fatal(err)
			}
			c.DropRAM()
			_, got, fromRAM, release, err := c.restoreState(info.ID)
			defer release()
			if fromRAM {
				t.Fatal("read from RAM, want Badger")
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || !bytes.Equal(got, state) {
				t.Fatalf("err %v; state equal %v", err, bytes.Equal(got, state))
			}
		})
	}
}
