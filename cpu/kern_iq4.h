//go:build cgo

// The 16 levels of the 4-bit table types, shared by their AVX2
// (kern_avx2_iq.h) and AVX-512 (kern_avx512_iq.c) kernels. No intrinsics,
// so the SIMDe build can include it too.

#ifndef FLOWINFER_KERN_IQ4_H
#define FLOWINFER_KERN_IQ4_H

#include <stdint.h>

// The levels of quant's kvaluesIQ4NL and kvaluesMXFP4 (ggml's kvalues_iq4nl
// and kvalues_mxfp4: the E2M1 values doubled). The tests compare every
// kernel with quant's Go products, which use quant's tables.
static const int8_t fi_kv_iq4nl[16] __attribute__((aligned(16))) = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                                    1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t fi_kv_mxfp4[16] __attribute__((aligned(16))) = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#endif
