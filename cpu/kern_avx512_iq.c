//go:build cgo

// AVX-512 products of the 4-bit table types (IQ4_NL and MXFP4 against Q8_0,
// IQ4_XS against Q8_K) on the packed layouts of kern_avx2_iqpk.c (rows in
// groups of 8; a 32-byte vector holds 4 codes of each of 8 rows; IQ4_XS
// with one signed byte per sub-block scale). Not here: the products on the
// file's layout (kern_avx2_iq.c serves both paths).
//
// VNNI's vpdpbusd multiplies unsigned bytes by signed bytes, summing 4
// products into a dword with no saturation. The levels are signed (IQ4_NL's
// reach -127), so the lookup table holds them plus 128 (1..241: unsigned
// bytes) and the offset comes back out of the block's sum: Σ(w+128)·y -
// 128·Σy, Σy the activation block's (sub-block's, IQ4_XS) code sum, taken
// once per call (prep) and set as the sum's starting value. One vpshufb per
// 4 codes of every row looks the levels up (the table in each 128-bit
// lane), one vpdpbusd per 4 codes multiplies them with 4 activation bytes
// broadcast to every row: where AVX2 needs pshufb, psignb, pmaddubsw,
// pmaddwd and paddd.
//
// Prefill (FI512_DEFINE's tiles): one 512-bit vector holds the same step of
// two packed groups (16 rows), up to 4 activation rows per tile, as the
// other AVX-512 packed products (kern_avx512.c). Decode (one activation
// row) takes one group per 256-bit vector (AVX512VL's vpdpbusd), as the
// AVX2 kernels do: each group's records are one sequential stream, which
// Zen 4 reads from memory about twice as fast as the two streams of the
// 512-bit tiles (docs/decisions.md, "AMD Zen 4: matrix-vector products on
// the AVX2 kernels").
//
// Every block's (IQ4_XS: super-block's) integer sum is exact and equal to
// the AVX2 kernels', and the float operations are theirs in their order
// (d_w·d_a, then one FMA into the row's lane), so products equal the AVX2
// packed products bit for bit, decode and prefill alike
// (TestPackedPathsAgree, TestIQ4Kernels).

#ifdef FI_SIMDE
#include "kern_simde.h"
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include <immintrin.h>
#endif

#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_ld.h"
#include "kern_avx512.h"
#include "kern_avx512_pk.h"
#include "kern_iq4.h"

#define PK_IQ4NL 144
#define PK_MXFP4 136
#define PK_IQ4XS 1104

// ---- tables and scales ------------------------------------------------------

// tbl4 returns the 16 levels kv plus 128 (as unsigned bytes) in each
// 128-bit lane: a vpshufb table.
I5 __m512i tbl4(const int8_t *kv) {
	return _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)kv)),
	                        _mm512_set1_epi8((char)0x80));
}

I5 __m256i tbl2(const int8_t *kv) { return _mm512_castsi512_si256(tbl4(kv)); }

// e8m0_16 is kern_avx2_iq.h's e8m0_half8 of the 8 bytes at p (lanes 0..7)
// and at q (lanes 8..15): half an E8M0 scale, 2^(e-128), subnormal for e =
// 0 and 1.
I5 __m512 e8m0_16(const uint8_t *p, const uint8_t *q) {
	const __m512i e = _mm512_cvtepu8_epi32(ld2_8(p, q));
	const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
	const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
	const __mmask16 small = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(2), e);
	return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub));
}

// e8m0_8 is e8m0_16 of the 8 bytes at p alone.
I5 __m256 e8m0_8(const uint8_t *p) {
	const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
	const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
	const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
	const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
	return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

// lo8 and hi8 look up the levels (plus 128) of the low and high nibbles of
// v (lo16, hi16: of a 512-bit v). vpshufb reads an index's low 4 bits and
// bit 7 (which zeroes the byte), so each needs the mask.
I5 __m256i lo8(__m256i tbl, __m256i v) { return _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, _mm256_set1_epi8(0x0f))); }
I5 __m256i hi8(__m256i tbl, __m256i v) { return lo8(tbl, _mm256_srli_epi16(v, 4)); }
I5 __m512i lo16(__m512i tbl, __m512i v) { return _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, _mm512_set1_epi8(0x0f))); }
I5 __m512i hi16(__m512i tbl, __m512i v) { return lo16(tbl, _mm512_srli_epi16(v, 4)); }

I5 __m256i bc32y(const uint8_t *p) { return _mm256_set1_epi32((int)ld_u32(p)); }

// ---- activation preparation -------------------------------------------------

// prep_xs writes, for super-blocks [i0, i1) of a Q8_K row a, -128 times
// each sub-block's code sum (8 int32 per super-block): the starting value
// of the sub-block's sum of (w+128)·y. Summed from the codes (not the
// bsums), exactly.
I5 void prep_xs(const uint8_t *a, int64_t i0, int64_t i1, uint8_t *dst) {
	const __m256i ones = _mm256_set1_epi8(1);
	for (int64_t i = i0; i < i1; i++) {
		__m256i s[8];
		UNROLL(8) for (int j = 0; j < 8; j++) {
			s[j] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, ld256(a + Q8K * i + 4 + 32 * j));
		}
		// h0: per 128-bit half, the sums of that half's 4 dwords of s[0..3]
		// (h1: of s[4..7]); the halves added are the sub-blocks' sums
		const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
		const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
		const __m128i t0 = _mm_add_epi32(_mm256_castsi256_si128(h0), _mm256_extracti128_si256(h0, 1));
		const __m128i t1 = _mm_add_epi32(_mm256_castsi256_si128(h1), _mm256_extracti128_si256(h1, 1));
		const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(t0), t1, 1);
		_mm256_storeu_si256((__m256i *)(dst + 32 * (i - i0)),
		                    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(t, 7)));
	}
}

// ---- prefill tiles: one (super-)block of 16 rows (groups at p and q) x na rows
// (the arguments of kern_avx512.c's tiles; x: the prep of activation row 0)

// tile_b32: IQ4_NL (mx 0) or MXFP4 (mx 1), 32 codes per block.
I5 void tile_b32(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                 __m512 *acc, const int na, const int mx) {
	const __m512i tbl = tbl4(mx ? fi_kv_mxfp4 : fi_kv_iq4nl);
	__m512i isum[4];
	UNROLL(4) for (int t = 0; t < na; t++) isum[t] = _mm512_set1_epi32(-128 * (int32_t)ld_u32(x + t * xs));
	UNROLL(4) for (int c = 0; c < 4; c++) {
		const __m512i v = ld2(p + 32 * c, q + 32 * c);
		const __m512i lo = lo16(tbl, v);
		const __m512i hi = hi16(tbl, v);
		UNROLL(4) for (int t = 0; t < na; t++) {
			isum[t] = _mm512_dpbusd_epi32(isum[t], lo, bc32(y + t * as + 2 + 4 * c));
			isum[t] = _mm512_dpbusd_epi32(isum[t], hi, bc32(y + t * as + 18 + 4 * c));
		}
	}
	const __m512 d = mx ? e8m0_16(p + 128, q + 128) : f16x16(p + 128, q + 128);
	UNROLL(4) for (int t = 0; t < na; t++) {
		const __m512 dy = _mm512_set1_ps(ld_f16(y + t * as));
		acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
	}
}

I5 void tile_iq4_nl(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                    __m512 *acc, const int na) {
	tile_b32(p, q, y, as, x, xs, acc, na, 0);
}

I5 void tile_mxfp4(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                   __m512 *acc, const int na) {
	tile_b32(p, q, y, as, x, xs, acc, na, 1);
}

// tile_iq4_xs: each sub-block's exact sum times the rows' scales (vpmulld),
// summed in int32 over the super-block (at most 8·32·241·127·32 < 2^31).
I5 void tile_iq4_xs(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                    __m512 *acc, const int na) {
	const __m512i tbl = tbl4(fi_kv_iq4nl);
	__m512i isum[4];
	UNROLL(4) for (int t = 0; t < na; t++) isum[t] = _mm512_setzero_si512();
	UNROLL(8) for (int j = 0; j < 8; j++) {
		__m512i c[8];
		UNROLL(4) for (int k = 0; k < 4; k++) {
			const __m512i v = ld2(p + 128 * j + 32 * k, q + 128 * j + 32 * k);
			c[2 * k] = lo16(tbl, v);
			c[2 * k + 1] = hi16(tbl, v);
		}
		const __m512i sc = _mm512_cvtepi8_epi32(ld2_8(p + 1024 + 8 * j, q + 1024 + 8 * j));
		UNROLL(4) for (int t = 0; t < na; t++) {
			const uint8_t *yj = y + t * as + 4 + 32 * j;
			__m512i s = _mm512_set1_epi32((int)ld_u32(x + t * xs + 4 * j));
			UNROLL(4) for (int k = 0; k < 4; k++) {
				s = _mm512_dpbusd_epi32(s, c[2 * k], bc32(yj + 4 * k));
				s = _mm512_dpbusd_epi32(s, c[2 * k + 1], bc32(yj + 16 + 4 * k));
			}
			isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s, sc));
			KEEP(isum[t]);
		}
	}
	const __m512 d = f16x16(p + 1088, q + 1088);
	UNROLL(4) for (int t = 0; t < na; t++) {
		const __m512 dy = _mm512_set1_ps(ld_f32(y + t * as));
		acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
	}
}

FI512_DEFINE(gemm_iq4_nl, tile_iq4_nl, prep_sums, PK_IQ4NL, 34, 4)
FI512_DEFINE(gemm_mxfp4, tile_mxfp4, prep_sums, PK_MXFP4, 34, 4)
FI512_DEFINE(gemm_iq4_xs, tile_iq4_xs, prep_xs, PK_IQ4XS, Q8K, 32)

// ---- decode: one group of 8 rows per 256-bit vector ---------------------------
// vec_*(p, y, x, acc): one (super-)block of the group at p times the
// activation block y (its prep at x), added to the rows' lanes acc. Two
// sums per block, so that the vpdpbusd chain is half as long.

I5 void vec_b32(const uint8_t *p, const uint8_t *y, const uint8_t *x, __m256 *acc, const int mx) {
	const __m256i tbl = tbl2(mx ? fi_kv_mxfp4 : fi_kv_iq4nl);
	__m256i s0 = _mm256_set1_epi32(-128 * (int32_t)ld_u32(x)), s1 = _mm256_setzero_si256();
	UNROLL(4) for (int c = 0; c < 4; c++) {
		const __m256i v = ld256(p + 32 * c);
		s0 = _mm256_dpbusd_epi32(s0, lo8(tbl, v), bc32y(y + 2 + 4 * c));
		s1 = _mm256_dpbusd_epi32(s1, hi8(tbl, v),
		                         bc32y(y + 18 + 4 * c));
	}
	const __m256 d = mx ? e8m0_8(p + 128) : _mm256_cvtph_ps(ld128(p + 128));
	*acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ld_f16(y))),
	                       _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), *acc);
}

I5 void vec_iq4_nl(const uint8_t *p, const uint8_t *y, const uint8_t *x, __m256 *acc) { vec_b32(p, y, x, acc, 0); }

I5 void vec_mxfp4(const uint8_t *p, const uint8_t *y, const uint8_t *x, __m256 *acc) { vec_b32(p, y, x, acc, 1); }

I5 void vec_iq4_xs(const uint8_t *p, const uint8_t *y, const uint8_t *x, __m256 *acc) {
	const __m256i tbl = tbl2(fi_kv_iq4nl);
	__m256i isum = _mm256_setzero_si256();
	UNROLL(8) for (int j = 0; j < 8; j++) {
		const uint8_t *yj = y + 4 + 32 * j;
		__m256i s0 = _mm256_set1_epi32((int)ld_u32(x + 4 * j)), s1 = _mm256_setzero_si256();
		UNROLL(4) for (int c = 0; c < 4; c++) {
			const __m256i v = ld256(p + 128 * j + 32 * c);
			s0 = _mm256_dpbusd_epi32(s0, lo8(tbl, v), bc32y(yj + 4 * c));
			s1 = _mm256_dpbusd_epi32(s1, hi8(tbl, v),
			                         bc32y(yj + 16 + 4 * c));
		}
		const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j)));
		isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(_mm256_add_epi32(s0, s1), sc));
		KEEP(isum);
	}
	const __m256 d = _mm256_cvtph_ps(ld128(p + 1088));
	*acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ld_f32(y))), _mm256_cvtepi32_ps(isum), *acc);
}

// FI_IQ_VEC(name, vec, prep, REC, ABLK, PB) defines
//   static void name(pk, nb, g0, g1, a, out)
// setting out[8g + r] for groups [g0, g1) to their products with the
// activation row a: blocks in parts of CH_BYTES of prep on the stack, each
// group's records one stream, prefetched PF_AHEAD bytes ahead.
#define FI_IQ_VEC(name, vec, prep, REC, ABLK, PB)                                                               \
	static void name(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {     \
		uint8_t x[CH_BYTES];                                                                                    \
		const int64_t ch = CH_BYTES / (PB);                                                                     \
		for (int64_t i0 = 0; i0 < nb; i0 += ch) {                                                               \
			const int64_t i1 = nb - i0 < ch ? nb : i0 + ch;                                                     \
			prep(a, i0, i1, x);                                                                                 \
			for (int64_t g = g0; g < g1; g++) {                                                                 \
				__m256 acc = i0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8 * g);                      \
				for (int64_t i = i0; i < i1; i++) {                                                             \
					const uint8_t *p = pk + (g * nb + i) * (REC);                                               \
					FI_MCA_BEGIN("avx512_" #name, 1);                                                           \
					for (int o = 0; o < (REC); o += 64) _mm_prefetch((const char *)(p + PF_AHEAD + o), _MM_HINT_T0); \
					vec(p, a + i * (ABLK), x + (i - i0) * (PB), &acc);                                          \
					FI_MCA_END();                                                                               \
				}                                                                                               \
				_mm256_storeu_ps(out + 8 * g, acc);                                                             \
			}                                                                                                   \
		}                                                                                                       \
	}

FI_IQ_VEC(gemv_iq4_nl, vec_iq4_nl, prep_sums, PK_IQ4NL, 34, 4)
FI_IQ_VEC(gemv_mxfp4, vec_mxfp4, prep_sums, PK_MXFP4, 34, 4)
FI_IQ_VEC(gemv_iq4_xs, vec_iq4_xs, prep_xs, PK_IQ4XS, Q8K, 32)

// ---- entry point (kern_avx512.c's fi_gemm_packed_avx512 calls it) -------------

int fi_avx512_iq_gemm_packed(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                             int64_t as, int64_t nact, float *out, int64_t os) {
	if (wt != FI_IQ4_NL && wt != FI_MXFP4 && wt != FI_IQ4_XS) return -1;
	if (r1 <= r0 || nact <= 0) return 0;
	const int64_t g0 = r0 / 8, g1 = r1 / 8;
	if (nact == 1) {
		switch (wt) {
		case FI_IQ4_NL: gemv_iq4_nl(pk, cols / 32, g0, g1, a, out); break;
		case FI_MXFP4: gemv_mxfp4(pk, cols / 32, g0, g1, a, out); break;
		default: gemv_iq4_xs(pk, cols / 256, g0, g1, a, out);
		}
		return 0;
	}
	switch (wt) {
	case FI_IQ4_NL: gemm_iq4_nl(pk, cols / 32, g0, g1, a, as, nact, out, os); break;
	case FI_MXFP4: gemm_mxfp4(pk, cols / 32, g0, g1, a, as, nact, out, os); break;
	default: gemm_iq4_xs(pk, cols / 256, g0, g1, a, as, nact, out, os);
	}
	return 0;
}
