#version 450
// Stores n rows of float32 K or V values into an F16 cache: row t goes to
// cell (seq, pos) = idx[2t], idx[2t+1], at row seq·n_ctx + pos of dim
// values (dim even: two halves per 32-bit word, rounded by packHalf2x16).
// Workgroup y is the row; x covers the row's pairs.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 64;

layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform Push {
	uint s_off;   // float offset of row 0
	uint idx_off; // int offset of row 0's (seq, pos)
	uint dim;     // values per row, even
	uint n_ctx;
} p;

void main() {
	const uint t = gl_WorkGroupID.y;
	const uint i = gl_GlobalInvocationID.x; // pair
	if (i >= p.dim / 2u) {
		return;
	}
	const uint cell = uint(idx[p.idx_off + 2u * t]) * p.n_ctx + uint(idx[p.idx_off + 2u * t + 1u]);
	const uint sb = p.s_off + t * p.dim + 2u * i;
	d[cell * (p.dim / 2u) + i] = packHalf2x16(vec2(s[sb], s[sb + 1u]));
}
