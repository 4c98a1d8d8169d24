#version 450
// Matrix-vector product of iq4_xs weights: mul_mat_vec_iq4_xs.glsl.
#extension GL_GOOGLE_include_directive : require
#include "mul_mat_vec_iq4_xs.glsl"
