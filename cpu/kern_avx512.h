//go:build cgo

// Macros shared by the AVX-512 files (kern_avx512.c, kern_avx512_ad.c),
// included after their target pragma (or SIMDe's header).
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

#endif
