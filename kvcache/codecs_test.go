package kvcache

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The package's encoder (window segBytes) writes the same frames, byte for
// byte, as an encoder of the level's default 8 MiB window, for every input
// size encode gives it (at most one segment): a shuffled f16-like state of
// 200 KiB (a small model's pack), 1 MiB and a whole 4 MiB segment, and the
// frames decode back to the input.
func TestEncoderWindow(t *testing.T) {
	def, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	e, d := codecs()
	x := uint32(11)
	state := make([]byte, segBytes)
	for i := 0; i+1 < len(state); i += 2 {
		x = x*1664525 + 1013904223
		state[i], state[i+1] = byte(x>>24)&0x3f, 0x30+byte(x>>8)%4
	}
	for _, n := range []int{200 << 10, 1 << 20, segBytes} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := shuffle2(state[:n])
			got, want := e.EncodeAll(src, nil), def.EncodeAll(src, nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("%d bytes: frame of %d bytes differs from the default window's %d", n, len(got), len(want))
			}
			if len(got) >= n {
				t.Fatalf("%d bytes: not compressed (%d)", n, len(got))
			}
			back, err := d.DecodeAll(got, make([]byte, 0, n))
			if err != nil || !bytes.Equal(back, src) {
				t.Fatalf("%d bytes: decode: %v", n, err)
			}
		})
	}
}
