#version 450
// Matrix-matrix product, Q4_K weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q4_K super-block (144 bytes, 256
// weights) holds f16 d and dmin, 12 bytes of packed 6-bit scales and mins
// for its 8 sub-blocks of 32, and 128 bytes of 4-bit quants: byte l of
// chunk c (32 bytes) holds sub-block 2c in its low nibble and 2c+1 in its
// high one; weight = d·sc·q - dmin·m (ggml's dequantize_row_q4_K).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

// scale_min returns sub-block s's 6-bit scale and min (ggml's
// get_scale_min_k4); sb is the byte offset of the 12 scale bytes.
uvec2 scale_min(uint sb, uint s) {
	if (s < 4u) {
		return uvec2(w_u8(sb + s) & 63u, w_u8(sb + s + 4u) & 63u);
	}
	const uint hi = w_u8(sb + s + 4u);
	return uvec2((hi & 0xFu) | ((w_u8(sb + s - 4u) >> 6) << 4), (hi >> 4) | ((w_u8(sb + s) >> 6) << 4));
}

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 144u * (k >> 8); // rows are whole super-blocks: 4-aligned
	const uint sub = (k >> 5) & 7u, l = k & 31u;
	const vec2 dm = unpackHalf2x16(w[bb >> 2]);
	const uvec2 sm = scale_min(bb + 4u, sub);
	const float d = dm.x * float(sm.x), m = dm.y * float(sm.y);
	const uint v = w[(bb + 16u + 32u * (sub >> 1) + l) >> 2] >> ((sub & 1u) * 4u);
	return d * vec4(float(v & 0xFu), float((v >> 8) & 0xFu), float((v >> 16) & 0xFu), float((v >> 24) & 0xFu)) - m;
}
