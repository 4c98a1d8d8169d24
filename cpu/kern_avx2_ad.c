//go:build cgo

// AVX2 decode-row attention over stored KV rows: the scores of a group of
// query heads against a run of cached K rows, and the weighted sum of a run
// of cached V rows, each in one call per run. Rows of every KV type (f32,
// f16, bf16, q8_0, q4_0, TurboQuant) are widened to float32 a tile at a
// time into a buffer that stays in L1, exactly as fi_dequant_avx2 and
// fi_turbo_decode_avx2 widen them, and met there by the queries or the
// weights: one pass over the cache's bytes, no call per chunk of rows.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

// kv_row widens one row of n values of type t (bits > 0: a TurboQuant row
// of that many bits, levels its codebook) to float32 at d.
FI_INLINE void kv_row(int t, int bits, const float *levels, const uint8_t *s, int64_t n, float *d) {
	int64_t i = 0;
	if (bits > 0) {
		const float sc = ld_f16(s);
		const uint8_t *c = s + 2;
		// the levels times the scale, each one float multiply as in
		// quant.Turbo.DecodeRotated (vectors: a table of 16 scalar stores
		// read back as vectors would stall store forwarding)
		const __m256 vs = _mm256_set1_ps(sc);
		if (bits == 4) {
			const __m256 lo = _mm256_mul_ps(vs, _mm256_loadu_ps(levels)), hi = _mm256_mul_ps(vs, _mm256_loadu_ps(levels + 8));
			const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
			for (; i + 8 <= n; i += 8) {
				uint32_t w;
				memcpy(&w, c + i / 2, 4);
				const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(15));
				const __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
				_mm256_storeu_ps(d + i, _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28))));
			}
		} else if (bits == 3) {
			const __m256 tab = _mm256_mul_ps(vs, _mm256_loadu_ps(levels));
			const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
			for (; i + 8 <= n; i += 8) {
				const uint32_t w = c[3 * i / 8] | c[3 * i / 8 + 1] << 8 | c[3 * i / 8 + 2] << 16;
				const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh), _mm256_set1_epi32(7));
				_mm256_storeu_ps(d + i, _mm256_permutevar8x32_ps(tab, idx));
			}
		}
		if (i == n) return;
		float lv[16];
		for (int k = 0; k < (1 << bits); k++) lv[k] = sc * levels[k];
		for (; i < n; i++) d[i] = lv[(c[i * bits / 8] | c[(i * bits + bits - 1) / 8] << 8) >> (i * bits % 8) & ((1 << bits) - 1)];
		return;
	}
	switch (t) {
	case FI_F16:
		for (; i < n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(ld128(s + 2 * i)));
		break;
	case FI_BF16:
		for (; i < n; i += 8) {
			const __m256i w = _mm256_cvtepu16_epi32(ld128(s + 2 * i));
			_mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
		}
		break;
	case FI_Q8_0:
		for (; i < n; i += 32, s += 34) {
			const __m256 sc = _mm256_set1_ps(ld_f16(s));
			for (int k = 0; k < 32; k += 8) {
				const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + 2 + k)));
				_mm256_storeu_ps(d + i + k, _mm256_mul_ps(sc, _mm256_cvtepi32_ps(q)));
			}
		}
		break;
	case FI_Q4_0:
		for (; i < n; i += 32, s += 18) {
			const __m256 sc = _mm256_set1_ps(ld_f16(s));
			const __m128i qs = ld128(s + 2);
			const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, _mm_set1_epi8(15)), _mm_set1_epi8(8));
			const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(15)), _mm_set1_epi8(8));
			_mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), sc));
			_mm256_storeu_ps(d + i + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), sc));
			_mm256_storeu_ps(d + i + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), sc));
			_mm256_storeu_ps(d + i + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), sc));
		}
		break;
	}
}

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

// fi_attn_scores_avx2: see kern.h.
int fi_attn_scores_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                        int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (dim % 8 != 0 || dim > FI_AD_MAXDIM) return -1;
	if (bits == 0 && t != FI_F32 && t != FI_F16 && t != FI_BF16 && t != FI_Q8_0 && t != FI_Q4_0) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(32)));
	const float *rp[FI_AD_TILE];
	static const float zero[FI_AD_MAXDIM];
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		kv_tile(t, bits, levels, src, stride, j0, tm, dim, buf, rp);
		for (int64_t r = tm; r < FI_AD_TILE; r++) rp[r] = zero;
		// pairs of query heads against 4 rows at a time: 8 running sums,
		// each row chunk and query chunk loaded once for 2 and 4 FMAs
		int64_t g = 0;
		for (; g + 2 <= G; g += 2) {
			const float *q0 = q + g * dim, *q1 = q0 + dim;
			for (int64_t r0 = 0; r0 < tm; r0 += 4) {
				const float **p = rp + r0;
				__m256 a[8];
				for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
				for (int64_t d = 0; d < dim; d += 8) {
					const __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d);
					_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
						const __m256 k = _mm256_loadu_ps(p[r] + d);
						a[r] = _mm256_fmadd_ps(x0, k, a[r]);
						a[r + 4] = _mm256_fmadd_ps(x1, k, a[r + 4]);
					}
				}
				float tmp[8];
				_mm256_storeu_ps(tmp, hsum8(a));
				float *o0 = s + g * ls + j0 + r0, *o1 = o0 + ls;
				for (int64_t r = 0; r < 4 && r < tm - r0; r++) o0[r] = tmp[r], o1[r] = tmp[r + 4];
			}
		}
		for (; g < G; g++) {
			const float *qg = q + g * dim;
			for (int64_t r0 = 0; r0 < tm; r0 += 8) {
				const float **p = rp + r0;
				__m256 a[8];
				for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
				for (int64_t d = 0; d < dim; d += 8) {
					const __m256 qv = _mm256_loadu_ps(qg + d);
					_Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) a[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(p[r] + d), a[r]);
				}
				float tmp[8];
				_mm256_storeu_ps(tmp, hsum8(a));
				float *o = s + g * ls + j0 + r0;
				for (int64_t r = 0; r < 8 && r < tm - r0; r++) o[r] = tmp[r];
			}
		}
	}
	return 0;
}

// sum_tile adds to ng (1..4) accumulator rows of 16 values at acc (stride
// dim) the sums over r < m of w[g*lw + r] · rp[r][c..c+16], r in order.
FI_INLINE void sum_tile(float *acc, int64_t dim, const int ng, const float *w, int64_t lw, const float **rp, int64_t m,
                        int64_t c) {
	__m256 a0[4], a1[4];
	_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
		a0[g] = _mm256_loadu_ps(acc + g * dim + c), a1[g] = _mm256_loadu_ps(acc + g * dim + c + 8);
	}
	for (int64_t r = 0; r < m; r++) {
		const __m256 v0 = _mm256_loadu_ps(rp[r] + c), v1 = _mm256_loadu_ps(rp[r] + c + 8);
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
FI_INLINE void sum_tile8(float *acc, int64_t dim, int64_t G, const float *w, int64_t lw, const float **rp, int64_t m,
                         int64_t c) {
	for (int64_t g = 0; g < G; g++) {
		__m256 a = _mm256_loadu_ps(acc + g * dim + c);
		for (int64_t r = 0; r < m; r++) a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + g * lw + r), _mm256_loadu_ps(rp[r] + c), a);
		_mm256_storeu_ps(acc + g * dim + c, a);
	}
}

// fi_attn_sum_avx2: see kern.h.
int fi_attn_sum_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                     const float *w, int64_t lw, int64_t G, float *acc) {
	if (dim % 8 != 0 || dim > FI_AD_MAXDIM) return -1;
	if (bits == 0 && t != FI_F32 && t != FI_F16 && t != FI_BF16 && t != FI_Q8_0 && t != FI_Q4_0) return -1;
	float buf[FI_AD_TILE * FI_AD_MAXDIM] __attribute__((aligned(32)));
	const float *rp[FI_AD_TILE];
	for (int64_t j0 = 0; j0 < n; j0 += FI_AD_TILE) {
		const int64_t tm = n - j0 < FI_AD_TILE ? n - j0 : FI_AD_TILE;
		kv_tile(t, bits, levels, src, stride, j0, tm, dim, buf, rp);
		const float *wj = w + j0;
		int64_t c = 0;
		for (; c + 16 <= dim; c += 16) {
			int64_t g = 0;
			for (; g + 4 <= G; g += 4) sum_tile(acc + g * dim, dim, 4, wj + g * lw, lw, rp, tm, c);
			for (; g < G; g++) sum_tile(acc + g * dim, dim, 1, wj + g * lw, lw, rp, tm, c);
		}
		if (c < dim) sum_tile8(acc, dim, G, wj, lw, rp, tm, c);
	}
	return 0;
}
