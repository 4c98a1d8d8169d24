#version 450
// Matrix-matrix product, IQ4_NL weights against F32 activations
// (prefill); the tiling is mm_head.glsl's. An IQ4_NL block (18 bytes, 32
// weights) holds an f16 scale d and 16 bytes of 4-bit codes (byte j:
// weight j low, j+16 high); weight = d·kvalues_iq4nl[code] (ggml's
// dequantize_row_iq4_nl).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 18u * (k >> 5);
	const uint j = k & 31u;
	const uint v = w_word(bb + 2u + (j & 15u)) >> ((j >> 4) * 4u);
	return w_f16(bb) * lut16(lo_codes(v), KV_IQ4NL);
}
