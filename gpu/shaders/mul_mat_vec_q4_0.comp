#version 450
// Matrix-vector product, Q4_0 weights against F32 activations. A Q4_0
// block is 18 bytes: an f16 scale d, then 16 bytes of 4-bit quants: byte j
// holds weight j in its low nibble and weight j+16 in its high one;
// weight = d·(q - 8) (ggml's dequantize_row_q4_0). Blocks are only 2-byte
// aligned, so quants are read as 16-bit pairs.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// row_dot: thread tid takes blocks tid, tid+BLOCK, ...
void row_dot(uint rb, uint xb, uint tid) {
	const uint nb = p.cols / 32;
	for (uint b = tid; b < nb; b += BLOCK) {
		const uint bb = rb + 18 * b;
		const float d = w_f16(bb);
		float sb[NUM_COLS];
		for (uint c = 0; c < nc; c++) {
			sb[c] = 0.0;
		}
		for (uint j = 0; j < 8; j++) {
			const uint v = w_u16(bb + 2 + 2 * j);
			const float q0 = float(int(v & 0xFu) - 8), q1 = float(int((v >> 8) & 0xFu) - 8);
			const float q2 = float(int((v >> 4) & 0xFu) - 8), q3 = float(int((v >> 12) & 0xFu) - 8);
			for (uint c = 0; c < nc; c++) {
				const uint xi = xb + c * p.cols + 32 * b + 2 * j;
				float t = sb[c];
				t = fma(q0, x[xi], t);
				t = fma(q1, x[xi + 1], t);
				t = fma(q2, x[xi + 16], t);
				t = fma(q3, x[xi + 17], t);
				sb[c] = t;
			}
		}
		for (uint c = 0; c < nc; c++) {
			acc[c] = fma(d, sb[c], acc[c]);
		}
	}
}
