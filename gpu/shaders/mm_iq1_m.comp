#version 450
// Matrix-matrix product, IQ1_M (1.75 bits per weight) weights against F32
// activations (prefill); the tiling is mm_head.glsl's, the block layout
// iq_dequant.glsl's.
#extension GL_GOOGLE_include_directive : require
#define IQ1_M
#include "mm_head.glsl"
#include "iq_dequant.glsl"
#include "mm_iq.glsl"
