#version 450
// Matrix-vector product, Q4_0 weights against F32 activations. A Q4_0
// block is 18 bytes: an f16 scale d, then 16 bytes of 4-bit quants: byte j
// holds weight j in its low nibble and weight j+16 in its high one;
// weight = d·(q - 8) (ggml's dequantize_row_q4_0). Blocks are only 2-byte
// aligned, so quants are read as 16-bit pairs.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes blocks tid, tid+BLOCK, ...
float row_dot(uint rb, uint xb, uint tid) {
	float s = 0.0;
	const uint nb = p.cols / 32;
	for (uint b = tid; b < nb; b += BLOCK) {
		const uint bb = rb + 18 * b;
		const uint xi = xb + 32 * b;
		float sb = 0.0;
		for (uint j = 0; j < 8; j++) {
			const uint v = w_u16(bb + 2 + 2 * j);
			const float q0 = float(int(v & 0xFu) - 8), q1 = float(int((v >> 8) & 0xFu) - 8);
			const float q2 = float(int((v >> 4) & 0xFu) - 8), q3 = float(int((v >> 12) & 0xFu) - 8);
			sb = fma(q0, x[xi + 2 * j], sb);
			sb = fma(q1, x[xi + 2 * j + 1], sb);
			sb = fma(q2, x[xi + 16 + 2 * j], sb);
			sb = fma(q3, x[xi + 16 + 2 * j + 1], sb);
		}
		s = fma(w_f16(bb), sb, s);
	}
	return s;
}
