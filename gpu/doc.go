// Package gpu is flowinfer's Vulkan compute backend. Kernels records
// single operations (matrix-vector products for F32, F16, Q8_0, Q4_0, Q4_K,
// Q5_K and Q6_K weights, RMS norm, SwiGLU, add, bias rows, softmax, RoPE,
// attention and KV stores against F32, F16 or Q8_0 caches: a workgroup per
// head and row for decode, tiles of rows sharing their K/V loads for a
// prompt) into command buffers of package vk, with one pipeline per shader
// variant built on first use.
// Backend implements model.Ops on top of them (backend.go says how
// activations stay on the device). Without cgo it has no kernels (package
// vk returns ErrNoCgo).
package gpu
