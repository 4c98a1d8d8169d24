//go:build cgo

// AVX2 fast Walsh-Hadamard transform, giving bit for bit quant.Hadamard's
// results: the same stages (butterflies of values h apart, h = 1, 2, 4,
// ...) on the same values, then the same multiplication by 1/√n. A float
// add is commutative, so a butterfly computed from a permuted copy of a
// vector rounds as Go's does; there is nothing to contract into an FMA.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kern.h"
#include "kern_avx2.h"

// stages124 is the butterflies of h = 1, 2 and 4 within the 8 values of v:
// lane j takes v[j] + v[j^h] where j&h is 0 and v[j^h] - v[j] where it is 1.
FI_INLINE __m256 stages124(__m256 v) {
	__m256 p = _mm256_permute_ps(v, 0xB1); // lanes swapped in pairs (h = 1)
	v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
	p = _mm256_permute_ps(v, 0x4E); // pairs swapped in fours (h = 2)
	v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
	p = _mm256_permute2f128_ps(v, v, 0x01); // halves swapped (h = 4)
	return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
}

// fi_hadamard_avx2: see kern.h.
int fi_hadamard_avx2(float *x, int64_t n, int64_t count) {
	if (n < 8 || (n & (n - 1)) != 0) return -1;
	const __m256 s = _mm256_set1_ps((float)(1 / sqrt((double)n)));
	for (int64_t c = 0; c < count; c++) {
		float *v = x + c * n;
		for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, stages124(_mm256_loadu_ps(v + i)));
		for (int64_t h = 8; h < n; h <<= 1) {
			for (int64_t i = 0; i < n; i += 2 * h) {
				for (int64_t j = i; j < i + h; j += 8) {
					const __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
					_mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
					_mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
				}
			}
		}
		for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_loadu_ps(v + i), s));
	}
	return 0;
}
