//go:build cgo

// AVX2 RMSNorm and RoPE rotation, giving bit for bit the results of the Go
// loops they replace (rmsNormRows and rotate in backend_ew.go). RMSNorm adds
// the squares in float64 in four interleaved running sums, as the Go loop
// does; the order of additions, not the vector width, fixes the result.
// Contraction into FMA is off, since a fused multiply-add rounds once where
// Go rounds twice.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kern.h"
#include "kern_avx2.h"

// fi_rmsnorm_avx2: see kern.h.
void fi_rmsnorm_avx2(float *out, const float *x, const float *w, int64_t rows, int64_t dim, float eps) {
	for (int64_t t = 0; t < rows; t++) {
		const float *xr = x + t * dim;
		float *yr = out + t * dim;
		// lane k of acc is the Go loop's s_k: the squares of x[i], i = k mod 4
		__m256d acc = _mm256_setzero_pd();
		int64_t i = 0;
		for (; i + 8 <= dim; i += 8) {
			const __m256 v = _mm256_loadu_ps(xr + i);
			const __m256 sq = _mm256_mul_ps(v, v);
			acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
			acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
		}
		if (i + 4 <= dim) {
			const __m128 v = _mm_loadu_ps(xr + i);
			acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(v, v)));
			i += 4;
		}
		double s[4];
		_mm256_storeu_pd(s, acc);
		for (; i < dim; i++) s[0] += (double)(xr[i] * xr[i]);
		const float mean = (float)((s[0] + s[1] + s[2] + s[3]) / (double)dim);
		const float scale = 1.0f / (float)sqrt((double)(mean + eps));
		const __m256 sv = _mm256_set1_ps(scale);
		i = 0;
		if (w) {
			for (; i + 8 <= dim; i += 8)
				_mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), sv),
				                                       _mm256_loadu_ps(w + i)));
			for (; i < dim; i++) yr[i] = xr[i] * scale * w[i];
		} else {
			for (; i + 8 <= dim; i += 8) _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(xr + i), sv));
			for (; i < dim; i++) yr[i] = xr[i] * scale;
		}
	}
}

// fi_rope_avx2: see kern.h.
void fi_rope_avx2(float *x, const float *cs, int64_t rows, int64_t nhead, int64_t hdim, int64_t half, int neox) {
	for (int64_t t = 0; t < rows; t++) {
		const float *c = cs + t * 4 * half, *s = c + 2 * half;
		for (int64_t h = 0; h < nhead; h++) {
			float *v = x + (t * nhead + h) * hdim;
			int64_t i = 0;
			if (neox) {
				// pairs (v[i], v[i+half]): c and s hold cos and sin of pair i
				for (; i + 8 <= half; i += 8) {
					const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
					const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
					_mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, cv), _mm256_mul_ps(x1, sv)));
					_mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(x0, sv), _mm256_mul_ps(x1, cv)));
				}
				for (; i < half; i++) {
					const float x0 = v[i], x1 = v[half + i];
					v[i] = x0 * c[i] - x1 * s[i];
					v[half + i] = x0 * s[i] + x1 * c[i];
				}
				continue;
			}
			// pairs (v[2i], v[2i+1]): c holds each cos twice, s holds
			// (-sin, sin), so v*c + swap(v)*s rotates four pairs at once.
			// x1*(-sin) + x0*cos equals Go's x0*cos - x1*sin exactly.
			for (; i + 8 <= 2 * half; i += 8) {
				const __m256 xv = _mm256_loadu_ps(v + i);
				const __m256 xs = _mm256_permute_ps(xv, 0xb1);
				_mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_mul_ps(xv, _mm256_loadu_ps(c + i)),
				                                      _mm256_mul_ps(xs, _mm256_loadu_ps(s + i))));
			}
			for (; i < 2 * half; i += 2) {
				const float x0 = v[i], x1 = v[i + 1];
				v[i] = x0 * c[i] - x1 * s[i + 1];
				v[i + 1] = x0 * s[i + 1] + x1 * c[i];
			}
		}
	}
}
