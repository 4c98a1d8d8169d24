#version 450
// Matrix-matrix product, BF16 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's. A bfloat16 is the top half of a float32
// (ggml's GGML_BF16_TO_FP32). Rows may start on any even byte.
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

vec4 wval4(uint rb, uint k) {
	vec4 v = vec4(0.0);
	for (uint j = 0; j < 4 && k + j < p.cols; j++) {
		v[j] = uintBitsToFloat(w_u16(rb + 2 * (k + j)) << 16);
	}
	return v;
}
