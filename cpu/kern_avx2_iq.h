//go:build cgo

// Helpers shared by the AVX2 products of the 4-bit table types (IQ4_NL,
// IQ4_XS, MXFP4: kern_avx2_iq.c row by row, kern_avx2_iqpk.c packed).
// Included after kern_avx2.h under the AVX2 target pragma.
//
// All three store a 4-bit index per weight into a table of 16 signed
// integer levels (quant/iq4.go). A vector of indices (0..15 per byte)
// becomes the levels with one pshufb against the table broadcast to both
// 128-bit halves (the algorithm of ggml's ggml_vec_dot_iq4_nl_q8_0). The
// levels are signed (IQ4_NL's reach -127), so each product with int8
// activations is pmaddubsw(|w|, sign(y, w)) (row-wise and prefill, where
// |w| serves several activation rows) or pmaddubsw(|y|, sign(w, y)) (packed
// decode, where |y| serves every row). A pmaddubsw pair is at most
// 2·127·127 = 32258 for IQ4_NL/IQ4_XS, so their pairs are widened to int32
// at once; MXFP4's levels are at most 12, so its pairs can be summed in
// int16 over a whole block (8 steps · 2 · 12 · 127 = 24384 < 32767).

#ifndef FLOWINFER_KERN_AVX2_IQ_H
#define FLOWINFER_KERN_AVX2_IQ_H

#include "kern_iq4.h"

// iq_table returns the 16 levels kv in both 128-bit halves (a pshufb table).
FI_INLINE __m256i iq_table(const int8_t *kv) {
	return _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)kv));
}

// e8m0_half is quant's e8m0Half: half an E8M0 scale, 2^(e-128) (2^-128 and
// 2^-127, subnormal, for e = 0 and 1; 2^127 for e = 255, as ggml).
FI_INLINE float e8m0_half(uint8_t e) {
	const uint32_t b = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

// e8m0_half8 is e8m0_half of the 8 bytes at p, one per lane.
FI_INLINE __m256 e8m0_half8(const uint8_t *p) {
	const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
	const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
	const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
	const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
	return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

// iq4xs_scales returns the 8 sub-block scales of the IQ4_XS super-block at
// x, minus 32 (-32..31), as signed bytes 0..7 of a 64-bit word (quant's
// iq4XSScale): the low 4 bits are nibbles of the 4 bytes at x + 4, the high
// 2 bits fields of the 16 bits at x + 2; each is spread to one byte per
// sub-block by shifts and masks.
FI_INLINE uint64_t iq4xs_scales(const uint8_t *x) {
	uint64_t lo = ld_u32(x + 4);
	lo = (lo | lo << 16) & 0x0000ffff0000ffffull;
	lo = (lo | lo << 8) & 0x00ff00ff00ff00ffull;
	lo = (lo | lo << 4) & 0x0f0f0f0f0f0f0f0full;
	uint16_t h16;
	memcpy(&h16, x + 2, 2);
	uint64_t hi = h16;
	hi = (hi | hi << 24) & 0x000000ff000000ffull;
	hi = (hi | hi << 12) & 0x000f000f000f000full;
	hi = (hi | hi << 6) & 0x0303030303030303ull;
	// minus 32 in each byte without borrows between bytes: from b + 128
	// (at least 128), take 32, then remove the 128
	return (((lo | hi << 4) | 0x8080808080808080ull) - 0x2020202020202020ull) ^ 0x8080808080808080ull;
}

#endif
