#version 450
// Matrix-vector product of mxfp4 weights: mul_mat_vec_mxfp4.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_mxfp4.glsl"
