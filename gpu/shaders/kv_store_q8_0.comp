#version 450
// Stores n rows of float32 K or V values into a Q8_0 cache, bit for bit
// as the CPU's cache stores them (q8_0_quant.glsl).
//
// Row t goes to cell (seq, pos) = idx[2t], idx[2t+1], at row seq·n_ctx +
// pos of dim values (dim/32 blocks of 34 bytes; dim a multiple of 64, so
// that rows start 4-aligned). Invocation x of workgroup row y stores the
// pair of blocks x of row y: 68 bytes, 17 whole words, so no two
// invocations write one word.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 64;

layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform Push {
	uint s_off;   // float offset of row 0
	uint idx_off; // int offset of row 0's (seq, pos)
	uint dim;     // values per row, a multiple of 64
	uint n_ctx;
} p;

#include "q8_0_quant.glsl"

uint bytes[68];

// block quantizes the 32 values from s[sb] into bytes[o..o+33].
void block(uint sb, uint o) {
	uint amax = 0u;
	for (uint j = 0u; j < 32u; j++) {
		amax = amax_bits(amax, s[sb + j]);
	}
	uint h;
	float id;
	q8_scales(amax, h, id);
	bytes[o] = h & 0xFFu;
	bytes[o + 1u] = h >> 8;
	for (uint j = 0u; j < 32u; j++) {
		precise const float f = s[sb + j] * id;
		bytes[o + 2u + j] = sat8(f);
	}
}

void main() {
	const uint t = gl_WorkGroupID.y;
	const uint i = gl_GlobalInvocationID.x; // pair of blocks
	if (i >= p.dim / 64u) {
		return;
	}
	const uint cell = uint(idx[p.idx_off + 2u * t]) * p.n_ctx + uint(idx[p.idx_off + 2u * t + 1u]);
	const uint sb = p.s_off + t * p.dim + 64u * i;
	block(sb, 0u);
	block(sb + 32u, 34u);
	const uint db = cell * (p.dim / 64u) * 17u + 17u * i;
	for (uint k = 0u; k < 17u; k++) {
		d[db + k] = bytes[4u * k] | (bytes[4u * k + 1u] << 8) | (bytes[4u * k + 2u] << 16) | (bytes[4u * k + 3u] << 24);
	}
}
