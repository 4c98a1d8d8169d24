#version 450
// Matrix-vector product, F16 weights against F32 activations.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes column pairs tid, tid+BLOCK, ... when the row
// starts on a word and has an even length (one word = two halves), else
// single columns.
void row_dot(uint rb, uint xb, uint tid) {
	if ((rb & 3u) == 0u && (p.cols & 1u) == 0u) {
		const uint wb = rb >> 2;
		for (uint i = tid; i < p.cols / 2; i += BLOCK) {
			const vec2 h = unpackHalf2x16(w[wb + i]);
			for (uint c = 0; c < nc; c++) {
				const uint xi = xb + c * p.cols + 2 * i;
				acc[c] = fma(h.x, x[xi], fma(h.y, x[xi + 1], acc[c]));
			}
		}
		return;
	}
	for (uint i = tid; i < p.cols; i += BLOCK) {
		const float wv = w_f16(rb + 2 * i);
		for (uint c = 0; c < nc; c++) {
			acc[c] = fma(wv, x[xb + c * p.cols + i], acc[c]);
		}
	}
}
