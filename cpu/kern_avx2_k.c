//go:build cgo

// AVX2 dot products of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) with Q8_K
// activations. Per super-block of 256 the weight codes are unpacked to
// unsigned bytes once, multiplied with each activation row by pmaddubsw,
// weighted by their sub-block scales with pmaddwd (exact int32), and the
// super-block sum is scaled by d_w*d_a and accumulated with FMA. Offsets
// (Q4_K/Q5_K/Q2_K mins, the -32 of Q6_K, the -4 of Q3_K) are applied through
// the activation block's bsums, as sums over 16 activations are exact.
//
// Q8_K activation block: float32 d, 256 int8 qs at +4, 16 int16 bsums at +260.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

#define Q8K 292

// k4_scales unpacks the 12 scale bytes of Q4_K/Q5_K (quant's scaleMinK4):
// *sc gets the 8 6-bit scales as int16 in both 128-bit halves, *mins the 8
// mins as int16 duplicated pairwise (m0 m0 m1 m1 ... m7 m7) to meet the 16
// bsums (two per 32-element sub-block).
FI_INLINE void k4_scales(const uint8_t *p, __m256i *sc, __m256i *mins) {
	const uint32_t u0 = ld_u32(p), u1 = ld_u32(p + 4), u2 = ld_u32(p + 8);
	const uint32_t sc_lo = u0 & 0x3f3f3f3f, m_lo = u1 & 0x3f3f3f3f;
	const uint32_t sc_hi = (u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4);
	const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4);
	const __m128i s8 = _mm_cvtsi64_si128((long long)((uint64_t)sc_lo | (uint64_t)sc_hi << 32));
	const __m128i m8 = _mm_cvtsi64_si128((long long)((uint64_t)m_lo | (uint64_t)m_hi << 32));
	*sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));
	*mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

// Q4_K: 144-byte super-blocks: fp16 d, fp16 dmin, 12 scale bytes, 128 qs;
// sub-block j (32 elements) is the low (j even) or high nibble of qs[32*(j/2)..].
FI_INLINE void tile_q4_K(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const int64_t nb = cols / 256;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 144 * i;
		const float d = ld_f16(x), dmin = ld_f16(x + 2);
		__m256i sc, mins;
		k4_scales(x + 4, &sc, &mins);
		__m256i isum[4];
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			const __m256i q = ld256(x + 16 + 32 * k);
			const __m256i lo = _mm256_and_si256(q, m4);
			const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			const __m256i sl = bcast16(sc, 2 * k), sh = bcast16(sc, 2 * k + 1);
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
				const uint8_t *y = a + j * as + Q8K * i + 4 + 64 * k;
				__m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld256(y)), sl);
				__m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld256(y + 32)), sh);
				isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(pl, ph));
				FI_KEEP(isum[j]);
			}
		}
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + Q8K * i;
			const float dy = ld_f32(y);
			const __m256i summ = _mm256_madd_epi16(mins, ld256(y + 260));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);
			acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dy), _mm256_cvtepi32_ps(summ), acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// hbit_to(h, b, t): bit b of each byte of h (already masked to that bit)
// moved to bit t; 16-bit shifts cannot carry a lone bit across a byte.
#define HBIT_TO(h, b, t) ((b) > (t) ? _mm256_srli_epi16((h), (b) - (t)) : _mm256_slli_epi16((h), (t) - (b)))

// Q5_K: 176-byte super-blocks: fp16 d, fp16 dmin, 12 scale bytes, 32 qh,
// 128 qs; sub-block j as Q4_K plus fifth bit j of qh[l].
FI_INLINE void tile_q5_K(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const int64_t nb = cols / 256;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 176 * i;
		const float d = ld_f16(x), dmin = ld_f16(x + 2);
		__m256i sc, mins;
		k4_scales(x + 4, &sc, &mins);
		const __m256i qh = ld256(x + 16);
		__m256i isum[4];
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			const __m256i q = ld256(x + 48 + 32 * k);
			const __m256i hl = _mm256_and_si256(qh, _mm256_set1_epi8((char)(1 << (2 * k))));
			const __m256i hh = _mm256_and_si256(qh, _mm256_set1_epi8((char)(1 << (2 * k + 1))));
			const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), HBIT_TO(hl, 2 * k, 4));
			const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), HBIT_TO(hh, 2 * k + 1, 4));
			const __m256i sl = bcast16(sc, 2 * k), sh = bcast16(sc, 2 * k + 1);
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
				const uint8_t *y = a + j * as + Q8K * i + 4 + 64 * k;
				__m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld256(y)), sl);
				__m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld256(y + 32)), sh);
				isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(pl, ph));
				FI_KEEP(isum[j]);
			}
		}
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + Q8K * i;
			const float dy = ld_f32(y);
			const __m256i summ = _mm256_madd_epi16(mins, ld256(y + 260));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);
			acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dy), _mm256_cvtepi32_ps(summ), acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// Q6_K: 210-byte super-blocks: 128 ql, 64 qh, 16 int8 scales, fp16 d;
// x = d*sc*(q-32) with 6-bit q. Half h (128 elements): vector k (32
// elements 128h+32k..) takes the low (k<2) or high (k>=2) nibbles of
// ql[64h+32(k&1)..] and bits 2k..2k+1 of qh[32h..]; its sub-blocks are
// 8h+2k, 8h+2k+1. The -32 is subtracted as 32*sum(sc*bsum).
FI_INLINE void tile_q6_K(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
	const int64_t nb = cols / 256;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 210 * i;
		const float d = ld_f16(x + 208);
		const __m128i sc = ld128(x + 192);
		__m256i isum[4];
		{
			const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
				const uint8_t *y = a + j * as + Q8K * i;
				isum[j] = _mm256_sub_epi32(_mm256_setzero_si256(),
				                           _mm256_slli_epi32(_mm256_madd_epi16(sc16, ld256(y + 260)), 5));
			}
		}
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			const __m256i l0 = ld256(x + 64 * h), l1 = ld256(x + 64 * h + 32);
			const __m256i qh = ld256(x + 128 + 32 * h);
			__m256i v[4];
			v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
			v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
			                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
			v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
			                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
			v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
			                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) {
				const __m256i s = pair_scales_i8(sc, 4 * h + k);
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
					const uint8_t *y = a + j * as + Q8K * i + 4 + 128 * h + 32 * k;
					isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(v[k], ld256(y)), s));
					FI_KEEP(isum[j]);
				}
			}
		}
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const float dy = ld_f32(a + j * as + Q8K * i);
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// Q2_K: 84-byte super-blocks: 16 scale bytes (low nibble scale, high nibble
// min per 16 elements), 64 qs, fp16 d, fp16 dmin. Elements 128k+32s+l are
// bits 2s..2s+1 of qs[32k+l]; sub-blocks 8k+2s, 8k+2s+1.
FI_INLINE void tile_q2_K(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m128i n4 = _mm_set1_epi8(0x0f);
	const __m256i m3 = _mm256_set1_epi8(0x03);
	const int64_t nb = cols / 256;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 84 * i;
		const float d = ld_f16(x + 80), dmin = ld_f16(x + 82);
		const __m128i sm = ld128(x);
		const __m128i sc = _mm_and_si128(sm, n4);
		const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), n4));
		__m256i isum[4];
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 2
		for (int k = 0; k < 2; k++) {
			const __m256i q = ld256(x + 16 + 32 * k);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
				const __m256i scv = pair_scales_u8(sc, 4 * k + s);
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
					const uint8_t *y = a + j * as + Q8K * i + 4 + 128 * k + 32 * s;
					isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(v, ld256(y)), scv));
					FI_KEEP(isum[j]);
				}
			}
		}
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + Q8K * i;
			const float dy = ld_f32(y);
			const __m256i summ = _mm256_madd_epi16(mins, ld256(y + 260));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);
			acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dy), _mm256_cvtepi32_ps(summ), acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// q3k_scales unpacks Q3_K's 12 scale bytes to 16 signed scales sc-32
// (quant's q3KScales).
FI_INLINE __m128i q3k_scales(const uint8_t *p) {
	const uint32_t a0 = ld_u32(p), a1 = ld_u32(p + 4), t = ld_u32(p + 8);
	const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f;
	const __m128i s = _mm_setr_epi32((int)((a0 & k2) | ((t & k1) << 4)), (int)((a1 & k2) | (((t >> 2) & k1) << 4)),
	                                 (int)(((a0 >> 4) & k2) | (((t >> 4) & k1) << 4)),
	                                 (int)(((a1 >> 4) & k2) | (((t >> 6) & k1) << 4)));
	return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

// Q3_K: 110-byte super-blocks: 32 hmask, 64 qs, 12 scale bytes, fp16 d;
// x = d*(sc-32)*(q-4+4h) with q the 2 low bits (as Q2_K) and h bit g of
// hmask[l] for group g = 4k+s. Computed as (q+4h) unsigned minus 4*bsum.
FI_INLINE void tile_q3_K(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i m3 = _mm256_set1_epi8(0x03);
	const int64_t nb = cols / 256;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 110 * i;
		const float d = ld_f16(x + 108);
		const __m128i sc = q3k_scales(x + 96);
		const __m256i hm = ld256(x);
		__m256i isum[4];
		{
			const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
				const uint8_t *y = a + j * as + Q8K * i;
				isum[j] = _mm256_sub_epi32(_mm256_setzero_si256(),
				                           _mm256_slli_epi32(_mm256_madd_epi16(sc16, ld256(y + 260)), 2));
			}
		}
#pragma GCC unroll 2
		for (int k = 0; k < 2; k++) {
			const __m256i q = ld256(x + 32 + 32 * k);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				const int g = 4 * k + s;
				const __m256i h = _mm256_and_si256(hm, _mm256_set1_epi8((char)(1 << g)));
				const __m256i v = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3), HBIT_TO(h, g, 2));
				const __m256i scv = pair_scales_i8(sc, g);
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
					const uint8_t *y = a + j * as + Q8K * i + 4 + 32 * g;
					isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(v, ld256(y)), scv));
					FI_KEEP(isum[j]);
				}
			}
		}
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const float dy = ld_f32(a + j * as + Q8K * i);
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

FI_DEFINE_GEMM(gemm_q2_K, tile_q2_K)
FI_DEFINE_GEMM(gemm_q3_K, tile_q3_K)
FI_DEFINE_GEMM(gemm_q4_K, tile_q4_K)
FI_DEFINE_GEMM(gemm_q5_K, tile_q5_K)
FI_DEFINE_GEMM(gemm_q6_K, tile_q6_K)

fi_gemm_fn fi_avx2_gemm_k(int wt) {
	switch (wt) {
	case FI_Q2_K: return gemm_q2_K;
	case FI_Q3_K: return gemm_q3_K;
	case FI_Q4_K: return gemm_q4_K;
	case FI_Q5_K: return gemm_q5_K;
	case FI_Q6_K: return gemm_q6_K;
	}
	return 0;
}
