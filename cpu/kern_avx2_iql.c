//go:build cgo

// AVX2 dot products of the lattice types against Q8_K activations, one
// weight row at a time against up to 4 activation rows (kern_avx2.h's
// tiles): IQ2_XXS, IQ3_XXS, IQ3_S, IQ2_XS and IQ2_S. They serve decode and
// prefill; these types have no packed layout. IQ1_S and IQ1_M are in
// kern_avx2_iq1.c.
//
// Per 32-element sub-block the 4 (IQ2: 8 levels each) or 8 (IQ3: 4 each)
// grid points are looked up as 64- or 32-bit words and set into one
// vector; 7-bit sign indices (IQ2_XXS, IQ2_XS, IQ3_XXS) become 8 bytes of
// ±1 each (even parity) from a table of 128 words, plain sign bytes (IQ3_S,
// IQ2_S) by pshufb and a bit test; the sign goes onto the activations
// (psignb), the grid levels (all positive) are pmaddubsw's unsigned side:
// the algorithm of ggml's ggml_vec_dot_iq2_xxs_q8_K, _iq3_xxs_, _iq3_s_,
// _iq2_xs_ and _iq2_s_q8_K. The grids are quant's (quant.LatticeGrid,
// copied in by fi_iql_set_grid when the package loads); the sign table is
// built here from its definition.
//
// Exactness: a pmaddubsw pair is at most 2·62·127 = 15748; pmaddwd by the
// odd scale 2ls+1 ≤ 31 of its sub-block (or half sub-block: IQ2_XS, IQ2_S)
// widens to int32, and a super-block's
// lane sums stay exact int32 (at most 8·32·62·127·31 < 2^31). quant adds
// float32(d·dy·bsum) per super-block; the kernels convert each lane's exact
// int32 sum and add d·dy·lanes with FMA into 8 float lanes, then the lanes,
// then apply the constant factor (1/8, 1/4, 1): results differ from quant's
// only in float rounding order.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

// The expanded grids (quant.LatticeGrid) and the parity signs: fi_signs8[i]
// holds byte j = -1 where bit j of i | parity(i)<<7 is set, else +1 (quant's
// ksignsIQ2XS and signMul).
static uint64_t fi_grid_iq2xxs[256];
static uint32_t fi_grid_iq3xxs[256];
static uint32_t fi_grid_iq3s[512];
static uint64_t fi_grid_iq2xs[512];
static uint64_t fi_grid_iq2s[1024];
static uint64_t fi_signs8[128];
static int fi_iql_ready;

int fi_iql_set_grid(int wt, const int8_t *g, int64_t n) {
	for (int i = 0; i < 128; i++) {
		const int s = i | (__builtin_popcount(i) & 1) << 7;
		uint64_t v = 0;
		for (int j = 0; j < 8; j++) v |= (uint64_t)(s >> j & 1 ? 0xff : 0x01) << (8 * j);
		fi_signs8[i] = v;
	}
	switch (wt) {
	case FI_IQ2_XXS:
		if (n != (int64_t)sizeof fi_grid_iq2xxs) return -1;
		memcpy(fi_grid_iq2xxs, g, n);
		fi_iql_ready |= 1;
		return 0;
	case FI_IQ3_XXS:
		if (n != (int64_t)sizeof fi_grid_iq3xxs) return -1;
		memcpy(fi_grid_iq3xxs, g, n);
		fi_iql_ready |= 2;
		return 0;
	case FI_IQ3_S:
		if (n != (int64_t)sizeof fi_grid_iq3s) return -1;
		memcpy(fi_grid_iq3s, g, n);
		fi_iql_ready |= 4;
		return 0;
	case FI_IQ2_XS:
		if (n != (int64_t)sizeof fi_grid_iq2xs) return -1;
		memcpy(fi_grid_iq2xs, g, n);
		fi_iql_ready |= 8;
		return 0;
	case FI_IQ2_S:
		if (n != (int64_t)sizeof fi_grid_iq2s) return -1;
		memcpy(fi_grid_iq2s, g, n);
		fi_iql_ready |= 16;
		return 0;
	}
	return -1;
}

#define Q8K 292

// signs4 returns the ±1 bytes of the four 7-bit sign indices in aux (bits
// 7l..7l+6 for the 8 weights l), in order.
FI_INLINE __m256i signs4(uint32_t aux) {
	return _mm256_set_epi64x((long long)fi_signs8[aux >> 21 & 127], (long long)fi_signs8[aux >> 14 & 127],
	                         (long long)fi_signs8[aux >> 7 & 127], (long long)fi_signs8[aux & 127]);
}

// FI_IQL_TILE(name, BB, grid_fn, factor) defines the tile of a lattice
// type of BB-byte super-blocks: grid_fn(x, ib, &s, &ls) returns sub-block
// ib's 32 grid levels and sets s to their ±1 signs and ls to the odd
// scales (1 + 2·4-bit scale) of its 16 pmaddubsw pairs as int16; the
// result is factor·Σ d·dy·Σ_ib Σ ls·g·s·y.
#define FI_IQL_TILE(name, BB, grid_fn, factor)                                                            \
	FI_INLINE void name(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,       \
	                    int64_t os, const int na) {                                                     \
		__m256 acc[4];                                                                                  \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();              \
		const int64_t nb = cols / 256;                                                                  \
		for (int64_t i = 0; i < nb; i++) {                                                              \
			const uint8_t *x = w + (BB) * i;                                                            \
			__m256i isum[4];                                                                            \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) isum[j] = _mm256_setzero_si256();      \
			_Pragma("GCC unroll 2") for (int ib = 0; ib < 8; ib++) {                                    \
				__m256i s, ls;                                                                          \
				const __m256i g = grid_fn(x, ib, &s, &ls);                                              \
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                  \
					const uint8_t *y = a + j * as + Q8K * i + 4 + 32 * ib;                              \
					const __m256i p = _mm256_maddubs_epi16(g, _mm256_sign_epi8(ld256(y), s));           \
					isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, ls));                      \
					FI_KEEP(isum[j]);                                                                   \
				}                                                                                       \
			}                                                                                           \
			const float d = ld_f16(x);                                                                  \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                      \
				const float dy = ld_f32(a + j * as + Q8K * i);                                          \
				acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);  \
				FI_KEEP(acc[j]);                                                                        \
			}                                                                                           \
		}                                                                                               \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = (factor) * hsum_ps(acc[j]);  \
	}

// plain_signs returns ±1 bytes from 32 plain sign bits (bit k of s for
// weight k: -1 where set): each sign byte is spread over its 8 weights by
// pshufb and tested against one bit per byte.
FI_INLINE __m256i plain_signs(uint32_t s) {
	const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s),
	                                          _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
	                                                            0x0101010101010101ll, 0));
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(1));
}

// scales2 returns the odd scales of a sub-block with one 4-bit scale per
// 16 weights (low nibble of sc: the first 16), as the int16 pmaddwd factor
// of each half.
FI_INLINE __m256i scales2(uint8_t sc) {
	return _mm256_set_m128i(_mm_set1_epi16((short)(2 * (sc >> 4) + 1)), _mm_set1_epi16((short)(2 * (sc & 15) + 1)));
}

// IQ2_XXS: 66-byte super-blocks: fp16 d, then per sub-block 4 grid indices
// (bytes) and a little-endian word of sign indices and scale.
FI_INLINE __m256i iq2xxs_grid(const uint8_t *x, int ib, __m256i *s, __m256i *ls) {
	const uint8_t *q = x + 2 + 8 * ib;
	const uint32_t aux = ld_u32(q + 4);
	*s = signs4(aux);
	*ls = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
	return _mm256_set_epi64x((long long)fi_grid_iq2xxs[q[3]], (long long)fi_grid_iq2xxs[q[2]],
	                         (long long)fi_grid_iq2xxs[q[1]], (long long)fi_grid_iq2xxs[q[0]]);
}

// IQ3_XXS: 98-byte super-blocks: fp16 d, 64 grid indices (8 per sub-block,
// 4 weights each), then one word of sign indices and scale per sub-block.
FI_INLINE __m256i iq3xxs_grid(const uint8_t *x, int ib, __m256i *s, __m256i *ls) {
	const uint8_t *q = x + 2 + 8 * ib;
	const uint32_t aux = ld_u32(x + 2 + 64 + 4 * ib);
	*s = signs4(aux);
	*ls = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
	const uint32_t *g = fi_grid_iq3xxs;
	return _mm256_set_epi32((int)g[q[7]], (int)g[q[6]], (int)g[q[5]], (int)g[q[4]], (int)g[q[3]], (int)g[q[2]],
	                        (int)g[q[1]], (int)g[q[0]]);
}

// IQ3_S: 110-byte super-blocks: fp16 d, 64 grid index low bytes, 8 bytes
// of their 9th bits (bit k of byte ib for index k of sub-block ib), 32
// plain sign bytes, 4 bytes of 4-bit scales (low nibble: even sub-block).
FI_INLINE __m256i iq3s_grid(const uint8_t *x, int ib, __m256i *s, __m256i *ls) {
	const uint8_t *q = x + 2 + 8 * ib;
	const unsigned h = x[66 + ib];
	const uint32_t *g = fi_grid_iq3s;
	*s = plain_signs(ld_u32(x + 74 + 4 * ib));
	*ls = _mm256_set1_epi16((short)(2 * (x[106 + ib / 2] >> (4 * (ib % 2)) & 15) + 1));
	return _mm256_set_epi32((int)g[q[7] | (h << 1 & 256)], (int)g[q[6] | (h << 2 & 256)], (int)g[q[5] | (h << 3 & 256)],
	                        (int)g[q[4] | (h << 4 & 256)], (int)g[q[3] | (h << 5 & 256)], (int)g[q[2] | (h << 6 & 256)],
	                        (int)g[q[1] | (h << 7 & 256)], (int)g[q[0] | (h << 8 & 256)]);
}

// IQ2_XS: 74-byte super-blocks: fp16 d, 32 little-endian uint16s (9-bit
// grid index | 7-bit sign index << 9, one per 8 weights), 8 scale bytes.
FI_INLINE __m256i iq2xs_grid(const uint8_t *x, int ib, __m256i *s, __m256i *ls) {
	uint16_t q[4];
	memcpy(q, x + 2 + 8 * ib, 8);
	*s = _mm256_set_epi64x((long long)fi_signs8[q[3] >> 9], (long long)fi_signs8[q[2] >> 9],
	                       (long long)fi_signs8[q[1] >> 9], (long long)fi_signs8[q[0] >> 9]);
	*ls = scales2(x[66 + ib]);
	return _mm256_set_epi64x((long long)fi_grid_iq2xs[q[3] & 511], (long long)fi_grid_iq2xs[q[2] & 511],
	                         (long long)fi_grid_iq2xs[q[1] & 511], (long long)fi_grid_iq2xs[q[0] & 511]);
}

// IQ2_S: 82-byte super-blocks: fp16 d, 32 grid index low bytes, 32 plain
// sign bytes, 8 bytes of the indices' top 2 bits (bits 2l, 2l+1 of byte ib
// for index l of sub-block ib), 8 scale bytes.
FI_INLINE __m256i iq2s_grid(const uint8_t *x, int ib, __m256i *s, __m256i *ls) {
	const uint8_t *q = x + 2 + 4 * ib;
	const unsigned h = x[66 + ib];
	const uint64_t *g = fi_grid_iq2s;
	*s = plain_signs(ld_u32(x + 34 + 4 * ib));
	*ls = scales2(x[74 + ib]);
	return _mm256_set_epi64x((long long)g[q[3] | (h << 2 & 0x300)], (long long)g[q[2] | (h << 4 & 0x300)],
	                         (long long)g[q[1] | (h << 6 & 0x300)], (long long)g[q[0] | (h << 8 & 0x300)]);
}

FI_IQL_TILE(tile_iq2_xxs, 66, iq2xxs_grid, 0.125f)
FI_IQL_TILE(tile_iq3_xxs, 98, iq3xxs_grid, 0.25f)
FI_IQL_TILE(tile_iq3_s, 110, iq3s_grid, 1.0f)
FI_IQL_TILE(tile_iq2_xs, 74, iq2xs_grid, 0.125f)
FI_IQL_TILE(tile_iq2_s, 82, iq2s_grid, 0.125f)

FI_DEFINE_GEMM(gemm_iq2_xxs, tile_iq2_xxs)
FI_DEFINE_GEMM(gemm_iq3_xxs, tile_iq3_xxs)
FI_DEFINE_GEMM(gemm_iq3_s, tile_iq3_s)
FI_DEFINE_GEMM(gemm_iq2_xs, tile_iq2_xs)
FI_DEFINE_GEMM(gemm_iq2_s, tile_iq2_s)

fi_gemm_fn fi_avx2_gemm_iql(int wt) {
	switch (wt) {
	case FI_IQ2_XXS: return fi_iql_ready & 1 ? gemm_iq2_xxs : 0;
	case FI_IQ3_XXS: return fi_iql_ready & 2 ? gemm_iq3_xxs : 0;
	case FI_IQ3_S: return fi_iql_ready & 4 ? gemm_iq3_s : 0;
	case FI_IQ2_XS: return fi_iql_ready & 8 ? gemm_iq2_xs : 0;
	case FI_IQ2_S: return fi_iql_ready & 16 ? gemm_iq2_s : 0;
	}
	return 0;
}
