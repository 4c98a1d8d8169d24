#version 450
// SwiGLU: out = silu(gate)·up, silu(g) = g/(1+e^-g), element-wise over n
// floats. Invocation i = y·numGroups.x·BLOCK + global x (two dimensions so
// that large n stays under the 65535-group limit).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) writeonly buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) readonly buffer U { float u[]; };

layout(push_constant) uniform Push {
	uint n;
	uint o_off; // float offsets
	uint g_off;
	uint u_off;
} p;

void main() {
	const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	const float v = g[p.g_off + i];
	o[p.o_off + i] = v / (1.0 + exp(-v)) * u[p.u_off + i];
}
