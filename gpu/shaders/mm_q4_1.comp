#version 450
// Matrix-matrix product, Q4_1 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q4_1 block (20 bytes, 32 weights) holds
// an f16 scale d, an f16 offset m and 16 bytes of 4-bit quants: byte j
// holds weight j in its low nibble and weight j+16 in its high one;
// weight = d·q + m (ggml's dequantize_row_q4_1).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 20u * (k >> 5);
	const uint j = k & 31u;
	const uint v = w_word(bb + 4u + (j & 15u)) >> ((j >> 4) * 4u);
	return w_f16(bb) * vec4(lo_codes(v)) + w_f16(bb + 2u);
}
