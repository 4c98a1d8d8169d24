#version 450
// Matrix-vector product of q4_0 weights: mul_mat_vec_q4_0.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_q4_0.glsl"
