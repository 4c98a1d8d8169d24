#version 450
// Matrix-matrix product, Q5_1 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q5_1 block (24 bytes, 32 weights) holds
// an f16 scale d, an f16 offset m, a 32-bit qh whose bit j is weight j's
// fifth bit, and 16 bytes of low nibbles (byte j: weight j low, j+16
// high); weight = d·q + m (ggml's dequantize_row_q5_1).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 24u * (k >> 5);
	const vec2 dm = vec2(w_f16(bb), w_f16(bb + 2u));
	const uint j = k & 31u;
	const uint qh = w_word(bb + 4u) >> j;
	const uint v = w_word(bb + 8u + (j & 15u)) >> ((j >> 4) * 4u);
	const uvec4 q = lo_codes(v) | (((uvec4(qh) >> uvec4(0u, 1u, 2u, 3u)) & 1u) << 4);
	return dm.x * vec4(q) + dm.y;
}
