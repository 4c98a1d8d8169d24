#version 450
// Multiplies each piece of n values of x (n a power of two, at most
// MAX_N) in place by the orthonormal Walsh-Hadamard matrix, as
// quant.Hadamard does (the same butterflies in the same order, then the
// scale 1/√n the caller passes, so the results are the CPU's bit for bit):
// llama.cpp's rotation of block-quantized K and V (model.KVLayer.RotK).
// One workgroup per piece; workgroup (x, y) is piece y·numGroups.x + x.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 64;
const uint MAX_N = 1024;

layout(std430, binding = 0) buffer X { float x[]; };

layout(push_constant) uniform Push {
	uint x_off;  // float offset of piece 0
	uint n;      // values per piece
	uint pieces;
	float scale; // 1/√n, rounded to float32 by the caller
} p;

shared float v[MAX_N];

void main() {
	const uint piece = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	if (piece >= p.pieces) {
		return; // the whole workgroup leaves
	}
	const uint tid = gl_LocalInvocationID.x;
	const uint b = p.x_off + piece * p.n;
	for (uint i = tid; i < p.n; i += BLOCK) {
		v[i] = x[b + i];
	}
	barrier();
	for (uint h = 1u; h < p.n; h <<= 1) {
		for (uint k = tid; k < p.n / 2u; k += BLOCK) {
			const uint i = (k / h) * 2u * h + k % h;
			const float a = v[i], c = v[i + h];
			v[i] = a + c;
			v[i + h] = a - c;
		}
		barrier();
	}
	for (uint i = tid; i < p.n; i += BLOCK) {
		x[b + i] = v[i] * p.scale;
	}
}
