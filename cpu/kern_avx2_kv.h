//go:build cgo

// kv_row: the widening of one stored KV row to float32, shared by the
// conversions (kern_avx2_dq.c) and the decode attention (kern_avx2_ad.c).
// Included after `#pragma GCC target("avx2,fma,f16c")` and kern_avx2.h.

#ifndef FLOWINFER_KERN_AVX2_KV_H
#define FLOWINFER_KERN_AVX2_KV_H

#include "kern.h"
#include "kern_avx2.h"

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
		// the levels times the scale, each one float multiply as in
		// quant.Turbo.DecodeRotated (vectors: a table of 16 scalar stores
		// read back as vectors would stall store forwarding)
		const __m256 vs = _mm256_set1_ps(sc);
		if (bits == 4) {
			const __m256 lo = _mm256_mul_ps(vs, _mm256_loadu_ps(levels)), hi = _mm256_mul_ps(vs, _mm256_loadu_ps(levels + 8));
			const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
			for (; i + 8 <= n; i += 8) {
				uint32_t w;
				memcpy(&w, c + i / 2, 4);
				const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(15));
				const __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
				_mm256_storeu_ps(d + i, _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28))));
			}
		} else if (bits == 3) {
			const __m256 tab = _mm256_mul_ps(vs, _mm256_loadu_ps(levels));
			const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
			for (; i + 8 <= n; i += 8) {
				const uint32_t w = c[3 * i / 8] | c[3 * i / 8 + 1] << 8 | c[3 * i / 8 + 2] << 16;
				const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(7));
				_mm256_storeu_ps(d + i, _mm256_permutevar8x32_ps(tab, idx));
			}
		}
		if (i == n) return;
		float lv[16];
		for (int k = 0; k < (1 << bits); k++) lv[k] = sc * levels[k];
		for (; i < n; i++) d[i] = lv[(c[i * bits / 8] | c[(i * bits + bits - 1) / 8] << 8) >> (i * bits % 8) & ((1 << bits) - 1)];
		return;
	}
	switch (t) {
	case FI_F16:
		for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(ld128(s + 2 * i)));
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
			const __m256 sc = _mm256_set1_ps(ld_f16(s));
			for (int k = 0; k < 32; k += 8) {
				const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + 2 + k)));
				_mm256_storeu_ps(d + i + k, _mm256_mul_ps(sc, _mm256_cvtepi32_ps(q)));
			}
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
