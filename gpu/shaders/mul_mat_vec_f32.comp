#version 450
// Matrix-vector product of f32 weights: mul_mat_vec_f32.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_f32.glsl"
