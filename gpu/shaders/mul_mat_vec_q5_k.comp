#version 450
// Matrix-vector product of q5_k weights: mul_mat_vec_q5_k.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_q5_k.glsl"
