#version 450
// Add: dst += src element-wise over n floats (the residual add). Indexing
// as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) buffer D { float d[]; };
layout(std430, binding = 1) readonly buffer S { float s[]; };

layout(push_constant) uniform Push {
	uint n;
	uint d_off; // float offsets
	uint s_off;
} p;

void main() {
	const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	d[p.d_off + i] += s[p.s_off + i];
}
