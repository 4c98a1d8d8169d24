#version 450
// Matrix-matrix product, Q8_0 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q8_0 block is 34 bytes: an f16 scale d,
// then 32 int8 quants q; weight = d·q (ggml's dequantize_row_q8_0).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 34u * (k >> 5);
	const float d = w_f16(bb);
	const uint qb = bb + 2u + (k & 31u); // even: k is a multiple of 4
	const uint lo = w_u16(qb), hi = w_u16(qb + 2u);
	return d * vec4(float(int(lo << 24) >> 24), float(int(lo << 16) >> 24), float(int(hi << 24) >> 24), float(int(hi << 16) >> 24));
}
