#version 450
// SwiGLUOAI: gpt-oss's clamped SwiGLU (ggml_swiglu_oai, as
// ggml_compute_forward_swiglu_oai_f32): x = min(gate, limit), y = up
// clamped to [-limit, limit], out = x/(1+e^(alpha·-x))·(y+1) over n
// floats. Indexing as in swiglu.comp.

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
	float alpha;
	float limit;
} p;

void main() {
	const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	const float x = min(g[p.g_off + i], p.limit);
	const float y = clamp(u[p.u_off + i], -p.limit, p.limit);
	o[p.o_off + i] = x / (1.0 + exp(p.alpha * -x)) * (y + 1.0);
}
