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
// Each super-block is decoded once for all activation rows (iq1_pre): its
// 32 indices, shift signs and scales with a few vector operations, the
// indices stored to memory and read back one load each for the table
// lookups (measured 2.2 -> 3.1 GB/s per CPU second on IQ1_M decode against
// computing each index with scalar shifts). The tile decodes FI_IQ1_AHEAD
// super-blocks ahead of their products: a 16-bit load from a vector store
// still in flight is not forwarded and waits for the store to complete
// (decode 2.7 -> 3.6 GB/s per CPU second on IQ1_S, 3.1 -> 3.7 on IQ1_M).
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

// iq1_pre is a super-block's decoding, shared by all activation rows: the
// 32 grid indices (one per 8 weights), the 32 (IQ1_M) or 8 (IQ1_S) shift
// signs as ±1 bytes, and the scales as int16s, placed for bcast16.
typedef struct {
	uint16_t idx[32];
	int8_t delta[32];
	__m256i ls;
} iq1_pre;

// FI_IQ1_MEM(p) makes the compiler read p's indices back from memory (one
// load each) rather than extract them from the vectors that computed them
// (two shuffle-port uops each, on the ports the products need).
#define FI_IQ1_MEM(p) __asm__("" : "+m"((p)->idx), "+m"((p)->delta))

// FI_IQ1_AHEAD: super-blocks decoded ahead of their products (4 measured
// as fast as 8 and 16).
#define FI_IQ1_AHEAD 4

// FI_IQ1_TILE(name, BB, prep_fn, sub_fn) defines the tile of an IQ1 type
// of BB-byte super-blocks: prep_fn(x, &pre) decodes a super-block's
// indices, shifts and scales and returns its fp16 scale d;
// sub_fn(&pre, ib, &w, &ls) returns sub-block ib's 32 weights 8g+δ as |w|
// and sets w to them (signed) and ls to the scales of its 16 pmaddubsw
// pairs as int16. The result is 1/8·Σ d·dy·Σ_ib Σ ls·(8g+δ)·y.
#define FI_IQ1_TILE(name, BB, prep_fn, sub_fn)                                                            \
	FI_INLINE void name(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,       \
	                    int64_t os, const int na) {                                                     \
		__m256 acc[4];                                                                                  \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc[j] = _mm256_setzero_ps();              \
		const int64_t nb = cols / 256;                                                                  \
		iq1_pre pres[FI_IQ1_AHEAD];                                                                     \
		float ds[FI_IQ1_AHEAD];                                                                         \
		for (int64_t i = 0; i < nb; i++) {                                                              \
			if (i % FI_IQ1_AHEAD == 0)                                                                  \
				for (int64_t k = i; k < nb && k < i + FI_IQ1_AHEAD; k++)                                \
					ds[k - i] = prep_fn(w + (BB) * k, &pres[k - i]);                                    \
			const iq1_pre *pre = &pres[i % FI_IQ1_AHEAD];                                               \
			const float d = ds[i % FI_IQ1_AHEAD];                                                       \
			__m256i isum[4];                                                                            \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) isum[j] = _mm256_setzero_si256();      \
			_Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {                                    \
				__m256i sw, ls;                                                                         \
				const __m256i aw = sub_fn(pre, ib, &sw, &ls);                                          \
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                  \
					const uint8_t *y = a + j * as + Q8K * i + 4 + 32 * ib;                              \
					const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(ld256(y), sw));         \
					isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, ls));                      \
					FI_KEEP(isum[j]);                                                                   \
				}                                                                                       \
			}                                                                                           \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                      \
				const float dy = ld_f32(a + j * as + Q8K * i);                                          \
				acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[j]), acc[j]);  \
				FI_KEEP(acc[j]);                                                                        \
			}                                                                                           \
		}                                                                                               \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) out[j * os] = 0.125f * hsum_ps(acc[j]);    \
	}

// grid4 returns the 8g bytes of the grid points of indices idx[0..3]
// (weights 0-7 from idx[0]).
FI_INLINE __m256i grid4(const uint16_t *idx) {
	return _mm256_set_epi64x((long long)fi_grid_iq1[idx[3]], (long long)fi_grid_iq1[idx[2]],
	                         (long long)fi_grid_iq1[idx[1]], (long long)fi_grid_iq1[idx[0]]);
}

// IQ1_S: 50-byte super-blocks: fp16 d, 32 grid index low bytes, then per
// sub-block a little-endian uint16: the indices' high 3 bits (bits 3l..3l+2
// for index l), the 3-bit scale (bits 12-14) and δ's sign (bit 15: -).
FI_INLINE float iq1s_prep(const uint8_t *x, iq1_pre *p) {
	const __m128i qh = ld128(x + 34);
	const __m256i qh2 = _mm256_broadcastsi128_si256(qh);
	const __m256i qs = ld256(x + 2);
	// Index k's high bits come from word k/4, bits 3(k%4)..: each word
	// repeated 4 times, moved to bits 9-11 by a multiply by 2^(9-3(k%4)),
	// masked and shifted down to bits 8-10.
	const __m256i mul = _mm256_set1_epi64x(0x0001000800400200ll);
	const __m256i m = _mm256_set1_epi16(0x0e00);
	for (int h = 0; h < 2; h++) {
		const __m256i rep = _mm256_shuffle_epi8(
		    qh2, h ? _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 12, 13, 12, 13, 12, 13,
		                              12, 13, 14, 15, 14, 15, 14, 15, 14, 15)
		           : _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6,
		                              7, 6, 7, 6, 7));
		const __m256i hi = _mm256_srli_epi16(_mm256_and_si256(_mm256_mullo_epi16(rep, mul), m), 1);
		const __m128i lo = h ? _mm256_extracti128_si256(qs, 1) : _mm256_castsi256_si128(qs);
		_mm256_storeu_si256((__m256i *)(p->idx + 16 * h), _mm256_or_si256(hi, _mm256_cvtepu8_epi16(lo)));
	}
	const __m128i ls = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1),
	                                _mm_set1_epi16(1));
	p->ls = _mm256_broadcastsi128_si256(ls);
	const __m128i dl = _mm_or_si128(_mm_srai_epi16(qh, 15), _mm_set1_epi16(1)); // ±1 per sub-block
	_mm_storel_epi64((__m128i *)p->delta, _mm_packs_epi16(dl, dl));
	FI_IQ1_MEM(p);
	return ld_f16(x);
}

FI_INLINE __m256i iq1s_sub(const iq1_pre *p, int ib, __m256i *sw, __m256i *ls) {
	*sw = _mm256_add_epi8(grid4(p->idx + 4 * ib), _mm256_set1_epi8(p->delta[ib]));
	*ls = bcast16(p->ls, ib);
	return _mm256_abs_epi8(*sw);
}

// IQ1_M: 56-byte super-blocks: 32 grid index low bytes; 16 bytes, one per
// two indices (bits 0-2 and 4-6: their high bits; bits 3 and 7: their δ
// signs); 4 little-endian uint16s holding the 3-bit scales of the 16-weight
// halves (bits 6k..6k+5 for sub-block 2j+k of word j: first half low) and,
// in their top nibbles, the fp16 super-block scale.
FI_INLINE float iq1m_prep(const uint8_t *x, iq1_pre *p) {
	const __m128i qh = ld128(x + 32), m4 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(7), b3 = _mm_set1_epi8(8);
	const __m128i lo = _mm_and_si128(qh, m4), hi = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
	for (int h = 0; h < 2; h++) {
		// nib byte k: the 4 bits of index 16h+k (high bits, δ sign)
		const __m128i nib = h ? _mm_unpackhi_epi8(lo, hi) : _mm_unpacklo_epi8(lo, hi);
		const __m128i qs = ld128(x + 16 * h), h3 = _mm_and_si128(nib, m3);
		_mm_storeu_si128((__m128i *)(p->idx + 16 * h), _mm_unpacklo_epi8(qs, h3));
		_mm_storeu_si128((__m128i *)(p->idx + 16 * h + 8), _mm_unpackhi_epi8(qs, h3));
		const __m128i neg = _mm_cmpeq_epi8(_mm_and_si128(nib, b3), b3);
		_mm_storeu_si128((__m128i *)(p->delta + 16 * h), _mm_or_si128(neg, _mm_set1_epi8(1)));
	}
	FI_IQ1_MEM(p);
	// The 16 scales: 64-bit lane s holds field s' (bits 3s'..3s'+2, s' =
	// 0, 2, 1, 3 for s = 0..3) of the 4 words, so sub-block 2j+k's halves
	// are int16 4k+j of the low and of the high 128 bits.
	uint64_t sc;
	memcpy(&sc, x + 48, 8);
	const __m256i v = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x((long long)sc), _mm256_set_epi64x(9, 3, 6, 0)),
	                                   _mm256_set1_epi16(7));
	p->ls = _mm256_or_si256(_mm256_slli_epi16(v, 1), _mm256_set1_epi16(1));
	// the fp16 scale from the top nibbles of the words (word j's: bits 4j..4j+3)
	const unsigned u = (unsigned)(sc >> 12 & 0x000f) | (unsigned)(sc >> 24 & 0x00f0) | (unsigned)(sc >> 36 & 0x0f00) |
	                   (unsigned)(sc >> 48 & 0xf000);
	return _cvtsh_ss((unsigned short)u);
}

FI_INLINE __m256i iq1m_sub(const iq1_pre *p, int ib, __m256i *sw, __m256i *ls) {
	// δ bytes 4ib..4ib+3, each over its 8 weights
	const __m256i dl = _mm256_shuffle_epi8(_mm256_set1_epi32((int)ld_u32((const uint8_t *)p->delta + 4 * ib)),
	                                       _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
	                                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
	*sw = _mm256_add_epi8(grid4(p->idx + 4 * ib), dl);
	*ls = bcast16(p->ls, 4 * (ib % 2) + ib / 2);
	return _mm256_abs_epi8(*sw);
}

FI_IQ1_TILE(tile_iq1_s, 50, iq1s_prep, iq1s_sub)
FI_IQ1_TILE(tile_iq1_m, 56, iq1m_prep, iq1m_sub)

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
