#version 450
// Scale: x[i] *= s over n floats (ggml_scale without bias: one float32
// product per value). Indexing as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) buffer X { float x[]; };

layout(push_constant) uniform Push {
	uint n;
	uint x_off; // float offset
	float s;
} p;

void main() {
	const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	x[p.x_off + i] *= p.s;
}
