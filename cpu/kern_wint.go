package cpu

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/quant"
)

// Decode V sums of q4_0, q8_0 and 3- and 4-bit TurboQuant rows sum integer
// products, as the scores of 4-bit K rows do (kern_qint.go). Widening those
// rows to float32 cost AVX2 a vpermps per 8 values (TurboQuant, about one
// FMA slot) or a mask, a subtract, two conversions and a buffer's store
// and load (q4_0); pmaddwd multiplies 16 int16 pairs where an FMA
// multiplies 8 floats, at the same two per cycle on Zen 3
// (docs/decisions.md, "Integer decode V sums"). q8_0 rows are summed
// this way too: with one call per chunk and the sums in named registers,
// the integer sums beat q8_0's float32 widening in registers
// (docs/decisions.md, "q8_0: V sums in integers, K scores in float32").
//
// The arithmetic (this Go code is its reference; the C kernels compute
// the same integers):
//
//   - each head's softmax weights are multiplied by each row's scale
//     (q4_0, q8_0: each block's, so a group of weights per block column;
//     TurboQuant: the row's), p_r = w_r·s_r in float32, and rounded to
//     int16 steps of m/32767, m = max|p_r| over the rows of a chunk of
//     WIntChunk positions: wq_r = round-to-even(p_r·(32767/m)), in
//     float32. The error is at most m·2^-16 per weight, relative to the
//     chunk's largest product. A group whose m is below 2^-64 (a chunk of
//     positions the softmax all but ignores: 18% of the row-heads of a
//     decode at depth 2048 of the llama-1b preset) takes its products and
//     m times 2^96 first (tinyScale; exact, so the integers are those an
//     unbounded float32 would give) and its step 2^-96 times that. A group
//     whose m is not finite or above 2^64 makes the whole row use
//     AttnSum's float32 arithmetic instead (m = 0: the group adds exactly
//     0);
//   - the values are integers: q4_0's nibble − 8, q8_0's int8,
//     TurboQuant's codebook as int8 multiples of its grid step cs
//     (quant.NewTurbo puts the 3- and 4-bit levels on it);
//   - a chunk's S_d = Σ_r wq_r·v_{r,d} in int64, exactly, whatever the
//     order, the runs of rows, or the path; the chunks' S_d·((m/32767)·cs)
//     (cs = 1 for q4_0 and q8_0; q4_0's −8 is −8·Σ_r wq_r in S_d) are summed
//     in float64 in the chunks' order, and the sum rounded once to float32.
//     The chunks are positions, not runs, so a paged cache's blocks give
//     the same bits as a contiguous cache.
//
// llama.cpp's flash attention sums f16 V rows into an f16 accumulator; these
// sums are exact, and the weights keep 15 bits of their chunk's largest
// product.

// wintKind reports whether V rows of type t (tq non-nil: TurboQuant codes)
// are summed in integers.
func wintKind(t quant.Type, tq *quant.Turbo) bool { return wintBits(t, turboBits(tq)) }

// wintBits is wintKind for rows of type t, or of TurboQuant codes of bits
// per coordinate (bits > 0).
func wintBits(t quant.Type, bits int) bool {
	if bits > 0 {
		return bits == 3 || bits == 4
	}
	return t == quant.Q4_0 || t == quant.Q8_0
}

// WIntChunk is the cached positions whose weights are rounded to one step:
// chunks of positions [k·WIntChunk, (k+1)·WIntChunk), so that the chunk's
// two passes (scales, then sums) find its V rows in L1/L2 (256 rows of
// q4_0 and 64 values: 9 KiB), whatever the context's length, and that a
// chunk's small weights get steps of their own: on stories260K, 256 gave
// 5-7 times less KLD against float32 arithmetic than 1024, 64 no less
// than 256 (docs/decisions.md, "Integer decode V sums").
const WIntChunk = 256

// WInt is the integer V sum of a group of G query heads over the cached V
// rows of one decode row and KV head, chunk by chunk: Begin starts the
// row, Chunk a chunk of n rows (positions 0..n-1 of the chunk), whose
// rows' scales and largest products AttnSumScales gathers run by run,
// whose weights RoundWeights rounds, whose products AttnSumQ adds run by
// run and Fold adds to the row's float64 sums; Finish converts those.
type WInt struct {
	G, n, dim, nb int
	t             quant.Type
	tq            *quant.Turbo
	sc            []float32 // nb·n: group b's scale of row r at b*n + r
	wq            []int16   // G·nb·n: head g's rounded weights of group b at (g*nb + b)*n
	m             []float32 // G·nb: each group's largest |w·s|
	wsum          []int64   // G·nb: Σ wq of each group
	S             []int64   // G·dim: the chunk's sums
	F             []float64 // G·dim: the row's sums of the chunks' scaled sums
	c8            [16]int8
	cs            float32
}

// Begin starts x's sums for G heads of dim values over rows of type t (tq:
// TurboQuant codes, dim its Padded; wintKind must hold), reusing x's
// buffers.
func (x *WInt) Begin(t quant.Type, tq *quant.Turbo, G, dim int) {
	if !wintKind(t, tq) || G < 0 || dim <= 0 || tq == nil && dim%32 != 0 || tq != nil && dim != tq.Padded() {
		panic(fmt.Sprintf("cpu: WInt.Begin: rows of %d of %s (TurboQuant %v), %d heads are not summed in integers", dim, t, tq != nil, G))
	}
	x.G, x.n, x.dim, x.t, x.tq = G, 0, dim, t, tq
	x.nb, x.cs = 1, 1
	if tq == nil {
		x.nb = dim / 32
	} else {
		x.c8, x.cs = qintLevels(tq.Levels())
	}
	x.Reserve(G, dim)
	x.m = x.m[:G*x.nb]
	x.wsum = x.wsum[:G*x.nb]
	x.S = x.S[:G*dim]
	x.F = x.F[:G*dim]
	clear(x.F)
}

// Chunk starts a chunk of n ≤ WIntChunk rows.
func (x *WInt) Chunk(n int) {
	if n < 0 || n > WIntChunk {
		panic(fmt.Sprintf("cpu: WInt.Chunk: %d rows (at most %d)", n, WIntChunk))
	}
	x.n = n
	x.sc = x.sc[:x.nb*n]
	x.wq = x.wq[:x.G*x.nb*n]
	clear(x.S)
	clear(x.m)
}

// Reserve sizes x's buffers for G heads of dim values, so that Begin and
// Chunk allocate nothing: (2·G + 4)·nb·WIntChunk bytes plus 16·G·dim, nb
// = max(1, dim/32): 10 KiB for 4 heads of q4_0 rows of 64.
func (x *WInt) Reserve(G, dim int) {
	nb := max(1, dim/32) // q4_0's groups, at least TurboQuant's one
	x.sc = grow(x.sc, nb*WIntChunk)
	x.wq = grow(x.wq, G*nb*WIntChunk)
	x.m = grow(x.m, G*nb)
	x.wsum = grow(x.wsum, G*nb)
	x.S = grow(x.S, G*dim)
	x.F = grow(x.F, G*dim)
}

// rowBytes returns the bytes of one of x's rows.
func (x *WInt) rowBytes() int {
	if x.tq != nil {
		return x.tq.RowBytes()
	}
	return x.dim / 32 * x.blockBytes()
}

// blockBytes returns the bytes of a block of 32 values (q4_0, q8_0): its
// f16 scale first.
func (x *WInt) blockBytes() int {
	n, _ := quant.RowBytes(x.t, 32) // Begin checked the type
	return n
}

// checkRun panics unless rows [j0, j0+n) of x fit src at stride.
func (x *WInt) checkRun(op string, src []byte, stride, j0, n int) int {
	rb := x.rowBytes()
	if j0 < 0 || n < 0 || j0+n > x.n || stride < rb || n > 0 && len(src) < (n-1)*stride+rb {
		panic(fmt.Sprintf("cpu: %s: rows %d..%d of %d (%d bytes, stride %d) in %d bytes", op, j0, j0+n, x.n, rb, stride, len(src)))
	}
	return rb
}

// AttnSumScales gathers the scales of rows [j0, j0+n) of x, stored at src
// (stride bytes apart), and takes their products with the heads' weights
// (head g's row r at w[g*lw + r]) into each group's largest |w·s|.
func (k *Kernels) AttnSumScales(x *WInt, src []byte, stride, j0, n int, w []float32, lw int) {
	x.checkRun("AttnSumScales", src, stride, j0, n)
	if x.G > 0 && (lw < x.n || len(w) < (x.G-1)*lw+x.n) {
		panic(fmt.Sprintf("cpu: AttnSumScales: %d heads of %d weights (stride %d) in %d", x.G, x.n, lw, len(w)))
	}
	if n == 0 {
		return
	}
	if k.isa != ISAScalarGo && kvScalesC(x, src, stride, j0, n, w, lw) {
		return
	}
	bs := 0
	if x.tq == nil {
		bs = x.blockBytes()
	}
	for r := range n {
		row := src[r*stride:]
		for b := range x.nb {
			s := quant.FP16ToFP32(uint16(row[b*bs]) | uint16(row[b*bs+1])<<8)
			x.sc[b*x.n+j0+r] = s
			for g := range x.G {
				i := g*x.nb + b
				if p := float32(math.Abs(float64(w[g*lw+j0+r] * s))); p != p || p > x.m[i] {
					x.m[i] = p // a NaN stays
				}
			}
		}
	}
}

// tinyScale is the power of two by which RoundWeights multiplies a
// group's products, and Fold divides its step, when their largest |value|
// m is below tinyMin: m·tinyScale then lies in [2^-53, 2^32) for every
// positive float32 m, so 32767/m is finite and the step a normal float32.
const (
	tinyMin   = 0x1p-64
	tinyScale = 0x1p96
)

// RoundWeights rounds the heads' weights of x's chunk (head g's row r at
// w[g*lw + r], as AttnSumScales took them) times the rows' scales; false
// when the row takes AttnSum's float32 arithmetic instead (a group's
// products hold a NaN, or their largest |value| is infinite or above
// 2^64). A group whose products are all 0 (weights that underflowed, say)
// adds exactly 0; one whose largest is below 2^-64 is rounded times
// tinyScale.
func (k *Kernels) RoundWeights(x *WInt, w []float32, lw int) bool {
	if x.n > 0 && x.G > 0 && (lw < x.n || len(w) < (x.G-1)*lw+x.n) {
		panic(fmt.Sprintf("cpu: RoundWeights: %d heads of %d weights (stride %d) in %d", x.G, x.n, lw, len(w)))
	}
	if x.n == 0 || x.G == 0 {
		return true
	}
	if k.isa != ISAScalarGo {
		if ok, done := wintRoundC(x, w, lw); done {
			return ok
		}
	}
	n := x.n
	for g := range x.G {
		wg := w[g*lw : g*lw+n]
		for b := range x.nb {
			sb := x.sc[b*n : (b+1)*n]
			i := g*x.nb + b
			m := x.m[i]
			q := x.wq[i*n : (i+1)*n]
			if m == 0 { // every product is 0: so are the weights
				clear(q)
				x.wsum[i] = 0
				continue
			}
			if !(m > 0 && m <= 0x1p64) {
				return false
			}
			ps := float32(1)
			if m < tinyMin {
				ps = tinyScale
			}
			inv := float32(qintMax) / (m * ps)
			var sum int64
			for r, v := range wg {
				p := v * sb[r] * ps // (v·s)·2^96 exactly
				iq := int16(max(-qintMax, min(qintMax, math.RoundToEven(float64(p*inv)))))
				q[r] = iq
				sum += int64(iq)
			}
			x.wsum[i] = sum
		}
	}
	return true
}

// AttnSumChunk is a chunk of n rows that sit in one run, src (stride bytes
// apart), with the heads' weights at w (as AttnSumScales): Chunk(n),
// AttnSumScales, RoundWeights, AttnSumQ and Fold in one call (C: one cgo
// call and the fold in vectors, where decode made four and a Go loop);
// false when RoundWeights refuses the weights. The C path prefetches next
// (nil: nothing) while it sums: the rows the caller reads next, whose
// first touch, the scales' gather, otherwise waits on memory.
func (k *Kernels) AttnSumChunk(x *WInt, src []byte, stride, n int, w []float32, lw int, next []byte) bool {
	x.Chunk(n)
	if k.isa != ISAScalarGo {
		x.checkRun("AttnSumChunk", src, stride, 0, n)
		if x.G > 0 && (lw < n || len(w) < (x.G-1)*lw+n) {
			panic(fmt.Sprintf("cpu: AttnSumChunk: %d heads of %d weights (stride %d) in %d", x.G, n, lw, len(w)))
		}
		if ok, done := wintChunkC(x, src, stride, n, w, lw, next); done { // else nothing written
			return ok
		}
	}
	k.AttnSumScales(x, src, stride, 0, n, w, lw)
	if !k.RoundWeights(x, w, lw) {
		return false
	}
	k.AttnSumQ(x, src, stride, 0, n)
	x.Fold()
	return true
}

// AttnSumQ adds the integer products of rows [j0, j0+n) of x, stored at
// src (stride bytes apart), by their rounded weights to x's sums.
func (k *Kernels) AttnSumQ(x *WInt, src []byte, stride, j0, n int) {
	rb := x.checkRun("AttnSumQ", src, stride, j0, n)
	if n == 0 || x.G == 0 {
		return
	}
	if k.isa != ISAScalarGo && attnSumQC(x, src, stride, j0, n) {
		return
	}
	dim, nb := x.dim, x.nb
	var vbuf [attnMaxDim]int8
	v := vbuf[:]
	if dim > len(vbuf) {
		v = make([]int8, dim)
	}
	v = v[:dim]
	for r := range n {
		x.rowInts(src[r*stride:][:rb], v)
		for g := range x.G {
			s := x.S[g*dim : (g+1)*dim]
			for d, vd := range v {
				s[d] += int64(x.wq[(g*nb+d*nb/dim)*x.n+j0+r]) * int64(vd)
			}
		}
	}
}

// rowInts sets v to a row's integer values: q4_0's bare nibbles (0..15),
// q8_0's int8s, TurboQuant's c8[code].
func (x *WInt) rowInts(row []byte, v []int8) {
	if x.tq == nil {
		bb := x.blockBytes()
		for b := range len(v) / 32 {
			q := row[b*bb+2 : (b+1)*bb] // the block's values, after its scale
			for i, c := range q {
				if x.t == quant.Q8_0 {
					v[b*32+i] = int8(c)
				} else {
					v[b*32+i], v[b*32+16+i] = int8(c&15), int8(c>>4)
				}
			}
		}
		return
	}
	bits := x.tq.Bits()
	c := row[2:]
	for d := range v {
		o := d * bits
		code := (int(c[o/8]) | int(c[(o+bits-1)/8])<<8) >> (o % 8) & (1<<bits - 1)
		v[d] = x.c8[code]
	}
}

// Fold adds the chunk's integer sums, scaled (q4_0: less 8 times the
// group's weights), to the row's float64 sums.
func (x *WInt) Fold() {
	if x.n == 0 {
		return
	}
	w := x.dim / x.nb // values per group
	for g := range x.G {
		for b := range x.nb {
			i := g*x.nb + b
			var off int64
			if x.tq == nil && x.t == quant.Q4_0 {
				off = 8 * x.wsum[i]
			}
			f := float64(x.m[i]/qintMax) * float64(x.cs)
			if m := x.m[i]; m > 0 && m < tinyMin {
				f = float64(m*tinyScale/qintMax) / tinyScale * float64(x.cs)
			}
			S, F := x.S[g*x.dim+b*w:][:w], x.F[g*x.dim+b*w:][:w]
			for d, s := range S {
				F[d] += float64(s-off) * f
			}
		}
	}
}

// Finish sets acc[g*dim + d] to head g's V sum, the row's sums rounded to
// float32.
func (x *WInt) Finish(acc []float32) {
	if len(acc) < x.G*x.dim {
		panic(fmt.Sprintf("cpu: WInt.Finish: %d heads of %d in %d floats", x.G, x.dim, len(acc)))
	}
	for i, f := range x.F[:x.G*x.dim] {
		acc[i] = float32(f)
	}
}
