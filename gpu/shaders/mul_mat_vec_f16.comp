#version 450
// Matrix-vector product, F16 weights against F32 activations.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes column pairs tid, tid+BLOCK, ... when the row
// starts on a word and has an even length (one word = two halves), else
// single columns.
float row_dot(uint rb, uint xb, uint tid) {
	float s = 0.0;
	if ((rb & 3u) == 0u && (p.cols & 1u) == 0u) {
		const uint wb = rb >> 2;
		for (uint i = tid; i < p.cols / 2; i += BLOCK) {
			const vec2 h = unpackHalf2x16(w[wb + i]);
			s = fma(h.x, x[xb + 2 * i], fma(h.y, x[xb + 2 * i + 1], s));
		}
		return s;
	}
	for (uint i = tid; i < p.cols; i += BLOCK) {
		s = fma(w_f16(rb + 2 * i), x[xb + i], s);
	}
	return s;
}
