#version 450
// Matrix-matrix product, Q5_0 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q5_0 block (22 bytes, 32 weights) holds
// an f16 scale d, a 32-bit qh whose bit j is weight j's fifth bit, and 16
// bytes of low nibbles (byte j: weight j low, j+16 high); weight =
// d·(q - 16) (ggml's dequantize_row_q5_0).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 22u * (k >> 5);
	const float d = w_f16(bb);
	const uint j = k & 31u;
	const uint qh = w_word(bb + 2u) >> j;
	const uint v = w_word(bb + 6u + (j & 15u)) >> ((j >> 4) * 4u);
	const uvec4 q = lo_codes(v) | (((uvec4(qh) >> uvec4(0u, 1u, 2u, 3u)) & 1u) << 4);
	return d * (vec4(q) - 16.0);
}
