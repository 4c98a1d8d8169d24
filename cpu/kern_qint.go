package cpu

import (
	"math"

	"github.com/flowinfer/flowinfer/quant"
)

// Decode scores against tiled K rows of q4_0 and 4-bit TurboQuant sum
// integer products. Widening those rows to float32 cost AVX2 as many
// vector operations as the FMAs that use them (docs/decisions.md, "Decode
// attention on AVX2: where float32 arithmetic stops"): pshufb and a
// zero-extension turn 16 codes into int16 at once, and pmaddwd multiplies
// 16 int16 pairs per instruction where an FMA multiplies 8 floats. (q8_0
// stays in float32: its widening is cheap, and pmaddwd was no faster than
// the FMAs on Zen 3: docs/decisions.md, "Integer decode scores".)
//
// The arithmetic, the same on every path (this Go code is its reference,
// the C kernels match it bit for bit):
//
//   - each query head is rounded to int16 steps of qs = m/32767, m its
//     largest |value|: qi = round-to-even(q·(32767/m)), in float32. The
//     error is at most qs/2 = m·2^-16 per value; llama.cpp rounds the
//     query meeting quantized K to q8_0, steps of m/127 per block of 32.
//     A head whose m is 0, not finite, or outside [2^-64, 2^64] makes the
//     call use AttnScoresTiles' float32 arithmetic instead;
//   - the K values are integers: q4_0's nibble − 8, and the 4-bit
//     TurboQuant levels, which quant.NewTurbo puts on a grid of steps
//     cs = max|level|/127, as int8 multiples of cs (qintLevels), so the
//     scores meet the levels every other reader of the codes meets;
//   - dot products of int16 by int8 values in int32, then a float32
//     conversion and scaling: TurboQuant rows (float32(acc)·(qs·cs))·s_row;
//     q4_0 o += float32(acc_b)·(s_b·qs) per block of 32, o starting at 0,
//     a multiply and an add (no FMA, so that Go reproduces it).
//
// int32 bounds: a q4_0 block's sum is at most 32767·8·32 < 2^24 (so its
// float32 conversion is exact; the C kernels' sums of the bare nibbles
// stay under 32767·15·32); a TurboQuant row's 32767·127·512 < 2^31 at
// attnMaxDim, the widest Round takes.
const qintMax = 32767

// qintKind reports whether tiled rows of type t (tq non-nil: TurboQuant
// codes) are scored in integers.
func qintKind(t quant.Type, tq *quant.Turbo) bool { return qintBits(t, turboBits(tq)) }

// qintBits is qintKind for rows of type t, or of TurboQuant codes of bits
// per coordinate (bits > 0).
func qintBits(t quant.Type, bits int) bool {
	if bits > 0 {
		return bits == 4
	}
	return t == quant.Q4_0
}

// turboBits returns tq's bits per coordinate, 0 for nil.
func turboBits(tq *quant.Turbo) int {
	if tq == nil {
		return 0
	}
	return tq.Bits()
}

// QInt is a group of query heads rounded for the integer scores, once per
// decode row and KV head (Round), then met by every run of cached rows
// (AttnScoresTilesQ). The C kernels read the pairs, corrections and
// scales; Go's path the rounded values.
type QInt struct {
	G, dim int
	turbo  bool
	qi     []int16   // G·dim rounded values
	qs     []float32 // each head's step
	qp     []int32   // G·dim/2 pairs: the two values byte i of a row meets, the first in the low half
	corr   []int32   // q4_0: G·dim/32, 8·Σ of each block's rounded values
	kq     []float32 // each head's scale: qs·cs (TurboQuant) or qs (q4_0)
	c8     [16]int8  // TurboQuant: the codebook as multiples of cs
	cs     float32
}

// Round rounds the G heads of dim values at q for rows of type t (tq:
// TurboQuant codes; qintKind must hold), reusing x's buffers; false when
// the rows take the float32 arithmetic: a head qintQuery refuses, or dim
// above attnMaxDim (the int32 sums' bound).
func (x *QInt) Round(t quant.Type, tq *quant.Turbo, q []float32, G, dim int) bool {
	if dim > attnMaxDim || len(q) < G*dim {
		return false
	}
	x.G, x.dim, x.turbo = G, dim, tq != nil
	x.qi = grow(x.qi, G*dim)
	x.qs = grow(x.qs, G)
	x.qp = grow(x.qp, G*dim/2)
	x.corr = grow(x.corr, G*dim/32)
	x.kq = grow(x.kq, G)
	x.cs = 1
	if x.turbo {
		x.c8, x.cs = qintLevels(tq.Levels())
	}
	for g := range G {
		qi := x.qi[g*dim : (g+1)*dim]
		qs, ok := qintQuery(q[g*dim:(g+1)*dim], qi)
		if !ok {
			return false
		}
		x.qs[g], x.kq[g] = qs, qs
		if x.turbo {
			x.kq[g] = qs * x.cs
		}
		qp := x.qp[g*dim/2 : (g+1)*dim/2]
		for i := range qp {
			d0, d1 := 2*i, 2*i+1
			if !x.turbo { // q4_0: byte i of a block holds values i and i+16
				d0 = i/16*32 + i%16
				d1 = d0 + 16
			}
			qp[i] = int32(uint32(uint16(qi[d0])) | uint32(uint16(qi[d1]))<<16)
		}
		if !x.turbo {
			for b := range dim / 32 {
				var sum int32
				for _, v := range qi[b*32 : (b+1)*32] {
					sum += int32(v)
				}
				x.corr[g*dim/32+b] = 8 * sum
			}
		}
	}
	return true
}

// qintQuery rounds the query head q to qi (len(q) values) and returns its
// step qs; ok is false when q takes the float32 arithmetic (m is 0, not
// finite, or outside [2^-64, 2^64]).
func qintQuery(q []float32, qi []int16) (qs float32, ok bool) {
	var m float32
	for _, v := range q {
		if v != v {
			return 0, false
		}
		m = max(m, float32(math.Abs(float64(v))))
	}
	if !(m >= 0x1p-64 && m <= 0x1p64) {
		return 0, false
	}
	inv := float32(qintMax) / m
	for d, v := range q {
		r := math.RoundToEven(float64(float32(v * inv)))
		qi[d] = int16(max(-qintMax, min(qintMax, r)))
	}
	return m / qintMax, true
}

// qintLevels returns the levels of a 3- or 4-bit codebook (8 or 16), which
// lie on a grid of cs = max|levels|/127 (quant.NewTurbo), as levels[c] =
// cs·c8[c].
func qintLevels(levels []float32) (c8 [16]int8, cs float32) {
	var m float32
	for _, l := range levels {
		m = max(m, float32(math.Abs(float64(l))))
	}
	cs = m / 127
	if cs == 0 {
		return c8, 0
	}
	for c, l := range levels {
		c8[c] = int8(max(-127, min(127, math.RoundToEven(float64(l/cs)))))
	}
	return c8, cs
}

// qintScoresTiles is AttnScoresTilesQ's Go path: row by row, untransposed.
func qintScoresTiles(src []byte, rb, u, r0, n int, x *QInt, s []float32, ls int) {
	var rbuf [4 * attnMaxDim]byte
	row := rbuf[:]
	if rb > len(rbuf) {
		row = make([]byte, rb)
	}
	row = row[:rb]
	dim := x.dim
	for j := range n {
		r := r0 + j
		quant.TileRow(row, src[r/quant.TileRows*quant.TileRows*rb:], r%quant.TileRows, u)
		for g := range x.G {
			s[g*ls+j] = qintScoreRow(x.turbo, row, x.qi[g*dim:(g+1)*dim], x.qs[g], x.kq[g], &x.c8)
		}
	}
}

// qintScoreRow is one row's score (row's bytes: q4_0 blocks, or 4-bit
// TurboQuant codes) against the rounded query qi of step qs and scale kq.
func qintScoreRow(turbo bool, row []byte, qi []int16, qs, kq float32, c8 *[16]int8) float32 {
	if turbo {
		var acc int32
		for i, b := range row[2 : 2+len(qi)/2] {
			acc += int32(qi[2*i])*int32(c8[b&15]) + int32(qi[2*i+1])*int32(c8[b>>4])
		}
		sc := quant.FP16ToFP32(uint16(row[0]) | uint16(row[1])<<8)
		return float32(float32(acc)*kq) * sc
	}
	var o float32
	for c := 0; c < len(qi); c += 32 {
		blk := row[c/32*18:][:18]
		var acc int32
		for i, b := range blk[2:] {
			acc += int32(qi[c+i])*(int32(b&15)-8) + int32(qi[c+16+i])*(int32(b>>4)-8)
		}
		sc := quant.FP16ToFP32(uint16(blk[0]) | uint16(blk[1])<<8)
		o = o + float32(float32(acc)*float32(sc*qs))
	}
	return o
}
