package cpu

// kern_ssm.go: the Mamba-2 kernels (model.Mamba's scan and convolution),
// each checking its shapes and then running the C path (kern_avx2_ssm.c,
// kern_avx512_ssm.c) or the Go loop (mamba.go) on a range of heads or
// channels. The Backend splits the ranges over its workers
// (mamba_backend.go); the Ref runs the Go loops.
//
// Numerics: the C convolution's sums are the Go loop's bits (each from
// tap 0, unfused); its SiLU takes a float32 exp within 2 ulp, so outputs
// may differ in the last bits; its state is copied, exact. The C scan
// fuses its multiply-adds and sums each row in 8 (AVX2) or 16 (AVX-512)
// lanes, so outputs and state differ from the Go loop's by float32
// rounding (TestSSMKernels states the tolerance). On every path one call
// on n tokens gives the bits of n calls on one token each: prefill and
// decode advance a sequence's state identically.

import "fmt"

// SSMScan runs model.Mamba's SSMScan on heads [h0, h1) of n tokens (the
// other heads' outputs and state are not touched).
func (k *Kernels) SSMScan(y, xbc, dt, a, d, state []float32, n, nHead, headDim, nGroup, dState, h0, h1 int) {
	inner := nHead * headDim
	if n < 0 || nHead <= 0 || headDim <= 0 || dState <= 0 || nGroup <= 0 || nHead%nGroup != 0 ||
		h0 < 0 || h0 > h1 || h1 > nHead || len(y) < n*inner || len(xbc) < n*(inner+2*nGroup*dState) ||
		len(dt) < n*nHead || len(a) < nHead || len(d) < nHead || len(state) < inner*dState {
		panic(fmt.Sprintf("cpu: SSMScan: %d tokens, heads [%d, %d) of %d×%d, %d groups, state %d: lengths y %d, xbc %d, dt %d, a %d, d %d, state %d",
			n, h0, h1, nHead, headDim, nGroup, dState, len(y), len(xbc), len(dt), len(a), len(d), len(state)))
	}
	if n == 0 || h0 == h1 || k.isa != ISAScalarGo && ssmScanC(k.isa, y, xbc, dt, a, d, state, n, nHead, headDim, nGroup, dState, h0, h1) {
		return
	}
	for h := h0; h < h1; h++ {
		ssmScanHead(y, xbc, dt, a, d, state, n, nHead, headDim, nGroup, dState, h)
	}
}

// SSMConv runs model.Mamba's SSMConv on channels [c0, c1) of ch, kw taps
// (the other channels' outputs and state are not touched).
func (k *Kernels) SSMConv(out, x, state, w, bias []float32, n, ch, kw, c0, c1 int) {
	if n < 0 || ch <= 0 || kw < 2 || c0 < 0 || c0 > c1 || c1 > ch || len(out) < n*ch || len(x) < n*ch ||
		len(state) < ch*(kw-1) || len(w) < ch*kw || bias != nil && len(bias) < ch {
		panic(fmt.Sprintf("cpu: SSMConv: %d tokens, channels [%d, %d) of %d, %d taps: lengths out %d, x %d, state %d, w %d, bias %d",
			n, c0, c1, ch, kw, len(out), len(x), len(state), len(w), len(bias)))
	}
	// the C kernel holds up to 16 taps (model.Mamba's convolutions have 2 to 16)
	if c0 == c1 || kw <= 16 && k.isa != ISAScalarGo && ssmConvC(k.isa, out, x, state, w, bias, n, ch, kw, c0, c1) {
		return
	}
	ssmConvRows(out, x, state, w, bias, n, ch, kw, c0, c1)
}
