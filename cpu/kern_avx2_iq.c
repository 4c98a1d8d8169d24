//go:build cgo

// AVX2 dot products of the 4-bit table types as stored in files, one
// weight row at a time against up to 4 activation rows (kern_avx2.h's
// tiles): IQ4_NL and MXFP4 with Q8_0 activations, IQ4_XS with Q8_K. They
// serve decode and prefill of unpacked weights and the rows of a packed
// matrix past its last group of 8 (kern_pack.go); packed weights take
// kern_avx2_iqpk.c.
//
// Per block of 32 the 16 nibble bytes become 32 levels with one pshufb
// (kern_avx2_iq.h), the algorithm of ggml's ggml_vec_dot_iq4_nl_q8_0,
// ggml_vec_dot_mxfp4_q8_0 and ggml_vec_dot_iq4_xs_q8_K: decoded once per
// weight row and block, multiplied with each activation row by
// pmaddubsw/pmaddwd (exact int32 sums), then scaled and accumulated in
// float32 lanes with FMA. IQ4_XS weights each 32-element sub-block's sum by
// its 6-bit scale in pmaddwd, so a super-block's sum stays an exact int32
// (at most 8 · 32 · 32 · 127 · 127 < 2^31 in magnitude) and takes one FMA;
// quant's reference adds one float term per sub-block. Results differ from
// quant's only in float rounding order.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_iq.h"

// FI_IQ_B32_TILE(name, BB, QOFF, kv, dw) defines the tile of a 32-element
// block type of BB bytes whose 16 nibble bytes start at QOFF (element l in
// the low nibble of byte l, element l+16 in the high nibble), with levels
// kv and the float scale dw(x) of the block at x, against Q8_0.
#define FI_IQ_B32_TILE(name, BB, QOFF, kv, dw)                                                          \
	FI_INLINE void name(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,      \
	                    int64_t os, const int na) {                                                    \
		__m256 acc[4];                                                                                 \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();             \
		const __m256i tbl = iq_table(kv), m4 = _mm256_set1_epi8(0x0f);                                 \
		const int64_t nb = cols / 32;                                                                  \
		for (int64_t i = 0; i < nb; i++) {                                                             \
			const uint8_t *x = w + (BB) * i;                                                           \
			const float d = dw(x);                                                                     \
			const __m128i q = ld128(x + (QOFF));                                                       \
			const __m256i v = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4)); \
			const __m256i av = _mm256_sign_epi8(v, v);                                                 \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                     \
				const uint8_t *y = a + j * as + 34 * i;                                                \
				const __m256 p = _mm256_cvtepi32_ps(dot_i8(v, av, ld256(y + 2)));                      \
				acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * ld_f16(y)), p, acc[j]);                    \
				FI_KEEP(acc[j]);                                                                       \
			}                                                                                          \
		}                                                                                              \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = hsum_ps(acc[j]);            \
	}

FI_INLINE float iq4_nl_d(const uint8_t *x) { return ld_f16(x); }
FI_INLINE float mxfp4_d(const uint8_t *x) { return e8m0_half(x[0]); }

// IQ4_NL: 18-byte blocks, fp16 d then 16 nibble bytes; x = d·kv[q].
FI_IQ_B32_TILE(tile_iq4_nl, 18, 2, fi_kv_iq4nl, iq4_nl_d)
// MXFP4: 17-byte blocks, an E8M0 exponent e then 16 nibble bytes;
// x = 2^(e-128)·kv[q] (kv the doubled E2M1 levels).
FI_IQ_B32_TILE(tile_mxfp4, 17, 1, fi_kv_mxfp4, mxfp4_d)

#define Q8K 292

// IQ4_XS: 136-byte super-blocks: fp16 d, the scales' high bits (16), their
// low nibbles (4 bytes), 128 nibble bytes (sub-block ib at 8 + 16·ib, as
// IQ4_NL's); x = d·(ls-32)·kv[q].
FI_INLINE void tile_iq4_xs(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,
                           int64_t os, const int na) {
	__m256 acc[4];
	_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();
	const __m256i tbl = iq_table(fi_kv_iq4nl), m4 = _mm256_set1_epi8(0x0f);
	const int64_t nb = cols / 256;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *x = w + 136 * i;
		const float d = ld_f16(x);
		// the 8 scales as int16 in both halves, for bcast16
		const __m256i sc =
		    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_cvtsi64_si128((long long)iq4xs_scales(x))));
		__m256i isum[4];
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int ib = 0; ib < 8; ib++) {
			const __m128i q = ld128(x + 8 + 16 * ib);
			const __m256i v = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4));
			const __m256i av = _mm256_sign_epi8(v, v);
			const __m256i s = bcast16(sc, ib);
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {
				const uint8_t *y = a + j * as + Q8K * i + 4 + 32 * ib;
				const __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(ld256(y), v));
				isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, s));
				FI_KEEP(isum[j]);
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

FI_DEFINE_GEMM(gemm_iq4_nl, tile_iq4_nl)
FI_DEFINE_GEMM(gemm_mxfp4, tile_mxfp4)
FI_DEFINE_GEMM(gemm_iq4_xs, tile_iq4_xs)

fi_gemm_fn fi_avx2_gemm_iq(int wt) {
	switch (wt) {
	case FI_IQ4_NL: return gemm_iq4_nl;
	case FI_MXFP4: return gemm_mxfp4;
	case FI_IQ4_XS: return gemm_iq4_xs;
	}
	return 0;
}
