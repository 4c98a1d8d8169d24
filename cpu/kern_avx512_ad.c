//go:build cgo

// AVX-512 decode-row attention (kern_avx2_ad.c has the AVX2 kernels and
// the row widening both use): 32 vector registers hold a 4×4 block of
// running dot products (4 cached rows × 4 query heads) or 4 query heads ×
// 64 values of V sums, so each loaded row chunk and query chunk feeds 4
// FMAs of 16 lanes and the kernels are bound by FMAs, not loads.

#ifdef FI_SIMDE
#include "kern_simde.h"
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#include <immintrin.h>
#endif

#include <math.h>
#include <stdint.h>

#include "kern.h"
#include "kern_avx512.h"


// fold adds the two 256-bit halves of v.
I5 __m256 fold(__m512 v) {
	return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// hsum8 returns the 8 lane sums of a[0..7] as one vector (lane r: the sum
// of a[r]'s lanes).
I5 __m256 hsum8(const __m256 *a) {
	const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
	const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
	const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

static int supported(int t, int bits, int64_t dim) {
	if (dim % 16 != 0 || dim > FI_AD_MAXDIM) return 0;
	return bits > 0 || t == FI_F32 || t == FI_F16 || t == FI_BF16 || t == FI_Q8_0 || t == FI_Q4_0;
}

// ld_row loads 16 values of a row from value d: float32s, or, half,
// float16s widened in the register (exactly, as the row widening does).
I5 __m512 ld_row(const int half, const void *row, int64_t d) {
	if (half) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
	return _mm512_loadu_ps((const float *)row + d);
}

// scores_tile sets the scores of query heads g < G against the m rows rp
// (FI_AD_TILE pointers, those past m at zeros) into s from column j0.
I5 void scores_tile(const int half, const void **rp, int64_t m, int64_t dim, const float *q, int64_t G, float *s,
                    int64_t ls, int64_t j0) {
	int64_t g = 0;
	for (; g + 4 <= G; g += 4) { // 4 query heads × 4 rows
		const float *q0 = q + g * dim;
		for (int64_t r0 = 0; r0 < m; r0 += 4) {
			const void **p = rp + r0;
			__m512 a[16];
			UNROLL(16) for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
			for (int64_t d = 0; d < dim; d += 16) {
				__m512 x[4];
				UNROLL(16) for (int i = 0; i < 4; i++) x[i] = _mm512_loadu_ps(q0 + i * dim + d);
				UNROLL(16) for (int r = 0; r < 4; r++) {
					const __m512 k = ld_row(half, p[r], d);
					UNROLL(16) for (int i = 0; i < 4; i++) a[i * 4 + r] = _mm512_fmadd_ps(x[i], k, a[i * 4 + r]);
				}
			}
			__m256 f[16];
			UNROLL(16) for (int i = 0; i < 16; i++) f[i] = fold(a[i]);
			float tmp[16];
			_mm256_storeu_ps(tmp, hsum8(f));
			_mm256_storeu_ps(tmp + 8, hsum8(f + 8));
			UNROLL(16) for (int i = 0; i < 4; i++) {
				float *o = s + (g + i) * ls + j0 + r0;
				for (int64_t r = 0; r < 4 && r < m - r0; r++) o[r] = tmp[i * 4 + r];
			}
		}
	}
	for (; g < G; g++) { // one query head × 8 rows
		const float *qg = q + g * dim;
		for (int64_t r0 = 0; r0 < m; r0 += 8) {
			const void **p = rp + r0;
			__m512 a[8];
			UNROLL(16) for (int r = 0; r < 8; r++) a[r] = _mm512_setzero_ps();
			for (int64_t d = 0; d < dim; d += 16) {
				const __m512 x = _mm512_loadu_ps(qg + d);
				UNROLL(16) for (int r = 0; r < 8; r++) a[r] = _mm512_fmadd_ps(x, ld_row(half, p[r], d), a[r]);
			}
			__m256 f[8];
			UNROLL(16) for (int r = 0; r < 8; r++) f[r] = fold(a[r]);
			float tmp[8];
			_mm256_storeu_ps(tmp, hsum8(f));
			float *o = s + g * ls + j0 + r0;
			for (int64_t r = 0; r < 8 && r < m - r0; r++) o[r] = tmp[r];
		}
	}
}

// zeros backs the rows past a tile's last (float32 or float16 zeros).
static const float zeros[FI_AD_MAXDIM];

// fi_attn_scores_avx512: see kern.h. Float16 rows are widened in the
// registers that use them; other types a tile at a time into buf.
int fi_attn_scores_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                          int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (!supported(t, bits, dim)) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(64)));
	const void *rp[FI_AD_TILE];
	const int half = bits == 0 && t == FI_F16;
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		if (half) {
			for (int64_t r = 0; r < tm; r++) rp[r] = src + (j0 + r) * stride;
		} else {
			fi_kv_tile_avx2(t, bits, levels, src, stride, j0, tm, dim, buf, (const float **)rp);
		}
		for (int64_t r = tm; r < FI_AD_TILE; r++) rp[r] = zeros;
		if (half) {
			scores_tile(1, rp, tm, dim, q, G, s, ls, j0);
		} else {
			scores_tile(0, rp, tm, dim, q, G, s, ls, j0);
		}
	}
	return 0;
}

// sum_tile adds to ng accumulator rows (stride dim) of nc×16 values from
// column c the sums over r < m, in order, of w[g*lw + r] · rp[r][c..].
I5 void sum_tile(const int half, float *acc, int64_t dim, const int ng, const int nc, const float *w, int64_t lw,
                 const void **rp, int64_t m, int64_t c) {
	__m512 a[4][4];
	UNROLL(16) for (int g = 0; g < ng; g++) {
		UNROLL(16) for (int i = 0; i < nc; i++) a[g][i] = _mm512_loadu_ps(acc + g * dim + c + 16 * i);
	}
	for (int64_t r = 0; r < m; r++) {
		__m512 k[4];
		UNROLL(16) for (int i = 0; i < nc; i++) k[i] = ld_row(half, rp[r], c + 16 * i);
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
I5 void sum_cols(const int half, float *acc, int64_t dim, const int ng, int nc, const float *w, int64_t lw,
                 const void **rp, int64_t m, int64_t c) {
	switch (nc) {
	case 4: sum_tile(half, acc, dim, ng, 4, w, lw, rp, m, c); break;
	case 3: sum_tile(half, acc, dim, ng, 3, w, lw, rp, m, c); break;
	case 2: sum_tile(half, acc, dim, ng, 2, w, lw, rp, m, c); break;
	default: sum_tile(half, acc, dim, ng, 1, w, lw, rp, m, c); break;
	}
}

// sum_rows adds the m rows rp's weighted sums to acc (fi_attn_sum_avx512).
I5 void sum_rows(const int half, float *acc, int64_t dim, const float *w, int64_t lw, int64_t G, const void **rp,
                 int64_t m) {
	for (int64_t c = 0; c < dim; c += 64) {
		const int nc = (int)((dim - c) / 16 < 4 ? (dim - c) / 16 : 4);
		int64_t g = 0;
		for (; g + 4 <= G; g += 4) sum_cols(half, acc + g * dim, dim, 4, nc, w + g * lw, lw, rp, m, c);
		for (; g < G; g++) sum_cols(half, acc + g * dim, dim, 1, nc, w + g * lw, lw, rp, m, c);
	}
}

// fi_attn_sum_avx512: see kern.h. Rows are widened as in
// fi_attn_scores_avx512.
int fi_attn_sum_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                       int64_t dim, const float *w, int64_t lw, int64_t G, float *acc) {
	if (!supported(t, bits, dim)) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(64)));
	const void *rp[FI_AD_TILE];
	const int half = bits == 0 && t == FI_F16;
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		if (half) {
			for (int64_t r = 0; r < tm; r++) rp[r] = src + (j0 + r) * stride;
			sum_rows(1, acc, dim, w + j0, lw, G, rp, tm);
		} else {
			fi_kv_tile_avx2(t, bits, levels, src, stride, j0, tm, dim, buf, (const float **)rp);
			sum_rows(0, acc, dim, w + j0, lw, G, rp, tm);
		}
	}
	return 0;
}

// exp16 is e^x in float32 for 16 lanes: fa_exp8's polynomial (Cephes'
// expf, within 2 ulp; kern_avx2_fa.c), 0 below -87.3, NaN kept.
I5 __m512 exp16(__m512 x) {
	const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
	const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
	const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
	                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
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
