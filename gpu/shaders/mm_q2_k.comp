#version 450
// Matrix-matrix product, Q2_K weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q2_K super-block (84 bytes, 256 weights)
// holds 16 scale bytes (low nibble a scale, high nibble a min, one per 16
// weights), 64 bytes of 2-bit quants and f16 d and dmin. Each 128-weight
// half h has four groups of 32: group g takes bits 2g..2g+1 of
// qs[32h + l] and scale byte 8h + 2g + l/16; weight = d·sc·q - dmin·m
// (ggml's dequantize_row_q2_K).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 84u * (k >> 8);
	const uint h = (k >> 7) & 1u, g = (k >> 5) & 3u, l = k & 31u;
	// l is a multiple of 4: the four weights share one scale byte
	const uint sm = w_u8(bb + 8u * h + 2u * g + (l >> 4));
	const float dl = w_f16(bb + 80u) * float(sm & 0xFu), ml = w_f16(bb + 82u) * float(sm >> 4);
	const uint v = w_word(bb + 16u + 32u * h + l) >> (2u * g);
	return dl * vec4((uvec4(v) >> uvec4(0u, 8u, 16u, 24u)) & 3u) - ml;
}
