//go:build cgo

// The widening of stored KV rows to float32, shared by the conversions
// (kern_avx2_dq.c) and the decode attention (kern_avx2_ad.c): ld8k, 8
// values in a register, and kv_row, a row into memory (through ld8k for
// the kinds it reads). Included after `#pragma GCC target("avx2,fma,f16c")`
// and kern_avx2.h.

#ifndef FLOWINFER_KERN_AVX2_KV_H
#define FLOWINFER_KERN_AVX2_KV_H

#include "kern.h"
#include "kern_avx2.h"

// Row kinds widened 8 values at a time in registers by ld8k: A_FLOAT
// (float32 rows, or rows kv_row widened into a buffer: bf16, q4_0, 2-bit
// TurboQuant), f16, q8_0, and TurboQuant codes of 3 or 4 bits. The V sums
// (kern_avx2_ad.c) read these kinds in place through ld8k, and kv_row
// widens them with it, so both make the same values by construction.
// Widening into a buffer cost a store and a load per value, and the tile's
// pass over the row bytes before the sums' pass (BenchmarkAttnRows on Zen
// 3: docs/decisions.md).
enum { A_FLOAT, A_F16, A_Q8_0, A_TQ3, A_TQ4 };

static inline int akind(int t, int bits) {
	if (bits == 3) return A_TQ3;
	if (bits == 4) return A_TQ4;
	if (bits > 0) return -1;
	switch (t) {
	case FI_F32: return A_FLOAT;
	case FI_F16: return A_F16;
	case FI_Q8_0: return A_Q8_0;
	}
	return -1;
}

// row_tab sets what ld8k needs of a row besides its bytes: for TurboQuant,
// the codebook times the row's scale (*scale, widened from the row's f16;
// each level one float multiply, as quant.Turbo.DecodeRotated): 3 bits in
// t0, 4 bits in t0 (levels 0-7) and t1 (8-15).
FI_INLINE void row_tab(const int kind, const float *scale, const float *levels, __m256 *t0, __m256 *t1) {
	if (kind != A_TQ3 && kind != A_TQ4) return;
	const __m256 sc = _mm256_broadcast_ss(scale);
	*t0 = _mm256_mul_ps(sc, _mm256_loadu_ps(levels));
	if (kind == A_TQ4) *t1 = _mm256_mul_ps(sc, _mm256_loadu_ps(levels + 8));
}

// ld8k loads values d..d+7 of a row of kind (d a multiple of 8) as float32:
// exact, or one float multiply as quant's Go code makes it; t0 and t1 are
// row_tab's, bs the row's block scales (q8_0) widened to float32.
FI_INLINE __m256 ld8k(const int kind, const void *row, int64_t d, __m256 t0, __m256 t1, const float *bs) {
	const uint8_t *s = row;
	switch (kind) {
	case A_F16: return _mm256_cvtph_ps(ld128(s + 2 * d));
	case A_Q8_0: {
		const uint8_t *b = s + d / 32 * 34;
		const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + d % 32)));
		return _mm256_mul_ps(_mm256_broadcast_ss(bs + d / 32), _mm256_cvtepi32_ps(q));
	}
	case A_TQ3: {
		// codes at bits 3d.. of the codes (after the 2 scale bytes): the
		// 4 bytes from the one before them (so the load ends within the
		// row), lane j shifted right by 8 + 3j; vpermps reads only an
		// index's low 3 bits
		uint32_t w;
		memcpy(&w, s + 1 + 3 * d / 8, 4);
		const __m256i sh = _mm256_setr_epi32(8, 11, 14, 17, 20, 23, 26, 29);
		return _mm256_permutevar8x32_ps(t0, _mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh));
	}
	case A_TQ4: {
		// lane j: bits 4j.. of 4 code bytes; vpermps reads the low 3
		// bits, the fourth (moved to the sign) picks t1 over t0
		uint32_t w;
		memcpy(&w, s + 2 + d / 2, 4);
		const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)w), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
		return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, idx), _mm256_permutevar8x32_ps(t1, idx),
		                        _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
	}
	default: return _mm256_loadu_ps((const float *)row + d);
	}
}

// kv_row widens one stored row of n values of type t (f16, bf16, q8_0 or
// q4_0: n a multiple of their block) to float32 at d; bits > 0: a
// TurboQuant row of that many bits (2, 3 or 4; levels its codebook) into
// the rotated domain. Each value is exact or one float multiply, as quant's
// Go code computes it, so results are bit for bit the same.
FI_INLINE void kv_row(int t, int bits, const float *levels, const uint8_t *s, int64_t n, float *d) {
	int64_t i = 0;
	if (bits > 0) {
		const float sc = ld_f16(s);
		const uint8_t *c = s + 2;
		// the levels times the scale in vectors (a table of 16 scalar
		// stores read back as vectors would stall store forwarding)
		__m256 t0 = _mm256_setzero_ps(), t1 = t0;
		if (bits == 4) { // each loop with its kind a constant
			row_tab(A_TQ4, &sc, levels, &t0, &t1);
			for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, ld8k(A_TQ4, s, i, t0, t1, NULL));
		} else if (bits == 3) {
			row_tab(A_TQ3, &sc, levels, &t0, &t1);
			for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, ld8k(A_TQ3, s, i, t0, t1, NULL));
		}
		if (i == n) return;
		float lv[16];
		for (int k = 0; k < (1 << bits); k++) lv[k] = sc * levels[k];
		for (; i < n; i++) d[i] = lv[(c[i * bits / 8] | c[(i * bits + bits - 1) / 8] << 8) >> (i * bits % 8) & ((1 << bits) - 1)];
		return;
	}
	const __m256 z = _mm256_setzero_ps(); // the TurboQuant tables ld8k takes
	switch (t) {
	case FI_F16:
		for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, ld8k(A_F16, s, i, z, z, NULL));
		for (; i < n; i++) d[i] = ld_f16(s + 2 * i);
		break;
	case FI_BF16:
		for (; i + 8 <= n; i += 8) {
			const __m256i w = _mm256_cvtepu16_epi32(ld128(s + 2 * i));
			_mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
		}
		for (; i < n; i++) {
			const uint32_t u = (uint32_t)(s[2 * i] | s[2 * i + 1] << 8) << 16;
			memcpy(d + i, &u, 4);
		}
		break;
	case FI_Q8_0:
		for (; i < n; i += 32, s += 34) {
			const float sc = ld_f16(s); // the block at s read as a row of 32
			for (int k = 0; k < 32; k += 8) _mm256_storeu_ps(d + i + k, ld8k(A_Q8_0, s, k, z, z, &sc));
		}
		break;
	case FI_Q4_0:
		for (; i < n; i += 32, s += 18) {
			const __m256 sc = _mm256_set1_ps(ld_f16(s));
			const __m128i qs = ld128(s + 2);
			const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, _mm_set1_epi8(15)), _mm_set1_epi8(8));
			const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(15)), _mm_set1_epi8(8));
			_mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), sc));
			_mm256_storeu_ps(d + i + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), sc));
			_mm256_storeu_ps(d + i + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), sc));
			_mm256_storeu_ps(d + i + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), sc));
		}
		break;
	}
}

#endif
