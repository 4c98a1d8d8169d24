#version 450
// Matrix-vector product, Q8_0 weights against F32 activations. A Q8_0
// block is 34 bytes: an f16 scale d, then 32 int8 quants q; weight = d·q.
// Blocks are only 2-byte aligned, so quants are read as 16-bit pairs.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes blocks tid, tid+BLOCK, ...
void row_dot(uint rb, uint xb, uint tid) {
	const uint nb = p.cols / 32;
	for (uint b = tid; b < nb; b += BLOCK) {
		const uint bb = rb + 34 * b;
		const float d = w_f16(bb);
		float sb[NUM_COLS];
		for (uint c = 0; c < nc; c++) {
			sb[c] = 0.0;
		}
		for (uint j = 0; j < 16; j++) {
			const uint v = w_u16(bb + 2 + 2 * j);
			const float q0 = float(int(v << 24) >> 24); // low byte, sign-extended
			const float q1 = float(int(v << 16) >> 24); // high byte
			for (uint c = 0; c < nc; c++) {
				const uint xi = xb + c * p.cols + 32 * b + 2 * j;
				sb[c] = fma(q0, x[xi], fma(q1, x[xi + 1], sb[c]));
			}
		}
		for (uint c = 0; c < nc; c++) {
			acc[c] = fma(d, sb[c], acc[c]);
		}
	}
}
