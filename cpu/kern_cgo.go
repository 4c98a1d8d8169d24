//go:build cgo

// The cgo bridge to the C kernels (kern.h). Each function makes one C call
// for a whole block of rows; Go slices are passed as pointers to their
// first element, after kern.go has checked every length.

package cpu

/*
#cgo CFLAGS: -O2 -std=gnu11
#cgo LDFLAGS: -lm
#include "kern.h"
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/flowinfer/flowinfer/quant"
)

const (
	featAVX2   = C.FI_AVX2
	featAVX512 = C.FI_AVX512
	featAMD    = C.FI_AMD
)

// The lattice kernels look grid points up in quant's grids, copied into C
// once (fi_iql_set_grid) so both read the same table.
func init() {
	for _, t := range []quant.Type{quant.IQ2_XXS, quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XS, quant.IQ2_S} {
		g := quant.LatticeGrid(t)
		if C.fi_iql_set_grid(C.int(t), (*C.int8_t)(ptr(g)), C.int64_t(len(g))) != 0 {
			panic(fmt.Sprintf("cpu: the %s kernel does not take quant's grid of %d bytes", t, len(g)))
		}
	}
	// IQ1_S and IQ1_M share one grid (kern_avx2_iq1.c).
	g := quant.LatticeGrid(quant.IQ1_S)
	if C.fi_iq1_set_grid((*C.int8_t)(ptr(g)), C.int64_t(len(g))) != 0 {
		panic(fmt.Sprintf("cpu: the IQ1 kernels do not take quant's grid of %d bytes", len(g)))
	}
}

// cgoKernels reports whether the C kernels are built in.
const cgoKernels = true

// repackMinActs is FI_RP_MIN_ACTS (kern.h).
const repackMinActs = C.FI_RP_MIN_ACTS

// cpuFeatures returns the FI_* bits of this machine (asked once).
var cpuFeatures = sync.OnceValue(func() int { return int(C.fi_cpu_features()) })

// hadamardC runs fi_hadamard_avx2 on the pieces of n values of x; false
// if it does not take n.
func hadamardC(x []float32, n int) bool {
	return C.fi_hadamard_avx2((*C.float)(ptr(x)), C.int64_t(n), C.int64_t(len(x)/n)) == 0
}

// quantizeRowsC runs the C quantizer of isa; false if it has none for t.
func quantizeRowsC(isa ISA, t quant.Type, src []float32, nRows, cols int, dst []byte) bool {
	switch isa {
	case ISAAVX2:
		return C.fi_quantize_rows_avx2(C.int(t), (*C.float)(ptr(src)), C.int64_t(nRows), C.int64_t(cols),
			(*C.uint8_t)(ptr(dst))) == 0
	case ISAAVX512:
		return C.fi_quantize_rows_avx512(C.int(t), (*C.float)(ptr(src)), C.int64_t(nRows), C.int64_t(cols),
			(*C.uint8_t)(ptr(dst))) == 0
	}
	return false
}

// gemmC runs the C matrix kernel of isa; false if it has none for wt.
func gemmC(isa ISA, wt quant.Type, w []byte, rowBytes, cols, r0, r1 int, a []byte, arb, nAct int, out []float32, outStride int) bool {
	switch isa {
	case ISAAVX2:
		return C.fi_gemm_avx2(C.int(wt), (*C.uint8_t)(ptr(w)), C.int64_t(rowBytes), C.int64_t(cols),
			C.int64_t(r0), C.int64_t(r1), (*C.uint8_t)(ptr(a)), C.int64_t(arb), C.int64_t(nAct),
			(*C.float)(ptr(out)), C.int64_t(outStride)) == 0
	case ISAAVX512:
		return C.fi_gemm_avx512(C.int(wt), (*C.uint8_t)(ptr(w)), C.int64_t(rowBytes), C.int64_t(cols),
			C.int64_t(r0), C.int64_t(r1), (*C.uint8_t)(ptr(a)), C.int64_t(arb), C.int64_t(nAct),
			(*C.float)(ptr(out)), C.int64_t(outStride)) == 0
	}
	return false
}

// packedSizeC returns the packed size of a rows×cols wt matrix (<= 0: none).
// The AVX-512 kernels read the AVX2 packed layouts.
func packedSizeC(isa ISA, wt quant.Type, rows, cols int) int {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		return int(C.fi_packed_size_avx2(C.int(wt), C.int64_t(rows), C.int64_t(cols)))
	}
	return -1
}

func packC(isa ISA, wt quant.Type, w []byte, rowBytes, rows, cols int, dst []byte) {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		C.fi_pack_avx2(C.int(wt), (*C.uint8_t)(ptr(w)), C.int64_t(rowBytes), C.int64_t(rows), C.int64_t(cols),
			(*C.uint8_t)(ptr(dst)))
	}
}

func gemmPackedC(isa ISA, wt quant.Type, pk []byte, cols, r0, r1 int, a []byte, arb, nAct int, out []float32, outStride int) {
	if isa == ISAAVX512 && nAct == 1 && cpuFeatures()&featAMD != 0 && !ownDecode512(wt) {
		// On AMD Zen 4 the AVX2 matrix-vector kernels stream packed weights
		// from memory twice as fast as the 512-bit ones (docs/decisions.md);
		// both read the same packed layout.
		isa = ISAAVX2
	}
	switch isa {
	case ISAAVX2:
		C.fi_gemm_packed_avx2(C.int(wt), (*C.uint8_t)(ptr(pk)), C.int64_t(cols), C.int64_t(r0), C.int64_t(r1),
			(*C.uint8_t)(ptr(a)), C.int64_t(arb), C.int64_t(nAct), (*C.float)(ptr(out)), C.int64_t(outStride))
	case ISAAVX512:
		C.fi_gemm_packed_avx512(C.int(wt), (*C.uint8_t)(ptr(pk)), C.int64_t(cols), C.int64_t(r0), C.int64_t(r1),
			(*C.uint8_t)(ptr(a)), C.int64_t(arb), C.int64_t(nAct), (*C.float)(ptr(out)), C.int64_t(outStride))
	}
}

// ownDecode512 reports whether the AVX-512 path's matrix-vector product of
// packed wt weights streams each 8-row group on its own, as the AVX2
// kernels do (kern_avx512_iq.c: 256-bit vpdpbusd), so AMD CPUs run it too.
func ownDecode512(wt quant.Type) bool {
	return wt == quant.IQ4_NL || wt == quant.IQ4_XS || wt == quant.MXFP4
}

// wsumC runs the C weighted row sum of isa; false if it has none.
func wsumC(isa ISA, out []float32, nOut, dim int, w []float32, ws int, v []float32, vs, n int) bool {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		C.fi_wsum_avx2((*C.float)(ptr(out)), C.int64_t(nOut), C.int64_t(dim), (*C.float)(ptr(w)), C.int64_t(ws),
			(*C.float)(ptr(v)), C.int64_t(vs), C.int64_t(n))
		return true
	}
	return false
}

// swigluC runs the C SwiGLU of isa; false if it has none.
func swigluC(isa ISA, out, gate, up []float32) bool {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		C.fi_swiglu_avx2((*C.float)(ptr(out)), (*C.float)(ptr(gate)), (*C.float)(ptr(up)), C.int64_t(len(gate)))
		return true
	}
	return false
}

// expSubC runs the C expSub of isa; false if it has none.
func expSubC(isa ISA, row []float32, mx float32) (float64, bool) {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		return float64(C.fi_expsub_avx2((*C.float)(ptr(row)), C.int64_t(len(row)), C.float(mx))), true
	}
	return 0, false
}

// rmsNormC runs the C RMSNorm of isa; false if it has none.
func rmsNormC(isa ISA, out, x, w []float32, rows, dim int, eps float32) bool {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		C.fi_rmsnorm_avx2((*C.float)(ptr(out)), (*C.float)(ptr(x)), (*C.float)(ptr(w)), C.int64_t(rows),
			C.int64_t(dim), C.float(eps))
		return true
	}
	return false
}

// ropeC runs the C RoPE rotation of isa; false if it has none.
func ropeC(isa ISA, x, cs []float32, rows, nHead, headDim, half int, neox bool) bool {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		nx := C.int(0)
		if neox {
			nx = 1
		}
		C.fi_rope_avx2((*C.float)(ptr(x)), (*C.float)(ptr(cs)), C.int64_t(rows), C.int64_t(nHead),
			C.int64_t(headDim), C.int64_t(half), nx)
		return true
	}
	return false
}

// flashTileC runs the C attention tile of isa; false if it has none for
// these shapes.
func flashTileC(isa ISA, qt []float32, rp, R, dk, dv int, kp, vp []float32, vn, L, j0 int, pos []int32, mask bool, win int,
	m []float32, l []float64, acc, scratch []float32) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	mk := C.int(0)
	if mask {
		mk = 1
	}
	return C.fi_fa_tile_avx2((*C.float)(ptr(qt)), C.int64_t(rp), C.int64_t(R), C.int64_t(dk), C.int64_t(dv),
		(*C.float)(ptr(kp)), (*C.float)(ptr(vp)), C.int64_t(vn), C.int64_t(L), C.int64_t(j0),
		(*C.int32_t)(ptr(pos)), mk, C.int64_t(win), (*C.float)(ptr(m)), (*C.double)(ptr(l)), (*C.float)(ptr(acc)),
		(*C.float)(ptr(scratch))) == 0
}

// maddPeakC runs the int16 multiply-add peak loop of isa's integer decode
// scores (v false) or V sums (v true) for n steps and returns the
// operations done, 2 per multiply-add (0: none for isa).
func maddPeakC(isa ISA, n int, v bool) float64 {
	switch {
	case isa == ISAAVX2 || isa == ISAAVX512 && v: // AVX-512's V sums are AVX2's (wintChunkC)
		C.fi_madd_peak_avx2(C.int64_t(n))
		return 384 * float64(n)
	case isa == ISAAVX512:
		var out C.int32_t
		if C.fi_dpwssd_peak_avx512(C.int64_t(n), &out) != 0 {
			return 0
		}
		return 1536 * float64(n)
	}
	return 0
}

// fmaPeakC runs the FMA peak loop of isa for n steps and returns the flops
// done (0: none for isa).
func fmaPeakC(isa ISA, n int) float64 {
	switch isa {
	case ISAAVX2:
		C.fi_fma_peak_avx2(C.int64_t(n))
		return 192 * float64(n)
	case ISAAVX512:
		if f := float32(C.fi_fma_peak_avx512(C.int64_t(n))); f != f {
			return 0
		}
		return 768 * float64(n)
	}
	return 0
}

// dequantC runs the C row conversion of isa; false if it has none for t.
func dequantC(isa ISA, t quant.Type, src []byte, stride, rows, cols int, dst []float32, dstride int) bool {
	if isa == ISAAVX2 || isa == ISAAVX512 {
		return C.fi_dequant_avx2(C.int(t), (*C.uint8_t)(ptr(src)), C.int64_t(stride), C.int64_t(rows), C.int64_t(cols),
			(*C.float)(ptr(dst)), C.int64_t(dstride)) == 0
	}
	return false
}

// turboDecodeC runs the C TurboQuant decode of isa; false if it has none.
func turboDecodeC(isa ISA, bits int, levels []float32, src []byte, stride, rows, n int, dst []float32, dstride int) bool {
	if (isa == ISAAVX2 || isa == ISAAVX512) && n%8 == 0 {
		C.fi_turbo_decode_avx2(C.int(bits), (*C.float)(ptr(levels)), (*C.uint8_t)(ptr(src)), C.int64_t(stride),
			C.int64_t(rows), C.int64_t(n), (*C.float)(ptr(dst)), C.int64_t(dstride))
		return true
	}
	return false
}

// softmaxC runs the C softmax of isa; false if it has none.
func softmaxC(isa ISA, row []float32, scale float32) bool {
	if isa == ISAAVX512 {
		C.fi_softmax_avx512((*C.float)(ptr(row)), C.int64_t(len(row)), C.float(scale))
		return true
	}
	if isa == ISAAVX2 {
		C.fi_softmax_avx2((*C.float)(ptr(row)), C.int64_t(len(row)), C.float(scale))
		return true
	}
	return false
}

// turboArgs returns the bits and codebook C takes for tq (0, nil: none).
func turboArgs(tq *quant.Turbo) (C.int, *C.float) {
	if tq == nil {
		return 0, nil
	}
	return C.int(tq.Bits()), (*C.float)(ptr(tq.Levels()))
}

// attnScoresC runs the C decode-row scores of isa; false if it has none
// for these rows.
func attnScoresC(isa ISA, t quant.Type, tq *quant.Turbo, src []byte, stride, n, dim int, q []float32, G int, s []float32, ls int) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	bits, lv := turboArgs(tq)
	if isa == ISAAVX512 && C.fi_attn_scores_avx512(C.int(t), bits, lv, (*C.uint8_t)(ptr(src)), C.int64_t(stride), C.int64_t(n),
		C.int64_t(dim), (*C.float)(ptr(q)), C.int64_t(G), (*C.float)(ptr(s)), C.int64_t(ls)) == 0 {
		return true
	}
	return C.fi_attn_scores_avx2(C.int(t), bits, lv, (*C.uint8_t)(ptr(src)), C.int64_t(stride), C.int64_t(n),
		C.int64_t(dim), (*C.float)(ptr(q)), C.int64_t(G), (*C.float)(ptr(s)), C.int64_t(ls)) == 0
}

// attnSumC runs the C decode-row V sum of isa; false if it has none for
// these rows.
func attnSumC(isa ISA, t quant.Type, tq *quant.Turbo, src []byte, stride, n, dim int, w []float32, lw, G int, acc []float32) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	bits, lv := turboArgs(tq)
	if isa == ISAAVX512 && C.fi_attn_sum_avx512(C.int(t), bits, lv, (*C.uint8_t)(ptr(src)), C.int64_t(stride), C.int64_t(n),
		C.int64_t(dim), (*C.float)(ptr(w)), C.int64_t(lw), C.int64_t(G), (*C.float)(ptr(acc))) == 0 {
		return true
	}
	return C.fi_attn_sum_avx2(C.int(t), bits, lv, (*C.uint8_t)(ptr(src)), C.int64_t(stride), C.int64_t(n),
		C.int64_t(dim), (*C.float)(ptr(w)), C.int64_t(lw), C.int64_t(G), (*C.float)(ptr(acc))) == 0
}

// attnScoresTilesC runs the C tiled scores of isa (AVX-512's refusing a
// width the AVX2 kernels take: theirs); false if it has none for these
// rows.
func attnScoresTilesC(isa ISA, t quant.Type, tq *quant.Turbo, src []byte, rb, u, r0, n, dim int, q []float32, G int, s []float32, ls int) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	bits, lv := turboArgs(tq)
	if isa == ISAAVX512 && C.fi_attn_scores_t_avx512(C.int(t), bits, lv, (*C.uint8_t)(ptr(src)), C.int64_t(rb), C.int64_t(u),
		C.int64_t(r0), C.int64_t(n), C.int64_t(dim), (*C.float)(ptr(q)), C.int64_t(G), (*C.float)(ptr(s)), C.int64_t(ls)) == 0 {
		return true
	}
	return C.fi_attn_scores_t_avx2(C.int(t), bits, lv, (*C.uint8_t)(ptr(src)), C.int64_t(rb), C.int64_t(u), C.int64_t(r0),
		C.int64_t(n), C.int64_t(dim), (*C.float)(ptr(q)), C.int64_t(G), (*C.float)(ptr(s)), C.int64_t(ls)) == 0
}

// attnScoresTilesQC runs the C integer tiled scores of isa (AVX-512's
// refusing a width: AVX2's); false if neither takes the rows.
func attnScoresTilesQC(isa ISA, t quant.Type, tq *quant.Turbo, src []byte, rb, r0, n int, x *QInt, s []float32, ls int) bool {
	if isa != ISAAVX2 && isa != ISAAVX512 {
		return false
	}
	bits, _ := turboArgs(tq)
	c8 := (*C.int8_t)(ptr(x.c8[:]))
	corr := (*C.int32_t)(nil)
	if len(x.corr) > 0 {
		corr = (*C.int32_t)(ptr(x.corr))
	}
	if isa == ISAAVX512 && C.fi_attn_scores_qi_avx512(C.int(t), bits, (*C.uint8_t)(ptr(src)), C.int64_t(rb), C.int64_t(r0), C.int64_t(n),
		C.int64_t(x.dim), (*C.int32_t)(ptr(x.qp)), corr, (*C.float)(ptr(x.kq)), c8, C.int64_t(x.G), (*C.float)(ptr(s)), C.int64_t(ls)) == 0 {
		return true
	}
	return C.fi_attn_scores_qi_avx2(C.int(t), bits, (*C.uint8_t)(ptr(src)), C.int64_t(rb), C.int64_t(r0), C.int64_t(n),
		C.int64_t(x.dim), (*C.int32_t)(ptr(x.qp)), corr, (*C.float)(ptr(x.kq)), c8, C.int64_t(x.G), (*C.float)(ptr(s)), C.int64_t(ls)) == 0
}

// untileC runs fi_untile.
func untileC(src []byte, rb, u, r0, n int, dst []byte) bool {
	C.fi_untile((*C.uint8_t)(ptr(src)), C.int64_t(rb), C.int64_t(u), C.int64_t(r0), C.int64_t(n), (*C.uint8_t)(ptr(dst)))
	return true
}

// kvScalesC runs fi_kv_scales_avx2 (AVX2 and AVX-512 machines alike) on
// rows [j0, j0+n) of x, at src.
func kvScalesC(x *WInt, src []byte, stride, j0, n int, w []float32, lw int) bool {
	bits, _ := turboArgs(x.tq)
	return C.fi_kv_scales_avx2(C.int(x.t), bits, (*C.uint8_t)(ptr(src)), C.int64_t(stride), C.int64_t(n), C.int64_t(x.nb),
		(*C.float)(ptr(x.sc[j0:])), C.int64_t(x.n), (*C.float)(ptr(w[j0:])), C.int64_t(lw), C.int64_t(x.G), (*C.float)(ptr(x.m))) == 0
}

// wintChunkC runs fi_wint_chunk_avx2 on x's chunk of n rows at src,
// prefetching next: ok as AttnSumChunk's result when done.
func wintChunkC(x *WInt, src []byte, stride, n int, w []float32, lw int, next []byte) (ok, done bool) {
	if n == 0 || x.G == 0 {
		return true, false
	}
	bits, _ := turboArgs(x.tq)
	r := C.fi_wint_chunk_avx2(C.int(x.t), bits, (*C.int8_t)(ptr(x.c8[:])), C.float(x.cs), (*C.uint8_t)(ptr(src)),
		C.int64_t(stride), C.int64_t(n), C.int64_t(x.dim), (*C.float)(ptr(w)), C.int64_t(lw), C.int64_t(x.G),
		C.int64_t(x.nb), (*C.float)(ptr(x.sc)), (*C.float)(ptr(x.m)), (*C.int16_t)(ptr(x.wq)), (*C.int64_t)(ptr(x.wsum)),
		(*C.int64_t)(ptr(x.S)), (*C.double)(ptr(x.F)), (*C.uint8_t)(ptr(next)), C.int64_t(len(next)))
	return r == 0, r != -1
}

// wintRoundC runs fi_wint_round_avx2 on x's rows: ok as RoundWeights'
// result when done.
func wintRoundC(x *WInt, w []float32, lw int) (ok, done bool) {
	r := C.fi_wint_round_avx2((*C.float)(ptr(w)), C.int64_t(lw), C.int64_t(x.G), C.int64_t(x.n), (*C.float)(ptr(x.sc)),
		C.int64_t(x.nb), (*C.float)(ptr(x.m)), (*C.int16_t)(ptr(x.wq)), (*C.int64_t)(ptr(x.wsum)))
	return r == 0, true
}

// attnSumQC runs fi_attn_sum_qi_avx2 on rows [j0, j0+n) of x; false if it
// does not take them.
func attnSumQC(x *WInt, src []byte, stride, j0, n int) bool {
	bits, _ := turboArgs(x.tq)
	return C.fi_attn_sum_qi_avx2(C.int(x.t), bits, (*C.int8_t)(ptr(x.c8[:])), (*C.uint8_t)(ptr(src)), C.int64_t(stride),
		C.int64_t(n), C.int64_t(x.dim), (*C.int16_t)(ptr(x.wq[j0:])), C.int64_t(x.n), C.int64_t(x.G), C.int64_t(x.nb),
		(*C.int64_t)(ptr(x.S))) == 0
}
