#version 450
// Tiled prefill attention against an F32 KV cache (flash_attn.glsl).
#extension GL_GOOGLE_include_directive : require
#define KV_T float
#include "flash_attn.glsl"

float k_at(uint e) { return k[e]; }
float v_at(uint e) { return v[e]; }
