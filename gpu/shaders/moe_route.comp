#version 450
// moe_route.comp: the weights of one token's k experts, ranked on the
// device (topk.comp), in the layout moe_scatter.comp reads: k entries (the
// token's slots 0 .. k-1) then the k weights' bits, each weight divided by
// the sum of the k (at least 2^-14, llama.cpp's clamp) when norm is set,
// as model's routed does on the host: added in slot order, then divided.
// One invocation: k is at most 32.
layout(local_size_x = 1) in;

layout(std430, binding = 0) readonly buffer V { float v[]; };
layout(std430, binding = 1) writeonly buffer R { uint r[]; };

layout(push_constant) uniform Push {
	uint k;
	uint norm;
} p;

void main() {
	float s = 0.0;
	for (uint j = 0u; j < p.k; j++) {
		s += v[j];
	}
	s = max(s, 6.103515625e-5);
	for (uint j = 0u; j < p.k; j++) {
		r[j] = j;
		r[p.k + j] = floatBitsToUint(p.norm != 0u ? v[j] / s : v[j]);
	}
}
