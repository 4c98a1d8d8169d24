// Matrix-vector product, BF16 weights against F32 activations. A bfloat16
// is the top half of a float32 (ggml's GGML_BF16_TO_FP32).
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes column pairs tid, tid+BLOCK, ... when the row
// starts on a word and has an even length (one word = two values), else
// single columns.
void row_dot(uint r, uint rb, uint xb, uint tid) {
	if ((rb & 3u) == 0u && (p.cols & 1u) == 0u) {
		const uint wb = rb >> 2;
		for (uint i = tid; i < p.cols / 2; i += BLOCK) {
			const uint v = w[wb + i];
			const float lo = uintBitsToFloat(v << 16), hi = uintBitsToFloat(v & 0xFFFF0000u);
			for (uint c = 0; c < nc; c++) {
				const uint xi = xb + c * p.cols + 2 * i;
				acc[r][c] = fma(lo, x[xi], fma(hi, x[xi + 1], acc[r][c]));
			}
		}
		return;
	}
	for (uint i = tid; i < p.cols; i += BLOCK) {
		const float wv = uintBitsToFloat(w_u16(rb + 2 * i) << 16);
		for (uint c = 0; c < nc; c++) {
			acc[r][c] = fma(wv, x[xb + c * p.cols + i], acc[r][c]);
		}
	}
}
