package llama

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/memosrt/memosrt/internal/half"
)

// u8ToF16Go is U8ToF16 in Go, value by value with package half.
func u8ToF16Go(dst, src []byte, lines, along, group, lineStep, elemStep int) {
	p := 0
	for l := range lines {
		for i0 := 0; i0 < along; i0 += group {
			n := min(group, along-i0)
			lo := half.Float(binary.LittleEndian.Uint16(src[p:]))
			st := half.Float(binary.LittleEndian.Uint16(src[p+2:]))
			for i := range n {
				f := lo + float32(src[p+4+i])*st
				binary.LittleEndian.PutUint16(dst[2*(l*lineStep+(i0+i)*elemStep):], half.Bits(f))
			}
			p += 4 + n
		}
	}
}

// U8ToF16 writes what package half's conversions write, byte for byte,
// for both layouts (values along a line consecutive, or lines side by
// side), groups that do not divide a line, line counts that are not a
// multiple of the vector width, and minimums and steps that are
// subnormal, huge, infinite or NaN.
func TestU8ToF16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	halves := func() uint16 {
		switch r.IntN(10) {
		case 0: // any bits: subnormals, infinities, NaNs
			return uint16(r.Uint32())
		case 1:
			return half.Bits(float32(r.NormFloat64()) * 1e-5)
		case 2:
			return half.Bits(float32(r.NormFloat64()) * 300)
		default:
			return half.Bits(float32(r.NormFloat64()))
		}
	}
	for _, tc := range []struct {
		name                string
		lines, along, group int
		byRow               bool // lines side by side (axis 0 of a K block)
	}{
		{"row 4096x512 g64", 64, 512, 64, false},
		{"row odd", 7, 37, 16, false},
		{"col 512x4096 g128", 512, 256, 128, true},
		{"col odd", 13, 45, 7, true},
		{"col one line", 1, 9, 4, true},
		{"col tails", 13, 45, 16, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src []byte
			for range tc.lines {
				for i0 := 0; i0 < tc.along; i0 += tc.group {
					src = binary.LittleEndian.AppendUint16(src, halves())
					src = binary.LittleEndian.AppendUint16(src, halves())
					for range min(tc.group, tc.along-i0) {
						src = append(src, byte(r.Uint32()))
					}
				}
			}
			lineStep, elemStep := tc.along, 1
			if tc.byRow {
				lineStep, elemStep = 1, tc.lines
			}
			want, got := make([]byte, 2*tc.lines*tc.along), make([]byte, 2*tc.lines*tc.along)
			u8ToF16Go(want, src, tc.lines, tc.along, tc.group, lineStep, elemStep)
			used, err := U8ToF16(got, src, tc.lines, tc.along, tc.group, lineStep, elemStep)
			if err != nil || used != len(src) {
				t.Fatalf("used %d of %d: %v", used, len(src), err)
			}
			if !bytes.Equal(got, want) {
				for i := 0; i < len(got); i += 2 {
					if g, w := binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(want[i:]); g != w {
						t.Fatalf("element %d: %#04x, want %#04x (%g)", i/2, g, w, half.Float(w))
					}
				}
			}
		})
	}
	// every half as a minimum, with a random step and codes
	for _, byRow := range []bool{false, true} {
		const lines, along = 1 << 16, 9
		var src []byte
		for h := range lines {
			src = binary.LittleEndian.AppendUint16(src, uint16(h))
			src = binary.LittleEndian.AppendUint16(src, halves())
			for range along {
				src = append(src, byte(r.Uint32()))
			}
		}
		lineStep, elemStep := along, 1
		if byRow {
			lineStep, elemStep = 1, lines
		}
		want, got := make([]byte, 2*lines*along), make([]byte, 2*lines*along)
		u8ToF16Go(want, src, lines, along, along, lineStep, elemStep)
		if _, err := U8ToF16(got, src, lines, along, along, lineStep, elemStep); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("every half (by row %v): %v, equal %v", byRow, err, bytes.Equal(got, want))
		}
	}
	if _, err := U8ToF16(make([]byte, 8), make([]byte, 5), 1, 5, 8, 1, 1); err == nil {
		t.Fatal("short src accepted")
	}
	if _, err := U8ToF16(make([]byte, 8), make([]byte, 9), 1, 5, 8, 1, 1); err == nil {
		t.Fatal("short dst accepted")
	}
}
