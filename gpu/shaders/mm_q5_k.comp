#version 450
// Matrix-matrix product, Q5_K weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A Q5_K super-block (176 bytes, 256
// weights) holds f16 d and dmin, 12 bytes of 6-bit scales and mins (as
// Q4_K), 32 bytes qh of fifth bits (bit s of qh[l] for weight l of
// sub-block s) and 128 bytes of low nibbles laid out as Q4_K's; weight =
// d·sc·q - dmin·m (ggml's dequantize_row_q5_K).
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

uvec2 scale_min(uint sb, uint s) {
	if (s < 4u) {
		return uvec2(w_u8(sb + s) & 63u, w_u8(sb + s + 4u) & 63u);
	}
	const uint hi = w_u8(sb + s + 4u);
	return uvec2((hi & 0xFu) | ((w_u8(sb + s - 4u) >> 6) << 4), (hi >> 4) | ((w_u8(sb + s) >> 6) << 4));
}

vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 176u * (k >> 8); // 176 = 4·44: super-blocks stay 4-aligned
	const uint sub = (k >> 5) & 7u, l = k & 31u;
	const vec2 dm = unpackHalf2x16(w[bb >> 2]);
	const uvec2 sm = scale_min(bb + 4u, sub);
	const float d = dm.x * float(sm.x), m = dm.y * float(sm.y);
	const uint lo = w[(bb + 48u + 32u * (sub >> 1) + l) >> 2] >> ((sub & 1u) * 4u);
	const uint hi = w[(bb + 16u + l) >> 2] >> sub;
	const uvec4 q = uvec4(lo & 0xFu, (lo >> 8) & 0xFu, (lo >> 16) & 0xFu, (lo >> 24) & 0xFu) |
		(uvec4(hi & 1u, (hi >> 8) & 1u, (hi >> 16) & 1u, (hi >> 24) & 1u) << 4);
	return d * vec4(q) - m;
}
