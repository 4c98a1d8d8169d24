//go:build cgo

// AVX2 conversion of stored KV rows to float32 (attention reads a chunk of
// f16, bf16, q8_0 or q4_0 rows into L1 this way), and the TurboQuant
// decode into the rotated domain. Every conversion is exact or one float
// multiply, as quant's Go dequantizers do it, so results are bit for bit
// the same.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_kv.h"

// fi_dequant_avx2: see kern.h.
int fi_dequant_avx2(int t, const uint8_t *src, int64_t stride, int64_t rows, int64_t cols, float *dst, int64_t dstride) {
	switch (t) {
	case FI_F16:
	case FI_BF16:
	case FI_Q8_0:
	case FI_Q4_0:
		break;
	default:
		return -1;
	}
	for (int64_t r = 0; r < rows; r++) kv_row(t, 0, NULL, src + r * stride, cols, dst + r * dstride);
	return 0;
}

// fi_turbo_decode_avx2: see kern.h.
void fi_turbo_decode_avx2(int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t rows, int64_t n,
                          float *dst, int64_t dstride) {
	for (int64_t r = 0; r < rows; r++) kv_row(0, bits, levels, src + r * stride, n, dst + r * dstride);
}
