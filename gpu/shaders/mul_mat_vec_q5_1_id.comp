#version 450
// mul_mat_vec_q5_1.glsl by expert id: workgroup z multiplies the matrix
// ids[id_off + z] selects (mul_mat_vec_head.glsl, BY_ID).
#extension GL_GOOGLE_include_directive : require
#define BY_ID
#include "mul_mat_vec_q5_1.glsl"
