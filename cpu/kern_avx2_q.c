//go:build cgo

// AVX2 dot products of the 32-element block types with their Q8_0 / Q8_1
// activations: Q8_0, Q4_0, Q5_0 (x Q8_0) and Q4_1, Q5_1 (x Q8_1). Per block
// the weights are unpacked to 32 bytes once, multiplied with each activation
// row by pmaddubsw/pmaddwd (exact int32 sums), converted to float and
// accumulated with FMA as d_w*d_a*sum; Q4_1/Q5_1 add m_w*s_a per block
// (s_a the activation block's fp16 d*sum(q), as quant.DotQ4_1 does).

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

// Q8_0 weights: 34-byte blocks, fp16 d then 32 int8.
FI_INLINE void tile_q8_0(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const int64_t nb = cols / 32;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 34 * i;
		const float dw = ld_f16(x);
		const __m256i v = ld256(x + 2);
		const __m256i av = _mm256_sign_epi8(v, v);
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + 34 * i;
			__m256 p = _mm256_cvtepi32_ps(dot_i8(v, av, ld256(y + 2)));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ld_f16(y)), p, acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// Q4_0 weights: 18-byte blocks, fp16 d then 16 bytes; element l in the low
// nibble of byte l, element l+16 in the high nibble; x = d*(q-8).
FI_INLINE void tile_q4_0(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0x0f), m8 = _mm256_set1_epi8(8);
	const int64_t nb = cols / 32;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 18 * i;
		const float dw = ld_f16(x);
		const __m128i q = ld128(x + 2);
		__m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
		v = _mm256_sub_epi8(v, m8);
		const __m256i av = _mm256_sign_epi8(v, v);
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + 34 * i;
			__m256 p = _mm256_cvtepi32_ps(dot_i8(v, av, ld256(y + 2)));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ld_f16(y)), p, acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// Q5_0 weights: 22-byte blocks, fp16 d, uint32 qh (bit l: fifth bit of
// element l), 16 nibble bytes as Q4_0; x = d*(q-16).
FI_INLINE void tile_q5_0(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0x0f), mf0 = _mm256_set1_epi8((char)0xf0);
	const int64_t nb = cols / 32;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 22 * i;
		const float dw = ld_f16(x);
		const __m128i q = ld128(x + 6);
		__m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
		// fifth bit clear: q-16 = q|0xf0 as int8; set: q.
		v = _mm256_or_si256(v, _mm256_andnot_si256(bits_to_bytes(ld_u32(x + 2)), mf0));
		const __m256i av = _mm256_sign_epi8(v, v);
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + 34 * i;
			__m256 p = _mm256_cvtepi32_ps(dot_i8(v, av, ld256(y + 2)));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ld_f16(y)), p, acc[j]);
			FI_KEEP(acc[j]);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);
}

// Q4_1 weights: 20-byte blocks, fp16 d, fp16 m, 16 nibble bytes; x = d*q+m.
// Activations Q8_1: 36-byte blocks, fp16 d, fp16 s, 32 int8.
FI_INLINE void tile_q4_1(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	float accm[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps(), accm[j] = 0;
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const int64_t nb = cols / 32;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 20 * i;
		const float dw = ld_f16(x), mw = ld_f16(x + 2);
		const __m128i q = ld128(x + 4);
		const __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + 36 * i;
			__m256 p = _mm256_cvtepi32_ps(dot_u8(v, ld256(y + 4)));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ld_f16(y)), p, acc[j]);
			FI_KEEP(acc[j]);
			accm[j] += mw * ld_f16(y + 2);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]) + accm[j];
}

// Q5_1 weights: 24-byte blocks, fp16 d, fp16 m, uint32 qh, 16 nibble bytes;
// x = d*q+m with 5-bit q.
FI_INLINE void tile_q5_1(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                         int64_t os, const int na) {
	__m256 acc[4];
	float accm[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps(), accm[j] = 0;
	const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
	const int64_t nb = cols / 32;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 24 * i;
		const float dw = ld_f16(x), mw = ld_f16(x + 2);
		const __m128i q = ld128(x + 8);
		__m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
		v = _mm256_or_si256(v, _mm256_and_si256(bits_to_bytes(ld_u32(x + 4)), m10));
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
			const uint8_t *y = a + j * as + 36 * i;
			__m256 p = _mm256_cvtepi32_ps(dot_u8(v, ld256(y + 4)));
			acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ld_f16(y)), p, acc[j]);
			FI_KEEP(acc[j]);
			accm[j] += mw * ld_f16(y + 2);
		}
	}
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]) + accm[j];
}

FI_DEFINE_GEMM(gemm_q8_0, tile_q8_0)
FI_DEFINE_GEMM(gemm_q4_0, tile_q4_0)
FI_DEFINE_GEMM(gemm_q5_0, tile_q5_0)
FI_DEFINE_GEMM(gemm_q4_1, tile_q4_1)
FI_DEFINE_GEMM(gemm_q5_1, tile_q5_1)

fi_gemm_fn fi_avx2_gemm_q(int wt) {
	switch (wt) {
	case FI_Q8_0: return gemm_q8_0;
	case FI_Q4_0: return gemm_q4_0;
	case FI_Q5_0: return gemm_q5_0;
	case FI_Q4_1: return gemm_q4_1;
	case FI_Q5_1: return gemm_q5_1;
	}
	return 0;
}
