//go:build cgo

// Unaligned little-endian scalar loads shared by the kernel files (memcpy:
// no pointer needs any alignment). No intrinsics, so the SIMDe build of
// kern_avx512.c can include it too.

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

#endif
