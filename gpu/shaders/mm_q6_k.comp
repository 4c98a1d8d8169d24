#version 450
// Matrix-matrix product, Q6_K weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q6_K super-block (210 bytes, 256
// weights) holds 128 bytes ql of low 4-bit halves, 64 bytes qh of high
// 2-bit pairs, 16 int8 scales (one per 16 weights) and an f16 d; weight =
// d·scale·(q - 32) (ggml's dequantize_row_q6_K). Each 128-weight half has
// four groups of 32: group g takes the low (g < 2) or high nibble of
// ql[(g&1)·32 + l] and bits 2g..2g+1 of qh[l]. Blocks are only 2-byte
// aligned: bytes are read one by one.
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 210u * (k >> 8);
	const uint h = (k >> 7) & 1u, g = (k >> 5) & 3u, l = k & 31u;
	const uint qlb = bb + h * 64u + (g & 1u) * 32u + l;
	const uint qhb = bb + 128u + h * 32u + l;
	const uint lshift = (g >> 1) * 4u, hshift = 2u * g;
	// l is a multiple of 4, so the four weights share one scale (16 weights each)
	const float ds = w_f16(bb + 208u) * float(w_i8(bb + 192u + h * 8u + g * 2u + (l >> 4)));
	vec4 v;
	for (uint j = 0; j < 4; j++) {
		const uint q = ((w_u8(qlb + j) >> lshift) & 0xFu) | (((w_u8(qhb + j) >> hshift) & 3u) << 4);
		v[j] = float(int(q) - 32);
	}
	return ds * v;
}
