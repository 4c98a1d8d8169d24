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

// fi_attn_scores_avx512: see kern.h.
int fi_attn_scores_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                          int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (!supported(t, bits, dim)) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(64)));
	const float *rp[FI_AD_TILE];
	static const float zero[FI_AD_MAXDIM];
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		fi_kv_tile_avx2(t, bits, levels, src, stride, j0, tm, dim, buf, rp);
		for (int64_t r = tm; r < FI_AD_TILE; r++) rp[r] = zero;
		int64_t g = 0;
		for (; g + 4 <= G; g += 4) { // 4 query heads × 4 rows
			const float *q0 = q + g * dim;
			for (int64_t r0 = 0; r0 < tm; r0 += 4) {
				const float **p = rp + r0;
				__m512 a[16];
				UNROLL(16) for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
				for (int64_t d = 0; d < dim; d += 16) {
					__m512 x[4];
					UNROLL(16) for (int i = 0; i < 4; i++) x[i] = _mm512_loadu_ps(q0 + i * dim + d);
					UNROLL(16) for (int r = 0; r < 4; r++) {
						const __m512 k = _mm512_loadu_ps(p[r] + d);
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
					for (int64_t r = 0; r < 4 && r < tm - r0; r++) o[r] = tmp[i * 4 + r];
				}
			}
		}
		for (; g < G; g++) { // one query head × 8 rows
			const float *qg = q + g * dim;
			for (int64_t r0 = 0; r0 < tm; r0 += 8) {
				const float **p = rp + r0;
				__m512 a[8];
				UNROLL(16) for (int r = 0; r < 8; r++) a[r] = _mm512_setzero_ps();
				for (int64_t d = 0; d < dim; d += 16) {
					const __m512 x = _mm512_loadu_ps(qg + d);
					UNROLL(16) for (int r = 0; r < 8; r++) a[r] = _mm512_fmadd_ps(x, _mm512_loadu_ps(p[r] + d), a[r]);
				}
				__m256 f[8];
				UNROLL(16) for (int r = 0; r < 8; r++) f[r] = fold(a[r]);
				float tmp[8];
				_mm256_storeu_ps(tmp, hsum8(f));
				float *o = s + g * ls + j0 + r0;
				for (int64_t r = 0; r < 8 && r < tm - r0; r++) o[r] = tmp[r];
			}
		}
	}
	return 0;
}

// sum_tile adds to ng accumulator rows (stride dim) of nc×16 values from
// column c the sums over r < m, in order, of w[g*lw + r] · rp[r][c..].
I5 void sum_tile(float *acc, int64_t dim, const int ng, const int nc, const float *w, int64_t lw, const float **rp,
                 int64_t m, int64_t c) {
	__m512 a[4][4];
	UNROLL(16) for (int g = 0; g < ng; g++) {
		UNROLL(16) for (int i = 0; i < nc; i++) a[g][i] = _mm512_loadu_ps(acc + g * dim + c + 16 * i);
	}
	for (int64_t r = 0; r < m; r++) {
		__m512 k[4];
		UNROLL(16) for (int i = 0; i < nc; i++) k[i] = _mm512_loadu_ps(rp[r] + c + 16 * i);
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
I5 void sum_cols(float *acc, int64_t dim, const int ng, int nc, const float *w, int64_t lw, const float **rp,
                 int64_t m, int64_t c) {
	switch (nc) {
	case 4: sum_tile(acc, dim, ng, 4, w, lw, rp, m, c); break;
	case 3: sum_tile(acc, dim, ng, 3, w, lw, rp, m, c); break;
	case 2: sum_tile(acc, dim, ng, 2, w, lw, rp, m, c); break;
	default: sum_tile(acc, dim, ng, 1, w, lw, rp, m, c); break;
	}
}

// fi_attn_sum_avx512: see kern.h.
int fi_attn_sum_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                       int64_t dim, const float *w, int64_t lw, int64_t G, float *acc) {
	if (!supported(t, bits, dim)) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(64)));
	const float *rp[FI_AD_TILE];
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		fi_kv_tile_avx2(t, bits, levels, src, stride, j0, tm, dim, buf, rp);
		const float *wj = w + j0;
		for (int64_t c = 0; c < dim; c += 64) {
			const int nc = (int)((dim - c) / 16 < 4 ? (dim - c) / 16 : 4);
			int64_t g = 0;
			for (; g + 4 <= G; g += 4) sum_cols(acc + g * dim, dim, 4, nc, wj + g * lw, lw, rp, tm, c);
			for (; g < G; g++) sum_cols(acc + g * dim, dim, 1, nc, wj + g * lw, lw, rp, tm, c);
		}
	}
	return 0;
}
