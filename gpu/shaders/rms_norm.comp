#version 450
// RMS norm of each row, times a weight vector when has_weight is set:
// y = x / sqrt(mean(x²) + eps) · w (ggml_rms_norm then ggml_mul). One
// workgroup per row (workgroup x); BLOCK threads share the sum of squares.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256; // a power of two

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
	uint dim;        // elements per row
	float eps;
	uint has_weight; // 0: no weight (binding 1 is ignored)
	uint x_off;      // float offsets of row 0
	uint g_off;
	uint y_off;
} p;

shared float red[BLOCK];

void main() {
	const uint tid = gl_LocalInvocationID.x;
	const uint xb = p.x_off + gl_WorkGroupID.x * p.dim;
	const uint yb = p.y_off + gl_WorkGroupID.x * p.dim;
	float s = 0.0;
	for (uint i = tid; i < p.dim; i += BLOCK) {
		s = fma(x[xb + i], x[xb + i], s);
	}
	red[tid] = s;
	barrier();
	for (uint k = BLOCK / 2; k > 0; k >>= 1) {
		if (tid < k) {
			red[tid] += red[tid + k];
		}
		barrier();
	}
	const float scale = 1.0 / sqrt(red[0] / float(p.dim) + p.eps);
	for (uint i = tid; i < p.dim; i += BLOCK) {
		float v = x[xb + i] * scale;
		if (p.has_weight != 0u) {
			v *= g[p.g_off + i];
		}
		y[yb + i] = v;
	}
}
