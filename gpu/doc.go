// Package gpu is flowinfer's Vulkan compute backend. This first layer
// records single operations (matrix-vector products for F32, F16, Q8_0 and
// Q4_K weights, RMS norm, SwiGLU, add) into command buffers of package vk,
// with one pipeline per shader variant built on first use; it is not yet
// wired into model.Ops. Without cgo it has no kernels (package vk returns
// ErrNoCgo).
package gpu
