#version 450
// Softmax of each row in place: exp(x - max) / Σ exp(x - max), as
// ggml_soft_max without mask or scale. One workgroup per row (workgroup
// x, then y past the per-dimension limit).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256; // a power of two

layout(std430, binding = 0) buffer X { float x[]; };

layout(push_constant) uniform Push {
	uint dim;
	uint x_off;
	uint rows;
} p;

shared float red[BLOCK];

void main() {
	const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	if (row >= p.rows) {
		return; // the whole workgroup leaves
	}
	const uint tid = gl_LocalInvocationID.x;
	const uint xb = p.x_off + row * p.dim;
	float m = -1.0 / 0.0;
	for (uint i = tid; i < p.dim; i += BLOCK) {
		m = max(m, x[xb + i]);
	}
	red[tid] = m;
	barrier();
	for (uint k = BLOCK / 2; k > 0; k >>= 1) {
		if (tid < k) {
			red[tid] = max(red[tid], red[tid + k]);
		}
		barrier();
	}
	m = red[0];
	barrier();
	float s = 0.0;
	for (uint i = tid; i < p.dim; i += BLOCK) {
		const float e = exp(x[xb + i] - m);
		x[xb + i] = e;
		s += e;
	}
	red[tid] = s;
	barrier();
	for (uint k = BLOCK / 2; k > 0; k >>= 1) {
		if (tid < k) {
			red[tid] += red[tid + k];
		}
		barrier();
	}
	const float inv = 1.0 / red[0];
	for (uint i = tid; i < p.dim; i += BLOCK) {
		x[xb + i] *= inv;
	}
}
