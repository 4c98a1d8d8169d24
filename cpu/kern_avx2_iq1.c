//go:build cgo

// AVX2 dot products of IQ1_S and IQ1_M against Q8_K activations, one
// weight row at a time against up to 4 activation rows (kern_avx2.h's
// tiles). They serve decode and prefill; these types have no packed
// layout.
//
// Both types store, per 8 weights, an 11-bit index into a grid of points
// whose 8 coordinates are -1, 0 or +1, and a shift δ = ±1/8 added to every
// coordinate (IQ1_S: one δ per 32 weights; IQ1_M: one per 8), with odd
// scales 2ls+1 (IQ1_S: per 32 weights; IQ1_M: per 16). ggml's
// ggml_vec_dot_iq1_s_q8_K and ggml_vec_dot_iq1_m_q8_K multiply the grid
// points and the shifts separately (two pmaddubsw per 32 weights; IQ1_S
// takes the shift part from the Q8_K group sums). Here each weight is
// 8·(g + δ) = 8g ± 1, one signed byte in {-9, -7, -1, 1, 7, 9}: the table
// holds 8g, δ's ±1 bytes are added, and one pmaddubsw (|w| unsigned, the
// sign moved onto the activations with psignb, w never 0) gives both parts
// at once: Σ (8g+δ)·y = 8·Σ g·y + Σ δ·y, the integers quant sums as sumi
// and sumi1 (IQ1_S's bsums are the same Σ y of the Q8_K row). The 1/8 is
// applied once at the end, exactly.
//
// Exactness: a pmaddubsw pair is at most 2·9·127 = 2286; pmaddwd by the
// scale (at most 15) widens to int32, and a super-block's lane sums stay
// below 8·2·2286·15 = 548640 < 2^24, so converting them to float is exact.
// quant computes float32(sumi) + float32(0.125·float32(sumi1)) per
// super-block and adds float32(d·dy)·that in order; the kernels add
// d·dy·lane with FMA into 8 float lanes, then the lanes, then scale by
// 1/8: results differ from quant's only in float rounding order.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

// fi_grid_iq1[k] holds the 8 coordinates of grid point k (quant.LatticeGrid
// of IQ1_S) times 8, as signed bytes -8, 0 or 8.
static uint64_t fi_grid_iq1[2048];
static int fi_iq1_ready;

int fi_iq1_set_grid(const int8_t *g, int64_t n) {
	if (n != 8 * 2048) return -1;
	for (int k = 0; k < 2048; k++) {
		uint64_t v = 0;
		for (int j = 0; j < 8; j++) {
			const int c = g[8 * k + j];
			if (c < -1 || c > 1) return -1;
			v |= (uint64_t)(uint8_t)(int8_t)(8 * c) << (8 * j);
		}
		fi_grid_iq1[k] = v;
	}
	fi_iq1_ready = 1;
	return 0;
}

#define Q8K 292

// ld_u16 reads a little-endian uint16.
FI_INLINE unsigned ld_u16(const uint8_t *p) {
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

// FI_IQ1_TILE(name, BB, weights_fn, dscale_fn) defines the tile of an IQ1
// type of BB-byte super-blocks: weights_fn(x, ib, &w, &ls) returns sub-block
// ib's 32 weights 8g+δ as |w| and sets w to them (signed) and ls to the
// scales of its 16 pmaddubsw pairs as int16; dscale_fn(x) is the fp16
// super-block scale. The result is 1/8·Σ d·dy·Σ_ib Σ ls·(8g+δ)·y.
#define FI_IQ1_TILE(name, BB, weights_fn, dscale_fn)                                                      \
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
				__m256i sw, ls;                                                                         \
				const __m256i aw = weights_fn(x, ib, &sw, &ls);                                         \
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                  \
					const uint8_t *y = a + j * as + Q8K * i + 4 + 32 * ib;                              \
					const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(ld256(y), sw));         \
					isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, ls));                      \
					FI_KEEP(isum[j]);                                                                   \
				}                                                                                       \
			}                                                                                           \
			const float d = dscale_fn(x);                                                               \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                      \
				const float dy = ld_f32(a + j * as + Q8K * i);                                          \
				acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);  \
				FI_KEEP(acc[j]);                                                                        \
			}                                                                                           \
		}                                                                                               \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = 0.125f * hsum_ps(acc[j]);    \
	}

// grid4 returns the 8g bytes of grid points i0..i3 (weights 0-7 from i0).
FI_INLINE __m256i grid4(unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
	return _mm256_set_epi64x((long long)fi_grid_iq1[i3], (long long)fi_grid_iq1[i2], (long long)fi_grid_iq1[i1],
	                         (long long)fi_grid_iq1[i0]);
}

// IQ1_S: 50-byte super-blocks: fp16 d, 32 grid index low bytes, then per
// sub-block a little-endian uint16: the indices' high 3 bits (bits 3l..3l+2
// for index l), the 3-bit scale (bits 12-14) and δ's sign (bit 15: -).
FI_INLINE __m256i iq1s_weights(const uint8_t *x, int ib, __m256i *sw, __m256i *ls) {
	const uint8_t *q = x + 2 + 4 * ib;
	const unsigned h = ld_u16(x + 34 + 2 * ib);
	const __m256i g = grid4(q[0] | (h << 8 & 0x700), q[1] | (h << 5 & 0x700), q[2] | (h << 2 & 0x700),
	                        q[3] | (h >> 1 & 0x700));
	*sw = _mm256_add_epi8(g, _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
	*ls = _mm256_set1_epi16((short)(2 * (h >> 12 & 7) + 1));
	return _mm256_abs_epi8(*sw);
}

// IQ1_M: 56-byte super-blocks: 32 grid index low bytes; 16 bytes, one per
// two indices (bits 0-2 and 4-6: their high bits; bits 3 and 7: their δ
// signs); 4 little-endian uint16s holding the 3-bit scales of the 16-weight
// halves (bits 6k..6k+5 for sub-block 2j+k of word j: first half low) and,
// in their top nibbles, the fp16 super-block scale.
FI_INLINE __m256i iq1m_weights(const uint8_t *x, int ib, __m256i *sw, __m256i *ls) {
	const uint8_t *q = x + 4 * ib;
	const unsigned h = ld_u16(x + 32 + 2 * ib); // indices l = 0..3: bits 4l..4l+2, δ sign bit 4l+3
	const __m256i g = grid4(q[0] | (h << 8 & 0x700), q[1] | (h << 4 & 0x700), q[2] | (h & 0x700),
	                        q[3] | (h >> 4 & 0x700));
	// δ bytes: -1 for the 8 weights of index l where bit 4l+3 of h is set
	// (64-bit lane l tests it in each of its 16-bit words), else +1.
	const __m256i bit = _mm256_set_epi64x((long long)0x8000800080008000ll, 0x0800080008000800ll,
	                                      0x0080008000800080ll, 0x0008000800080008ll);
	const __m256i neg = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)h), bit), bit);
	*sw = _mm256_add_epi8(g, _mm256_or_si256(neg, _mm256_set1_epi8(1)));
	const unsigned sc = ld_u16(x + 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
	*ls = _mm256_set_m128i(_mm_set1_epi16((short)(2 * (sc >> 3 & 7) + 1)), _mm_set1_epi16((short)(2 * (sc & 7) + 1)));
	return _mm256_abs_epi8(*sw);
}

FI_INLINE float iq1s_d(const uint8_t *x) { return ld_f16(x); }

// iq1m_d gathers the fp16 scale from the top nibbles of the scale words
// (word j's holds bits 4j..4j+3).
FI_INLINE float iq1m_d(const uint8_t *x) {
	const unsigned u = ld_u16(x + 48) >> 12 | (ld_u16(x + 50) >> 8 & 0x00f0) | (ld_u16(x + 52) >> 4 & 0x0f00) |
	                   (ld_u16(x + 54) & 0xf000);
	return _cvtsh_ss((unsigned short)u);
}

FI_IQ1_TILE(tile_iq1_s, 50, iq1s_weights, iq1s_d)
FI_IQ1_TILE(tile_iq1_m, 56, iq1m_weights, iq1m_d)

FI_DEFINE_GEMM(gemm_iq1_s, tile_iq1_s)
FI_DEFINE_GEMM(gemm_iq1_m, tile_iq1_m)

fi_gemm_fn fi_avx2_gemm_iq1(int wt) {
	if (!fi_iq1_ready) return 0;
	switch (wt) {
	case FI_IQ1_S: return gemm_iq1_s;
	case FI_IQ1_M: return gemm_iq1_m;
	}
	return 0;
}
