// Package gpu is flowinfer's Vulkan compute backend. Kernels records
// single operations (matrix-vector products for F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_NL and
// IQ4_XS weights, RMS norm, SwiGLU, GeGLU, gpt-oss's clamped SwiGLU, scale,
// add, bias rows, softmax, RoPE, attention and KV stores against F32, F16
// or Q8_0 caches: a workgroup per head and row for decode, tiles of rows
// sharing their K/V loads for a prompt) into command buffers of package vk,
// with one pipeline per shader variant built on first use.
// Backend implements model.Ops on top of them (backend.go says how
// activations stay on the device). Without cgo it has no kernels (package
// vk returns ErrNoCgo).
//
// The lattice ("i-quant") weight types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S, IQ1_S and IQ1_M have matrix-vector and matrix-matrix shaders too:
// shaders/iq_dequant.glsl decodes them with package quant's grids, which
// iq_tables.go puts in a buffer of their own.
package gpu
