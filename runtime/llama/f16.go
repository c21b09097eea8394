package llama

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#endif

// The float arithmetic below is Go's: lo + code*step, a multiply then an
// add, each rounded (no fused multiply-add, which gcc would otherwise make
// of them under -march=native).
#pragma GCC push_options
#pragma GCC optimize ("fp-contract=off")

// memosrt_h2f is package half's Float: exact for every half.
static inline float memosrt_h2f(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, m = h & 0x3ff, b;
	float f;
	if (exp == 0x1f) {
		b = sign | 0x7f800000 | m << 13;
	} else if (exp != 0) {
		b = sign | (exp + 127 - 15) << 23 | m << 13;
	} else if (m == 0) {
		b = sign;
	} else {
		f = (float)m * 0x1p-24f;
		return sign ? -f : f;
	}
	memcpy(&f, &b, 4);
	return f;
}

// memosrt_f2h is package half's Bits: round to nearest even, subnormal
// halves included; at or past 65520, and for NaN, the signed infinity.
static inline uint16_t memosrt_f2h(float f) {
	uint32_t b, a;
	memcpy(&b, &f, 4);
	uint16_t sign = (b >> 16) & 0x8000;
	a = b & 0x7fffffff;
	if (a >= 0x477ff000) {
		return sign | 0x7c00;
	}
	if (a >= 0x38800000) {
		uint32_t h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ff), rem = a & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) {
			h++;
		}
		return sign | (uint16_t)h;
	}
	// subnormal half: round(|f| * 2^24) to even, from the float's bits
	uint32_t e = a >> 23;
	if (e == 0) {
		return sign; // a float subnormal: far below 2^-25
	}
	uint32_t m = (a & 0x7fffff) | 0x800000, shift = 126 - e; // |f| * 2^24 = m / 2^shift
	if (shift > 25) {
		return sign;
	}
	uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (r & 1))) {
		r++;
	}
	return sign | (uint16_t)r;
}

static inline void memosrt_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

#if defined(__AVX2__) && defined(__F16C__)
// memosrt_cvt8 converts 8 floats to halves as memosrt_f2h does: the
// hardware rounds to nearest even; a NaN becomes the infinity of its sign.
static inline __m128i memosrt_cvt8(__m256 v) {
	__m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m128i inf = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7c00)), _mm_set1_epi16(0x7c00));
	return _mm_andnot_si128(_mm_and_si128(inf, _mm_set1_epi16(0x03ff)), h);
}
#endif

// memosrt_u8_to_f16: see U8ToF16. src holds lines × line_bytes bytes.
static int memosrt_u8_to_f16(uint8_t *dst, const uint8_t *src, int64_t lines, int64_t along, int64_t g,
		int64_t line_step, int64_t elem_step, int64_t line_bytes) {
	if (elem_step == 1) { // a line's values are consecutive
		for (int64_t l = 0; l < lines; l++) {
			const uint8_t *p = src + l * line_bytes;
			uint8_t *o = dst + 2 * l * line_step;
			for (int64_t i0 = 0; i0 < along; i0 += g) {
				int64_t n = along - i0 < g ? along - i0 : g, i = 0;
				float lo = memosrt_h2f((uint16_t)(p[0] | p[1] << 8)), st = memosrt_h2f((uint16_t)(p[2] | p[3] << 8));
				const uint8_t *c = p + 4;
#if defined(__AVX2__) && defined(__F16C__)
				__m256 vlo = _mm256_set1_ps(lo), vst = _mm256_set1_ps(st);
				for (; i + 8 <= n; i += 8) {
					__m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + i))));
					_mm_storeu_si128((__m128i *)(o + 2 * (i0 + i)), memosrt_cvt8(_mm256_add_ps(vlo, _mm256_mul_ps(x, vst))));
				}
#endif
				for (; i < n; i++) {
					memosrt_put16(o + 2 * (i0 + i), memosrt_f2h(lo + (float)c[i] * st));
				}
				p += 4 + n;
			}
		}
		return 0;
	}
	// lines side by side (line_step 1, or any other): row by row across
	// the lines, each line's minimum and step of the group read first
	float *lo = malloc(sizeof(float) * 2 * lines);
	if (lo == NULL) {
		return -1;
	}
	float *st = lo + lines;
	int64_t goff = 0;
	for (int64_t i0 = 0; i0 < along; i0 += g) {
		int64_t n = along - i0 < g ? along - i0 : g;
		for (int64_t l = 0; l < lines; l++) {
			const uint8_t *p = src + l * line_bytes + goff;
			lo[l] = memosrt_h2f((uint16_t)(p[0] | p[1] << 8));
			st[l] = memosrt_h2f((uint16_t)(p[2] | p[3] << 8));
		}
		const uint8_t *c = src + goff + 4; // line l's code i: c[l*line_bytes + i]
		int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
		// 8 codes of 8 lines at a time, transposed (rows of codes of one
		// index across the 8 lines) and stored 8 halves a row
		if (line_step == 1) {
			for (; i + 8 <= n; i += 8) {
				int64_t l = 0;
				for (; l + 8 <= lines; l += 8) {
					const uint8_t *q = c + l * line_bytes + i;
					__m128i a0 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)q), _mm_loadl_epi64((const __m128i *)(q + line_bytes)));
					__m128i a1 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(q + 2 * line_bytes)), _mm_loadl_epi64((const __m128i *)(q + 3 * line_bytes)));
					__m128i a2 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(q + 4 * line_bytes)), _mm_loadl_epi64((const __m128i *)(q + 5 * line_bytes)));
					__m128i a3 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(q + 6 * line_bytes)), _mm_loadl_epi64((const __m128i *)(q + 7 * line_bytes)));
					__m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
					__m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
					__m128i t[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2), _mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3)};
					__m256 vlo = _mm256_loadu_ps(lo + l), vst = _mm256_loadu_ps(st + l);
					for (int j = 0; j < 4; j++) { // t[j]: codes i+2j (low 8 bytes) and i+2j+1 of lines l..l+7
						__m256 x0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(t[j]));
						__m256 x1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(t[j], 8)));
						_mm_storeu_si128((__m128i *)(dst + 2 * ((i0 + i + 2 * j) * elem_step + l)), memosrt_cvt8(_mm256_add_ps(vlo, _mm256_mul_ps(x0, vst))));
						_mm_storeu_si128((__m128i *)(dst + 2 * ((i0 + i + 2 * j + 1) * elem_step + l)), memosrt_cvt8(_mm256_add_ps(vlo, _mm256_mul_ps(x1, vst))));
					}
				}
				for (; l < lines; l++) {
					for (int64_t j = 0; j < 8; j++) {
						memosrt_put16(dst + 2 * ((i0 + i + j) * elem_step + l), memosrt_f2h(lo[l] + (float)c[l * line_bytes + i + j] * st[l]));
					}
				}
			}
		}
#endif
		for (; i < n; i++) {
			uint8_t *o = dst + 2 * (i0 + i) * elem_step;
			int64_t l = 0;
#if defined(__AVX2__) && defined(__F16C__)
			if (line_step == 1) {
				for (; l + 8 <= lines; l += 8) {
					const uint8_t *q = c + l * line_bytes + i;
					__m256i k = _mm256_setr_epi32(q[0], q[line_bytes], q[2 * line_bytes], q[3 * line_bytes],
						q[4 * line_bytes], q[5 * line_bytes], q[6 * line_bytes], q[7 * line_bytes]);
					__m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(k), _mm256_loadu_ps(st + l));
					_mm_storeu_si128((__m128i *)(o + 2 * l), memosrt_cvt8(_mm256_add_ps(_mm256_loadu_ps(lo + l), x)));
				}
			}
#endif
			for (; l < lines; l++) {
				memosrt_put16(o + 2 * l * line_step, memosrt_f2h(lo[l] + (float)c[l * line_bytes + i] * st[l]));
			}
		}
		goff += 4 + n;
	}
	free(lo);
	return 0;
}
#pragma GCC pop_options
*/
import "C"

import (
	"fmt"
	"unsafe" // unsafe: the cgo boundary; the slices are read and written for the call's duration only.
)

// U8ToF16 decodes grouped 8-bit affine codes into f16 values (IEEE
// binary16, little-endian) in dst: the layout of a q8 lossy pack's region
// (package kvcache's Quantize). src holds lines lines, each of along
// values in groups of group (the last one shorter when group does not
// divide along): per group an f16 minimum lo, an f16 step, then its codes,
// one byte each. Value i of line l, lo + float32(code)×step rounded to
// f16 as package half's Bits does (a multiply then an add in float32, each
// rounded; a NaN becomes the infinity of its sign), goes to dst's f16
// element l×lineStep + i×elemStep. It returns the bytes of src used,
// lines × (along + 4 × groups).
//
// The work is one C call (AVX2 and F16C where the build targets them, 8
// values at a time): about 10 times package half's per-value conversion
// in Go. Errors: sizes that are not positive, an src shorter than the
// codes, a dst too short for the last element, no memory for the
// lines' minimums and steps (8 bytes a line).
func U8ToF16(dst, src []byte, lines, along, group, lineStep, elemStep int) (int, error) {
	if lines <= 0 || along <= 0 || group <= 0 || lineStep < 0 || elemStep < 0 {
		return 0, fmt.Errorf("llama: u8 to f16: %d lines of %d in groups of %d, steps %d and %d", lines, along, group, lineStep, elemStep)
	}
	lineBytes := along + 4*((along+group-1)/group)
	if lineBytes > len(src)/lines {
		return 0, fmt.Errorf("llama: u8 to f16: %d lines of %d bytes, src has %d", lines, lineBytes, len(src))
	}
	last := uint64(lines-1)*uint64(lineStep) + uint64(along-1)*uint64(elemStep)
	if last >= uint64(len(dst)/2) {
		return 0, fmt.Errorf("llama: u8 to f16: element %d, dst holds %d", last, len(dst)/2)
	}
	if C.memosrt_u8_to_f16((*C.uint8_t)(unsafe.Pointer(&dst[0])), (*C.uint8_t)(unsafe.Pointer(&src[0])), C.int64_t(lines), C.int64_t(along),
		C.int64_t(group), C.int64_t(lineStep), C.int64_t(elemStep), C.int64_t(lineBytes)) != 0 {
		return 0, fmt.Errorf("llama: u8 to f16: no memory for %d lines", lines)
	}
	return lines * lineBytes, nil
}
