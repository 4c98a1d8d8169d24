//go:build cgo

// The cgo bridge to the gated delta net kernels (kern_avx2_dn.c), after
// kern_dn.go has checked every length. The AVX-512 path runs the AVX2
// code: no 512-bit version is written (on AMD Zen 4, this project's
// AVX-512 machine, 512-bit multiply-adds are double-pumped 256-bit ones;
// not measured for these kernels, docs/decisions.md).

package cpu

// #include "kern.h"
import "C"

// dnDeltaC runs fi_dn_delta_avx2; false if isa has no C path or d is not
// a multiple of 8.
func dnDeltaC(isa ISA, s []float32, d, n int, q, k, v []float32, xs int, g, beta []float32, gs int,
	out []float32, os int, scale float32) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	return C.fi_dn_delta_avx2((*C.float)(ptr(s)), C.int64_t(d), C.int64_t(n), (*C.float)(ptr(q)), (*C.float)(ptr(k)),
		(*C.float)(ptr(v)), C.int64_t(xs), (*C.float)(ptr(g)), (*C.float)(ptr(beta)), C.int64_t(gs),
		(*C.float)(ptr(out)), C.int64_t(os), C.float(scale)) == 0
}

// dnConvC runs fi_dn_conv_avx2; false if isa has no C path or it does
// not take the sizes.
func dnConvC(isa ISA, out, x, state, w []float32, n, ch, c0, c1, kw int) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	return C.fi_dn_conv_avx2((*C.float)(ptr(out)), (*C.float)(ptr(x)), (*C.float)(ptr(state)), (*C.float)(ptr(w)),
		C.int64_t(n), C.int64_t(ch), C.int64_t(c0), C.int64_t(c1), C.int64_t(kw)) == 0
}
