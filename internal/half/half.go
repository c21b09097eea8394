package half

import "math"

// Bits returns f as binary16 bits, rounding to nearest even; magnitudes
// that round past the largest half (65504) become infinity. NaN is not
// handled (it becomes infinity).
func Bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	switch {
	case a >= 0x477ff000: // 65520: rounds past the largest half, 65504
		return sign | 0x7c00
	case a >= 0x38800000: // 2^-14: a normal half
		h := (a>>23-112)<<10 | (a>>13)&0x3ff
		if rem := a & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
			h++ // a carry out of the mantissa correctly bumps the exponent
		}
		return sign | uint16(h)
	default: // subnormal half: multiples of 2^-24
		return sign | uint16(math.RoundToEven(float64(math.Float32frombits(a))*0x1p24))
	}
}

// Float returns the float32 value of binary16 bits h (exact: every half
// is a float32).
func Float(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | m<<13)
	case m == 0:
		return math.Float32frombits(sign)
	default: // subnormal: m × 2^-24
		f := float32(m) * 0x1p-24
		if sign != 0 {
			f = -f
		}
		return f
	}
}
