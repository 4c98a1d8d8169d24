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
//     at load time (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0): 1.25-2.7x DotRows per
//     core; their prefill expands packed groups into the scratch layout.
//
// Besides the products: SwiGLU, softmax's exp, attention's weighted V sum
// (AddWeighted), RMSNorm and RoPE's rotation, each bit-identical to its Go
// loop (kern_avx2_exp.c, kern_avx2_norm.c, kern_avx2_f.c).
//
// Paths: AVX2 (kern_avx2_*.c) has every kernel. AVX-512 (kern_avx512.c:
// F, BW, VL, DQ and VNNI) has its own packed products, on the same packed
// layouts, F32/F16 products, the Q8_0/Q8_1/Q8_K quantizers, and BF16
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
	// packed products (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0) and, where the CPU has
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
// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K ... Q6_K, on every
// path. The activations are of type quant.VecDotType(wt).
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

// AddWeighted adds to out[g*dim+c] (g < nOut, c < dim) the sums over
// j < n of w[g*wStride+j] · v[j*vStride+c]: the weighted sum of n rows of
// v (attention's V rows, weighted by the softmax of a group of query
// heads). The Go path sums j in order with separate multiply and add; the
// SIMD paths also go in order of j, with fused multiply-adds.
func (k *Kernels) AddWeighted(out []float32, nOut, dim int, w []float32, wStride int, v []float32, vStride, n int) {
	const op = "AddWeighted"
	switch {
	case nOut < 0 || dim < 0 || n < 0:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d, %d terms", op, nOut, dim, n))
	case nOut == 0 || dim == 0 || n == 0:
		return
	case len(out) < nOut*dim:
		panic(fmt.Sprintf("cpu: %s: output needs %d floats, has %d", op, nOut*dim, len(out)))
	case wStride < n || len(w) < (nOut-1)*wStride+n:
		panic(fmt.Sprintf("cpu: %s: %d weight rows of %d (stride %d) in %d floats", op, nOut, n, wStride, len(w)))
	case vStride < dim || len(v) < (n-1)*vStride+dim:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d (stride %d) in %d floats", op, n, dim, vStride, len(v)))
	}
	if k.isa != ISAScalarGo && wsumC(k.isa, out, nOut, dim, w, wStride, v, vStride, n) {
		return
	}
	for j := range n {
		vj := v[j*vStride : j*vStride+dim]
		for g := range nOut {
			axpy(out[g*dim:(g+1)*dim], w[g*wStride+j], vj)
		}
	}
}

// SwiGLU sets out[i] = gate[i]·sigmoid(gate[i])·up[i] for i < len(gate)
// (out and up at least as long). Every path gives the Go loop's result
// bit for bit, but for |gate[i]| ≥ 87 (then within one ulp).
func (k *Kernels) SwiGLU(out, gate, up []float32) {
	if len(out) < len(gate) || len(up) < len(gate) {
		panic(fmt.Sprintf("cpu: SwiGLU: %d gates, %d ups, %d outputs", len(gate), len(up), len(out)))
	}
	if len(gate) == 0 || k.isa != ISAScalarGo && swigluC(k.isa, out, gate, up) {
		return
	}
	swiglu(out, gate, up)
}

// ExpSub sets row[i] = exp(row[i]-mx) and returns the sum of the results,
// added in order in float64 (softmax's numerator and denominator). Every
// path gives the Go loop's result bit for bit, but where row[i]-mx ≤ -87
// (then within one ulp).
func (k *Kernels) ExpSub(row []float32, mx float32) float64 {
	if len(row) == 0 {
		return 0
	}
	if k.isa != ISAScalarGo {
		if s, ok := expSubC(k.isa, row, mx); ok {
			return s
		}
	}
	return expSub(row, mx)
}

// RMSNorm sets each of the len(x)/dim rows of out to x·scale·weight[i]
// (weight nil: x·scale), scale = 1/sqrt(mean of x² + eps) in float32, the
// squares added in float64 in four interleaved running sums (element i in
// sum i mod 4). Every path gives the Go loop's result bit for bit.
func (k *Kernels) RMSNorm(out, x, weight []float32, dim int, eps float32) {
	if dim <= 0 || len(x)%dim != 0 || len(out) < len(x) || weight != nil && len(weight) < dim {
		panic(fmt.Sprintf("cpu: RMSNorm: %d inputs, %d outputs, %d weights, rows of %d", len(x), len(out), len(weight), dim))
	}
	if len(x) == 0 || k.isa != ISAScalarGo && rmsNormC(k.isa, out, x, weight, len(x)/dim, dim, eps) {
		return
	}
	rmsNormRows(out, x, weight, dim, eps)
}

// Rope rotates, in each of rows rows of nHead heads of headDim floats, the
// first half pairs of every head by the angles in cs, 4·half floats per row
// as ropeTable (backend.go) writes them (neox: pairs (v[i], v[i+half]); otherwise pairs
// (v[2i], v[2i+1])). Every path gives the Go loop's result bit for bit.
func (k *Kernels) Rope(x, cs []float32, rows, nHead, headDim, half int, neox bool) {
	if half < 0 || 2*half > headDim || len(x) < rows*nHead*headDim || len(cs) < rows*4*half {
		panic(fmt.Sprintf("cpu: Rope: %d values, %d angles, %d rows of %d heads of %d, %d pairs",
			len(x), len(cs), rows, nHead, headDim, half))
	}
	if rows == 0 || half == 0 || k.isa != ISAScalarGo && ropeC(k.isa, x, cs, rows, nHead, headDim, half, neox) {
		return
	}
	rotate(x, cs, rows, nHead, headDim, half, neox)
}

// ptr returns the address of a slice's first element for C (nil if empty).
func ptr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// DequantRows converts rows rows of cols values of type t (F32, F16,
// BF16, Q8_0, Q4_0: the KV cache's block and float types; cols a whole
// number of blocks), row r at src[r*stride:], to float32s at
// dst[r*dstride:]: bit for bit quant.DequantizeFunc(t) row by row.
func (k *Kernels) DequantRows(t quant.Type, src []byte, stride, rows, cols int, dst []float32, dstride int) {
	const op = "DequantRows"
	rb := layoutBytes(op, t, cols, dotLayout)
	switch {
	case rows < 0:
		panic(fmt.Sprintf("cpu: %s: %d rows", op, rows))
	case rows == 0 || cols == 0:
		return
	case stride < rb || len(src) < (rows-1)*stride+rb:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d bytes (stride %d) in %d bytes", op, rows, rb, stride, len(src)))
	case dstride < cols || len(dst) < (rows-1)*dstride+cols:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d floats (stride %d) in %d", op, rows, cols, dstride, len(dst)))
	}
	if t == quant.F32 {
		for r := range rows {
			copy(dst[r*dstride:][:cols], bytesF32(src[r*stride:][:rb]))
		}
		return
	}
	if k.isa != ISAScalarGo && dequantC(k.isa, t, src, stride, rows, cols, dst, dstride) {
		return
	}
	f := quant.DequantizeFunc(t)
	if f == nil {
		panic(fmt.Sprintf("cpu: %s: type %s not supported", op, t))
	}
	for r := range rows {
		f(src[r*stride:][:rb], dst[r*dstride:][:cols])
	}
}

// TurboDecode decodes rows rows of tq's codes, row r at src[r*stride:],
// into the rotated domain (tq.Padded() values at dst[r*dstride:]): bit for
// bit tq.DecodeRotated row by row.
func (k *Kernels) TurboDecode(tq *quant.Turbo, src []byte, stride, rows int, dst []float32, dstride int) {
	const op = "TurboDecode"
	n, rb := tq.Padded(), tq.RowBytes()
	switch {
	case rows < 0:
		panic(fmt.Sprintf("cpu: %s: %d rows", op, rows))
	case rows == 0:
		return
	case stride < rb || len(src) < (rows-1)*stride+rb:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d bytes (stride %d) in %d bytes", op, rows, rb, stride, len(src)))
	case dstride < n || len(dst) < (rows-1)*dstride+n:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d floats (stride %d) in %d", op, rows, n, dstride, len(dst)))
	}
	if k.isa != ISAScalarGo && turboDecodeC(k.isa, tq.Bits(), tq.Levels(), src, stride, rows, n, dst, dstride) {
		return
	}
	for r := range rows {
		tq.DecodeRotated(dst[r*dstride:][:n], src[r*stride:][:rb])
	}
}

// Softmax sets row[i] = exp(s·row[i] - m) / Σ_j exp(s·row[j] - m), with
// s = scale and m the largest s·row[j]: attention's weights from its raw
// scores. The Go path sums in order in float64 (as Ref); the SIMD paths
// take a float32 exp (within 2 ulp, as prefill's flash tiles do: a third
// of the time of Go's float64 polynomial) and sum in sixteen float64
// lanes (AVX2: four chains of four; AVX-512: two of eight), so results
// differ from it by a few ulps.
func (k *Kernels) Softmax(row []float32, scale float32) {
	if len(row) == 0 || k.isa != ISAScalarGo && softmaxC(k.isa, row, scale) {
		return
	}
	for j := range row {
		row[j] *= scale
	}
	softmaxRow(k, row)
}

// kvRowBytes returns the bytes of one cached row of dim values of type t
// (tq non-nil: a TurboQuant row, dim its Padded width), or panics.
func kvRowBytes(op string, t quant.Type, tq *quant.Turbo, dim int) int {
	if tq != nil {
		if dim != tq.Padded() {
			panic(fmt.Sprintf("cpu: %s: TurboQuant rows have %d values, not %d", op, tq.Padded(), dim))
		}
		return tq.RowBytes()
	}
	return layoutBytes(op, t, dim, dotLayout)
}

// checkAttnRows panics unless src holds n rows of rb bytes at stride,
// x (G rows of lx floats, n used) and the G rows of dim at y fit.
func checkAttnRows(op string, src []byte, stride, rb, n, dim int, x []float32, lx, G int, y []float32) {
	switch {
	case n < 0 || G < 0 || dim < 0:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d, %d heads", op, n, dim, G))
	case n == 0 || G == 0:
		return
	case stride < rb || len(src) < (n-1)*stride+rb:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d bytes (stride %d) in %d bytes", op, n, rb, stride, len(src)))
	case lx < n || len(x) < (G-1)*lx+n:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d (stride %d) in %d floats", op, G, n, lx, len(x)))
	case len(y) < G*dim:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d need %d floats, have %d", op, G, dim, G*dim, len(y)))
	}
}

// attnMaxDim is the widest cached row the Go paths of AttnScores and
// AttnSum widen into a stack buffer (wider ones, which no supported model
// has, get a heap buffer); the C paths take up to FI_AD_MAXDIM (512) and
// leave wider rows to Go.
const attnMaxDim = 512

// rowBuf returns a buffer of dim floats: buf's when it is long enough.
func rowBuf(buf *[attnMaxDim]float32, dim int) []float32 {
	if dim <= attnMaxDim {
		return buf[:dim]
	}
	return make([]float32, dim)
}

// kvRowF32 widens the cached row src (type t, or tq's codes) to dst. The
// types are called directly, not through quant.DequantizeFunc: a call
// through a function value makes dst escape, and the callers' stack
// buffer with it (an allocation per call on the decode path).
func kvRowF32(t quant.Type, tq *quant.Turbo, src []byte, dst []float32) {
	switch {
	case tq != nil:
		tq.DecodeRotated(dst, src)
	case t == quant.F32:
		copy(dst, bytesF32(src[:4*len(dst)]))
	case t == quant.F16:
		quant.DequantizeRowF16(src, dst)
	case t == quant.BF16:
		quant.DequantizeRowBF16(src, dst)
	case t == quant.Q8_0:
		quant.DequantizeRowQ8_0(src, dst)
	case t == quant.Q4_0:
		quant.DequantizeRowQ4_0(src, dst)
	default: // kvRowBytes refused it before
		panic(fmt.Sprintf("cpu: KV rows of type %v", t))
	}
}

// AttnScores sets s[g*ls+j] = Σ_d q[g*dim+d]·x_j[d] for g < G and j < n:
// the scores of a group of G query heads against n cached K rows. Row x_j
// is at src[j*stride:], of type t (F32, F16, BF16, Q8_0, Q4_0), widened to
// float32 as DequantRows does; or, tq non-nil, TurboQuant codes decoded
// into the rotated domain as TurboDecode does (dim = tq.Padded(), q then
// rotated queries). The Go path sums each dot in order of d; the SIMD
// paths widen a tile of rows in L1 and sum in eight lanes.
func (k *Kernels) AttnScores(t quant.Type, tq *quant.Turbo, src []byte, stride, n, dim int, q []float32, G int, s []float32, ls int) {
	const op = "AttnScores"
	rb := kvRowBytes(op, t, tq, dim)
	checkAttnRows(op, src, stride, rb, n, dim, s, ls, G, q)
	if n == 0 || G == 0 || dim == 0 {
		for g := range G {
			clear(s[g*ls : g*ls+n])
		}
		return
	}
	if k.isa != ISAScalarGo && attnScoresC(k.isa, t, tq, src, stride, n, dim, q, G, s, ls) {
		return
	}
	var buf [attnMaxDim]float32
	x := rowBuf(&buf, dim)
	for j := range n {
		kvRowF32(t, tq, src[j*stride:][:rb], x)
		scoreRow(q, x, G, s[j:], ls)
	}
}

// AttnScoresTiles is AttnScores for rows stored in transposed tiles
// (quant.TileRows' layout, in units of u bytes): row j < n, whose scores go
// to column j, is row r0+j of the tiles at src, tile i at
// src[i·TileRows·rb:] for rows of rb bytes. The Go path untransposes each
// row and sums as AttnScores does; the SIMD paths read the tiles in
// place, lanes holding rows. Rows of q4_0 and 4-bit TurboQuant are
// scored in integers on every path, against queries rounded to int16
// (kern_qint.go; AttnScoresTilesQ), unless QInt.Round refuses them.
func (k *Kernels) AttnScoresTiles(t quant.Type, tq *quant.Turbo, src []byte, u, r0, n, dim int, q []float32, G int, s []float32, ls int) {
	k.attnScoresTiles(t, tq, src, u, r0, n, dim, q, G, s, ls, true)
}

// attnScoresTiles is AttnScoresTiles; integer false keeps the float32
// arithmetic for every kind (decode, once QInt.Round has refused the
// heads: rounding them again would only allocate).
func (k *Kernels) attnScoresTiles(t quant.Type, tq *quant.Turbo, src []byte, u, r0, n, dim int, q []float32, G int, s []float32, ls int, integer bool) {
	const op = "AttnScoresTiles"
	rb := kvRowBytes(op, t, tq, dim)
	if r0 < 0 || r0 >= quant.TileRows || u <= 0 || rb%u != 0 || n > 0 && len(src) < (r0+n+quant.TileRows-1)/quant.TileRows*quant.TileRows*rb {
		panic(fmt.Sprintf("cpu: %s: rows %d..%d of tiles of %d-byte rows (units of %d) in %d bytes", op, r0, r0+n, rb, u, len(src)))
	}
	if n < 0 || G < 0 || ls < n || G > 0 && len(s) < (G-1)*ls+n || len(q) < G*dim {
		panic(fmt.Sprintf("cpu: %s: %d rows, %d heads of %d: scores %d (stride %d), queries %d", op, n, G, dim, len(s), ls, len(q)))
	}
	if n == 0 || G == 0 {
		return
	}
	if dim == 0 {
		for g := range G {
			clear(s[g*ls : g*ls+n])
		}
		return
	}
	if integer && qintKind(t, tq) {
		var x QInt
		if x.Round(t, tq, q, G, dim) {
			k.AttnScoresTilesQ(t, tq, src, u, r0, n, &x, s, ls)
			return
		}
	}
	if k.isa != ISAScalarGo && attnScoresTilesC(k.isa, t, tq, src, rb, u, r0, n, dim, q, G, s, ls) {
		return
	}
	var buf [attnMaxDim]float32
	var rbuf [4 * attnMaxDim]byte
	x := rowBuf(&buf, dim)
	row := rbuf[:]
	if rb > len(rbuf) {
		row = make([]byte, rb)
	}
	row = row[:rb]
	for j := range n {
		r := r0 + j
		quant.TileRow(row, src[r/quant.TileRows*quant.TileRows*rb:], r%quant.TileRows, u)
		kvRowF32(t, tq, row, x)
		scoreRow(q, x, G, s[j:], ls)
	}
}

// AttnScoresTilesQ is AttnScoresTiles for rows of the integer kinds
// (q4_0, 4-bit TurboQuant: kern_qint.go) against queries x rounded once
// by x.Round for the same type; every path gives the same scores, bit for
// bit.
func (k *Kernels) AttnScoresTilesQ(t quant.Type, tq *quant.Turbo, src []byte, u, r0, n int, x *QInt, s []float32, ls int) {
	const op = "AttnScoresTilesQ"
	dim, G := x.dim, x.G
	rb := kvRowBytes(op, t, tq, dim)
	if !qintKind(t, tq) || x.turbo != (tq != nil) {
		panic(fmt.Sprintf("cpu: %s: rows of %s (TurboQuant %v) are not scored in integers, or not against these queries", op, t, tq != nil))
	}
	if r0 < 0 || r0 >= quant.TileRows || u <= 0 || rb%u != 0 || n > 0 && len(src) < (r0+n+quant.TileRows-1)/quant.TileRows*quant.TileRows*rb {
		panic(fmt.Sprintf("cpu: %s: rows %d..%d of tiles of %d-byte rows (units of %d) in %d bytes", op, r0, r0+n, rb, u, len(src)))
	}
	if n < 0 || ls < n || G > 0 && len(s) < (G-1)*ls+n {
		panic(fmt.Sprintf("cpu: %s: %d rows, %d heads: scores %d (stride %d)", op, n, G, len(s), ls))
	}
	if n == 0 || G == 0 {
		return
	}
	if k.isa != ISAScalarGo && attnScoresTilesQC(k.isa, t, tq, src, rb, r0, n, x, s, ls) {
		return
	}
	qintScoresTiles(src, rb, u, r0, n, x, s, ls)
}

// Untile copies rows r0..r0+n-1 of the transposed tiles at src (rows of
// rb bytes in units of u, as AttnScoresTiles reads them) to dst, rb bytes
// apart.
func (k *Kernels) Untile(src []byte, rb, u, r0, n int, dst []byte) {
	if n <= 0 {
		return
	}
	if r0 < 0 || u <= 0 || rb%u != 0 || len(src) < (r0+n+quant.TileRows-1)/quant.TileRows*quant.TileRows*rb || len(dst) < n*rb {
		panic(fmt.Sprintf("cpu: Untile: rows %d..%d of %d bytes (units of %d) from %d bytes to %d", r0, r0+n, rb, u, len(src), len(dst)))
	}
	if k.isa != ISAScalarGo && untileC(src, rb, u, r0, n, dst) {
		return
	}
	for j := range n {
		r := r0 + j
		quant.TileRow(dst[j*rb:(j+1)*rb], src[r/quant.TileRows*quant.TileRows*rb:], r%quant.TileRows, u)
	}
}

// scoreRow sets s[g*ls] (g < G) to the dot product of the row x with query
// head g of q (len(x) values each), summed in order.
func scoreRow(q, x []float32, G int, s []float32, ls int) {
	for g := range G {
		qg := q[g*len(x) : (g+1)*len(x)]
		var sum float32
		for d, v := range x {
			sum += qg[d] * v
		}
		s[g*ls] = sum
	}
}

// AttnSum adds to acc[g*dim+d] (g < G, d < dim) the sums over j < n, in
// order of j, of w[g*lw+j]·x_j[d]: attention's weighted sum of n cached V
// rows, the rows as in AttnScores (TurboQuant: the sum stays in the
// rotated domain). The Go path multiplies and adds separately; the SIMD
// paths use fused multiply-adds.
func (k *Kernels) AttnSum(t quant.Type, tq *quant.Turbo, src []byte, stride, n, dim int, w []float32, lw, G int, acc []float32) {
	const op = "AttnSum"
	rb := kvRowBytes(op, t, tq, dim)
	checkAttnRows(op, src, stride, rb, n, dim, w, lw, G, acc)
	if n == 0 || G == 0 || dim == 0 {
		return
	}
	if k.isa != ISAScalarGo && attnSumC(k.isa, t, tq, src, stride, n, dim, w, lw, G, acc) {
		return
	}
	var buf [attnMaxDim]float32
	x := rowBuf(&buf, dim)
	for j := range n {
		kvRowF32(t, tq, src[j*stride:][:rb], x)
		for g := range G {
			axpy(acc[g*dim:(g+1)*dim], w[g*lw+j], x)
		}
	}
}
