#version 450
// AddRows: x[i] += b[i mod dim] over n floats (a bias on every row).
// Indexing as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) buffer D { float d[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };

layout(push_constant) uniform Push {
	uint n;
	uint d_off; // float offsets
	uint b_off;
	uint dim;
} p;

void main() {
	const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	d[p.d_off + i] += b[p.b_off + i % p.dim];
}
