package kvcache

import (
	"bytes"
	"encoding/json"
	"errors"
	goruntime "runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// frame assembles a blob around a header and payload with valid framing
// and checksum, so that only the contents are hostile.
func frame(t testing.TB, h Header, payload []byte) []byte {
	t.Helper()
	hj, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return frameBlob(hj, payload, FormatVersionExact)
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var a, b goruntime.MemStats
	goruntime.ReadMemStats(&a)
	fn()
	goruntime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestHostileSizesDoNotAllocate: a small blob whose header or zstd frame
// claims gigabytes is refused as corrupt without allocating them.
func TestHostileSizesDoNotAllocate(t *testing.T) {
	state := bytes.Repeat([]byte{1, 2, 3, 4}, 1000)
	good, err := Encode(Header{Tokens: []int32{1, 2}}, state)
	if err != nil {
		t.Fatal(err)
	}
	h, payload, err := DecodeHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	// a frame that honestly declares 7 GiB of content: what a header lying
	// about RawBytes would be paired with
	var big bytes.Buffer
	w, _ := zstd.NewWriter(&big, zstd.WithEncoderLevel(zstd.SpeedFastest))
	w.ResetContentSize(&big, 7<<30)
	w.Write(bytes.Repeat([]byte{0}, 1<<20))
	w.Close() // errors out (short content); the frame header is written
	cases := []struct {
		name    string
		rawSize int64
		payload []byte
	}{
		{"raw-bytes-claims-7GiB", 7 << 30, payload},
		{"raw-bytes-beyond-zstd-ratio", int64(len(payload))*32768 + 1, payload},
		{"frame-content-size-7GiB", int64(len(state)), big.Bytes()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hh := h
			hh.RawBytes = tc.rawSize
			blob := frame(t, hh, tc.payload)
			var derr error
			n := allocated(func() { _, _, derr = Decode(blob) })
			if !errors.Is(derr, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", derr)
			}
			if n > 64<<20 {
				t.Fatalf("refusing a %d-byte blob allocated %d bytes", len(blob), n)
			}
			n = allocated(func() { _, _, derr = decodeParts(split(blob, 1000), len(blob), nil) })
			if !errors.Is(derr, ErrCorrupt) || n > 64<<20 {
				t.Fatalf("in parts: err = %v, %d bytes allocated", derr, n)
			}
		})
	}
	// the honest blob still decodes, also for an empty state
	if _, got, err := Decode(good); err != nil || !bytes.Equal(got, state) {
		t.Fatalf("good blob: %v", err)
	}
	empty, _ := Encode(Header{}, nil)
	if _, got, err := Decode(empty); err != nil || len(got) != 0 {
		t.Fatalf("empty state: %v, %d bytes", err, len(got))
	}
}
