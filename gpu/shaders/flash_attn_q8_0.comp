#version 450
// Tiled prefill attention against a Q8_0 KV cache (flash_attn.glsl), read
// as attn_q8_0.comp reads it: rows are whole blocks (34 bytes: an f16
// scale d and 32 int8 quants, value = d·q), so element e is quant e%32 of
// block e/32 counting from the buffer's start; blocks are 2-byte aligned
// and bytes are read out of 32-bit words.
#extension GL_GOOGLE_include_directive : require
#define KV_T uint
#include "flash_attn.glsl"

float q8_at(uint b, uint e) {
	const uint bb = 34u * (e >> 5);
	const uint word = b == 0u ? k[bb >> 2] : v[bb >> 2];
	const float d = unpackHalf2x16(word >> ((bb & 2u) * 8u)).x;
	const uint qb = bb + 2u + (e & 31u);
	const uint qw = b == 0u ? k[qb >> 2] : v[qb >> 2];
	return d * float(int(qw << (24u - 8u * (qb & 3u))) >> 24);
}

float k_at(uint e) { return q8_at(0u, e); }
float v_at(uint e) { return q8_at(1u, e); }
