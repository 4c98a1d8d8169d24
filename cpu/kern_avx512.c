//go:build cgo

// AVX-512 kernels (F, BW, VL, DQ and VNNI; BF16 where the CPU has it): the
// products that dominate a forward pass, on the same packed weights as the
// AVX2 path (kern_avx2_pk.c: rows in groups of 8, a 32-byte vector holds
// 4 codes of each of 8 rows), F32/F16 rows (16 lanes per FMA, two weight
// rows per tile) and the Q8_0/Q8_1/Q8_K activation quantizers; the 4-bit
// table types' packed products are in kern_avx512_iq.c, and the helpers and
// matrix driver of both files in kern_avx512_pk.h. Everything else on this
// path (the other weight types and activation types,
// attention's sums, SwiGLU, exp, RMSNorm, RoPE) runs the AVX2 code, which
// every AVX-512 CPU also has.
//
// One 512-bit vector holds the same step of TWO packed groups (16 rows):
// vector lanes are still rows, and an activation's 4 bytes are still one
// broadcast from memory. VNNI's vpdpbusd (u8 x s8, 4 products summed into
// a dword) replaces pmaddubsw + pmaddwd + paddd, and vpdpwssd replaces
// pmaddwd + paddd:
//   - Q8_0 and Q4_0: weights made unsigned (Q8_0: w ^ 0x80 = w + 128; Q4_0
//     codes are 0..15) so one vpdpbusd per step; the offset, 128 (or 8)
//     times the activation block's sum, starts the block's accumulator.
//   - Q4_K and Q5_K: each sub-block's exact int32 sum (vpdpbusd) times the
//     rows' scales (vpmulld); mins as on AVX2, with vpdpwssd. Q5_K's fifth
//     bits are or-ed into the codes first (codes 0..31).
//   - Q6_K: pmaddubsw still sums each sub-block of a pair into its own
//     int16 (vpdpbusd would mix them), and vpdpwssd applies the pair of
//     scales.
// Integer sums are the AVX2 kernels' exactly and the float operations run
// in the same order, so results equal the AVX2 packed products bit for bit
// (kern_test.go checks this; and both against quant's Go reference).
//
// The same tile function serves decode (one activation row) and prefill (up
// to 4 rows per tile, weights blocked to stay in L2 across tiles).
//
// On machines without AVX-512 the file runs under SIMDe's portable
// intrinsics, by building the package with the fi_simde tag
// (kern_simde.go, kern_simde.h).

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

// BF16_TARGET enables vdpbf16ps for the BF16 product only (the CPU may have
// AVX-512 without BF16). Not under SIMDe: there the compiler must not emit
// any AVX-512 instruction.
#ifdef FI_SIMDE
#define BF16_TARGET
#else
#define BF16_TARGET __attribute__((target("avx512bf16")))
#endif

#define PK_Q4K 1184
#define PK_Q5K 1440
#define PK_Q80 272
#define PK_Q6K 1680
#define PK_Q40 144

// prep_q6 writes the codes of super-blocks [i0, i1) of a Q8_K row in the
// packed Q6_K step order; prep_none is the prep of the tiles that need none.
static void prep_q6(const uint8_t *a, int64_t i0, int64_t i1, uint8_t *dst) {
	fi_q6_perm(a + Q8K * i0, i1 - i0, dst);
}

static void prep_none(const uint8_t *a, int64_t i0, int64_t i1, uint8_t *dst) {
	(void)a, (void)i0, (void)i1, (void)dst;
}

// ---- tiles: one (super-)block of 16 rows (groups at p and q) x na rows -------
// y: activation row 0's block; as: bytes between activation rows; x: row
// 0's prep for this block; xs: bytes between rows' prep; acc[t]: row t's
// 16 outputs.

// tile_k4: Q4_K (q5 = 0) or Q5_K (q5 = 1: the fifth bits from the record's
// hb, kern_avx2_pk.c). vpdpbusd's int32 sums hold either range exactly.
I5 void tile_k4(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, __m512 *acc, const int na,
                const int q5) {
	const __m512i m4 = _mm512_set1_epi8(0x0f), m16 = _mm512_set1_epi8(0x10);
	__m512i isum[4], msum[4];
	UNROLL(4) for (int t = 0; t < na; t++) isum[t] = _mm512_setzero_si512();
	UNROLL(8) for (int j = 0; j < 8; j++) {
		__m512i c[8];
		const __m512i hb = q5 ? ld2(p + 1184 + 32 * j, q + 1184 + 32 * j) : _mm512_setzero_si512();
		UNROLL(4) for (int k = 0; k < 4; k++) {
			const __m512i v = ld2(p + 128 * j + 32 * k, q + 128 * j + 32 * k);
			c[2 * k] = _mm512_and_si512(v, m4);
			c[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
			if (q5) {
				c[2 * k] = _mm512_or_si512(c[2 * k], _mm512_and_si512(_mm512_slli_epi16(hb, 4 - k), m16));
				c[2 * k + 1] = _mm512_or_si512(c[2 * k + 1], _mm512_and_si512(_mm512_srli_epi16(hb, k), m16));
			}
		}
		const __m512i sc = _mm512_cvtepu8_epi32(ld2_8(p + 1024 + 8 * j, q + 1024 + 8 * j));
		UNROLL(4) for (int t = 0; t < na; t++) {
			const uint8_t *yj = y + t * as + 4 + 32 * j;
			__m512i s = _mm512_setzero_si512();
			UNROLL(4) for (int k = 0; k < 4; k++) {
				s = _mm512_dpbusd_epi32(s, c[2 * k], bc32(yj + 4 * k));
				s = _mm512_dpbusd_epi32(s, c[2 * k + 1], bc32(yj + 16 + 4 * k));
			}
			isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s, sc));
			// Without this GCC keeps every sub-block's sum s live until
			// the end of the super-block and spills them (na = 4: 24
			// zmm stores and 26 loads per tile; llvm-mca -mcpu=
			// icelake-server 344 -> 329 cycles).
			KEEP(isum[t]);
		}
	}
	// mins: rows' (m_2q, m_2q+1) against the activation's sub-block sums
	// (S_2q, S_2q+1), two sub-blocks per vpdpwssd.
	__m512i mm[4];
	UNROLL(4) for (int k = 0; k < 4; k++) {
		const __m128i a0 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(p + 1088 + 16 * k)),
		                                     _mm_loadl_epi64((const __m128i *)(p + 1096 + 16 * k)));
		const __m128i b0 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(q + 1088 + 16 * k)),
		                                     _mm_loadl_epi64((const __m128i *)(q + 1096 + 16 * k)));
		mm[k] = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(a0), b0, 1));
	}
	UNROLL(4) for (int t = 0; t < na; t++) {
		const uint8_t *yt = y + t * as;
		const __m128i ones = _mm_set1_epi16(1);
		// |S_j| <= 32 x 128: int16 exact
		const __m128i s16 = _mm_packs_epi32(_mm_madd_epi16(ld128(yt + 260), ones), _mm_madd_epi16(ld128(yt + 276), ones));
		uint8_t sp[16];
		_mm_storeu_si128((__m128i *)sp, s16);
		msum[t] = _mm512_setzero_si512();
		UNROLL(4) for (int k = 0; k < 4; k++) msum[t] = _mm512_dpwssd_epi32(msum[t], mm[k], bc32(sp + 4 * k));
	}
	const __m512 d = f16x16(p + 1152, q + 1152), dm = f16x16(p + 1168, q + 1168);
	UNROLL(4) for (int t = 0; t < na; t++) {
		const __m512 dy = _mm512_set1_ps(ld_f32(y + t * as));
		acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
		acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dy), _mm512_cvtepi32_ps(msum[t]), acc[t]);
	}
}

I5 void tile_q4_K(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                  __m512 *acc, const int na) {
	(void)x, (void)xs;
	tile_k4(p, q, y, as, acc, na, 0);
}

I5 void tile_q5_K(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                  __m512 *acc, const int na) {
	(void)x, (void)xs;
	tile_k4(p, q, y, as, acc, na, 1);
}

// q6_half rebuilds steps 4h..4h+3 (codes 0..63) of a pair of both groups
// from their three vectors at v and w (layout: kern_avx2_pk.c).
I5 void q6_half(const uint8_t *v, const uint8_t *w, __m512i s[4]) {
	const __m512i m6 = _mm512_set1_epi8(0x3f);
	const __m512i a = ld2(v, w), b = ld2(v + 32, w + 32), c = ld2(v + 64, w + 64);
	s[0] = _mm512_and_si512(a, m6);
	s[1] = _mm512_and_si512(b, m6);
	s[2] = _mm512_and_si512(c, m6);
	// 0xfe: x | y | z
	s[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(a, 6), _mm512_set1_epi8(0x03)),
	                                 _mm512_and_si512(_mm512_srli_epi16(b, 4), _mm512_set1_epi8(0x0c)),
	                                 _mm512_and_si512(_mm512_srli_epi16(c, 2), _mm512_set1_epi8(0x30)), 0xfe);
}

I5 void tile_q6_K(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                  __m512 *acc, const int na) {
	__m512i isum[4], osum[4];
	UNROLL(4) for (int t = 0; t < na; t++) isum[t] = osum[t] = _mm512_setzero_si512();
	UNROLL(8) for (int k = 0; k < 8; k++) {
		const __m512i sc = _mm512_cvtepi8_epi16(ld2_16(p + 1536 + 16 * k, q + 1536 + 16 * k));
		__m512i s[8];
		q6_half(p + 192 * k, q + 192 * k, s);
		q6_half(p + 192 * k + 96, q + 192 * k + 96, s + 4);
		UNROLL(4) for (int t = 0; t < na; t++) {
			// int16 sums: 2 steps x 2 products x 63 x 128 = 32256 < 32767
			const uint8_t *yk = x + t * xs + 32 * k;
			UNROLL(4) for (int h = 0; h < 4; h++) {
				const __m512i pr = _mm512_add_epi16(_mm512_maddubs_epi16(s[2 * h], bc32(yk + 8 * h)),
				                                    _mm512_maddubs_epi16(s[2 * h + 1], bc32(yk + 8 * h + 4)));
				isum[t] = _mm512_dpwssd_epi32(isum[t], pr, sc);
			}
			// the -32 of every code: sc against the pair's bsums
			osum[t] = _mm512_dpwssd_epi32(osum[t], sc, bc32(y + t * as + 260 + 4 * k));
		}
	}
	const __m512 d = f16x16(p + 1664, q + 1664);
	UNROLL(4) for (int t = 0; t < na; t++) {
		const __m512i s = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(osum[t], 5));
		acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(ld_f32(y + t * as))), _mm512_cvtepi32_ps(s), acc[t]);
	}
}

I5 void tile_q8_0(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                  __m512 *acc, const int na) {
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	__m512i isum[4];
	// sum (w + 128) a - 128 sum a
	UNROLL(4) for (int t = 0; t < na; t++) {
		isum[t] = _mm512_set1_epi32(-128 * (int32_t)ld_u32(x + t * xs));
	}
	UNROLL(8) for (int s = 0; s < 8; s++) {
		const __m512i w = _mm512_xor_si512(ld2(p + 32 * s, q + 32 * s), flip);
		UNROLL(4) for (int t = 0; t < na; t++) {
			isum[t] = _mm512_dpbusd_epi32(isum[t], w, bc32(y + t * as + 2 + 4 * s));
		}
	}
	const __m512 d = f16x16(p + 256, q + 256);
	UNROLL(4) for (int t = 0; t < na; t++) {
		const __m512 dy = _mm512_set1_ps(ld_f16(y + t * as));
		acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
	}
}

I5 void tile_q4_0(const uint8_t *p, const uint8_t *q, const uint8_t *y, int64_t as, const uint8_t *x, int64_t xs,
                  __m512 *acc, const int na) {
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	__m512i isum[4];
	// sum q a - 8 sum a (x = d (q - 8))
	UNROLL(4) for (int t = 0; t < na; t++) {
		isum[t] = _mm512_set1_epi32(-8 * (int32_t)ld_u32(x + t * xs));
	}
	UNROLL(4) for (int c = 0; c < 4; c++) {
		const __m512i v = ld2(p + 32 * c, q + 32 * c);
		const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
		UNROLL(4) for (int t = 0; t < na; t++) {
			isum[t] = _mm512_dpbusd_epi32(isum[t], lo, bc32(y + t * as + 2 + 4 * c));
			isum[t] = _mm512_dpbusd_epi32(isum[t], hi, bc32(y + t * as + 18 + 4 * c));
		}
	}
	const __m512 d = f16x16(p + 128, q + 128);
	UNROLL(4) for (int t = 0; t < na; t++) {
		const __m512 dy = _mm512_set1_ps(ld_f16(y + t * as));
		acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
	}
}

FI512_DEFINE(gemm_q4_K, tile_q4_K, prep_none, PK_Q4K, Q8K, 0)
FI512_DEFINE(gemm_q5_K, tile_q5_K, prep_none, PK_Q5K, Q8K, 0)
FI512_DEFINE(gemm_q6_K, tile_q6_K, prep_q6, PK_Q6K, Q8K, 256)
FI512_DEFINE(gemm_q8_0, tile_q8_0, prep_sums, PK_Q80, 34, 4)
FI512_DEFINE(gemm_q4_0, tile_q4_0, prep_sums, PK_Q40, 34, 4)

// ---- BF16 rows: vdpbf16ps --------------------------------------------------

// bf16_tile adds to acc[t] the pairwise products of cols bf16 elements of
// weight row w and activation rows a + t*as (t < na). A partial last
// vector is zero-padded.
BF16_TARGET I5 void bf16_tile(const uint8_t *w, const uint8_t *a, int64_t as, int64_t cols, __m512 *acc,
                              const int na) {
	int64_t c = 0;
	for (; c + 32 <= cols; c += 32) {
		__m512bh wv;
		memcpy(&wv, w + 2 * c, 64);
		UNROLL(4) for (int t = 0; t < na; t++) {
			__m512bh av;
			memcpy(&av, a + t * as + 2 * c, 64);
			acc[t] = _mm512_dpbf16_ps(acc[t], wv, av);
		}
	}
	if (c < cols) {
		uint8_t wb[64] = {0}, ab[64] = {0};
		memcpy(wb, w + 2 * c, (size_t)(2 * (cols - c)));
		__m512bh wv;
		memcpy(&wv, wb, 64);
		UNROLL(4) for (int t = 0; t < na; t++) {
			memcpy(ab, a + t * as + 2 * c, (size_t)(2 * (cols - c)));
			__m512bh av;
			memcpy(&av, ab, 64);
			acc[t] = _mm512_dpbf16_ps(acc[t], wv, av);
		}
	}
}

BF16_TARGET static void gemm_bf16(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
                                  const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os) {
	for (int64_t r = r0; r < r1; r++) {
		for (int64_t t = 0; t < nact; t += 4) {
			const int64_t na = nact - t < 4 ? nact - t : 4;
			__m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
			switch (na) {
			case 1: bf16_tile(w + r * ws, a + t * as, as, cols, acc, 1); break;
			case 2: bf16_tile(w + r * ws, a + t * as, as, cols, acc, 2); break;
			case 3: bf16_tile(w + r * ws, a + t * as, as, cols, acc, 3); break;
			default: bf16_tile(w + r * ws, a + t * as, as, cols, acc, 4); break;
			}
			for (int64_t u = 0; u < na; u++) out[(t + u) * os + r] = _mm512_reduce_add_ps(acc[u]);
		}
	}
}

// ---- F32 and F16 rows: 16 lanes per FMA -------------------------------------

// ldf loads 16 elements of a float row (F32 when esz is 4, else F16) as
// float32, exactly (vcvtph2ps).
I5 __m512 ldf(const uint8_t *p, const int esz) {
	if (esz == 4) return _mm512_loadu_ps((const float *)p);
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

// ldf_tail is ldf of the last n < 16 elements, zero-padded.
I5 __m512 ldf_tail(const uint8_t *p, const int esz, int64_t n) {
	uint8_t b[64] = {0};
	memcpy(b, p, (size_t)(n * esz));
	return ldf(b, esz);
}

// float_tile sets out[j*os + k] (k < nr ≤ 2, j < na ≤ 4) to the product of
// weight row w + k*ws and activation row a + j*as, one accumulator per
// pair: per 16 elements nr + na loads for nr·na FMAs. Each output is summed
// in the same order whatever nr and na.
I5 void float_tile(const int esz, const uint8_t *w, int64_t ws, int64_t cols, const uint8_t *a, int64_t as,
                   float *out, int64_t os, const int nr, const int na) {
	__m512 c[2][4];
	UNROLL(2) for (int k = 0; k < nr; k++) UNROLL(4) for (int j = 0; j < na; j++) c[k][j] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= cols; i += 16) {
		__m512 wv[2];
		UNROLL(2) for (int k = 0; k < nr; k++) wv[k] = ldf(w + k * ws + esz * i, esz);
		UNROLL(4) for (int j = 0; j < na; j++) {
			const __m512 y = ldf(a + j * as + esz * i, esz);
			UNROLL(2) for (int k = 0; k < nr; k++) c[k][j] = _mm512_fmadd_ps(wv[k], y, c[k][j]);
		}
	}
	if (i < cols) {
		__m512 wv[2];
		UNROLL(2) for (int k = 0; k < nr; k++) wv[k] = ldf_tail(w + k * ws + esz * i, esz, cols - i);
		UNROLL(4) for (int j = 0; j < na; j++) {
			const __m512 y = ldf_tail(a + j * as + esz * i, esz, cols - i);
			UNROLL(2) for (int k = 0; k < nr; k++) c[k][j] = _mm512_fmadd_ps(wv[k], y, c[k][j]);
		}
	}
	// one reduction for every na: an output's bits do not depend on the
	// batch around it (TestGemmRowsBatchInvariant)
	UNROLL(2) for (int k = 0; k < nr; k++) {
		UNROLL(4) for (int j = 0; j < na; j++) out[j * os + k] = _mm512_reduce_add_ps(c[k][j]);
	}
}

// gemm_float is fi_gemm_avx2 for F32 (esz 4) and F16 weights: rows in
// pairs, up to 4 activation rows per tile, and with several activation rows
// weight rows in blocks that stay in L2 across the activation tiles.
I5 void gemm_float(const int esz, const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
                   const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os) {
	int64_t rbk = nact == 1 ? r1 - r0 : FI_ROW_BLOCK_BYTES / ws;
	if (rbk < 2) rbk = 2;
	for (int64_t rs = r0; rs < r1; rs += rbk) {
		const int64_t re = rs + rbk < r1 ? rs + rbk : r1;
		for (int64_t t = 0; t < nact; t += 4) {
			const uint8_t *at = a + t * as;
			float *ot = out + t * os;
			const int64_t na = nact - t < 4 ? nact - t : 4;
			for (int64_t r = rs; r < re; r += 2) {
				const int nr = re - r >= 2 ? 2 : 1;
				const uint8_t *wr = w + r * ws;
				if (nact == 1) // decode: the pair of rows after next, as the AVX2 path does
					for (int64_t o = 0; o < 2 * ws; o += 64) _mm_prefetch((const char *)(wr + 4 * ws + o), _MM_HINT_T0);
				switch (na * 2 + nr) {
				case 3: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 1, 1); break;
				case 4: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 2, 1); break;
				case 5: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 1, 2); break;
				case 6: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 2, 2); break;
				case 7: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 1, 3); break;
				case 8: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 2, 3); break;
				case 9: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 1, 4); break;
				default: float_tile(esz, wr, ws, cols, at, as, ot + r, os, 2, 4);
				}
			}
		}
	}
}

static void gemm_f32(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                     int64_t as, int64_t nact, float *out, int64_t os) {
	gemm_float(4, w, ws, cols, r0, r1, a, as, nact, out, os);
}

static void gemm_f16(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                     int64_t as, int64_t nact, float *out, int64_t os) {
	gemm_float(2, w, ws, cols, r0, r1, a, as, nact, out, os);
}

// ---- activation quantization: Q8_0, Q8_1, Q8_K --------------------------------
//
// The AVX2 quantizers' float operations on 16 lanes (kern_avx2_quant.c says
// which Go expression each reproduces); vpmovsdb and vpmovdb narrow int32
// to bytes in element order (signed saturation, truncation), where AVX2
// needs packs and a permute.

// abs_max16 returns the largest |x| of n floats (n a multiple of 16),
// ignoring NaN: max_ps returns its second operand when either is NaN.
I5 float abs_max16(const float *x, int n) {
	__m512 m = _mm512_setzero_ps();
	for (int i = 0; i < n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
	const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(m),
	                               _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1)));
	__m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	q = _mm_max_ps(q, _mm_movehl_ps(q, q));
	q = _mm_max_ss(q, _mm_movehdup_ps(q));
	return _mm_cvtss_f32(q);
}

// round16 is round_q: x*id rounded half to even, INT32_MIN for NaN and
// values beyond int32.
I5 __m512i round16(__m512 x, __m512 id) {
	return _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// hsum16 adds 16 int32 lanes, wrapping.
I5 int32_t hsum16(__m512i v) {
	const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
	__m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(1, 0, 3, 2)));
	q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(q);
}

static void quantize_q8_512(const float *x, int64_t n, uint8_t *dst, const int with_sum) {
	const int bsz = with_sum ? 36 : 34, qoff = with_sum ? 4 : 2;
	for (int64_t i = 0; i < n / 32; i++) {
		const float *xb = x + 32 * i;
		uint8_t *b = dst + bsz * i;
		const float amax = abs_max16(xb, 32);
		const float d = amax / 127.0f;
		const uint16_t dh = fi_f16_avx2(d);
		memcpy(b, &dh, 2);
		const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
		const __m512i i0 = round16(_mm512_loadu_ps(xb), id), i1 = round16(_mm512_loadu_ps(xb + 16), id);
		_mm_storeu_si128((__m128i *)(b + qoff), _mm512_cvtsepi32_epi8(i0));
		_mm_storeu_si128((__m128i *)(b + qoff + 16), _mm512_cvtsepi32_epi8(i1));
		if (with_sum) {
			// the rounded values before saturation, wrapping
			const uint16_t sh = fi_f16_avx2(d * (float)hsum16(_mm512_add_epi32(i0, i1)));
			memcpy(b + 2, &sh, 2);
		}
	}
}

static void quantize_q8k_512(const float *x, int64_t n, uint8_t *dst) {
	for (int64_t i = 0; i < n / 256; i++) {
		const float *xb = x + 256 * i;
		uint8_t *b = dst + 292 * i;
		const float amax = abs_max16(xb, 256);
		if (amax == 0.0f) {
			memset(b, 0, 292);
			continue;
		}
		// first index with |x| == amax (NaN compares unequal)
		const __m512 va = _mm512_set1_ps(amax);
		int first = 0;
		for (int j = 0; j < 256; j += 16) {
			const __mmask16 e = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + j)), va, _CMP_EQ_OQ);
			if (e) {
				first = j + __builtin_ctz(e);
				break;
			}
		}
		const float iscale = -127.0f / xb[first];
		const __m512 vs = _mm512_set1_ps(iscale);
		for (int j = 0; j < 256; j += 16) {
			// int8(min(127, q)): clamp above only, keep the low byte
			const __m512i q = _mm512_min_epi32(round16(_mm512_loadu_ps(xb + j), vs), _mm512_set1_epi32(127));
			const __m128i q8 = _mm512_cvtepi32_epi8(q);
			_mm_storeu_si128((__m128i *)(b + 4 + j), q8);
			// bsum: the bytes as int8, added as int16
			const int16_t g = (int16_t)hsum16(_mm512_cvtepi8_epi32(q8));
			memcpy(b + 260 + 2 * (j / 16), &g, 2);
		}
		const float d = 1.0f / iscale;
		memcpy(b, &d, 4);
	}
}

int fi_quantize_rows_avx512(int t, const float *src, int64_t nrows, int64_t cols, uint8_t *dst) {
	if (t != FI_Q8_0 && t != FI_Q8_1 && t != FI_Q8_K) return fi_quantize_rows_avx2(t, src, nrows, cols, dst);
	const int64_t rb = fi_act_row_bytes(t, cols);
	for (int64_t r = 0; r < nrows; r++) {
		const float *x = src + r * cols;
		uint8_t *d = dst + r * rb;
		switch (t) {
		case FI_Q8_0: quantize_q8_512(x, cols, d, 0); break;
		case FI_Q8_1: quantize_q8_512(x, cols, d, 1); break;
		default: quantize_q8k_512(x, cols, d);
		}
	}
	return 0;
}

// ---- entry points (kern.h) -------------------------------------------------

int fi_gemm_avx512(int wt, const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                   int64_t as, int64_t nact, float *out, int64_t os) {
	if (wt == FI_BF16 && (fi_cpu_features() & FI_AVX512BF16)) {
		if (r1 > r0 && nact > 0) gemm_bf16(w, ws, cols, r0, r1, a, as, nact, out, os);
		return 0;
	}
	if (wt == FI_F32 || wt == FI_F16) {
		if (r1 > r0 && nact > 0) (wt == FI_F32 ? gemm_f32 : gemm_f16)(w, ws, cols, r0, r1, a, as, nact, out, os);
		return 0;
	}
	return fi_gemm_avx2(wt, w, ws, cols, r0, r1, a, as, nact, out, os);
}

int fi_gemm_packed_avx512(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                          int64_t as, int64_t nact, float *out, int64_t os) {
	if (r1 <= r0 || nact <= 0) return 0;
	switch (wt) {
	case FI_Q4_0: gemm_q4_0(pk, cols / 32, r0 / 8, r1 / 8, a, as, nact, out, os); return 0;
	case FI_Q4_K: gemm_q4_K(pk, cols / 256, r0 / 8, r1 / 8, a, as, nact, out, os); return 0;
	case FI_Q5_K: gemm_q5_K(pk, cols / 256, r0 / 8, r1 / 8, a, as, nact, out, os); return 0;
	case FI_Q6_K: gemm_q6_K(pk, cols / 256, r0 / 8, r1 / 8, a, as, nact, out, os); return 0;
	case FI_Q8_0: gemm_q8_0(pk, cols / 32, r0 / 8, r1 / 8, a, as, nact, out, os); return 0;
	case FI_IQ4_NL:
	case FI_IQ4_XS:
	case FI_MXFP4: return fi_avx512_iq_gemm_packed(wt, pk, cols, r0, r1, a, as, nact, out, os);
	}
	// -1 for a type without a packed form
	return fi_gemm_packed_avx2(wt, pk, cols, r0, r1, a, as, nact, out, os);
}

