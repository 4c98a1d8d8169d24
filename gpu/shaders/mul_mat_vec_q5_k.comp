#version 450
// Matrix-vector product, Q5_K weights against F32 activations. A Q5_K
// super-block (176 bytes, 256 weights) holds f16 d and dmin, 12 bytes of
// packed 6-bit scales and mins (as Q4_K), 32 bytes qh of fifth bits and
// 128 bytes of 4-bit quants: sub-block s (32 weights) takes the low (s
// even) or high nibble of chunk s/2 and bit s of qh[l]; weight =
// d·sc·q - dmin·m (ggml's dequantize_row_q5_K).
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// scale_min is Q4_K's (mul_mat_vec_q4_k.comp): ggml's get_scale_min_k4.
uvec2 scale_min(uint sb, uint s) {
	if (s < 4u) {
		return uvec2(w_u8(sb + s) & 63u, w_u8(sb + s + 4u) & 63u);
	}
	const uint hi = w_u8(sb + s + 4u);
	return uvec2((hi & 0xFu) | ((w_u8(sb + s - 4u) >> 6) << 4), (hi >> 4) | ((w_u8(sb + s) >> 6) << 4));
}

// row_dot: thread tid takes sub-blocks tid, tid+BLOCK, ... of the row
// (rows are whole super-blocks, so rb is 4-aligned).
void row_dot(uint rb, uint xb, uint tid) {
	const uint nsub = (p.cols / 256) * 8;
	for (uint k = tid; k < nsub; k += BLOCK) {
		const uint bb = rb + 176u * (k >> 3);
		const uint sub = k & 7u;
		const vec2 dm = unpackHalf2x16(w[bb >> 2]);
		const uvec2 sm = scale_min(bb + 4u, sub);
		const uint qw = (bb + 48u + 32u * (sub >> 1)) >> 2; // first word of the chunk
		const uint hw = (bb + 16u) >> 2;                    // first word of qh
		const uint shift = (sub & 1u) * 4u;
		uint qv[8], hq[8]; // the sub-block's words, read once for every vector
		for (uint j = 0; j < 8; j++) {
			qv[j] = w[qw + j] >> shift;
			hq[j] = w[hw + j] >> sub;
		}
		for (uint c = 0; c < nc; c++) {
			const uint xi = xb + c * p.cols + 32u * k;
			float sqx = 0.0, sx = 0.0;
			for (uint j = 0; j < 8; j++) {
				const uint v = qv[j];
				const uint hv = hq[j];
				for (uint b = 0; b < 4; b++) {
					const float xv = x[xi + 4 * j + b];
					const uint q = ((v >> (8 * b)) & 0xFu) | (((hv >> (8 * b)) & 1u) << 4);
					sqx = fma(float(q), xv, sqx);
					sx += xv;
				}
			}
			acc[c] += dm.x * float(sm.x) * sqx - dm.y * float(sm.y) * sx;
		}
	}
}
