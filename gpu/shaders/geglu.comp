#version 450
// GeGLU: out = gelu(gate)·up over n floats, gelu as ggml's CPU backend
// computes it with GGML_GELU_FP16 (ggml_vec_geglu_f32): a gate at or below
// -10 gives +0 (not 0·up), at or above 10 the gate itself; any other is
// rounded to float16 (to nearest, ties to even, in integer arithmetic so
// that no driver's conversion mode matters) and looks up ggml's table of
// 65536 gelu values (binding 3, one float per float16 bit pattern).
// Indexing as in swiglu.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 256;

layout(std430, binding = 0) writeonly buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) readonly buffer U { float u[]; };
layout(std430, binding = 3) readonly buffer T { float table[]; };

layout(push_constant) uniform Push {
	uint n;
	uint o_off; // float offsets
	uint g_off;
	uint u_off;
	uint t_off;
} p;

// f16bits returns the float16 bit pattern nearest to f, ties to even, for
// finite |f| < 65504 (here |f| < 10).
uint f16bits(float f) {
	const uint x = floatBitsToUint(f);
	const uint sign = (x >> 16) & 0x8000u;
	const uint ax = x & 0x7fffffffu;
	if (ax >= 0x38800000u) { // 2^-14 and up: a normal float16
		uint h = (ax - 0x38000000u) >> 13; // exponent rebiased 127 -> 15
		const uint rem = ax & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
			h++; // a carry into the exponent is the right result
		}
		return sign | h;
	}
	const uint e = ax >> 23;
	if (e < 101u) { // below 2^-26: rounds to zero
		return sign;
	}
	// a float16 subnormal: units of 2^-24 are mant·2^(e-126)
	const uint mant = (ax & 0x7fffffu) | 0x800000u;
	const uint shift = 126u - e; // 14..25
	uint h = mant >> shift;
	const uint rem = mant & ((1u << shift) - 1u);
	const uint half_ = 1u << (shift - 1u);
	if (rem > half_ || (rem == half_ && (h & 1u) != 0u)) {
		h++;
	}
	return sign | h;
}

void main() {
	const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * BLOCK + gl_GlobalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	const float x = g[p.g_off + i];
	float r;
	if (x <= -10.0) {
		r = 0.0;
	} else if (x >= 10.0) {
		r = x * u[p.u_off + i];
	} else {
		r = table[p.t_off + f16bits(x)] * u[p.u_off + i];
	}
	o[p.o_off + i] = r;
}
