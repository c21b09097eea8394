package kvcache

import (
	"bytes"
	"context"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/runtime"
)

// TestRawCheaper: the restore-cost comparison behind Put's codec choice.
func TestRawCheaper(t *testing.T) {
	for _, tc := range []struct {
		c    codecCosts
		s, b int
		raw  bool
	}{
		// page-cache reads: reading 100 bytes and copying them (20 ns)
		// beats reading 66 and decoding 100 (106.6 ns)
		{codecCosts{ReadNs: 0.1, CopyNs: 0.1, DecodeNs: 1}, 100, 66, true},
		// a slow disk: 1010 ns raw against 500 + 100 compressed
		{codecCosts{ReadNs: 10, CopyNs: 0.1, DecodeNs: 1}, 100, 50, false},
		// equal costs: raw (no decoding for nothing)
		{codecCosts{ReadNs: 1, CopyNs: 1, DecodeNs: 1.5}, 100, 50, true},
	} {
		if got := tc.c.rawCheaper(tc.s, tc.b); got != tc.raw {
			t.Errorf("%+v, %d/%d bytes: raw %v, want %v", tc.c, tc.s, tc.b, got, tc.raw)
		}
	}
}

// TestReadRateMean: the read cost is a mean weighted 3/4 on the past.
func TestReadRateMean(t *testing.T) {
	var r readRate
	if r.get() != 0 {
		t.Fatal("a fresh rate is not 0")
	}
	r.add(4)
	r.add(8)
	r.add(-1) // ignored
	if got := r.get(); got != 5 {
		t.Fatalf("mean %v, want 5", got)
	}
	if m := median([]float64{9, 1, 1000, 2, 3}); m != 3 {
		t.Fatalf("median %v, want 3", m)
	}
	if m := median([]float64{4, 1, 2, 1000}); m != 3 {
		t.Fatalf("median %v, want 3", m)
	}
}

// TestPutChoosesCodecByCost: a compressible state of several segments is
// stored raw on page-cache reads (decoding costs far more than the read
// it saves) and compressed when reads are measured slow; both restore
// byte-exact from Badger, and a read from Badger is measured.
func TestPutChoosesCodecByCost(t *testing.T) {
	state := make([]byte, 2*segBytes+12345)
	x := uint32(7)
	for i := 0; i+1 < len(state); i += 2 {
		x = x*1664525 + 1013904223
		state[i] = byte(x >> 24)          // random low bytes
		state[i+1] = 0x30 + byte(x>>8)%12 // f16-like high bytes: compressible
	}
	kv := runtime.KVConfig{ModelFingerprint: "ab", NLayer: 5, TypeK: "f16", TypeV: "f16", NStream: 1}
	for _, tc := range []struct {
		name   string
		readNs float64
		codec  string
	}{
		{"page cache", 0, CodecRaw},
		{"slow disk", 1e4, CodecZstdShuffle2Seg}, // 10 µs a byte
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(testenv.DB(t, t.TempDir()), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.reads.add(tc.readNs)
			info, err := c.Put(context.Background(), Header{KV: kv, Tokens: []int32{1, 2, 3}}, state)
			if err != nil {
				t.Fatal(err)
			}
			blob, err := c.Blob(info.ID)
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := DecodeHeader(blob)
			if err != nil || h.Codec != tc.codec {
				t.Fatalf("codec %q, want %q (%v)", h.Codec, tc.codec, err)
			}
			c.DropRAM()
			before := c.reads.get()
			_, got, fromRAM, err := c.State(info.ID)
			if err != nil || fromRAM || !bytes.Equal(got, state) {
				t.Fatalf("from RAM %v, equal %v, %v", fromRAM, bytes.Equal(got, state), err)
			}
			if after := c.reads.get(); after == before || after <= 0 {
				t.Fatalf("read cost %v after the read, %v before", after, before)
			}
		})
	}
}
