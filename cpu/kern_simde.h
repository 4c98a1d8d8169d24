//go:build cgo

// Test builds only (tag fi_simde, kern_simde.go): kern_avx512.c is compiled
// against SIMDe's portable implementations of the x86 intrinsics (Debian
// libsimde-dev), so the AVX-512 kernels run, slowly, on a CPU without
// AVX-512 and are tested like every other path.
//
// SIMDe 0.7.4 (Debian 12) lacks a few of the intrinsics the kernels use.
// They are defined below from SIMDe's own 256-bit versions, half by half,
// only where SIMDe does not define them: element-wise conversions and one
// horizontal sum, each with the documented meaning of the intrinsic.

#ifndef FLOWINFER_KERN_SIMDE_H
#define FLOWINFER_KERN_SIMDE_H

#if !__has_include(<simde/x86/avx512.h>)
#error "the fi_simde build tag needs SIMDe's headers: apt-get install libsimde-dev"
#endif

// SIMDe then builds each 512-bit operation from native AVX2 halves (the
// path needs AVX2 anyway). Without FMA its fmadd would round twice, and
// could not be compared bit for bit with the AVX2 kernels.
#pragma GCC target("avx2,fma,f16c")

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

#define FI_SIMDE_FN static inline __attribute__((always_inline))

// Halves: the low and high 256 (128, 64) bits of a vector.
FI_SIMDE_FN __m256i fi_simde_lo512(__m512i v) { return _mm512_castsi512_si256(v); }
FI_SIMDE_FN __m256i fi_simde_hi512(__m512i v) { return _mm512_extracti64x4_epi64(v, 1); }
FI_SIMDE_FN __m128i fi_simde_lo256(__m256i v) { return _mm256_castsi256_si128(v); }
FI_SIMDE_FN __m128i fi_simde_hi256(__m256i v) { return _mm256_extracti128_si256(v, 1); }
FI_SIMDE_FN __m128i fi_simde_lo128(__m128i v) { return v; }
FI_SIMDE_FN __m128i fi_simde_hi128(__m128i v) { return _mm_srli_si128(v, 8); }

// Joins: lo in bytes 0..31 and hi in bytes 32..63.
FI_SIMDE_FN __m512i fi_simde_join(__m256i lo, __m256i hi) {
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
FI_SIMDE_FN __m512 fi_simde_joinps(__m256 lo, __m256 hi) {
	return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// FI_SIMDE_HALVES defines R fn(A v) as join(op(lo(v)), op(hi(v))): a
// 512-bit element-wise operation from its 256-bit version.
#define FI_SIMDE_HALVES(fn, R, A, join, op, half)                                                  \
	FI_SIMDE_FN R fn(A v) { return join(op(fi_simde_lo##half(v)), op(fi_simde_hi##half(v))); }

#ifndef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps fi_simde_cvtepi32_ps
FI_SIMDE_HALVES(fi_simde_cvtepi32_ps, __m512, __m512i, fi_simde_joinps, _mm256_cvtepi32_ps, 512)
#endif

#ifndef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32 fi_simde_cvtps_epi32
FI_SIMDE_FN __m512i fi_simde_cvtps_epi32(__m512 v) {
	return fi_simde_join(_mm256_cvtps_epi32(_mm512_castps512_ps256(v)),
	                     _mm256_cvtps_epi32(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}
#endif

// vpmovdb (truncate) and vpmovsdb (saturate) of 16 int32 to 16 bytes.
#ifndef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8 fi_simde_cvtepi32_epi8
FI_SIMDE_FN __m128i fi_simde_cvtepi32_epi8(__m512i v) {
	int32_t x[16];
	int8_t y[16];
	_mm512_storeu_si512(x, v);
	for (int i = 0; i < 16; i++) y[i] = (int8_t)x[i];
	return _mm_loadu_si128((const __m128i *)y);
}
#endif

#ifndef _mm512_cvtsepi32_epi8
#define _mm512_cvtsepi32_epi8 fi_simde_cvtsepi32_epi8
FI_SIMDE_FN __m128i fi_simde_cvtsepi32_epi8(__m512i v) {
	int32_t x[16];
	int8_t y[16];
	_mm512_storeu_si512(x, v);
	for (int i = 0; i < 16; i++) y[i] = (int8_t)(x[i] > 127 ? 127 : x[i] < -128 ? -128 : x[i]);
	return _mm_loadu_si128((const __m128i *)y);
}
#endif

#ifndef _mm512_cvtph_ps
#define _mm512_cvtph_ps fi_simde_cvtph_ps
FI_SIMDE_HALVES(fi_simde_cvtph_ps, __m512, __m256i, fi_simde_joinps, _mm256_cvtph_ps, 256)
#endif

#ifndef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32 fi_simde_cvtepu8_epi32
FI_SIMDE_HALVES(fi_simde_cvtepu8_epi32, __m512i, __m128i, fi_simde_join, _mm256_cvtepu8_epi32, 128)
#endif

#ifndef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32 fi_simde_cvtepi8_epi32
FI_SIMDE_HALVES(fi_simde_cvtepi8_epi32, __m512i, __m128i, fi_simde_join, _mm256_cvtepi8_epi32, 128)
#endif

#ifndef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 fi_simde_cvtepu16_epi32
FI_SIMDE_HALVES(fi_simde_cvtepu16_epi32, __m512i, __m256i, fi_simde_join, _mm256_cvtepu16_epi32, 256)
#endif

#ifndef _mm512_cvtepu8_epi16
#define _mm512_cvtepu8_epi16 fi_simde_cvtepu8_epi16
FI_SIMDE_HALVES(fi_simde_cvtepu8_epi16, __m512i, __m256i, fi_simde_join, _mm256_cvtepu8_epi16, 256)
#endif

#ifndef _mm512_cvtps_pd
#define _mm512_cvtps_pd fi_simde_cvtps_pd
FI_SIMDE_FN __m512d fi_simde_cvtps_pd(__m256 v) {
	return _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_cvtps_pd(_mm256_castps256_ps128(v))),
	                          _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), 1);
}
#endif

#ifndef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps fi_simde_reduce_add_ps
FI_SIMDE_FN float fi_simde_reduce_add_ps(__m512 v) {
	__m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(_mm512_castpd_ps(
	                                                         _mm512_castpd256_pd512(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))));
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
	s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
	return _mm_cvtss_f32(s4);
}
#endif

#ifndef _mm_prefetch
#define _mm_prefetch(p, hint) __builtin_prefetch((p))
#endif
#ifndef _MM_HINT_T0
#define _MM_HINT_T0 3
#endif

#endif
