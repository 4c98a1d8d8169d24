//go:build cgo

// AVX2 conversion of stored KV rows to float32 (attention reads a chunk of
// f16, bf16, q8_0 or q4_0 rows into L1 this way), and the TurboQuant
// decode into the rotated domain. Every conversion is exact or one float
// multiply, as quant's Go dequantizers do it, so results are bit for bit
// the same.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include "kern.h"
#include "kern_avx2.h"

// fi_dequant_avx2: see kern.h.
int fi_dequant_avx2(int t, const uint8_t *src, int64_t stride, int64_t rows, int64_t cols, float *dst, int64_t dstride) {
	switch (t) {
	case FI_F16:
	case FI_BF16:
	case FI_Q8_0:
	case FI_Q4_0:
		break;
	default:
		return -1;
	}
	for (int64_t r = 0; r < rows; r++) {
		const uint8_t *s = src + r * stride;
		float *d = dst + r * dstride;
		int64_t i = 0;
		switch (t) {
		case FI_F16:
			for (; i + 8 <= cols; i += 8) {
				_mm256_storeu_ps(d + i, _mm256_cvtph_ps(ld128(s + 2 * i)));
			}
			for (; i < cols; i++) {
				d[i] = ld_f16(s + 2 * i);
			}
			break;
		case FI_BF16:
			for (; i + 8 <= cols; i += 8) {
				const __m256i w = _mm256_cvtepu16_epi32(ld128(s + 2 * i));
				_mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
			}
			for (; i < cols; i++) {
				uint32_t u = (uint32_t)(s[2 * i] | s[2 * i + 1] << 8) << 16;
				memcpy(d + i, &u, 4);
			}
			break;
		case FI_Q8_0:
			for (; i < cols; i += 32, s += 34) {
				const __m256 sc = _mm256_set1_ps(ld_f16(s));
				for (int k = 0; k < 32; k += 8) {
					const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + 2 + k)));
					_mm256_storeu_ps(d + i + k, _mm256_mul_ps(sc, _mm256_cvtepi32_ps(q)));
				}
			}
			break;
		case FI_Q4_0:
			for (; i < cols; i += 32, s += 18) {
				const __m256 sc = _mm256_set1_ps(ld_f16(s));
				const __m128i qs = ld128(s + 2);
				const __m128i lo = _mm_and_si128(qs, _mm_set1_epi8(15));
				const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(15));
				const __m128i halves[2] = {lo, hi};
				for (int h = 0; h < 2; h++) {
					const __m128i v = _mm_sub_epi8(halves[h], _mm_set1_epi8(8));
					const __m256i a = _mm256_cvtepi8_epi32(v);
					const __m256i b = _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8));
					_mm256_storeu_ps(d + i + 16 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(a), sc));
					_mm256_storeu_ps(d + i + 16 * h + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(b), sc));
				}
			}
			break;
		}
	}
	return 0;
}

// fi_turbo_decode_avx2: see kern.h.
void fi_turbo_decode_avx2(int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t rows, int64_t n,
                          float *dst, int64_t dstride) {
	for (int64_t r = 0; r < rows; r++) {
		const uint8_t *s = src + r * stride;
		float *d = dst + r * dstride;
		const float sc = ld_f16(s);
		const uint8_t *c = s + 2;
		float lv[16];
		for (int k = 0; k < (1 << bits); k++) {
			lv[k] = sc * levels[k];
		}
		// the vector tables are multiplied anew (the same products):
		// reading lv's scalar stores back as vectors would stall store
		// forwarding
		const __m256 vs = _mm256_set1_ps(sc);
		if (bits == 4) {
			// AVX2 vpermps looks up 8 levels; a blend picks the upper 8
			const __m256 lo = _mm256_mul_ps(vs, _mm256_loadu_ps(levels)), hi = _mm256_mul_ps(vs, _mm256_loadu_ps(levels + 8));
			for (int64_t i = 0; i + 8 <= n; i += 8) {
				uint32_t w;
				memcpy(&w, c + i / 2, 4);
				// nibble k of w is code i+k
				const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
				const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(15));
				const __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
				const __m256 m = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)); // sign bit = bit 3 of the code
				_mm256_storeu_ps(d + i, _mm256_blendv_ps(a, b, m));
			}
		} else if (bits == 3) {
			const __m256 tab = _mm256_mul_ps(vs, _mm256_loadu_ps(levels));
			for (int64_t i = 0; i + 8 <= n; i += 8) {
				uint32_t w = c[3 * i / 8] | c[3 * i / 8 + 1] << 8 | c[3 * i / 8 + 2] << 16;
				const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
				const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(7));
				_mm256_storeu_ps(d + i, _mm256_permutevar8x32_ps(tab, idx));
			}
		} else { // 2 bits
			for (int64_t i = 0; i < n; i++) {
				d[i] = lv[(c[i / 4] >> (2 * (i % 4))) & 3];
			}
		}
	}
}
