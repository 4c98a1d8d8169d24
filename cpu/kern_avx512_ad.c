//go:build cgo

// AVX-512 decode-row attention (kern_avx2_ad.c has the AVX2 kernels and
// the row widening both use): 32 vector registers hold a 4×4 block of
// running dot products (4 cached rows × 4 query heads) or 4 query heads ×
// 64 values of V sums, so each loaded row chunk and query chunk feeds 4
// FMAs of 16 lanes. Rows of f16, q8_0, q4_0 and 3- and 4-bit TurboQuant
// are widened in registers as they are used (ld_row), exactly as the AVX2
// path widens them into a buffer, so results agree bit for bit; f32 rows
// are read in place; bf16 and 2-bit rows go through the buffer. A block's
// 16 dot products are summed across lanes by a tree of shuffles and adds
// and stored as four vectors, straight into the scores: storing them to a
// buffer and copying 16 floats out took 30% of the time (BenchmarkAttnRows,
// f32 scores 78 -> 55 us on Zen 4; docs/decisions.md). Also the AVX-512
// softmax.

#ifdef FI_SIMDE
#include "kern_simde.h"
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#include <immintrin.h>
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kern.h"
#include "kern_avx512.h"


// The lane sums of many vectors at once, as a tree of adds of shuffled
// pairs (3 instructions a step, no horizontal adds, one store at the end):
//   - half256(a, b): lanes 0-7 hold a's 8 partial sums, lanes 8-15 b's;
//   - half128(x, y) of two such: the four 128-bit quarters hold 4 partial
//     sums of x's two, then of y's two;
//   - half64(x, y): quarter j holds 2 partial sums of x's quarter j, then
//     2 of y's;
//   - half32(x, y): quarter j holds x's two sums, then y's.
// (shuffle_i32x4 rather than shuffle_f32x4, the same instruction's
// meaning, which SIMDe 0.7.4 names only with its own prefix.)
I5 __m512 quarters(__m512 a, __m512 b, const int imm) {
	return _mm512_castsi512_ps(_mm512_shuffle_i32x4(_mm512_castps_si512(a), _mm512_castps_si512(b), imm));
}

I5 __m512 half256(__m512 a, __m512 b) { return _mm512_add_ps(quarters(a, b, 0x44), quarters(a, b, 0xee)); }

I5 __m512 half128(__m512 x, __m512 y) { return _mm512_add_ps(quarters(x, y, 0x88), quarters(x, y, 0xdd)); }

I5 __m512 half64(__m512 x, __m512 y) {
	const __m512d a = _mm512_castps_pd(x), b = _mm512_castps_pd(y);
	return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

I5 __m512 half32(__m512 x, __m512 y) {
	return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xdd));
}

// sums16 returns the lane sums of a[0..15] transposed: lane 4j+i holds the
// sum of a[4i+j]'s lanes.
I5 __m512 sums16(const __m512 *a) {
	__m512 b[8], c[4];
	UNROLL(16) for (int i = 0; i < 8; i++) b[i] = half256(a[2 * i], a[2 * i + 1]);
	UNROLL(16) for (int i = 0; i < 4; i++) c[i] = half128(b[2 * i], b[2 * i + 1]);
	return half32(half64(c[0], c[1]), half64(c[2], c[3]));
}

// sums8 returns the lane sums of a[0..7] in lanes 0..7 (lane r: a[r]'s).
I5 __m256 sums8(const __m512 *a) {
	__m512 b[4];
	UNROLL(16) for (int i = 0; i < 4; i++) b[i] = half256(a[2 * i], a[2 * i + 1]);
	const __m512 e = half64(half128(b[0], b[1]), half128(b[2], b[3]));
	// quarter j of half32(e, e): the sums of a[j] and a[4+j], twice
	const __m512 z = half32(e, e);
	return _mm512_castps512_ps256(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), z));
}

static int supported(int t, int bits, int64_t dim) {
	if (dim % 16 != 0 || dim > FI_AD_MAXDIM) return 0;
	return bits > 0 || t == FI_F32 || t == FI_F16 || t == FI_BF16 || t == FI_Q8_0 || t == FI_Q4_0;
}

// Row kinds the kernels read in place, widening 16 values at a time in
// registers exactly as kv_row widens them (kern_avx2_kv.h), so results are
// the same bit for bit: K_FLOAT (float32 rows, or rows kv_row widened into
// a buffer: bf16), the stored types, and TurboQuant codes of 3 or 4 bits.
enum { K_FLOAT, K_F16, K_Q8_0, K_Q4_0, K_TQ3, K_TQ4 };

static int kind_of(int t, int bits) {
	if (bits == 3) return K_TQ3;
	if (bits == 4) return K_TQ4;
	if (bits > 0) return -1; // 2 bits: widened into a buffer
	switch (t) {
	case FI_F16: return K_F16;
	case FI_Q8_0: return K_Q8_0;
	case FI_Q4_0: return K_Q4_0;
	}
	return -1;
}

// row_tab returns what ld_row needs of a row besides its bytes: for
// TurboQuant, the codebook times the row's scale (each level one float
// multiply, as kv_row; 3-bit levels twice over, so the code's fourth bit,
// read from the next code, does not matter).
I5 __m512 row_tab(const int kind, const void *row, __m512 levels) {
	if (kind != K_TQ3 && kind != K_TQ4) return levels;
	return _mm512_mul_ps(_mm512_set1_ps(ld_f16((const uint8_t *)row)), levels);
}

// ld_row loads values d..d+15 of a row of kind (d a multiple of 16) as
// float32; tab is row_tab's.
I5 __m512 ld_row(const int kind, const void *row, int64_t d, __m512 tab) {
	const uint8_t *s = row;
	switch (kind) {
	case K_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 2 * d)));
	case K_Q8_0: {
		const uint8_t *b = s + d / 32 * 34;
		const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + d % 32))));
		return _mm512_mul_ps(_mm512_set1_ps(ld_f16(b)), x);
	}
	case K_Q4_0: {
		// the 16 values a code c can stand for, (c - 8)·scale, each the
		// float product kv_row makes, looked up by the code in a lane's
		// low 4 bits
		const uint8_t *b = s + d / 32 * 18;
		const __m512 t = _mm512_mul_ps(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7),
		                               _mm512_set1_ps(ld_f16(b)));
		const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)));
		return _mm512_permutexvar_ps(d % 32 ? _mm512_srli_epi32(c, 4) : c, t);
	}
	case K_TQ4: {
		// 8 bytes, two codes each from the low nibble, in every 64-bit
		// lane; lane j takes byte j/2 (pshufb) shifted right by 4·(j%2):
		// vpermps reads only an index's low 4 bits
		const __m512i w = _mm512_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)(s + 2 + d / 2)));
		const __m512i ix = _mm512_setr_epi32(0x80808000, 0x80808000, 0x80808001, 0x80808001, 0x80808002, 0x80808002,
		                                     0x80808003, 0x80808003, 0x80808004, 0x80808004, 0x80808005, 0x80808005,
		                                     0x80808006, 0x80808006, 0x80808007, 0x80808007);
		const __m512i sh = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
		return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_shuffle_epi8(w, ix), sh), tab);
	}
	case K_TQ3: {
		// 6 bytes, code j at bit 3j, loaded with the 2 bytes before them
		// (so that the 8 bytes end within the row) into every 64-bit
		// lane: lane j takes the bytes that hold it (pshufb), shifted
		// right by 3j mod 8; the index's fourth bit, from the next code,
		// does not matter (row_tab)
		const __m512i w = _mm512_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)(s + 3 * d / 8)));
		const __m512i ix = _mm512_setr_epi32(0x80800302, 0x80800302, 0x80800302, 0x80800403, 0x80800403, 0x80800403,
		                                     0x80800504, 0x80800504, 0x80800605, 0x80800605, 0x80800605, 0x80800706,
		                                     0x80800706, 0x80800706, 0x80808007, 0x80808007);
		const __m512i sh = _mm512_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5, 0, 3, 6, 1, 4, 7, 2, 5);
		return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_shuffle_epi8(w, ix), sh), tab);
	}
	default: return _mm512_loadu_ps((const float *)row + d);
	}
}

// scores_tile sets the scores of query heads g < G against the m rows rp
// (FI_AD_TILE pointers, those past m at zeros) into s from column j0.
I5 void scores_tile(const int kind, const void **rp, int64_t m, int64_t dim, const float *q, int64_t G, float *s,
                    int64_t ls, int64_t j0, __m512 levels) {
	int64_t g = 0;
	for (; g + 4 <= G; g += 4) { // 4 query heads × 4 rows
		const float *q0 = q + g * dim;
		for (int64_t r0 = 0; r0 < m; r0 += 4) {
			const void **p = rp + r0;
			__m512 a[16], tab[4]; // a[4r+i]: row r, head i
			UNROLL(16) for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
			UNROLL(16) for (int r = 0; r < 4; r++) tab[r] = row_tab(kind, p[r], levels);
			UNROLL(8) for (int64_t d = 0; d < dim; d += 16) {
				__m512 x[4];
				UNROLL(16) for (int i = 0; i < 4; i++) x[i] = _mm512_loadu_ps(q0 + i * dim + d);
				UNROLL(16) for (int r = 0; r < 4; r++) {
					const __m512 k = ld_row(kind, p[r], d, tab[r]);
					UNROLL(16) for (int i = 0; i < 4; i++) a[r * 4 + i] = _mm512_fmadd_ps(x[i], k, a[r * 4 + i]);
				}
			}
			// quarter i: head i's scores of rows r0..r0+3
			const __m512 z = sums16(a);
			float *o = s + g * ls + j0 + r0;
			if (m - r0 >= 4) {
				_mm_storeu_ps(o, _mm512_castps512_ps128(z));
				_mm_storeu_ps(o + ls, _mm512_extractf32x4_ps(z, 1));
				_mm_storeu_ps(o + 2 * ls, _mm512_extractf32x4_ps(z, 2));
				_mm_storeu_ps(o + 3 * ls, _mm512_extractf32x4_ps(z, 3));
				continue;
			}
			float tmp[16];
			_mm512_storeu_ps(tmp, z);
			for (int i = 0; i < 4; i++) {
				for (int64_t r = 0; r < m - r0; r++) o[i * ls + r] = tmp[i * 4 + r];
			}
		}
	}
	for (; g < G; g++) { // one query head × 8 rows
		const float *qg = q + g * dim;
		for (int64_t r0 = 0; r0 < m; r0 += 8) {
			const void **p = rp + r0;
			__m512 a[8], tab[8];
			UNROLL(16) for (int r = 0; r < 8; r++) a[r] = _mm512_setzero_ps();
			UNROLL(16) for (int r = 0; r < 8; r++) tab[r] = row_tab(kind, p[r], levels);
			UNROLL(8) for (int64_t d = 0; d < dim; d += 16) {
				const __m512 x = _mm512_loadu_ps(qg + d);
				UNROLL(16) for (int r = 0; r < 8; r++) a[r] = _mm512_fmadd_ps(x, ld_row(kind, p[r], d, tab[r]), a[r]);
			}
			const __m256 z = sums8(a);
			float *o = s + g * ls + j0 + r0;
			if (m - r0 >= 8) {
				_mm256_storeu_ps(o, z);
				continue;
			}
			float tmp[8];
			_mm256_storeu_ps(tmp, z);
			for (int64_t r = 0; r < m - r0; r++) o[r] = tmp[r];
		}
	}
}

// zeros backs the rows past a tile's last (float32 or float16 zeros).
static const float zeros[FI_AD_MAXDIM];

// levels16 returns the codebook of a bits-bit TurboQuant type as ld_row
// indexes it (3 bits: twice over), zeros for other types.
static __m512 levels16(int bits, const float *levels) {
	float l[16] = {0};
	if (bits == 3 || bits == 4) {
		for (int i = 0; i < 16; i++) l[i] = levels[i % (1 << bits)];
	}
	return _mm512_loadu_ps(l);
}

// row_ptrs points rp at the tile's m rows from j0 and the rest at zeros
// (a zero row of every kind reads as zeros: zero scales).
I5 void row_ptrs(const void **rp, const uint8_t *src, int64_t stride, int64_t j0, int64_t m) {
	for (int64_t r = 0; r < m; r++) rp[r] = src + (j0 + r) * stride;
	for (int64_t r = m; r < FI_AD_TILE; r++) rp[r] = zeros;
}

// BY_KIND runs M(k) with k the constant equal to kind, one of the kinds
// read in place.
#define BY_KIND(kind, M) \
	switch (kind) { \
	case K_F16: M(K_F16); break; \
	case K_Q8_0: M(K_Q8_0); break; \
	case K_Q4_0: M(K_Q4_0); break; \
	case K_TQ3: M(K_TQ3); break; \
	case K_TQ4: M(K_TQ4); break; \
	}

// SCORES runs scores_tile with kind a constant, so each kind's loads are
// inlined into a tile of its own, and with the common head sizes (64, 128)
// constants too, so the loop over a row's values unrolls.
#define SCORES(k)                                                                                                      \
	do {                                                                                                               \
		if (dim == 64) {                                                                                               \
			scores_tile(k, rp, tm, 64, q, G, s, ls, j0, lv);                                                           \
		} else if (dim == 128) {                                                                                       \
			scores_tile(k, rp, tm, 128, q, G, s, ls, j0, lv);                                                          \
		} else {                                                                                                       \
			scores_tile(k, rp, tm, dim, q, G, s, ls, j0, lv);                                                          \
		}                                                                                                              \
	} while (0)

// fi_attn_scores_avx512: see kern.h. Rows of f16, q8_0, q4_0 and 3- and
// 4-bit TurboQuant are widened in the registers that use them; f32 rows
// are read as they are, others widened a tile at a time into buf.
int fi_attn_scores_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                          int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (!supported(t, bits, dim)) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(64)));
	const void *rp[FI_AD_TILE];
	const int kind = kind_of(t, bits);
	const __m512 lv = levels16(bits, levels);
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		if (kind < 0) {
			fi_kv_tile_avx2(t, bits, levels, src, stride, j0, tm, dim, buf, (const float **)rp);
			for (int64_t r = tm; r < FI_AD_TILE; r++) rp[r] = zeros;
			SCORES(K_FLOAT);
			continue;
		}
		row_ptrs(rp, src, stride, j0, tm);
		BY_KIND(kind, SCORES);
	}
	return 0;
}

// sum_tile adds to ng accumulator rows (stride dim) of nc×16 values from
// column c the sums over r < m, in order, of w[g*lw + r] · rp[r][c..].
I5 void sum_tile(const int kind, float *acc, int64_t dim, const int ng, const int nc, const float *w, int64_t lw,
                 const void **rp, int64_t m, int64_t c, __m512 levels) {
	__m512 a[4][4];
	UNROLL(16) for (int g = 0; g < ng; g++) {
		UNROLL(16) for (int i = 0; i < nc; i++) a[g][i] = _mm512_loadu_ps(acc + g * dim + c + 16 * i);
	}
	for (int64_t r = 0; r < m; r++) {
		__m512 k[4];
		const __m512 tab = row_tab(kind, rp[r], levels);
		UNROLL(16) for (int i = 0; i < nc; i++) k[i] = ld_row(kind, rp[r], c + 16 * i, tab);
		UNROLL(16) for (int g = 0; g < ng; g++) {
			const __m512 x = _mm512_set1_ps(w[g * lw + r]);
			UNROLL(16) for (int i = 0; i < nc; i++) a[g][i] = _mm512_fmadd_ps(x, k[i], a[g][i]);
		}
	}
	UNROLL(16) for (int g = 0; g < ng; g++) {
		UNROLL(16) for (int i = 0; i < nc; i++) _mm512_storeu_ps(acc + g * dim + c + 16 * i, a[g][i]);
	}
}

// sum_cols runs sum_tile for ng rows over nc (1..4, a constant in each
// call) chunks of 16 columns.
I5 void sum_cols(const int kind, float *acc, int64_t dim, const int ng, int nc, const float *w, int64_t lw,
                 const void **rp, int64_t m, int64_t c, __m512 levels) {
	switch (nc) {
	case 4: sum_tile(kind, acc, dim, ng, 4, w, lw, rp, m, c, levels); break;
	case 3: sum_tile(kind, acc, dim, ng, 3, w, lw, rp, m, c, levels); break;
	case 2: sum_tile(kind, acc, dim, ng, 2, w, lw, rp, m, c, levels); break;
	default: sum_tile(kind, acc, dim, ng, 1, w, lw, rp, m, c, levels); break;
	}
}

// sum_rows adds the m rows rp's weighted sums to acc (fi_attn_sum_avx512).
I5 void sum_rows(const int kind, float *acc, int64_t dim, const float *w, int64_t lw, int64_t G, const void **rp,
                 int64_t m, __m512 levels) {
	for (int64_t c = 0; c < dim; c += 64) {
		const int nc = (int)((dim - c) / 16 < 4 ? (dim - c) / 16 : 4);
		int64_t g = 0;
		for (; g + 4 <= G; g += 4) sum_cols(kind, acc + g * dim, dim, 4, nc, w + g * lw, lw, rp, m, c, levels);
		for (; g < G; g++) sum_cols(kind, acc + g * dim, dim, 1, nc, w + g * lw, lw, rp, m, c, levels);
	}
}

// SUMS runs sum_rows as SCORES runs scores_tile.
#define SUMS(k)                                                                                                        \
	do {                                                                                                               \
		if (dim == 64) {                                                                                               \
			sum_rows(k, acc, 64, w + j0, lw, G, rp, tm, lv);                                                           \
		} else if (dim == 128) {                                                                                       \
			sum_rows(k, acc, 128, w + j0, lw, G, rp, tm, lv);                                                          \
		} else {                                                                                                       \
			sum_rows(k, acc, dim, w + j0, lw, G, rp, tm, lv);                                                          \
		}                                                                                                              \
	} while (0)

// fi_attn_sum_avx512: see kern.h. Rows are widened as in
// fi_attn_scores_avx512.
int fi_attn_sum_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                       int64_t dim, const float *w, int64_t lw, int64_t G, float *acc) {
	if (!supported(t, bits, dim)) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(64)));
	const void *rp[FI_AD_TILE];
	const int kind = kind_of(t, bits);
	const __m512 lv = levels16(bits, levels);
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		if (kind < 0) {
			fi_kv_tile_avx2(t, bits, levels, src, stride, j0, tm, dim, buf, (const float **)rp);
			SUMS(K_FLOAT);
			continue;
		}
		row_ptrs(rp, src, stride, j0, tm);
		BY_KIND(kind, SUMS);
	}
	return 0;
}

// exp16 is e^x in float32 for 16 lanes: fa_exp8's polynomial (Cephes'
// expf, within 2 ulp; kern_avx2.h), 0 below -87.3, NaN kept.
I5 __m512 exp16(__m512 x) {
	const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(FI_EXPF_MIN), _CMP_GE_OQ);
	const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(FI_EXPF_MIN)), _mm512_set1_ps(FI_EXPF_MAX));
	const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(FI_EXPF_LOG2E)),
	                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FI_EXPF_LN2_HI), xc);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FI_EXPF_LN2_LO), r);
	__m512 p = _mm512_set1_ps(FI_EXPF_P5);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FI_EXPF_P4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FI_EXPF_P3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FI_EXPF_P2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FI_EXPF_P1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FI_EXPF_P0));
	const __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
	const __m512 v = _mm512_maskz_mul_ps(keep, y, _mm512_castsi512_ps(e));
	return _mm512_mask_mov_ps(v, nan, x);
}

// ld16 loads row[i..i+k) (k <= 16) padded with pad; st16 stores k lanes.
I5 __m512 ld16(const float *row, int64_t k, float pad) {
	if (k == 16) return _mm512_loadu_ps(row);
	float t[16];
	for (int j = 0; j < 16; j++) t[j] = j < k ? row[j] : pad;
	return _mm512_loadu_ps(t);
}

I5 void st16(float *row, __m512 v, int64_t k) {
	if (k == 16) {
		_mm512_storeu_ps(row, v);
		return;
	}
	float t[16];
	_mm512_storeu_ps(t, v);
	for (int j = 0; j < k; j++) row[j] = t[j];
}

// fi_softmax_avx512: see kern.h.
void fi_softmax_avx512(float *row, int64_t n, float scale) {
	const __m512 sc = _mm512_set1_ps(scale);
	__m512 mx = _mm512_set1_ps(-INFINITY);
	for (int64_t i = 0; i < n; i += 16) {
		const int64_t k = n - i < 16 ? n - i : 16;
		const __m512 x = _mm512_mul_ps(ld16(row + i, k, -INFINITY), sc);
		st16(row + i, x, k);
		mx = _mm512_max_ps(mx, x);
	}
	float l[16];
	_mm512_storeu_ps(l, mx);
	float m = l[0];
	for (int j = 1; j < 16; j++) m = l[j] > m ? l[j] : m;
	const __m512 mv = _mm512_set1_ps(m);
	__m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
	for (int64_t i = 0; i < n; i += 16) {
		const int64_t k = n - i < 16 ? n - i : 16;
		// lanes past the end hold -inf: e^-inf is 0 and adds nothing
		const __m512 e = exp16(_mm512_sub_ps(ld16(row + i, k, -INFINITY), mv));
		st16(row + i, e, k);
		s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
		s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
	}
	double d[8];
	_mm512_storeu_pd(d, _mm512_add_pd(s0, s1));
	const __m512 inv = _mm512_set1_ps((float)(1 / (((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7])))));
	for (int64_t i = 0; i < n; i += 16) {
		const int64_t k = n - i < 16 ? n - i : 16;
		st16(row + i, _mm512_mul_ps(ld16(row + i, k, 0), inv), k);
	}
}
