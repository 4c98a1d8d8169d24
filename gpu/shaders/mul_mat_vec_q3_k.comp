#version 450
// Matrix-vector product of q3_k weights: mul_mat_vec_q3_k.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_q3_k.glsl"
