//go:build cgo

// AVX2 decode-row attention over stored KV rows: the scores of a group of
// query heads against a run of cached K rows, and the weighted sum of a run
// of cached V rows, each in one call per run. F32 rows are read in place.
// The scores widen f16 rows in the registers that use them, and rows of
// the other KV types (bf16, q8_0, q4_0, TurboQuant) to float32 a tile at a
// time into a buffer that stays in L1 (kv_row, kern_avx2_kv.h: as
// fi_dequant_avx2 and fi_turbo_decode_avx2 widen them), where the queries
// meet them. The V sums widen f16, q8_0 and 3- and 4-bit TurboQuant rows in
// registers too (ld8k, kern_avx2_kv.h, which kv_row also widens them with),
// the others through the buffer. One pass over the cache's bytes, no call
// per chunk of rows.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_kv.h"

// fi_kv_tile_avx2 points rp[r] (r < m) at rows j0+r as float32: the rows
// themselves for f32, else widened into buf (rows of n) by kv_row. The
// AVX-512 kernels (kern_avx512_ad.c) widen rows through it too.
void fi_kv_tile_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t j0, int64_t m,
                     int64_t n, float *buf, const float **rp) {
	for (int64_t r = 0; r < m; r++) {
		const uint8_t *s = src + (j0 + r) * stride;
		if (bits == 0 && t == FI_F32) {
			rp[r] = (const float *)s;
		} else {
			kv_row(t, bits, levels, s, n, buf + r * n);
			rp[r] = buf + r * n;
		}
	}
}

#define kv_tile fi_kv_tile_avx2

// hsum8 returns the 8 lane sums of a[0..7] as one vector (lane r: the sum
// of a[r]'s lanes).
FI_INLINE __m256 hsum8(const __m256 *a) {
	const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
	const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
	const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// ld8 loads values d..d+7 of a row: float32s, or, half, float16s widened
// in the register (exactly, as kv_row widens them).
FI_INLINE __m256 ld8(const int half, const void *row, int64_t d) {
	if (half) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
	return _mm256_loadu_ps((const float *)row + d);
}

// scores_tile sets the scores of query heads g < G against the m rows rp
// (FI_AD_TILE pointers, those past m at zeros) into s from column j0.
FI_INLINE void scores_tile(const int half, const void **rp, int64_t m, int64_t dim, const float *q, int64_t G,
                           float *s, int64_t ls, int64_t j0) {
	// pairs of query heads against 4 rows at a time: 8 running sums,
	// each row chunk and query chunk loaded once for 2 and 4 FMAs
	int64_t g = 0;
	for (; g + 2 <= G; g += 2) {
		const float *q0 = q + g * dim, *q1 = q0 + dim;
		for (int64_t r0 = 0; r0 < m; r0 += 4) {
			const void **p = rp + r0;
			__m256 a[8];
			_Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
			for (int64_t d = 0; d < dim; d += 8) {
				const __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d);
				_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
					const __m256 k = ld8(half, p[r], d);
					a[r] = _mm256_fmadd_ps(x0, k, a[r]);
					a[r + 4] = _mm256_fmadd_ps(x1, k, a[r + 4]);
				}
			}
			const __m256 h = hsum8(a);
			float *o0 = s + g * ls + j0 + r0, *o1 = o0 + ls;
			if (m - r0 >= 4) {
				_mm_storeu_ps(o0, _mm256_castps256_ps128(h));
				_mm_storeu_ps(o1, _mm256_extractf128_ps(h, 1));
			} else {
				float tmp[8];
				_mm256_storeu_ps(tmp, h);
				for (int64_t r = 0; r < m - r0; r++) o0[r] = tmp[r], o1[r] = tmp[r + 4];
			}
		}
	}
	for (; g < G; g++) {
		const float *qg = q + g * dim;
		for (int64_t r0 = 0; r0 < m; r0 += 8) {
			const void **p = rp + r0;
			__m256 a[8];
			_Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
			for (int64_t d = 0; d < dim; d += 8) {
				const __m256 qv = _mm256_loadu_ps(qg + d);
				_Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) a[r] = _mm256_fmadd_ps(qv, ld8(half, p[r], d), a[r]);
			}
			float tmp[8];
			_mm256_storeu_ps(tmp, hsum8(a));
			float *o = s + g * ls + j0 + r0;
			for (int64_t r = 0; r < 8 && r < m - r0; r++) o[r] = tmp[r];
		}
	}
}

// zeros backs the rows past a tile's last (float32 or float16 zeros).
static const float zeros[FI_AD_MAXDIM];

// fi_attn_scores_avx2: see kern.h. Float16 rows are widened in the
// registers that use them, other types a tile at a time into buf.
int fi_attn_scores_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                        int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (dim % 8 != 0 || dim > FI_AD_MAXDIM) return -1;
	if (bits == 0 && t != FI_F32 && t != FI_F16 && t != FI_BF16 && t != FI_Q8_0 && t != FI_Q4_0) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(32)));
	const void *rp[FI_AD_TILE];
	const int half = bits == 0 && t == FI_F16;
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		if (half) {
			for (int64_t r = 0; r < tm; r++) rp[r] = src + (j0 + r) * stride;
		} else {
			kv_tile(t, bits, levels, src, stride, j0, tm, dim, buf, (const float **)rp);
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

// sum_tile adds to ng (1..4) accumulator rows of 16 values at acc (stride
// dim) the sums over r < m of w[g*lw + r] · rp[r][c..c+16], r in order.
FI_INLINE void sum_tile(const int kind, float *acc, int64_t dim, const int ng, const float *w, int64_t lw,
                        const void **rp, const float *sc, int64_t ns, int64_t m, int64_t c, const float *levels) {
	__m256 a0[4], a1[4];
	_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
		a0[g] = _mm256_loadu_ps(acc + g * dim + c), a1[g] = _mm256_loadu_ps(acc + g * dim + c + 8);
	}
	__m256 t0 = _mm256_setzero_ps(), t1 = t0;
	for (int64_t r = 0; r < m; r++) {
		row_tab(kind, sc + r * ns, levels, &t0, &t1);
		const __m256 v0 = ld8k(kind, rp[r], c, t0, t1, sc + r * ns), v1 = ld8k(kind, rp[r], c + 8, t0, t1, sc + r * ns);
		_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
			const __m256 x = _mm256_broadcast_ss(w + g * lw + r);
			a0[g] = _mm256_fmadd_ps(x, v0, a0[g]);
			a1[g] = _mm256_fmadd_ps(x, v1, a1[g]);
		}
	}
	_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
		_mm256_storeu_ps(acc + g * dim + c, a0[g]), _mm256_storeu_ps(acc + g * dim + c + 8, a1[g]);
	}
}

// sum_tile8 is sum_tile for 8 values (the last ones of a row of 8k + 8).
FI_INLINE void sum_tile8(const int kind, float *acc, int64_t dim, int64_t G, const float *w, int64_t lw,
                         const void **rp, const float *sc, int64_t ns, int64_t m, int64_t c, const float *levels) {
	for (int64_t g = 0; g < G; g++) {
		__m256 a = _mm256_loadu_ps(acc + g * dim + c), t0 = _mm256_setzero_ps(), t1 = t0;
		for (int64_t r = 0; r < m; r++) {
			row_tab(kind, sc + r * ns, levels, &t0, &t1);
			a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + g * lw + r), ld8k(kind, rp[r], c, t0, t1, sc + r * ns), a);
		}
		_mm256_storeu_ps(acc + g * dim + c, a);
	}
}

// sum_rows adds the m rows rp's weighted sums to acc (fi_attn_sum_avx2).
FI_INLINE void sum_rows(const int kind, float *acc, int64_t dim, const float *w, int64_t lw, int64_t G,
                        const void **rp, const float *sc, int64_t ns, int64_t m, const float *levels) {
	int64_t c = 0;
	for (; c + 16 <= dim; c += 16) {
		int64_t g = 0;
		for (; g + 4 <= G; g += 4) sum_tile(kind, acc + g * dim, dim, 4, w + g * lw, lw, rp, sc, ns, m, c, levels);
		for (; g < G; g++) sum_tile(kind, acc + g * dim, dim, 1, w + g * lw, lw, rp, sc, ns, m, c, levels);
	}
	if (c < dim) sum_tile8(kind, acc, dim, G, w, lw, rp, sc, ns, m, c, levels);
}

// SUM runs sum_rows with kind a constant, so each kind's widening is
// inlined into a loop of its own.
#define SUM(k) sum_rows(k, acc, dim, w + j0, lw, G, rp, sc, ns, tm, levels)

// fi_attn_sum_avx2: see kern.h. Rows of the kinds akind names are read in
// place, the others widened a tile at a time into buf.
int fi_attn_sum_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                     const float *w, int64_t lw, int64_t G, float *acc) {
	if (dim % 8 != 0 || dim > FI_AD_MAXDIM) return -1;
	if (bits == 0 && t != FI_F32 && t != FI_F16 && t != FI_BF16 && t != FI_Q8_0 && t != FI_Q4_0) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(32)));
	const void *rp[FI_AD_TILE];
	// the tile's scales, ns a row (TurboQuant: 1; q8_0: a block's)
	float sc[FI_AD_TILE * (FI_AD_MAXDIM / 32)];
	const int kind = akind(t, bits);
	const int64_t ns = bits > 0 ? 1 : kind == A_Q8_0 ? dim / 32 : 0;
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		if (kind < 0) {
			kv_tile(t, bits, levels, src, stride, j0, tm, dim, buf, (const float **)rp);
			SUM(A_FLOAT);
			continue;
		}
		for (int64_t r = 0; r < tm; r++) rp[r] = src + (j0 + r) * stride;
		if (bits > 0) {
			for (int64_t r = 0; r < tm; r++) sc[r] = ld_f16(rp[r]);
		} else if (ns > 0) {
			for (int64_t r = 0; r < tm; r++) {
				for (int64_t b = 0; b < ns; b++) sc[r * ns + b] = ld_f16((const uint8_t *)rp[r] + b * 34);
			}
		}
		switch (kind) {
		case A_FLOAT: SUM(A_FLOAT); break;
		case A_F16: SUM(A_F16); break;
		case A_Q8_0: SUM(A_Q8_0); break;
		case A_TQ3: SUM(A_TQ3); break;
		case A_TQ4: SUM(A_TQ4); break;
		}
	}
	return 0;
}
