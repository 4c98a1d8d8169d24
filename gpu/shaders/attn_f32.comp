#version 450
// Causal attention against an F32 KV cache (attn.glsl).
#extension GL_GOOGLE_include_directive : require
#define KV_T float
#include "attn.glsl"

float k_at(uint e) { return k[e]; }
float v_at(uint e) { return v[e]; }
