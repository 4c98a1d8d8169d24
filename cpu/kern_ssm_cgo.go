//go:build cgo

// The cgo bridge to the Mamba-2 kernels (kern_avx2_ssm.c,
// kern_avx512_ssm.c), after kern_ssm.go has checked every length.

package cpu

/*
#include "kern.h"
*/
import "C"

// ssmScanC runs the C scan of isa on heads [h0, h1); false if it has none
// (or could not allocate its scratch: nothing written then).
func ssmScanC(isa ISA, y, xbc, dt, a, d, state []float32, n, nHead, headDim, nGroup, dState, h0, h1 int) bool {
	switch isa {
	case ISAAVX2:
		return C.fi_ssm_scan_avx2((*C.float)(ptr(y)), (*C.float)(ptr(xbc)), (*C.float)(ptr(dt)), (*C.float)(ptr(a)),
			(*C.float)(ptr(d)), (*C.float)(ptr(state)), C.int64_t(n), C.int64_t(nHead), C.int64_t(headDim),
			C.int64_t(nGroup), C.int64_t(dState), C.int64_t(h0), C.int64_t(h1)) == 0
	case ISAAVX512:
		return C.fi_ssm_scan_avx512((*C.float)(ptr(y)), (*C.float)(ptr(xbc)), (*C.float)(ptr(dt)), (*C.float)(ptr(a)),
			(*C.float)(ptr(d)), (*C.float)(ptr(state)), C.int64_t(n), C.int64_t(nHead), C.int64_t(headDim),
			C.int64_t(nGroup), C.int64_t(dState), C.int64_t(h0), C.int64_t(h1)) == 0
	}
	return false
}

// ssmConvC runs the C convolution of isa (AVX-512: AVX2's) on channels
// [c0, c1); false if it has none (or could not allocate its scratch).
func ssmConvC(isa ISA, out, x, state, w, bias []float32, n, ch, k, c0, c1 int) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	var bp *C.float
	if bias != nil {
		bp = (*C.float)(ptr(bias))
	}
	return C.fi_ssm_conv_avx2((*C.float)(ptr(out)), (*C.float)(ptr(x)), (*C.float)(ptr(state)), (*C.float)(ptr(w)), bp,
		C.int64_t(n), C.int64_t(ch), C.int64_t(k), C.int64_t(c0), C.int64_t(c1)) == 0
}
