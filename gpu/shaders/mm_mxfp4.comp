#version 450
// Matrix-matrix product, MXFP4 weights against F32 activations quantized
// to Q8_0 first, as ggml's CPU product does (MXFP4's vec_dot_type is
// Q8_0; ggml_vec_dot_mxfp4_q8_0), prefill; the tiling is mm_head.glsl's
// with Q8_ACT. An MXFP4 block (17 bytes, 32 weights) holds an E8M0 scale
// byte e and 16 bytes of FP4 E2M1 codes (byte j: weight j low, j+16
// high); weight = 2^(e-128)·kvalues_mxfp4[code] (ggml's
// dequantize_row_mxfp4). Blocks start at any byte (w_word).
#extension GL_GOOGLE_include_directive : require
#define Q8_ACT
#include "mm_head.glsl"
#include "quant4.glsl"

// wval4: the levels kvalues_mxfp4[code] of weights k..k+3 (the scale is
// wscale's).
vec4 wval4(uint rb, uint k) {
	const uint bb = rb + 17u * (k >> 5);
	const uint j = k & 31u;
	const uint v = w_word(bb + 1u + (j & 15u)) >> ((j >> 4) * 4u);
	return lut16(lo_codes(v), KV_MXFP4);
}

float wscale(uint rb, uint k) { return e8m0_half(w_u8(rb + 17u * (k >> 5))); }
