#version 450
// MoE row gather: row i of dst is row idx[i]/k of src, for n rows of d
// floats (an expert's tokens' inputs: idx holds the (token, slot) entries
// routed to the expert, token-major with k slots per token, so entry v is
// token v/k's). The entries come in a uint array (the staging ring).
// Indexing over the n·d floats as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer I { uint idx[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

layout(push_constant) uniform Push {
	uint n;     // rows · d
	uint d;     // floats per row
	uint k;     // slots per token
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
	d[p.d_off + j] = s[p.s_off + (idx[p.i_off + row] / p.k) * p.d + c];
}
