#version 450
// Tiled prefill attention against an F16 KV cache (flash_attn.glsl): two
// halves per 32-bit word, element e in word e/2 (rows have an even number
// of values).
#extension GL_GOOGLE_include_directive : require
#define KV_T uint
#include "flash_attn.glsl"

float k_at(uint e) { return unpackHalf2x16(k[e >> 1])[e & 1u]; }
float v_at(uint e) { return unpackHalf2x16(v[e >> 1])[e & 1u]; }
