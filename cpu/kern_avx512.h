//go:build cgo

// Macros and helpers shared by the AVX-512 files (kern_avx512.c,
// kern_avx512_ad.c), included after their target pragma (or SIMDe's
// header).
//
// I5 inlines the tiles into their drivers, where sizes are constants;
// UNROLL unrolls their loops, so arrays of vectors stay in registers. Under
// SIMDe, where every intrinsic is a function of its own, both would make
// the compiler take minutes: neither is used.

#ifndef FLOWINFER_KERN_AVX512_H
#define FLOWINFER_KERN_AVX512_H

#ifdef FI_SIMDE
#define I5 static inline
#define UNROLL(n)
#else
#define I5 static inline __attribute__((always_inline))
#define FI_PRAGMA(x) _Pragma(#x)
#define UNROLL(n) FI_PRAGMA(GCC unroll n)
#endif

#include <stdint.h>
#include <string.h>

// ld_f16 widens the fp16 at p exactly.
I5 float ld_f16(const uint8_t *p) {
	uint16_t h;
	memcpy(&h, p, 2);
	return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

#endif
