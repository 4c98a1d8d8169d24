#version 450
// Matrix-matrix product, F32 weights against F32 activations (prefill);
// the tiling is mm_head.glsl's.
#extension GL_GOOGLE_include_directive : require
#include "mm_head.glsl"

vec4 wval4(uint rb, uint k) {
	vec4 v = vec4(0.0);
	for (uint j = 0; j < 4 && k + j < p.cols; j++) {
		v[j] = uintBitsToFloat(w[(rb >> 2) + k + j]);
	}
	return v;
}
