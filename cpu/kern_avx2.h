//go:build cgo

// Helpers shared by the AVX2 dot-product files (kern_avx2_*.c), which
// include this after `#pragma GCC target("avx2,fma,f16c")`.
//
// Every weight type has one tile function: the dots of ONE weight row with
// NA activation rows (NA = 1..4, a compile-time constant after inlining).
// The weight row is decoded once per block and used for all NA activation
// rows; integer sums are exact, and each block's (or super-block's) integer
// sum is scaled and accumulated in float32 lanes with FMA, so results differ
// from quant's scalar dots only in float rounding order.
//
// FI_DEFINE_GEMM turns a tile into the matrix driver: weight rows in blocks
// that stay in L2 (FI_ROW_BLOCK_BYTES), and for each block every tile of 4
// activation rows, so each weight byte is fetched from memory once per call
// and each activation tile stays in L1 while it meets the block's rows.

#ifndef FLOWINFER_KERN_AVX2_H
#define FLOWINFER_KERN_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kern_ld.h"

#define FI_INLINE static inline __attribute__((always_inline))


// FI_KEEP(v) makes the compiler materialize v in a register here: it stops
// GCC from reassociating running sums into a tree of deferred adds (which
// keeps every product alive and spills them to the stack).
#define FI_KEEP(v) __asm__("" : "+x"(v))

// ld_f16 reads a little-endian fp16 and widens it exactly (vcvtph2ps).
FI_INLINE float ld_f16(const uint8_t *p) {
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

// scale_min_k4 unpacks the 6-bit scale and min of sub-block j (0..7) from
// the 12 bytes at q of a Q4_K or Q5_K super-block (quant.scaleMinK4).
FI_INLINE void scale_min_k4(const uint8_t *q, int j, int *sc, int *m) {
	if (j < 4) {
		*sc = q[j] & 63, *m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

FI_INLINE __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
FI_INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }

// hsum_ps adds the 8 lanes.
FI_INLINE float hsum_ps(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

// dot_i8 returns 8 int32 partial sums of x·y for signed bytes x and y
// (|x| <= 127 or y != -128, else the int16 step can saturate: never for
// activations from QuantizeRow of finite values).
FI_INLINE __m256i dot_i8(__m256i x, __m256i ax, __m256i y) {
	return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x)), _mm256_set1_epi16(1));
}

// dot_u8 returns 8 int32 partial sums of x·y for x in [0, 127] unsigned and
// y signed.
FI_INLINE __m256i dot_u8(__m256i x, __m256i y) {
	return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// bits_to_bytes expands the 32 bits of x to 32 bytes: 0xff where the bit
// is set, 0 where not (byte i <- bit i).
FI_INLINE __m256i bits_to_bytes(uint32_t x) {
	const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
	                                      2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
	return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

// pair_ctl[p]: pshufb control giving bytes [2p x8, 2p+1 x8] of a 16-byte
// vector: the scales of sub-blocks 2p and 2p+1 (16 elements each) for the 32
// elements of one vector, before widening to int16.
static const uint8_t fi_pair_ctl[8][16] __attribute__((aligned(16))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

// pair_scales_i8 widens scales 2p, 2p+1 (signed bytes) to int16 halves.
FI_INLINE __m256i pair_scales_i8(__m128i sc, int p) {
	return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_load_si128((const __m128i *)fi_pair_ctl[p])));
}

// pair_scales_u8 widens scales 2p, 2p+1 (unsigned bytes) to int16 halves.
FI_INLINE __m256i pair_scales_u8(__m128i sc, int p) {
	return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sc, _mm_load_si128((const __m128i *)fi_pair_ctl[p])));
}

// bcast16_ctl[s]: pshufb control broadcasting int16 lane s of each 128-bit
// half (s in 0..7).
static const uint8_t fi_bcast16_ctl[8][32] __attribute__((aligned(32))) = {
#define FI_B(s) {2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, \
                 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1}
    FI_B(0), FI_B(1), FI_B(2), FI_B(3), FI_B(4), FI_B(5), FI_B(6), FI_B(7),
#undef FI_B
};

FI_INLINE __m256i bcast16(__m256i v, int s) {
	return _mm256_shuffle_epi8(v, _mm256_load_si256((const __m256i *)fi_bcast16_ctl[s]));
}

// fi_prefetch requests n bytes at p into the cache (no fault past the end
// of a mapping: prefetches are hints). Decode streams weights from memory;
// out-of-order execution alone does not run far enough ahead.
FI_INLINE void fi_prefetch(const uint8_t *p, int64_t n) {
	for (int64_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

// FI_PF_ROWS: how many rows ahead the decode driver prefetches.
#define FI_PF_ROWS 2

// FI_DEFINE_GEMM(name, tile) defines
//   static void name(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
//                    const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os)
// from tile(w_row, cols, a, as, out, os, NA), which writes out[j*os] for
// j < NA. FI_DEFINE_GEMM_ROWS(name, tile, rows) is the same with rows(rs,
// re, at, ot, NA) computing weight rows [rs, re) against the NA activation
// rows at at (outputs at ot) when there are several activation rows; for
// FI_DEFINE_GEMM that is one tile call per row (FI_GEMM_ROW_TILES).
// FI_DEFINE_GEMM_DR(name, decode, rows) is FI_DEFINE_GEMM_ROWS with the
// statements decode computing rows [r0, r1) against one activation row
// (FI_GEMM_DECODE_ROWS(tile): one tile call per row, the row after next
// prefetched).
#define FI_DEFINE_GEMM(name, tile) FI_DEFINE_GEMM_ROWS(name, tile, FI_GEMM_ROW_TILES(tile))
#define FI_GEMM_ROW_TILES(tile)                                                                          \
	for (int64_t r = rs; r < re; r++) tile(w + r * ws, cols, at, as, ot + r, os, NA)
#define FI_DEFINE_GEMM_ROWS(name, tile, rows) FI_DEFINE_GEMM_DR(name, FI_GEMM_DECODE_ROWS(tile), rows)
#define FI_GEMM_DECODE_ROWS(tile)                                                                        \
	for (int64_t r = r0; r < r1; r++) {                                                                  \
		fi_prefetch(w + (r + FI_PF_ROWS) * ws, ws);                                                      \
		tile(w + r * ws, cols, a, as, out + r, os, 1);                                                   \
	}
#define FI_DEFINE_GEMM_DR(name, decode, rows)                                                            \
	static void name(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a, \
	                 int64_t as, int64_t nact, float *out, int64_t os) {                                   \
		if (nact == 1) {                                                                                   \
			decode;                                                                                        \
			return;                                                                                        \
		}                                                                                                  \
		int64_t rbk = FI_ROW_BLOCK_BYTES / ws;                                                             \
		if (rbk < 2) rbk = 2;                                                                              \
		for (int64_t rs = r0; rs < r1; rs += rbk) {                                                        \
			const int64_t re = rs + rbk < r1 ? rs + rbk : r1;                                              \
			for (int64_t t = 0; t < nact; t += 4) {                                                        \
				const uint8_t *at = a + t * as;                                                            \
				float *ot = out + t * os;                                                                  \
				switch (nact - t) {                                                                        \
				case 1: { enum { NA = 1 }; rows; } break;                                                  \
				case 2: { enum { NA = 2 }; rows; } break;                                                  \
				case 3: { enum { NA = 3 }; rows; } break;                                                  \
				default: { enum { NA = 4 }; rows; }                                                        \
				}                                                                                          \
			}                                                                                              \
		}                                                                                                  \
	}

// Per-file entry points (kern_avx2_*.c), dispatched by fi_gemm_avx2.
typedef void (*fi_gemm_fn)(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
                           const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os);

fi_gemm_fn fi_avx2_gemm_q(int wt);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (kern_avx2_q.c)
fi_gemm_fn fi_avx2_gemm_k(int wt);  // Q2_K ... Q6_K (kern_avx2_k.c)
fi_gemm_fn fi_avx2_gemm_f(int wt);  // F32, F16, BF16 (kern_avx2_f.c)
fi_gemm_fn fi_avx2_gemm_iq(int wt); // IQ4_NL, IQ4_XS, MXFP4 (kern_avx2_iq.c)
fi_gemm_fn fi_avx2_gemm_iql(int wt); // IQ2_XXS, IQ3_XXS, IQ3_S, IQ2_XS, IQ2_S (kern_avx2_iql.c)
fi_gemm_fn fi_avx2_gemm_iq1(int wt); // IQ1_S, IQ1_M (kern_avx2_iq1.c)

// The packed IQ4_NL, IQ4_XS and MXFP4 products (kern_avx2_iqpk.c):
// fi_packed_size_avx2, fi_pack_avx2 and fi_gemm_packed_avx2 for those
// types (rows a multiple of 8), -1 for any other.
int64_t fi_avx2_iq_packed_size(int wt, int64_t rows, int64_t cols);
int fi_avx2_iq_pack(int wt, const uint8_t *w, int64_t ws, int64_t rows, int64_t cols, uint8_t *dst);
int fi_avx2_iq_gemm_packed(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                           int64_t as, int64_t nact, float *out, int64_t os);

// fi_avx2_gemm_rp (kern_avx2_rp.c) computes rows [r0, r0+n) with weights
// repacked on the fly, n a multiple of 8 it returns (0: type not handled).
int64_t fi_avx2_gemm_rp(int wt, const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
                        const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os);

// fa_exp8 is e^x for x <= 88, 0 for x < -87.3 (-inf included): a float32
// polynomial (Cephes' expf, within 2 ulp), used by the flash tiles
// (kern_avx2_fa.c) and the softmax (kern_avx2_exp.c).
FI_INLINE __m256 fa_exp8(__m256 x) {
	const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(FI_EXPF_MIN), _CMP_GE_OQ);
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(FI_EXPF_MIN)), _mm256_set1_ps(FI_EXPF_MAX));
	const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(FI_EXPF_LOG2E)),
	                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FI_EXPF_LN2_HI), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FI_EXPF_LN2_LO), r);
	__m256 p = _mm256_set1_ps(FI_EXPF_P5);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FI_EXPF_P4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FI_EXPF_P3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FI_EXPF_P2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FI_EXPF_P1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FI_EXPF_P0));
	const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
}

#endif
