//go:build cgo

// AVX2 dot products of the lattice types against Q8_K activations, one
// weight row at a time against up to 4 activation rows (kern_avx2.h's
// tiles): IQ2_XXS and IQ3_XXS. They serve decode and prefill; these types
// have no packed layout. The other lattice types (IQ3_S, IQ2_XS, IQ2_S,
// IQ1_S, IQ1_M) have no C kernel: fi_gemm_avx2 returns -1 for them and Go
// runs quant's dot product.
//
// Per 32-element sub-block the 4 (IQ2: 8 levels each) or 8 (IQ3: 4 each)
// grid points are looked up as 64- or 32-bit words and set into one
// vector, and the 7-bit sign indices become 8 bytes of ±1 each (even
// parity) from a table of 128 words; the sign goes onto the activations
// (psignb), the grid levels (all positive) are pmaddubsw's unsigned side:
// the algorithm of ggml's ggml_vec_dot_iq2_xxs_q8_K and
// ggml_vec_dot_iq3_xxs_q8_K. The grids are quant's (quant.LatticeGrid,
// copied in by fi_iql_set_grid when the package loads); the sign table is
// built here from its definition.
//
// Exactness: a pmaddubsw pair is at most 2·62·127 = 15748; pmaddwd by the
// sub-block's odd scale 2ls+1 ≤ 31 widens to int32, and a super-block's
// lane sums stay exact int32 (at most 8·32·62·127·31 < 2^31). quant adds
// float32(d·dy·bsum) per super-block; the kernels convert each lane's exact
// int32 sum and add d·dy·lanes with FMA into 8 float lanes, then the lanes,
// then apply the constant factor (1/8, 1/4): results differ from quant's
// only in float rounding order.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

// The expanded grids (quant.LatticeGrid) and the parity signs: fi_signs8[i]
// holds byte j = -1 where bit j of i | parity(i)<<7 is set, else +1 (quant's
// ksignsIQ2XS and signMul).
static uint64_t fi_grid_iq2xxs[256];
static uint32_t fi_grid_iq3xxs[256];
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
// type of BB-byte super-blocks: grid_fn(x, ib, &aux) returns sub-block ib's
// 32 grid levels and sets aux to its word of sign indices and scale (top
// nibble); the result is factor·Σ d·dy·Σ_ib (2·ls+1)·Σ g·s·y.
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
				uint32_t aux;                                                                           \
				const __m256i g = grid_fn(x, ib, &aux);                                                 \
				const __m256i s = signs4(aux);                                                          \
				const __m256i ls = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));                    \
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

// IQ2_XXS: 66-byte super-blocks: fp16 d, then per sub-block 4 grid indices
// (bytes) and a little-endian word of sign indices and scale.
FI_INLINE __m256i iq2xxs_grid(const uint8_t *x, int ib, uint32_t *aux) {
	const uint8_t *q = x + 2 + 8 * ib;
	*aux = ld_u32(q + 4);
	return _mm256_set_epi64x((long long)fi_grid_iq2xxs[q[3]], (long long)fi_grid_iq2xxs[q[2]],
	                         (long long)fi_grid_iq2xxs[q[1]], (long long)fi_grid_iq2xxs[q[0]]);
}

// IQ3_XXS: 98-byte super-blocks: fp16 d, 64 grid indices (8 per sub-block,
// 4 weights each), then one word of sign indices and scale per sub-block.
FI_INLINE __m256i iq3xxs_grid(const uint8_t *x, int ib, uint32_t *aux) {
	const uint8_t *q = x + 2 + 8 * ib;
	*aux = ld_u32(x + 2 + 64 + 4 * ib);
	const uint32_t *g = fi_grid_iq3xxs;
	return _mm256_set_epi32((int)g[q[7]], (int)g[q[6]], (int)g[q[5]], (int)g[q[4]], (int)g[q[3]], (int)g[q[2]],
	                        (int)g[q[1]], (int)g[q[0]]);
}

FI_IQL_TILE(tile_iq2_xxs, 66, iq2xxs_grid, 0.125f)
FI_IQL_TILE(tile_iq3_xxs, 98, iq3xxs_grid, 0.25f)

FI_DEFINE_GEMM(gemm_iq2_xxs, tile_iq2_xxs)
FI_DEFINE_GEMM(gemm_iq3_xxs, tile_iq3_xxs)

fi_gemm_fn fi_avx2_gemm_iql(int wt) {
	switch (wt) {
	case FI_IQ2_XXS: return fi_iql_ready & 1 ? gemm_iq2_xxs : 0;
	case FI_IQ3_XXS: return fi_iql_ready & 2 ? gemm_iq3_xxs : 0;
	}
	return 0;
}
