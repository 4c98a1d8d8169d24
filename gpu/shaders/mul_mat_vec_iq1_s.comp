#version 450
// Matrix-vector product, IQ1_S (1.56 bits per weight) weights against F32
// activations: the block layout is iq_dequant.glsl's, the split
// mul_mat_vec_iq.glsl's.
#extension GL_GOOGLE_include_directive : require
#define ROWS_DOT
#define IQ1_S
#include "mul_mat_vec_head.glsl"
#include "iq_dequant.glsl"
#include "mul_mat_vec_iq.glsl"
