#version 450
// Matrix-matrix product, IQ4_XS weights against F32 activations
// (prefill); the tiling is mm_head.glsl's. An IQ4_XS super-block (136
// bytes, 256 weights) holds an f16 d, a 16-bit scales_h (bits 2b, 2b+1:
// the high bits of sub-block b's 6-bit scale), 4 bytes scales_l (nibble
// b&1 of byte b>>1: the low bits) and 128 bytes of 4-bit codes, 16 per
// sub-block of 32 (byte j: weight j low, j+16 high); weight =
// d·(ls - 32)·kvalues_iq4nl[code] (ggml's dequantize_row_iq4_xs).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 136u * (k >> 8);
	const uint b = (k >> 5) & 7u, j = k & 31u;
	const uint ls = ((w_u8(bb + 4u + (b >> 1)) >> (4u * (b & 1u))) & 0xFu) | (((w_u16(bb + 2u) >> (2u * b)) & 3u) << 4);
	const uint v = w_word(bb + 8u + 16u * b + (j & 15u)) >> ((j >> 4) * 4u);
	return (w_f16(bb) * float(int(ls) - 32)) * lut16(lo_codes(v), KV_IQ4NL);
}
