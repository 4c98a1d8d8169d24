// Fast matrix kernels: activation quantization and weight-row dot products
// for whole blocks of rows, in C with SIMD intrinsics behind cgo (kern_*.c)
// or, as the reference and the CGO_ENABLED=0 build, quant's scalar Go.
//
// Kernels is one instruction-set path. Available lists the paths this
// machine runs (feature detection in C: cpuid and OS support); KernelsFor
// picks one, so tests can force each. Nothing here reads the environment:
// a FLOWINFER_ISA-style override belongs in cmd or tests (ParseISA).
//
// Three products, all with the same numerics:
//   - DotRows (decode): one activation row; on AVX2 one weight row at a time
//     against up to 4 activation rows (kern_avx2_q.c, _k.c, _f.c).
//   - GemmRows (prefill): with 8+ activation rows, Q4_0, Q4_K, Q6_K, Q8_0
//     weights are expanded 8 rows at a time into a scratch layout whose
//     vector lanes are rows (kern_avx2_rp.c); other types and small batches
//     use the DotRows tiles.
//   - DotRowsPacked / GemmRowsPacked (kern_pack.go): on weights packed once
//     at load time (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_NL, IQ4_XS, MXFP4):
//     1.25-2.7x DotRows per core; their prefill expands packed groups into
//     the scratch layout.
//
// Besides the products: SwiGLU, softmax's exp, attention's weighted V sum
// (AddWeighted), RMSNorm and RoPE's rotation, each bit-identical to its Go
// loop (kern_avx2_exp.c, kern_avx2_norm.c, kern_avx2_f.c).
//
// Paths: AVX2 (kern_avx2_*.c) has every kernel. AVX-512 (kern_avx512.c,
// kern_avx512_iq.c: F, BW, VL, DQ and VNNI) has its own packed products,
// on the same packed layouts, F32/F16 products, the Q8_0/Q8_1/Q8_K quantizers, and BF16
// products where the CPU has AVX512_BF16; for everything else it runs the
// AVX2 code. Its packed products equal AVX2's bit for bit, its quantizers
// are byte-identical to quant's.
// The machines this is developed on have no AVX-512: `go test -tags
// fi_simde ./cpu/` runs every test of the package on it through SIMDe's
// portable intrinsics (kern_simde.go).
//
// Numerics: QuantizeRows is byte-identical to quant.QuantizeRow on every
// path. The products compute the same exact integer sums as quant.DotFunc
// and differ only in the order and fusing (FMA) of the float additions of
// per-block terms: within 1e-6·S of quant for the quantized types and
// 2e-6·S for F32/F16/BF16 (S = Σ(|w_i|+|o_i|)·|a_i|, o_i the offset part of
// a weight: min, -32·d·sc ...; kern_test.go), measured at most 1.6e-7·S and
// 3.4e-7·S. Decode and prefill of the same token may differ in the last
// bits, as in llama.cpp.
//
// Calls are per matrix or per block of rows (a cgo call costs ~27 ns), not
// per element. This file does not split work across threads: callers hand
// row ranges [r0, r1) to their workers.
//
// This file holds the paths (ISA, Kernels), the weight and activation
// layouts and the matrix products; the row-wise kernels (SwiGLU, exp,
// softmax, RMSNorm, RoPE) are in kern_ew.go, the kernels on the KV
// cache's rows (widening, attention scores and sums) in kern_attn.go.

package cpu

import (
	"fmt"
	"unsafe"

	"github.com/flowinfer/flowinfer/quant"
)

// ISA is one kernel implementation path.
type ISA int

const (
	// ISAScalarGo is quant's plain-Go reference code: every machine, and
	// the only path of a CGO_ENABLED=0 build.
	ISAScalarGo ISA = iota
	// ISAAVX2 is C with AVX2, FMA and F16C intrinsics (x86-64-v3).
	ISAAVX2
	// ISAAVX512 is C with AVX-512 (F, BW, VL, DQ, VNNI) intrinsics for the
	// packed products of Q4_0, Q4_K, Q5_K, Q6_K, Q8_0 and, where the CPU has
	// AVX512_BF16, BF16 weights; the rest of it is ISAAVX2's code.
	ISAAVX512
)

// String returns the name ParseISA accepts.
func (i ISA) String() string {
	switch i {
	case ISAScalarGo:
		return "go"
	case ISAAVX2:
		return "avx2"
	case ISAAVX512:
		return "avx512"
	}
	return fmt.Sprintf("isa(%d)", int(i))
}

// ParseISA returns the ISA named s ("go", "avx2", "avx512").
func ParseISA(s string) (ISA, error) {
	for _, i := range []ISA{ISAScalarGo, ISAAVX2, ISAAVX512} {
		if s == i.String() {
			return i, nil
		}
	}
	return 0, fmt.Errorf("cpu: unknown ISA %q (want go, avx2 or avx512)", s)
}

// Available returns the paths this machine (and build) can run, fastest
// first; ISAScalarGo is always last.
func Available() []ISA {
	var isas []ISA
	if cpuFeatures()&featAVX512 != 0 {
		isas = append(isas, ISAAVX512)
	}
	if cpuFeatures()&featAVX2 != 0 {
		isas = append(isas, ISAAVX2)
	}
	return append(isas, ISAScalarGo)
}

// KernelsFor returns the kernels of path isa, or nil if this machine or
// build cannot run it.
func KernelsFor(isa ISA) *Kernels {
	for _, a := range Available() {
		if a == isa {
			return &Kernels{isa: isa}
		}
	}
	return nil
}

// Best returns the fastest kernels this machine runs.
func Best() *Kernels { return &Kernels{isa: Available()[0]} }

// Kernels is one ISA path's set of kernels. Its methods are safe for
// concurrent use and do not allocate. They panic, naming the violated
// condition, if slices are shorter than the shapes need or a type is not
// supported (shapes are validated when a model loads; this keeps C from
// ever reading or writing out of bounds).
type Kernels struct {
	isa ISA
}

// ISA returns the path.
func (k *Kernels) ISA() ISA { return k.isa }

// Supports reports whether DotRows and GemmRows take weights of type wt:
// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K ... Q6_K, IQ4_NL,
// IQ4_XS, MXFP4 and the lattice types IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ1_S, IQ1_M, on every path. The activations are of type
// quant.VecDotType(wt). The lattice types have AVX2 kernels (IQ2_XXS,
// IQ3_XXS, IQ3_S, IQ2_XS and IQ2_S in kern_avx2_iql.c, IQ1_S and IQ1_M in
// kern_avx2_iq1.c; the AVX-512 path runs them too) and no packed layout;
// ISAScalarGo runs quant's Go dot products (GemmRows's fallback).
func (k *Kernels) Supports(wt quant.Type) bool {
	_, _, ok := dotLayout(wt)
	return ok
}

// dotLayout returns the block size and bytes of a weight type with a dot
// product (a switch: cheaper than quant's table lookup on every call).
func dotLayout(t quant.Type) (bs, bb int, ok bool) {
	switch t {
	case quant.F32:
		return 1, 4, true
	case quant.F16, quant.BF16:
		return 1, 2, true
	case quant.Q4_0:
		return 32, 18, true
	case quant.Q4_1:
		return 32, 20, true
	case quant.Q5_0:
		return 32, 22, true
	case quant.Q5_1:
		return 32, 24, true
	case quant.Q8_0:
		return 32, 34, true
	case quant.Q2_K:
		return 256, 84, true
	case quant.Q3_K:
		return 256, 110, true
	case quant.Q4_K:
		return 256, 144, true
	case quant.Q5_K:
		return 256, 176, true
	case quant.Q6_K:
		return 256, 210, true
	case quant.IQ4_NL:
		return 32, 18, true
	case quant.MXFP4:
		return 32, 17, true
	case quant.IQ4_XS:
		return 256, 136, true
	case quant.IQ2_XXS:
		return 256, 66, true
	case quant.IQ2_XS:
		return 256, 74, true
	case quant.IQ2_S:
		return 256, 82, true
	case quant.IQ3_XXS:
		return 256, 98, true
	case quant.IQ3_S:
		return 256, 110, true
	case quant.IQ1_S:
		return 256, 50, true
	case quant.IQ1_M:
		return 256, 56, true
	}
	return 0, 0, false
}

// actLayout is dotLayout for the activation (vec-dot) types.
func actLayout(t quant.Type) (bs, bb int, ok bool) {
	switch t {
	case quant.Q8_0:
		return 32, 34, true
	case quant.Q8_1:
		return 32, 36, true
	case quant.Q8_K:
		return 256, 292, true
	}
	return dotLayout(t)
}

// layoutBytes returns the bytes of cols elements of t, or panics.
func layoutBytes(op string, t quant.Type, cols int, layout func(quant.Type) (int, int, bool)) int {
	bs, bb, ok := layout(t)
	if !ok {
		panic(fmt.Sprintf("cpu: %s: type %s not supported", op, t))
	}
	if cols < 0 || cols%bs != 0 {
		panic(fmt.Sprintf("cpu: %s: %d %s columns are not a whole number of blocks of %d", op, cols, t, bs))
	}
	return cols / bs * bb
}

// QuantizeRows converts nRows rows of cols float32s (src, row-major) to
// type t, rows back to back in dst (quant.RowBytes(t, cols) bytes each),
// byte-identical to quant.QuantizeRow row by row. The vec-dot types Q8_0,
// Q8_1, Q8_K, F16, BF16 and F32 run in SIMD; any other type quant can
// quantize runs in Go.
func (k *Kernels) QuantizeRows(t quant.Type, src []float32, nRows, cols int, dst []byte) {
	const op = "QuantizeRows"
	f := quant.QuantizeFunc(t)
	if f == nil {
		panic(fmt.Sprintf("cpu: %s: cannot quantize to %s", op, t))
	}
	rb, err := quant.RowBytes(t, cols)
	if err != nil {
		panic(fmt.Sprintf("cpu: %s: %v", op, err))
	}
	if nRows < 0 || len(src) < nRows*cols || len(dst) < nRows*rb {
		panic(fmt.Sprintf("cpu: %s: %d rows of %d %s need %d floats and %d bytes, have %d and %d",
			op, nRows, cols, t, nRows*cols, nRows*rb, len(src), len(dst)))
	}
	if nRows == 0 || cols == 0 {
		return
	}
	if k.isa != ISAScalarGo && quantizeRowsC(k.isa, t, src, nRows, cols, dst) {
		return
	}
	for r := range nRows {
		f(src[r*cols:(r+1)*cols], dst[r*rb:(r+1)*rb])
	}
}

// DotRows sets out[r] = dot(weight row r, a) for r in [r0, r1): the decode
// matrix-vector product over one block of rows. Weight row r (type wt,
// cols elements) starts at w[r*rowBytes]; a is one activation row of type
// quant.VecDotType(wt) (from QuantizeRows); out is indexed by absolute row
// and only out[r0:r1] is written.
func (k *Kernels) DotRows(wt quant.Type, w []byte, rowBytes, cols, r0, r1 int, a []byte, out []float32) {
	k.GemmRows(wt, w, rowBytes, cols, r0, r1, a, 1, out, r1)
}

// GemmRows sets out[t*outStride+r] = dot(weight row r, activation row t)
// for r in [r0, r1) and t in [0, nAct): the prefill matrix product over one
// block of weight rows. The nAct activation rows sit back to back in a
// (quant.RowBytes(quant.VecDotType(wt), cols) bytes each, as QuantizeRows
// writes them); each weight row is read from memory once for all of them.
// outStride must be at least r1 when nAct > 1.
func (k *Kernels) GemmRows(wt quant.Type, w []byte, rowBytes, cols, r0, r1 int, a []byte, nAct int, out []float32, outStride int) {
	const op = "GemmRows"
	wrb := layoutBytes(op, wt, cols, dotLayout)
	vt := quant.VecDotType(wt)
	arb := layoutBytes(op, vt, cols, actLayout)
	switch {
	case r0 < 0 || r1 < r0:
		panic(fmt.Sprintf("cpu: %s: bad row range [%d, %d)", op, r0, r1))
	case nAct < 0:
		panic(fmt.Sprintf("cpu: %s: %d activation rows", op, nAct))
	case r1 == r0 || nAct == 0:
		return
	case rowBytes < wrb:
		panic(fmt.Sprintf("cpu: %s: row stride %d < %d bytes of a %s row of %d", op, rowBytes, wrb, wt, cols))
	case len(w) < (r1-1)*rowBytes+wrb:
		panic(fmt.Sprintf("cpu: %s: rows [%d, %d) of %d bytes need %d bytes, have %d", op, r0, r1, rowBytes, (r1-1)*rowBytes+wrb, len(w)))
	case len(a) < nAct*arb:
		panic(fmt.Sprintf("cpu: %s: %d %s activation rows of %d need %d bytes, have %d", op, nAct, vt, cols, nAct*arb, len(a)))
	case nAct > 1 && outStride < r1:
		panic(fmt.Sprintf("cpu: %s: output stride %d < row end %d", op, outStride, r1))
	case len(out) < (nAct-1)*outStride+r1:
		panic(fmt.Sprintf("cpu: %s: output needs %d floats, has %d", op, (nAct-1)*outStride+r1, len(out)))
	}
	if cols == 0 {
		for t := range nAct {
			clear(out[t*outStride+r0 : t*outStride+r1])
		}
		return
	}
	if k.isa != ISAScalarGo && gemmC(k.isa, wt, w, rowBytes, cols, r0, r1, a, arb, nAct, out, outStride) {
		return
	}
	dot := quant.DotFunc(wt)
	for t := range nAct {
		at := a[t*arb : (t+1)*arb]
		o := out[t*outStride:]
		for r := r0; r < r1; r++ {
			o[r] = dot(cols, w[r*rowBytes:r*rowBytes+wrb], at)
		}
	}
}

// ptr returns the address of a slice's first element for C (nil if empty).
func ptr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }
