//go:build cgo

// Unaligned little-endian scalar loads shared by the kernel files (memcpy:
// no pointer needs any alignment), a blocking size, and the llvm-mca region
// markers. No
// intrinsics, so the SIMDe build of kern_avx512.c can include it too.

#ifndef FLOWINFER_KERN_LD_H
#define FLOWINFER_KERN_LD_H

#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) uint32_t ld_u32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static inline __attribute__((always_inline)) float ld_f32(const uint8_t *p) {
	float f;
	memcpy(&f, p, 4);
	return f;
}

// Bytes of weight rows the row-wise products (AVX2 and AVX-512) run against
// all activation tiles before moving on (L2 is 512 KiB per core here;
// activations and outputs need room too).
#define FI_ROW_BLOCK_BYTES (128 * 1024)

// FI_MCA_BEGIN(name, n) / FI_MCA_END() mark one iteration of a product's
// inner loop (one packed record) for llvm-mca, as region "name_n" (n: a
// constant, the activation rows of a tile). Only when compiled with -DFI_MCA
// (bench/mca.sh, which reads the assembly); otherwise they are nothing.
#ifdef FI_MCA
#define FI_MCA_BEGIN(name, n) __asm__ volatile("# LLVM-MCA-BEGIN " name "_%c0" ::"i"(n))
#define FI_MCA_END() __asm__ volatile("# LLVM-MCA-END")
#else
#define FI_MCA_BEGIN(name, n) ((void)0)
#define FI_MCA_END() ((void)0)
#endif

#endif
