//go:build cgo

// The packed products' helpers and matrix driver shared by the AVX-512
// files that multiply packed weights (kern_avx512.c: Q4_0, Q4_K, Q5_K,
// Q6_K, Q8_0; kern_avx512_iq.c: IQ4_NL, IQ4_XS, MXFP4), included after
// kern_avx512.h: two-group loads (a 512-bit vector holds the same step of
// two packed 8-row groups), the activation block sums, and FI512_DEFINE,
// which turns a tile into a matrix product.

#ifndef FLOWINFER_KERN_AVX512_PK_H
#define FLOWINFER_KERN_AVX512_PK_H

#include <stdlib.h>
#include <string.h>

#include "kern_ld.h"

// KEEP(v) makes the compiler materialize v in a register here, so that a
// sum is accumulated where it is written rather than deferred (see
// tile_k4). Nothing under SIMDe, where the vector types are structs.
#ifdef FI_SIMDE
#define KEEP(v) ((void)0)
#else
#define KEEP(v) __asm__("" : "+v"(v))
#endif

#define Q8K 292

// Prefetch distance (bytes) on each of the two groups' streams, as on AVX2.
#define PF_AHEAD 2048

// L2 budget (bytes) of packed weights reused across activation tiles.
#define W_BYTES (192 * 1024)

I5 __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
I5 __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

// ld2 joins the 32 bytes at p (lanes 0..7) and at q (lanes 8..15).
I5 __m512i ld2(const uint8_t *p, const uint8_t *q) {
	return _mm512_inserti64x4(_mm512_castsi256_si512(ld256(p)), ld256(q), 1);
}

// ld2_16 joins the 16 bytes at p and at q.
I5 __m256i ld2_16(const uint8_t *p, const uint8_t *q) {
	return _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(p)), ld128(q), 1);
}

// ld2_8 joins the 8 bytes at p and at q.
I5 __m128i ld2_8(const uint8_t *p, const uint8_t *q) {
	return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p), _mm_loadl_epi64((const __m128i *)q));
}

// f16x16 widens the 8 fp16 at p (lanes 0..7) and at q (lanes 8..15).
I5 __m512 f16x16(const uint8_t *p, const uint8_t *q) { return _mm512_cvtph_ps(ld2_16(p, q)); }

I5 __m512i bc32(const uint8_t *p) { return _mm512_set1_epi32((int)ld_u32(p)); }

I5 void prefetch2(const uint8_t *p, const uint8_t *q, int n) {
	for (int o = 0; o < n; o += 64) {
		_mm_prefetch((const char *)(p + PF_AHEAD + o), _MM_HINT_T0);
		_mm_prefetch((const char *)(q + PF_AHEAD + o), _MM_HINT_T0);
	}
}

// ---- activation preparation -------------------------------------------------
// A tile reads, besides the activation rows themselves, what prep wrote for
// them: per block of 32 the sum of its codes (Q8_0, Q4_0, IQ4_NL, MXFP4),
// per super-block the codes in the packed Q6_K step order (Q6_K) or its
// sub-blocks' sums (IQ4_XS).

// prep_sums writes the code sums of blocks [i0, i1) of a Q8_0 row a.
I5 void prep_sums(const uint8_t *a, int64_t i0, int64_t i1, uint8_t *dst) {
	const __m256i ones = _mm256_set1_epi8(1);
	for (int64_t i = i0; i < i1; i++) {
		__m256i v = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, ld256(a + 34 * i + 2));
		__m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
		h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
		h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
		const int32_t s = _mm_cvtsi128_si32(h);
		memcpy(dst + 4 * (i - i0), &s, 4);
	}
}

// ---- drivers ---------------------------------------------------------------

// CH_BYTES: prep bytes per activation row held on the stack at a time.
#define CH_BYTES (8 * 1024)

// FI512_DEFINE(name, tile, prep, REC, ABLK, PB) defines
//   static void name(pk, nb, g0, g1, a, as, nact, out, os)
// writing out[t*os + 8g + r] for groups [g0, g1) and activation rows t <
// nact: REC packed bytes per (super-)block and group, ABLK activation bytes
// per block, PB prep bytes per block and activation row.
//
// Groups go in pairs (one vector: 16 rows; an odd last group is paired with
// itself and only its 8 outputs are stored), activation rows in tiles of
// up to 4. For more than 4 rows the prep of all rows is done once into a
// heap buffer and the pairs are taken in blocks of W_BYTES, each block
// meeting every tile while it sits in L2; otherwise (and if that buffer
// cannot be had) the prep goes through a stack buffer, CH_BYTES per row at
// a time, and the whole row range streams once per tile.
#define FI512_DEFINE(name, tile, prep, REC, ABLK, PB)                                                           \
	I5 void name##_pair(const uint8_t *pk, int64_t nb, int64_t g, int last, int64_t i0, int64_t i1,             \
	                    const uint8_t *a, int64_t as, const uint8_t *x, int64_t xs, float *out, int64_t os,     \
	                    const int na) {                                                                         \
		__m512 acc[4];                                                                                          \
		UNROLL(4) for (int t = 0; t < na; t++) {                                                                \
			const float *o = out + t * os + 8 * g;                                                              \
			acc[t] = i0 == 0 ? _mm512_setzero_ps()                                                              \
			                 : _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(o)),                   \
			                                      _mm256_loadu_ps(last ? o : o + 8), 1);                        \
		}                                                                                                       \
		for (int64_t i = i0; i < i1; i++) {                                                                     \
			const uint8_t *p = pk + (g * nb + i) * (REC), *q = last ? p : p + nb * (REC);                       \
			FI_MCA_BEGIN("avx512_" #name, na);                                                                  \
			prefetch2(p, q, REC);                                                                               \
			tile(p, q, a + i * (ABLK), as, x + (i - i0) * (PB), xs, acc, na);                                   \
			FI_MCA_END();                                                                                       \
		}                                                                                                       \
		UNROLL(4) for (int t = 0; t < na; t++) {                                                                \
			float *o = out + t * os + 8 * g;                                                                    \
			if (last) {                                                                                         \
				_mm256_storeu_ps(o, _mm512_castps512_ps256(acc[t]));                                            \
			} else {                                                                                            \
				_mm512_storeu_ps(o, acc[t]);                                                                    \
			}                                                                                                   \
		}                                                                                                       \
	}                                                                                                           \
                                                                                                                \
	static void name##_run(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, int64_t i0, int64_t i1,       \
	                       const uint8_t *a, int64_t as, const uint8_t *x, int64_t xs, int64_t na, float *out,  \
	                       int64_t os) {                                                                        \
		for (int64_t g = g0; g < g1; g += 2) {                                                                  \
			const int last = g + 1 == g1;                                                                       \
			switch (na) {                                                                                       \
			case 1: name##_pair(pk, nb, g, last, i0, i1, a, as, x, xs, out, os, 1); break;                      \
			case 2: name##_pair(pk, nb, g, last, i0, i1, a, as, x, xs, out, os, 2); break;                      \
			case 3: name##_pair(pk, nb, g, last, i0, i1, a, as, x, xs, out, os, 3); break;                      \
			default: name##_pair(pk, nb, g, last, i0, i1, a, as, x, xs, out, os, 4); break;                     \
			}                                                                                                   \
		}                                                                                                       \
	}                                                                                                           \
                                                                                                                \
	static void name(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, int64_t as,       \
	                 int64_t nact, float *out, int64_t os) {                                                    \
		uint8_t none[1], *heap = (PB) > 0 && nact > 4 ? malloc((size_t)(nact * nb * (PB))) : 0;                 \
		if (heap || ((PB) == 0 && nact > 4)) {                                                                  \
			if (!heap) heap = none;                                                                             \
			const int64_t xs = nb * (PB);                                                                       \
			for (int64_t t = 0; t < nact; t++) prep(a + t * as, 0, nb, heap + t * xs);                          \
			int64_t gpb = (W_BYTES / (nb * (REC))) & ~(int64_t)1;                                               \
			if (gpb < 2) gpb = 2;                                                                               \
			for (int64_t b0 = g0; b0 < g1; b0 += gpb) {                                                         \
				const int64_t b1 = g1 - b0 < gpb ? g1 : b0 + gpb;                                               \
				for (int64_t t = 0; t < nact; t += 4) {                                                         \
					name##_run(pk, nb, b0, b1, 0, nb, a + t * as, as, heap + t * xs, xs,                        \
					           nact - t < 4 ? nact - t : 4, out + t * os, os);                                  \
				}                                                                                               \
			}                                                                                                   \
			if (heap != none) free(heap);                                                                       \
			return;                                                                                             \
		}                                                                                                       \
		uint8_t x[4 * ((PB) > 0 ? CH_BYTES : 1)];                                                               \
		const int64_t ch = (PB) > 0 ? CH_BYTES / ((PB) > 0 ? (PB) : 1) : nb, xs = (PB) > 0 ? CH_BYTES : 0;      \
		for (int64_t t = 0; t < nact; t += 4) {                                                                 \
			const int64_t na = nact - t < 4 ? nact - t : 4;                                                     \
			for (int64_t i0 = 0; i0 < nb; i0 += ch) {                                                           \
				const int64_t i1 = nb - i0 < ch ? nb : i0 + ch;                                                 \
				for (int64_t u = 0; u < na; u++) prep(a + (t + u) * as, i0, i1, x + u * xs);                    \
				name##_run(pk, nb, g0, g1, i0, i1, a + t * as, as, x, xs, na, out + t * os, os);                \
			}                                                                                                   \
		}                                                                                                       \
	}

// fi_avx512_iq_gemm_packed is fi_gemm_packed_avx512 for IQ4_NL, IQ4_XS and
// MXFP4 (kern_avx512_iq.c); -1 for another type.
int fi_avx512_iq_gemm_packed(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                             int64_t as, int64_t nact, float *out, int64_t os);

#endif
