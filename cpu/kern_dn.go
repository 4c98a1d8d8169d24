package cpu

// kern_dn.go: the gated delta net's kernels on one path (Kernels): the
// delta rule of one value head over n tokens and the convolution with
// SiLU on a range of channels, each on the C path (kern_avx2_dn.c) where
// it takes the sizes (the delta rule: d a multiple of 8; the convolution:
// whole groups of 8 channels), else on deltanet.go's Go loops. Callers
// (backend_deltanet.go) check the lengths once per call; these split no
// work across threads.
//
// Numerics. The convolution adds its products as the Go loop does; its
// SiLU takes backend_math.go's expf where the Go loop takes
// float32(math.Exp), which differ in the last bit now and then; through
// 1+e, the division and (gated norm) the product after it, that is up to
// 3 ulps of the result, measured: the bound tested is 4 ulps of the Go
// loop (the gated norm's gate alike, backend_deltanet.go). The
// delta rule's C path computes a·(s_j·k) in place of (a·s_j)·k, fuses the
// update into one multiply-add and adds its dot products in another order
// (kern_avx2_dn.c), so it differs from the Go loop in rounding only: on
// random inputs of the real sizes its outputs and state stay within
// dnTol of the Go loop's, relative to the row's scale (deltanet_test.go).

import "math"

// dnTol is the delta rule's bound, C path against the Go loop (and the Go
// loop against float64 arithmetic), on |Δout_j| / (Σ_i |S_ij·q_i| / √d)
// and, for the state after the call, on |ΔS_ij| / (|S_ij| + ‖S_·j‖/√d):
// tested on up to 200 tokens at Qwen3.5's sizes and odd ones, measured
// at most 6.1e-7 (the update contracts: a ≤ 1, β ∈ (0, 1), ‖k‖ = 1, so
// rounding errors do not grow with the tokens).
const dnTol = 2e-6

// deltaHead runs the gated delta rule of value head h for n tokens, as
// deltaNetHead (whose arguments it takes; delta is the Go loop's scratch).
func (k *Kernels) deltaHead(out, qkv, g, beta, s, delta []float32, n, hk, hv, d, h int) {
	if n > 0 && k.isa != ISAScalarGo {
		cd, kh := (2*hk+hv)*d, h%hk
		scale := 1 / float32(math.Sqrt(float64(d)))
		if dnDeltaC(k.isa, s[:d*d], d, n, qkv[kh*d:], qkv[(hk+kh)*d:], qkv[(2*hk+h)*d:], cd, g[h:], beta[h:], hv,
			out[h*d:], hv*d, scale) {
			return
		}
	}
	deltaNetHead(out, qkv, g, beta, s, delta, n, hk, hv, d, h)
}

// convSiLU runs ConvSiLU on channels [c0, c1): the C path on whole groups
// of 8 channels, the Go loop on the rest.
func (k *Kernels) convSiLU(out, x, state, w []float32, n, ch, kw, c0, c1 int) {
	if n > 0 && k.isa != ISAScalarGo {
		m := c0 + (c1-c0)/8*8
		if m > c0 && dnConvC(k.isa, out, x, state, w, n, ch, c0, m, kw) {
			c0 = m
		}
	}
	if c0 < c1 {
		convSiLURows(out, x, state, w, n, ch, kw, c0, c1)
	}
}
