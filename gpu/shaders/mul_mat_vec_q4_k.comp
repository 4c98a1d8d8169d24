#version 450
// Matrix-vector product, Q4_K weights against F32 activations. A Q4_K
// super-block (144 bytes, 256 weights) holds f16 d and dmin, 12 bytes of
// packed 6-bit scales and mins for its 8 sub-blocks of 32, and 128 bytes of
// 4-bit quants: byte l of chunk c (32 bytes) holds sub-block 2c in its low
// nibble and 2c+1 in its high one. weight = d·sc·q - dmin·m (ggml's
// dequantize_row_q4_K).
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_head.glsl"

// scale_min returns sub-block s's 6-bit scale and min (ggml's
// get_scale_min_k4): bytes 0-3 hold scales 0-3 and 4-7 mins 0-3 in their
// low 6 bits; bytes 8-11 hold the low 4 bits of scale and min 4-7, whose
// top 2 bits sit in the top bits of bytes 0-3 and 4-7.
uvec2 scale_min(uint sb, uint s) {
	if (s < 4u) {
		return uvec2(w_u8(sb + s) & 63u, w_u8(sb + s + 4u) & 63u);
	}
	const uint hi = w_u8(sb + s + 4u);
	return uvec2((hi & 0xFu) | ((w_u8(sb + s - 4u) >> 6) << 4), (hi >> 4) | ((w_u8(sb + s) >> 6) << 4));
}

// row_dot: thread tid takes sub-blocks tid, tid+BLOCK, ... of the row
// (rows are whole super-blocks, so rb is 4-aligned).
float row_dot(uint rb, uint xb, uint tid) {
	float s = 0.0;
	const uint nsub = (p.cols / 256) * 8;
	for (uint k = tid; k < nsub; k += BLOCK) {
		const uint bb = rb + 144 * (k >> 3);
		const uint sub = k & 7u;
		const vec2 dm = unpackHalf2x16(w[bb >> 2]);
		const uvec2 sm = scale_min(bb + 4u, sub);
		const uint qw = (bb + 16u + 32u * (sub >> 1)) >> 2; // first word of the chunk
		const uint shift = (sub & 1u) * 4u;
		const uint xi = xb + 32u * k;
		float sqx = 0.0, sx = 0.0;
		for (uint j = 0; j < 8; j++) {
			const uint v = w[qw + j] >> shift;
			for (uint b = 0; b < 4; b++) {
				const float xv = x[xi + 4 * j + b];
				sqx = fma(float((v >> (8 * b)) & 0xFu), xv, sqx);
				sx += xv;
			}
		}
		s += dm.x * float(sm.x) * sqx - dm.y * float(sm.y) * sx;
	}
	return s;
}
