#version 450
// Matrix-vector product, Q8_0 weights against F32 activations. A Q8_0
// block is 34 bytes: an f16 scale d, then 32 int8 quants q; weight = d·q.
// Blocks are only 2-byte aligned, so quants are read as 16-bit pairs.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes blocks tid, tid+BLOCK, ...
float row_dot(uint rb, uint xb, uint tid) {
	float s = 0.0;
	const uint nb = p.cols / 32;
	for (uint b = tid; b < nb; b += BLOCK) {
		const uint bb = rb + 34 * b;
		const uint xi = xb + 32 * b;
		float sb = 0.0;
		for (uint j = 0; j < 16; j++) {
			const uint v = w_u16(bb + 2 + 2 * j);
			const int q0 = int(v << 24) >> 24; // low byte, sign-extended
			const int q1 = int(v << 16) >> 24; // high byte
			sb = fma(float(q0), x[xi + 2 * j], fma(float(q1), x[xi + 2 * j + 1], sb));
		}
		s = fma(w_f16(bb), sb, s);
	}
	return s;
}
