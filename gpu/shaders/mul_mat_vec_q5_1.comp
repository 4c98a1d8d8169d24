#version 450
// Matrix-vector product of q5_1 weights: mul_mat_vec_q5_1.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_q5_1.glsl"
