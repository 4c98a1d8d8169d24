#version 450
// Matrix-matrix product, Q3_K weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q3_K super-block (110 bytes, 256
// weights) holds 32 bytes hmask of high bits, 64 bytes qs of 2-bit low
// parts, 12 bytes of packed 6-bit scales (one per 16 weights, stored +32)
// and an f16 d. Each 128-weight half h has four groups of 32: group g
// takes bits 2g..2g+1 of qs[32h + l], bit 4h + g of hmask[l] and scale
// j = 8h + 2g + l/16; q3 = low + 4·high - 4, weight = d·(scale - 32)·q3
// (ggml's dequantize_row_q3_K).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"
#include "quant4.glsl"

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 110u * (k >> 8);
	const uint h = (k >> 7) & 1u, g = (k >> 5) & 3u, l = k & 31u;
	// scale j: low bits in byte j's low nibble (j < 8) or byte j-8's high
	// one, high bits 2·(j/4) of byte 8 + j%4 (ggml's kmask unpacking); l is
	// a multiple of 4, so the four weights share it
	const uint j = 8u * h + 2u * g + (l >> 4);
	const uint lo = (w_u8(bb + 96u + (j & 7u)) >> (4u * (j >> 3))) & 0xFu;
	const uint hi = (w_u8(bb + 104u + (j & 3u)) >> (2u * (j >> 2))) & 3u;
	const float dl = w_f16(bb + 108u) * float(int(lo | (hi << 4)) - 32);
	const uint q = (w_word(bb + 32u + 32u * h + l) >> (2u * g)) & 0x03030303u;
	const uint hm = (w_word(bb + l) >> (4u * h + g)) & 0x01010101u;
	return dl * (vec4((uvec4(q | (hm << 2)) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu) - 4.0);
}
