#version 450
// Matrix-matrix product, Q4_0 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q4_0 block is 18 bytes: an f16 scale d,
// then 16 bytes of 4-bit quants: byte j holds weight j in its low nibble
// and weight j+16 in its high one; weight = d·(q - 8) (ggml's
// dequantize_row_q4_0).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 18u * (k >> 5);
	const float d = w_f16(bb);
	const uint j = k & 31u;
	const uint qb = bb + 2u + (j & 15u); // even
	const uint shift = (j >> 4) * 4u;
	const uint v = (w_u16(qb) | (w_u16(qb + 2u) << 16)) >> shift;
	return d * (vec4(float(v & 0xFu), float((v >> 8) & 0xFu), float((v >> 16) & 0xFu), float((v >> 24) & 0xFu)) - 8.0);
}
