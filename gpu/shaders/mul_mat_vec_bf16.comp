#version 450
// Matrix-vector product of bf16 weights: mul_mat_vec_bf16.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_bf16.glsl"
