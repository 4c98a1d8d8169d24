#version 450
// RoPE: rotates the first 2·half values of each head of each row in place
// by a per-row table of cos and sin (4·half floats per row: c[2·half] then
// s[2·half]) that the host computes as package cpu's rope table does, so
// ggml's frequency recurrence, llama3 frequency factors and YaRN's ramp
// and mscale are all in the table. Normal RoPE (neox 0) turns adjacent
// pairs (2i, 2i+1) by c[2i], s[2i+1]; NeoX turns (i, i+half) by c[i], s[i]
// (ggml_rope_ext's two modes). Workgroup x is the head, y the row.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 64;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };

layout(push_constant) uniform Push {
	uint x_off;    // float offset of row 0
	uint cs_off;   // float offset of row 0's table
	uint n_head;
	uint head_dim;
	uint half_dim; // rotated pairs per head
	uint neox;
} p;

void main() {
	const uint h = gl_WorkGroupID.x;
	const uint t = gl_WorkGroupID.y;
	const uint xb = p.x_off + (t * p.n_head + h) * p.head_dim;
	const uint cb = p.cs_off + t * 4u * p.half_dim;
	const uint sb = cb + 2u * p.half_dim;
	for (uint i = gl_LocalInvocationID.x; i < p.half_dim; i += BLOCK) {
		if (p.neox != 0u) {
			const float x0 = x[xb + i], x1 = x[xb + i + p.half_dim];
			x[xb + i] = x0 * cs[cb + i] - x1 * cs[sb + i];
			x[xb + i + p.half_dim] = x0 * cs[sb + i] + x1 * cs[cb + i];
		} else {
			const float x0 = x[xb + 2u * i], x1 = x[xb + 2u * i + 1u];
			x[xb + 2u * i] = x0 * cs[cb + 2u * i] - x1 * cs[sb + 2u * i + 1u];
			x[xb + 2u * i + 1u] = x0 * cs[sb + 2u * i + 1u] + x1 * cs[cb + 2u * i];
		}
	}
}
