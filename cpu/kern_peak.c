//go:build cgo

// The machine's F32 FMA peak, for reporting kernels' FLOP/s against it
// (BenchmarkFMAPeak): independent chains of vector FMAs with no memory
// operands, enough of them to cover the FMA latency on current x86 cores.
// And the int16 multiply-add peak of the integer decode kernels (scores of
// q4_0 and 4-bit TurboQuant K rows, V sums of q4_0, q8_0 and 3- and 4-bit
// TurboQuant rows: kern_qint.go, kern_wint.go), in the instructions they
// use: vpmaddwd then vpaddd on AVX2, vpdpwssd (VNNI) in AVX-512's scores.

#include <immintrin.h>

#include "kern.h"

// fi_fma_peak_avx2: see kern.h.
__attribute__((target("avx2,fma"))) float fi_fma_peak_avx2(int64_t n) {
	__m256 a[12];
	const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
	for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
	for (int64_t k = 0; k < n; k++) {
		_Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
	}
	__m256 s = a[0];
	for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
	float t[8];
	_mm256_storeu_ps(t, s);
	return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

// fi_madd_peak_avx2: see kern.h. Each chain multiplies its own int16
// pairs, so that no product can be hoisted out of the loop; the lanes wrap.
__attribute__((target("avx2"))) int32_t fi_madd_peak_avx2(int64_t n) {
	__m256i a[12];
	const __m256i y = _mm256_set1_epi16(3);
	for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi32(i + 1);
	for (int64_t k = 0; k < n; k++) {
		_Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(a[i], y));
	}
	__m256i s = a[0];
	for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, a[i]);
	return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

// fi_fma_peak_avx512: see kern.h. Not in the SIMDe build (it reports
// AVX-512 on machines without it): there it returns NaN.
#ifdef FI_SIMDE
float fi_fma_peak_avx512(int64_t n) {
	(void)n;
	return __builtin_nanf("");
}

int fi_dpwssd_peak_avx512(int64_t n, int32_t *out) {
	(void)n, (void)out;
	return -1;
}
#else
__attribute__((target("avx512f"))) float fi_fma_peak_avx512(int64_t n) {
	__m512 a[24];
	const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
	for (int i = 0; i < 24; i++) a[i] = _mm512_set1_ps((float)i);
	for (int64_t k = 0; k < n; k++) {
		_Pragma("GCC unroll 24") for (int i = 0; i < 24; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
	}
	__m512 s = a[0];
	for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, a[i]);
	return _mm512_reduce_add_ps(s);
}

// fi_dpwssd_peak_avx512: see kern.h.
__attribute__((target("avx512f,avx512vnni"))) int fi_dpwssd_peak_avx512(int64_t n, int32_t *out) {
	__m512i a[24];
	const __m512i x = _mm512_set1_epi16(3), y = _mm512_set1_epi16(-2);
	for (int i = 0; i < 24; i++) a[i] = _mm512_set1_epi32(i);
	for (int64_t k = 0; k < n; k++) {
		_Pragma("GCC unroll 24") for (int i = 0; i < 24; i++) a[i] = _mm512_dpwssd_epi32(a[i], x, y);
	}
	__m512i s = a[0];
	for (int i = 1; i < 24; i++) s = _mm512_add_epi32(s, a[i]);
	*out = _mm512_reduce_add_epi32(s);
	return 0;
}
#endif
