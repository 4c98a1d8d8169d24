//go:build cgo

// AVX2 tile of prefill attention (flash attention; backend_attn_flash.go's
// block): one tile of L cached positions against a block of query rows,
// with the online softmax's running max and sum. K rows come packed (rows
// of dk, contiguous) and V in column blocks of 16 (cpu.FlashPackV), so
// every read streams, whatever the cache's row stride (2 KiB strides map
// all rows to a few cache sets, and defeat the hardware prefetchers).
//
//   1. S = K·Qᵀ (L x rp, row stride rp+16): the query rows are the columns,
//      packed by the caller in blocks of 16 (dk x 16 floats each); a
//      register tile is 6 keys x 16 query rows (12 accumulators), a K
//      element broadcast per key, two Q vectors per step.
//   2. Per query row (8 columns of S at a time): keys beyond the row's
//      position, or before its sliding window, are masked on the tiles
//      that cross the diagonal or a window's edge, the new max (on the
//      other tiles, kept by step 1 from its register tiles), the
//      rescale factor c = exp(m_old - m_new), P = exp(S - m_new) in place,
//      l = l·c + Σ P (the tile's sum in float32, l in float64).
//   3. acc = acc·c + P·V: register tile 6 query rows x 16 columns of V,
//      P broadcast from S (its column is the query row), V rows from the
//      packed block.
//
// exp is a float32 polynomial (Cephes' expf, within 2 ulp), zero below
// -87.3 (so masked -inf scores give 0). Everything else is float32 FMA:
// results differ from Ref's in rounding only.

#pragma GCC target("avx2,fma,f16c")

#include <math.h>

#include "kern.h"
#include "kern_avx2.h"

// fa_qk sets nj (1..6) rows of S (stride ss) at columns [0, 16): key row
// jj (kp + jj*dk) times the 16 query columns of the block at qb (dk x 16);
// mx (unless NULL) becomes the columns' max of mx and these rows.
FI_INLINE void fa_qk(const float *kp, int64_t dk, const float *qb, float *s, int64_t ss, float *mx, const int nj) {
	__m256 a0[6], a1[6];
	_Pragma("GCC unroll 6") for (int jj = 0; jj < nj; jj++) a0[jj] = _mm256_setzero_ps(), a1[jj] = _mm256_setzero_ps();
	for (int64_t d = 0; d < dk; d++) {
		const __m256 b0 = _mm256_loadu_ps(qb + d * 16), b1 = _mm256_loadu_ps(qb + d * 16 + 8);
		_Pragma("GCC unroll 6") for (int jj = 0; jj < nj; jj++) {
			const __m256 x = _mm256_broadcast_ss(kp + jj * dk + d);
			a0[jj] = _mm256_fmadd_ps(x, b0, a0[jj]);
			a1[jj] = _mm256_fmadd_ps(x, b1, a1[jj]);
		}
	}
	_Pragma("GCC unroll 6") for (int jj = 0; jj < nj; jj++) {
		_mm256_storeu_ps(s + jj * ss, a0[jj]);
		_mm256_storeu_ps(s + jj * ss + 8, a1[jj]);
	}
	if (mx) {
		__m256 m0 = _mm256_loadu_ps(mx), m1 = _mm256_loadu_ps(mx + 8);
		_Pragma("GCC unroll 6") for (int jj = 0; jj < nj; jj++) {
			m0 = _mm256_max_ps(m0, a0[jj]);
			m1 = _mm256_max_ps(m1, a1[jj]);
		}
		_mm256_storeu_ps(mx, m0);
		_mm256_storeu_ps(mx + 8, m1);
	}
}

// fa_pv updates nr (1..6) query rows of acc (stride dv) at nc (1 or 2)
// vectors of columns: acc = acc·cs[r] + Σ_j s[j*ss + r] · vb[j*w + c], vb
// the packed V block (L rows of w = 8·nc floats).
FI_INLINE void fa_pv(float *acc, int64_t dv, const float *cs, const float *s, int64_t ss, const float *vb,
                     int64_t L, const int nr, const int nc) {
	__m256 a0[6], a1[6];
	_Pragma("GCC unroll 6") for (int i = 0; i < nr; i++) {
		const __m256 c = _mm256_broadcast_ss(cs + i);
		a0[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + i * dv), c);
		if (nc == 2) a1[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + i * dv + 8), c);
	}
	const int64_t w = 8 * nc;
	for (int64_t j = 0; j < L; j++) {
		const __m256 v0 = _mm256_loadu_ps(vb + j * w);
		const __m256 v1 = nc == 2 ? _mm256_loadu_ps(vb + j * w + 8) : v0;
		_Pragma("GCC unroll 6") for (int i = 0; i < nr; i++) {
			const __m256 p = _mm256_broadcast_ss(s + j * ss + i);
			a0[i] = _mm256_fmadd_ps(p, v0, a0[i]);
			if (nc == 2) a1[i] = _mm256_fmadd_ps(p, v1, a1[i]);
		}
	}
	_Pragma("GCC unroll 6") for (int i = 0; i < nr; i++) {
		_mm256_storeu_ps(acc + i * dv, a0[i]);
		if (nc == 2) _mm256_storeu_ps(acc + i * dv + 8, a1[i]);
	}
}

static void fa_pv_rows(float *acc, int64_t dv, const float *cs, const float *s, int64_t ss, const float *vb,
                       int64_t L, int64_t nr, int nc) {
#define FA_PV(n)                                                          \
	case n:                                                               \
		if (nc == 2)                                                      \
			fa_pv(acc, dv, cs, s, ss, vb, L, n, 2);                       \
		else                                                              \
			fa_pv(acc, dv, cs, s, ss, vb, L, n, 1);                       \
		break;
	switch (nr) {
		FA_PV(1)
		FA_PV(2)
		FA_PV(3)
		FA_PV(4)
		FA_PV(5)
		FA_PV(6)
	}
#undef FA_PV
}

// fi_fa_tile_avx2: see kern.h.
int fi_fa_tile_avx2(const float *qt, int64_t rp, int64_t R, int64_t dk, int64_t dv, const float *kp, const float *vp,
                    int64_t vn, int64_t L, int64_t j0, const int32_t *pos, int mask, int64_t win, float *m, double *l,
                    float *acc, float *scratch) {
	if (dv % 8 != 0 || rp % 16 != 0) return -1;
	const int64_t ss = rp + 16;
	float *s = scratch, *cs = s + L * ss;
	// 1. S = K·Qᵀ; unmasked, the new max per query row as well (in cs)
	if (!mask) memcpy(cs, m, (size_t)rp * 4);
	for (int64_t r = 0; r < rp; r += 16) {
		const float *qb = qt + r * dk;
		float *mx = mask ? NULL : cs + r;
		int64_t j = 0;
		for (; j + 6 <= L; j += 6) fa_qk(kp + j * dk, dk, qb, s + j * ss + r, ss, mx, 6);
		switch (L - j) {
		case 1: fa_qk(kp + j * dk, dk, qb, s + j * ss + r, ss, mx, 1); break;
		case 2: fa_qk(kp + j * dk, dk, qb, s + j * ss + r, ss, mx, 2); break;
		case 3: fa_qk(kp + j * dk, dk, qb, s + j * ss + r, ss, mx, 3); break;
		case 4: fa_qk(kp + j * dk, dk, qb, s + j * ss + r, ss, mx, 4); break;
		case 5: fa_qk(kp + j * dk, dk, qb, s + j * ss + r, ss, mx, 5); break;
		}
	}
	// 2. online softmax, 8 query rows (columns of S) at a time
	const __m256 ninf = _mm256_set1_ps(-INFINITY);
	for (int64_t r = 0; r < rp; r += 8) {
		const __m256 mold = _mm256_loadu_ps(m + r);
		__m256 mx = mold;
		if (mask) {
			// left out: positions past the row's (jv > pv) and, with a
			// window, those at or before pv - win (not jv > lo)
			const __m256i pv = _mm256_loadu_si256((const __m256i *)(pos + r));
			const __m256i lo = win > 0 ? _mm256_sub_epi32(pv, _mm256_set1_epi32((int32_t)win)) : _mm256_set1_epi32(INT32_MIN);
			const __m256i ones = _mm256_set1_epi32(-1);
			for (int64_t j = 0; j < L; j++) {
				const __m256i jv = _mm256_set1_epi32((int32_t)(j0 + j));
				const __m256i o = _mm256_or_si256(_mm256_cmpgt_epi32(jv, pv), _mm256_xor_si256(_mm256_cmpgt_epi32(jv, lo), ones));
				const __m256 out = _mm256_castsi256_ps(o);
				const __m256 x = _mm256_blendv_ps(_mm256_loadu_ps(s + j * ss + r), ninf, out);
				_mm256_storeu_ps(s + j * ss + r, x);
				mx = _mm256_max_ps(mx, x);
			}
		} else {
			mx = _mm256_loadu_ps(cs + r);
		}
		// a row with nothing unmasked yet keeps a max of -inf, but its
		// exponents are taken from 0 so that no -inf - -inf appears (its P
		// and c are 0 either way); a later tile then starts from its own
		// max (a window can hide a row's first tiles)
		const __m256 mxe = _mm256_blendv_ps(mx, _mm256_setzero_ps(), _mm256_cmp_ps(mx, ninf, _CMP_EQ_OQ));
		const __m256 c = fa_exp8(_mm256_sub_ps(mold, mxe));
		__m256 sum = _mm256_setzero_ps();
		for (int64_t j = 0; j < L; j++) {
			const __m256 p = fa_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j * ss + r), mxe));
			_mm256_storeu_ps(s + j * ss + r, p);
			sum = _mm256_add_ps(sum, p);
		}
		_mm256_storeu_ps(m + r, mx);
		_mm256_storeu_ps(cs + r, c);
		const __m256d c0 = _mm256_cvtps_pd(_mm256_castps256_ps128(c)), c1 = _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1));
		const __m256d s0 = _mm256_cvtps_pd(_mm256_castps256_ps128(sum)),
		              s1 = _mm256_cvtps_pd(_mm256_extractf128_ps(sum, 1));
		_mm256_storeu_pd(l + r, _mm256_fmadd_pd(_mm256_loadu_pd(l + r), c0, s0));
		_mm256_storeu_pd(l + r + 4, _mm256_fmadd_pd(_mm256_loadu_pd(l + r + 4), c1, s1));
	}
	// 3. acc = acc·c + P·V
	for (int64_t c = 0; c < dv; c += 16) {
		const int nc = dv - c >= 16 ? 2 : 1;
		const float *vb = vp + c * vn + j0 * 8 * nc;
		for (int64_t r = 0; r < R; r += 6) {
			const int64_t nr = R - r < 6 ? R - r : 6;
			fa_pv_rows(acc + r * dv + c, dv, cs + r, s + r, ss, vb, L, nr, nc);
		}
	}
	return 0;
}
