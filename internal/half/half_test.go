package half

import (
	"math"
	"testing"
)

// Every one of the 65536 halves but NaNs survives Float then Bits.
func TestRoundTripEveryHalf(t *testing.T) {
	for h := range 1 << 16 {
		f := Float(uint16(h))
		if math.IsNaN(float64(f)) {
			if exp := (h >> 10) & 0x1f; exp != 0x1f || h&0x3ff == 0 {
				t.Fatalf("%#04x: NaN from a non-NaN", h)
			}
			continue
		}
		if got := Bits(f); got != uint16(h) {
			t.Fatalf("Bits(Float(%#04x)) = %#04x (%g)", h, got, f)
		}
	}
}

func TestBits(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00},
		{0x1p-24, 0x0001}, {0x1p-25, 0}, {1 + 0x1p-11, 0x3c00}, {1 + 3*0x1p-11, 0x3c02},
	} {
		if got := Bits(tc.in); got != tc.want {
			t.Errorf("Bits(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}
