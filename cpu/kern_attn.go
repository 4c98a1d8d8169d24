package cpu

// kern_attn.go: the kernels on the KV cache's rows: widening cached rows
// to float32 (DequantRows, TurboDecode), untransposing K tiles (Untile),
// and attention's scores against K rows (AttnScores, AttnScoresTiles) and
// weighted sums of V rows (AddWeighted, AttnSum), each checking its shapes
// and then running the C path or its Go loop. It plans nothing (the
// Backend's attention: backend_attn.go) and holds neither the integer
// scores and sums (kern_qint.go, kern_wint.go) nor prefill's flash tile
// (kern_fa.go).

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

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
