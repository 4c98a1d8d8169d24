#version 450
// Matrix-vector product, Q6_K weights against F32 activations. A Q6_K
// super-block (210 bytes, 256 weights) holds 128 bytes ql of low 4-bit
// halves, 64 bytes qh of high 2-bit pairs, 16 int8 scales (one per 16
// weights) and an f16 d; weight = d·scale·(q - 32) with q = 6 bits
// (ggml's dequantize_row_q6_K). Each 128-weight half has four groups of
// 32: group g takes the low (g < 2) or high nibble of ql[(g&1)·32 + l]
// and bits 2g..2g+1 of qh[l]. Blocks are only 2-byte aligned: bytes are
// read one by one.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

int w_i8(uint b) { return int(w_u8(b) << 24) >> 24; }

// row_dot: thread tid takes groups of 32 weights tid, tid+BLOCK, ...
void row_dot(uint rb, uint xb, uint tid) {
	const uint ngroups = (p.cols / 256) * 8;
	for (uint k = tid; k < ngroups; k += BLOCK) {
		const uint bb = rb + 210u * (k >> 3);
		const uint h = (k >> 2) & 1u, g = k & 3u;
		const uint qlb = bb + h * 64u + (g & 1u) * 32u;
		const uint qhb = bb + 128u + h * 32u;
		const uint lshift = (g >> 1) * 4u, hshift = 2u * g;
		const uint scb = bb + 192u + h * 8u + g * 2u;
		const float d = w_f16(bb + 208u), sc0 = float(w_i8(scb)), sc1 = float(w_i8(scb + 1u));
		float s0[NUM_COLS], s1[NUM_COLS];
		for (uint c = 0; c < nc; c++) {
			s0[c] = 0.0;
			s1[c] = 0.0;
		}
		for (uint l = 0; l < 16; l++) {
			const float q0 = float(int(((w_u8(qlb + l) >> lshift) & 0xFu) | (((w_u8(qhb + l) >> hshift) & 3u) << 4)) - 32);
			const float q1 = float(int(((w_u8(qlb + l + 16u) >> lshift) & 0xFu) | (((w_u8(qhb + l + 16u) >> hshift) & 3u) << 4)) - 32);
			for (uint c = 0; c < nc; c++) {
				const uint xi = xb + c * p.cols + 32u * k + l;
				s0[c] = fma(q0, x[xi], s0[c]);
				s1[c] = fma(q1, x[xi + 16u], s1[c]);
			}
		}
		for (uint c = 0; c < nc; c++) {
			acc[c] = fma(d, sc0 * s0[c] + sc1 * s1[c], acc[c]);
		}
	}
}
