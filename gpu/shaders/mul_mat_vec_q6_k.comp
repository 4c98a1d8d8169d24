#version 450
// Matrix-vector product of q6_k weights: mul_mat_vec_q6_k.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_q6_k.glsl"
