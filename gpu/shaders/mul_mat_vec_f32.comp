#version 450
// Matrix-vector product, F32 weights: y = W·x.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes columns tid, tid+BLOCK, ... (rb is 4-aligned).
float row_dot(uint rb, uint xb, uint tid) {
	const uint wb = rb >> 2;
	float s = 0.0;
	for (uint i = tid; i < p.cols; i += BLOCK) {
		s = fma(uintBitsToFloat(w[wb + i]), x[xb + i], s);
	}
	return s;
}
