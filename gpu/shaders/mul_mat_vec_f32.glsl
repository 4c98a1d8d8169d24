// Matrix-vector product, F32 weights: y = W·x.
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes columns tid, tid+BLOCK, ... (rb is 4-aligned).
void row_dot(uint r, uint rb, uint xb, uint tid) {
	const uint wb = rb >> 2;
	for (uint i = tid; i < p.cols; i += BLOCK) {
		const float wv = uintBitsToFloat(w[wb + i]);
		for (uint c = 0; c < nc; c++) {
			acc[r][c] = fma(wv, x[xb + c * p.cols + i], acc[r][c]);
		}
	}
}
