#version 450
// MoE sum: row t of dst is the sum of src's rows t·k ... t·k+k-1 (rows of
// d floats: each token's k weighted expert outputs), added in that order,
// as the host's copy then k-1 adds. Indexing over the n·d floats of dst
// as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) writeonly buffer D { float d[]; };

layout(push_constant) uniform Push {
	uint n;     // tokens · d
	uint d;     // floats per row
	uint k;     // rows summed per token
	uint s_off; // float offsets
	uint d_off;
} p;

void main() {
	const uint j = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (j >= p.n) {
		return;
	}
	const uint t = j / p.d, c = j - t * p.d;
	const uint b = p.s_off + t * p.k * p.d + c;
	float acc = s[b];
	for (uint i = 1; i < p.k; i++) {
		acc += s[b + i * p.d];
	}
	d[p.d_off + j] = acc;
}
