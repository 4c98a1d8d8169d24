#version 450
// MoE weighted scatter: row idx[i] of dst is row i of src times the
// weight w[i], for n rows of d floats (an expert's outputs, each into its
// (token, slot) entry, scaled by the router's weight of that entry). The
// entries and their weights come in one uint array (the staging ring): m
// entries at i_off, then their m weights' bits. One product per value, as
// the host's y·w. Indexing over the n·d floats as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer I { uint idx[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

layout(push_constant) uniform Push {
	uint n;     // rows · d
	uint d;     // floats per row
	uint m;     // rows (the weights follow the entries)
	uint s_off; // float offsets
	uint i_off; // uint offset of the entries
	uint d_off;
} p;

void main() {
	const uint j = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (j >= p.n) {
		return;
	}
	const uint row = j / p.d, c = j - row * p.d;
	const float w = uintBitsToFloat(idx[p.i_off + p.m + row]);
	d[p.d_off + idx[p.i_off + row] * p.d + c] = s[p.s_off + j] * w;
}
