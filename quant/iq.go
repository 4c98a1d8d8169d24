// The lattice ("i-quant") types IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ1_S and IQ1_M: block layouts, grids, dequantization and dot products
// with Q8_K activations, each reproducing ggml's C bit for bit
// (ggml-quants.c's dequantize_row_* and ggml-cpu/quants.c's generic
// ggml_vec_dot_*_q8_K). The quantizers are in iq_quantize.go.
//
// All seven store groups of 8 (IQ2, IQ1) or 4 (IQ3) weights as an index
// into a grid of selected lattice points, with one fp16 scale per 256 and
// small sub-block scales:
//   - IQ2_XXS/IQ2_XS/IQ2_S: 8 magnitudes from {8, 25, 43} per grid point
//     (256/512/1024 points), a sign per weight (7 stored bits per 8 with
//     even parity in IQ2_XXS/IQ2_XS, 8 plain bits in IQ2_S);
//     x = d * (0.5 + ls) / 4 * grid * sign, ls a 4-bit scale per 32
//     (IQ2_XXS) or per 16.
//   - IQ3_XXS/IQ3_S: 4 magnitudes per grid point (256 points of
//     {4, 12, ..., 52, 62}, 512 points of {1, 3, ..., 15}); IQ3_XXS:
//     x = d * (0.5 + ls) / 2 * grid * sign, 7-bit parity signs;
//     IQ3_S: x = d * (1 + 2 ls) * grid * sign, plain sign bits.
//   - IQ1_S/IQ1_M: 8 values from {-1, 0, +1} per grid point (2048
//     points), shifted by ±1/8 per group: x = d * (2 ls + 1) * (grid ± 1/8).
//
// As in the other files, every product that feeds an addition is rounded
// to float32 explicitly so no FMA can change the result.

package quant

import (
	"math/bits"
	"unsafe"
)

// blockIQ2_XXS: 256 weights, 2.0625 bits per weight. Per 32 weights two
// little-endian uint32s: the first holds four 8-bit grid indices, the
// second four 7-bit sign indices (bits 7l..7l+6) and a 4-bit scale (top
// nibble).
type blockIQ2_XXS struct {
	d  uint16     // fp16 super-block scale
	qs [32]uint16 // grid indices, signs and scales
}

// blockIQ2_XS: 256 weights, 2.3125 bits per weight. qs[k] is a 9-bit grid
// index (low bits) and a 7-bit sign index (high bits) for 8 weights;
// scales holds two 4-bit scales per 32 (low nibble: first 16).
type blockIQ2_XS struct {
	d      uint16     // fp16 super-block scale
	qs     [32]uint16 // grid index | sign index<<9
	scales [8]byte    // 4-bit sub-block scales
}

// blockIQ2_S: 256 weights, 2.5625 bits per weight. qs[0:32] are the low 8
// bits of the 10-bit grid indices, qs[32:64] one plain sign byte per 8
// weights; qh[ib] holds the high 2 bits of sub-block ib's 4 indices.
type blockIQ2_S struct {
	d      uint16   // fp16 super-block scale
	qs     [64]byte // grid index low bits, then signs
	qh     [8]byte  // grid index high bits
	scales [8]byte  // 4-bit sub-block scales (two per 32)
}

// blockIQ3_XXS: 256 weights, 3.0625 bits per weight. qs[0:64] are 8-bit
// grid indices (one per 4 weights); qs[64:96] one uint32 per 32 weights:
// four 7-bit sign indices and a 4-bit scale (top nibble).
type blockIQ3_XXS struct {
	d  uint16   // fp16 super-block scale
	qs [96]byte // grid indices, then signs and scales
}

// blockIQ3_S: 256 weights, 3.4375 bits per weight. qs are the low 8 bits
// of the 9-bit grid indices (one per 4 weights), qh their high bits (one
// byte per 32), signs one plain bit per weight, scales one 4-bit scale per
// 32 (two per byte).
type blockIQ3_S struct {
	d      uint16   // fp16 super-block scale
	qs     [64]byte // grid index low bits
	qh     [8]byte  // grid index high bits
	signs  [32]byte // sign bits
	scales [4]byte  // 4-bit sub-block scales
}

// blockIQ1_S: 256 weights, 1.5625 bits per weight. qs are the low 8 bits
// of the 11-bit grid indices (one per 8 weights); qh[ib] holds, per 32
// weights, the 4 high 3-bit parts (bits 3l..3l+2), a 3-bit scale (bits
// 12-14) and the sign of the ±1/8 shift (bit 15).
type blockIQ1_S struct {
	d  uint16    // fp16 super-block scale
	qs [32]byte  // grid index low bits
	qh [8]uint16 // grid index high bits, scale, shift sign
}

// blockIQ1_M: 256 weights, 1.75 bits per weight. qs are the low 8 bits of
// the 11-bit grid indices; qh has one byte per 16 weights: the high 3 bits
// of two indices (bits 0-2, 4-6) and their shift signs (bits 3, 7); scales
// are four little-endian uint16s holding two 3-bit scales per 32 weights
// (bits 6k..6k+5 for sub-blocks 2j+k of uint16 j) and, in their top
// nibbles, the 16 bits of the fp16 super-block scale.
type blockIQ1_M struct {
	qs     [32]byte // grid index low bits
	qh     [16]byte // grid index high bits, shift signs
	scales [8]byte  // sub-block scales and the fp16 scale
}

const (
	offIQ2_XXSQs = int(unsafe.Offsetof(blockIQ2_XXS{}.qs))

	offIQ2_XSQs     = int(unsafe.Offsetof(blockIQ2_XS{}.qs))
	offIQ2_XSScales = int(unsafe.Offsetof(blockIQ2_XS{}.scales))

	offIQ2_SQs     = int(unsafe.Offsetof(blockIQ2_S{}.qs))
	offIQ2_SQh     = int(unsafe.Offsetof(blockIQ2_S{}.qh))
	offIQ2_SScales = int(unsafe.Offsetof(blockIQ2_S{}.scales))

	offIQ3_XXSQs = int(unsafe.Offsetof(blockIQ3_XXS{}.qs))

	offIQ3_SQs     = int(unsafe.Offsetof(blockIQ3_S{}.qs))
	offIQ3_SQh     = int(unsafe.Offsetof(blockIQ3_S{}.qh))
	offIQ3_SSigns  = int(unsafe.Offsetof(blockIQ3_S{}.signs))
	offIQ3_SScales = int(unsafe.Offsetof(blockIQ3_S{}.scales))

	offIQ1_SQs = int(unsafe.Offsetof(blockIQ1_S{}.qs))
	offIQ1_SQh = int(unsafe.Offsetof(blockIQ1_S{}.qh))

	offIQ1_MQh     = int(unsafe.Offsetof(blockIQ1_M{}.qh))
	offIQ1_MScales = int(unsafe.Offsetof(blockIQ1_M{}.scales))

	sizeIQ2_XXS = int(unsafe.Sizeof(blockIQ2_XXS{}))
	sizeIQ2_XS  = int(unsafe.Sizeof(blockIQ2_XS{}))
	sizeIQ2_S   = int(unsafe.Sizeof(blockIQ2_S{}))
	sizeIQ3_XXS = int(unsafe.Sizeof(blockIQ3_XXS{}))
	sizeIQ3_S   = int(unsafe.Sizeof(blockIQ3_S{}))
	sizeIQ1_S   = int(unsafe.Sizeof(blockIQ1_S{}))
	sizeIQ1_M   = int(unsafe.Sizeof(blockIQ1_M{}))
)

// iq1Delta is the ±shift of IQ1_S and IQ1_M grid values (ggml's
// IQ1S_DELTA and IQ1M_DELTA, both 0.125).
const iq1Delta = float32(0.125)

// Level tables: the value of each 2- or 3-bit grid coordinate in the
// dequantization grids. IQ2: 8, 25, 43; IQ1: -1, 0, +1; IQ3_XXS:
// 4·(2l+1) except 62 for l = 7; IQ3_S: 2l+1.
var (
	levelsIQ2    = [4]int8{8, 25, 43, 0}
	levelsIQ1    = [4]int8{-1, 0, 1, 0}
	levelsIQ3XXS = [8]int8{4, 12, 20, 28, 36, 44, 52, 62}
	levelsIQ3S   = [8]int8{1, 3, 5, 7, 9, 11, 13, 15}
)

// expandGrid8 maps compact 8-wide grid points (2 bits per element) through
// levels: ggml's iq2xxs_grid, iq2xs_grid, iq2s_grid, iq1s_grid.
func expandGrid8(kgrid []uint16, levels *[4]int8) [][8]int8 {
	g := make([][8]int8, len(kgrid))
	for k, p := range kgrid {
		for i := range 8 {
			g[k][i] = levels[(p>>(2*i))&3]
		}
	}
	return g
}

// expandGrid4 maps compact 4-wide grid points (3 bits per element) through
// levels: ggml's iq3xxs_grid, iq3s_grid.
func expandGrid4(kgrid []uint16, levels *[8]int8) [][4]int8 {
	g := make([][4]int8, len(kgrid))
	for k, p := range kgrid {
		for i := range 4 {
			g[k][i] = levels[(p>>(3*i))&7]
		}
	}
	return g
}

// The dequantization grids, expanded once from the compact tables; read
// only.
var (
	gridIQ2XXS = expandGrid8(kgridIQ2XXS[:], &levelsIQ2)
	gridIQ2XS  = expandGrid8(kgridIQ2XS[:], &levelsIQ2)
	gridIQ2S   = expandGrid8(kgridIQ2S[:], &levelsIQ2)
	gridIQ1S   = expandGrid8(kgridIQ1S[:], &levelsIQ1)
	gridIQ3XXS = expandGrid4(kgridIQ3XXS[:], &levelsIQ3XXS)
	gridIQ3S   = expandGrid4(kgridIQ3S[:], &levelsIQ3S)
)

// ksignsIQ2XS returns the 8 sign bits encoded by a 7-bit sign index: the
// 7 bits as given and bit 7 set when their count is odd, so every group of
// 8 has an even number of negative weights (ggml's ksigns_iq2xs table).
func ksignsIQ2XS(i uint32) uint8 {
	i &= 127
	return uint8(i) | uint8(bits.OnesCount32(i)&1)<<7
}

// SignsIQ2XS returns ggml's ksigns_iq2xs table, ksignsIQ2XS of 0..127,
// for kernels that look the sign bytes up themselves (package gpu's
// shader tables).
func SignsIQ2XS() []uint8 {
	t := make([]uint8, 128)
	for i := range t {
		t[i] = ksignsIQ2XS(uint32(i))
	}
	return t
}

// signMul[s][j] is -1 where bit j of the sign byte s is set, else +1
// (ggml tests kmask_iq2xs[j] = 1<<j against the sign byte).
var signMul = func() (t [256][8]int8) {
	for s := range 256 {
		for j := range 8 {
			t[s][j] = 1 - 2*int8(s>>j&1)
		}
	}
	return
}()

// signedRow writes n = len(g) values db*g[j], negated where bit j0+j of s
// is set (ggml: db * grid[j] * (signs & kmask ? -1.f : 1.f)).
func signedRow(y []float32, g []int8, s uint8, j0 int, db float32) {
	for j, v := range g {
		f := db * float32(v)
		if s>>(j0+j)&1 != 0 {
			f = -f
		}
		y[j] = f
	}
}

// signedDot8 is sum_j g[j]*q8[j]*(±1 by bit j of s) over 8 elements.
func signedDot8(g *[8]int8, q8 []byte, s uint8) int32 {
	m := &signMul[s]
	q8 = q8[:8]
	var sum int32
	for j := range 8 {
		sum += int32(g[j]) * int32(int8(q8[j])) * int32(m[j])
	}
	return sum
}

// signedDot4 is sum_j g[j]*q8[j]*(±1 by bit j0+j of s) over 4 elements.
func signedDot4(g *[4]int8, q8 []byte, s uint8, j0 int) int32 {
	m := signMul[s][j0 : j0+4]
	q8 = q8[:4]
	var sum int32
	for j := range 4 {
		sum += int32(g[j]) * int32(int8(q8[j])) * int32(m[j])
	}
	return sum
}

// DequantizeRowIQ2_XXS converts IQ2_XXS super-blocks (dequantize_row_iq2_xxs).
func DequantizeRowIQ2_XXS(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ2_XXS : (i+1)*sizeIQ2_XXS]
		d := fp16(b)
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			q := b[offIQ2_XXSQs+8*ib : offIQ2_XXSQs+8*ib+8]
			aux := le32(q[4:])
			db := float32(d*(0.5+float32(aux>>28))) * 0.25
			for l := range 4 {
				signedRow(y[32*ib+8*l:32*ib+8*l+8], gridIQ2XXS[q[l]][:], ksignsIQ2XS(aux>>(7*l)), 0, db)
			}
		}
	}
}

// DequantizeRowIQ2_XS converts IQ2_XS super-blocks (dequantize_row_iq2_xs).
func DequantizeRowIQ2_XS(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ2_XS : (i+1)*sizeIQ2_XS]
		d := fp16(b)
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			sc := b[offIQ2_XSScales+ib]
			db := [2]float32{
				float32(d*(0.5+float32(sc&0xf))) * 0.25,
				float32(d*(0.5+float32(sc>>4))) * 0.25,
			}
			for l := range 4 {
				q := uint32(le16(b[offIQ2_XSQs+2*(4*ib+l):]))
				signedRow(y[32*ib+8*l:32*ib+8*l+8], gridIQ2XS[q&511][:], ksignsIQ2XS(q>>9), 0, db[l/2])
			}
		}
	}
}

// iq2SIndex is the 10-bit grid index of group l (0..3) of sub-block ib of
// an IQ2_S block.
func iq2SIndex(b []byte, ib, l int) int {
	return int(b[offIQ2_SQs+4*ib+l]) | int(b[offIQ2_SQh+ib])<<(8-2*l)&0x300
}

// DequantizeRowIQ2_S converts IQ2_S super-blocks (dequantize_row_iq2_s).
func DequantizeRowIQ2_S(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ2_S : (i+1)*sizeIQ2_S]
		d := fp16(b)
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			sc := b[offIQ2_SScales+ib]
			db := [2]float32{
				float32(d*(0.5+float32(sc&0xf))) * 0.25,
				float32(d*(0.5+float32(sc>>4))) * 0.25,
			}
			for l := range 4 {
				s := b[offIQ2_SQs+QK_K/8+4*ib+l]
				signedRow(y[32*ib+8*l:32*ib+8*l+8], gridIQ2S[iq2SIndex(b, ib, l)][:], s, 0, db[l/2])
			}
		}
	}
}

// DequantizeRowIQ3_XXS converts IQ3_XXS super-blocks (dequantize_row_iq3_xxs).
func DequantizeRowIQ3_XXS(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ3_XXS : (i+1)*sizeIQ3_XXS]
		d := fp16(b)
		qs := b[offIQ3_XXSQs : offIQ3_XXSQs+96]
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			aux := le32(qs[QK_K/4+4*ib:])
			db := float32(d*(0.5+float32(aux>>28))) * 0.5
			for l := range 4 {
				s := ksignsIQ2XS(aux >> (7 * l))
				yl := y[32*ib+8*l : 32*ib+8*l+8]
				signedRow(yl[:4], gridIQ3XXS[qs[8*ib+2*l]][:], s, 0, db)
				signedRow(yl[4:], gridIQ3XXS[qs[8*ib+2*l+1]][:], s, 4, db)
			}
		}
	}
}

// iq3SIndex returns the two 9-bit grid indices of group l (0..3) of
// sub-block ib of an IQ3_S block.
func iq3SIndex(b []byte, ib, l int) (int, int) {
	qs := b[offIQ3_SQs+8*ib:]
	qh := int(b[offIQ3_SQh+ib])
	return int(qs[2*l]) | (qh<<(8-2*l))&256, int(qs[2*l+1]) | (qh<<(7-2*l))&256
}

// iq3SScale returns 1 + 2*ls for sub-block ib of an IQ3_S block.
func iq3SScale(b []byte, ib int) int32 {
	return 1 + 2*int32(b[offIQ3_SScales+ib/2]>>(4*(ib%2))&0xf)
}

// DequantizeRowIQ3_S converts IQ3_S super-blocks (dequantize_row_iq3_s).
func DequantizeRowIQ3_S(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ3_S : (i+1)*sizeIQ3_S]
		d := fp16(b)
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			db := d * float32(iq3SScale(b, ib))
			for l := range 4 {
				s := b[offIQ3_SSigns+4*ib+l]
				g1, g2 := iq3SIndex(b, ib, l)
				yl := y[32*ib+8*l : 32*ib+8*l+8]
				signedRow(yl[:4], gridIQ3S[g1][:], s, 0, db)
				signedRow(yl[4:], gridIQ3S[g2][:], s, 4, db)
			}
		}
	}
}

// iq1Row writes 8 values dl * (g[j] + delta).
func iq1Row(y []float32, g *[8]int8, dl, delta float32) {
	y = y[:8]
	for j := range 8 {
		y[j] = dl * (float32(g[j]) + delta)
	}
}

// DequantizeRowIQ1_S converts IQ1_S super-blocks (dequantize_row_iq1_s).
func DequantizeRowIQ1_S(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ1_S : (i+1)*sizeIQ1_S]
		d := fp16(b)
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			qh := le16(b[offIQ1_SQh+2*ib:])
			dl := d * float32(2*(qh>>12&7)+1)
			delta := iq1Delta
			if qh&0x8000 != 0 {
				delta = -iq1Delta
			}
			for l := range 4 {
				idx := int(b[offIQ1_SQs+4*ib+l]) | int(qh>>(3*l)&7)<<8
				iq1Row(y[32*ib+8*l:], &gridIQ1S[idx], dl, delta)
			}
		}
	}
}

// iq1MScale returns the fp16 super-block scale of an IQ1_M block, spread
// over the top nibbles of its four scale words.
func iq1MScale(b []byte) float32 {
	sc := b[offIQ1_MScales:]
	u := le16(sc[0:])>>12 | le16(sc[2:])>>8&0x00f0 | le16(sc[4:])>>4&0x0f00 | le16(sc[6:])&0xf000
	return FP16ToFP32(u)
}

// iq1MSubScales returns 2*ls+1 for the two halves of sub-block ib of an
// IQ1_M block.
func iq1MSubScales(b []byte, ib int) (int32, int32) {
	sc := le16(b[offIQ1_MScales+2*(ib/2):])
	sh := 6 * (ib % 2)
	return 2*int32(sc>>sh&7) + 1, 2*int32(sc>>(sh+3)&7) + 1
}

// iq1MIndex returns the 11-bit grid index and the shift sign (+1 or -1)
// of group l (0..3) of sub-block ib of an IQ1_M block.
func iq1MIndex(b []byte, ib, l int) (int, int32) {
	qh := int(b[offIQ1_MQh+2*ib+l/2])
	idx := int(b[4*ib+l]) | (qh<<(8-4*(l%2)))&0x700
	if qh&(0x08<<(4*(l%2))) != 0 {
		return idx, -1
	}
	return idx, 1
}

// DequantizeRowIQ1_M converts IQ1_M super-blocks (dequantize_row_iq1_m).
func DequantizeRowIQ1_M(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ1_M : (i+1)*sizeIQ1_M]
		d := iq1MScale(b)
		y := dst[i*QK_K : (i+1)*QK_K]
		for ib := range QK_K / 32 {
			ls1, ls2 := iq1MSubScales(b, ib)
			dl := [2]float32{d * float32(ls1), d * float32(ls2)}
			for l := range 4 {
				idx, sg := iq1MIndex(b, ib, l)
				iq1Row(y[32*ib+8*l:], &gridIQ1S[idx], dl[l/2], float32(sg)*iq1Delta)
			}
		}
	}
}

// DotIQ2_XXS is ggml_vec_dot_iq2_xxs_q8_K (the generic C form).
func DotIQ2_XXS(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ2_XXS : (i+1)*sizeIQ2_XXS]
		dy, q8, _ := q8KBlock(a, i)
		d := fp16(x) * dy
		var bsum int32
		for ib := range QK_K / 32 {
			q := x[offIQ2_XXSQs+8*ib : offIQ2_XXSQs+8*ib+8]
			aux := le32(q[4:])
			var sumi int32
			for l := range 4 {
				sumi += signedDot8(&gridIQ2XXS[q[l]], q8[32*ib+8*l:], ksignsIQ2XS(aux>>(7*l)))
			}
			bsum += sumi * int32(2*(aux>>28)+1)
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.125 * sumf
}

// DotIQ2_XS is ggml_vec_dot_iq2_xs_q8_K (the generic C form).
func DotIQ2_XS(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ2_XS : (i+1)*sizeIQ2_XS]
		dy, q8, _ := q8KBlock(a, i)
		d := fp16(x) * dy
		var bsum int32
		for ib := range QK_K / 32 {
			sc := x[offIQ2_XSScales+ib]
			var sumi [2]int32
			for l := range 4 {
				q := uint32(le16(x[offIQ2_XSQs+2*(4*ib+l):]))
				sumi[l/2] += signedDot8(&gridIQ2XS[q&511], q8[32*ib+8*l:], ksignsIQ2XS(q>>9))
			}
			bsum += sumi[0]*(2*int32(sc&0xf)+1) + sumi[1]*(2*int32(sc>>4)+1)
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.125 * sumf
}

// DotIQ2_S is ggml_vec_dot_iq2_s_q8_K (the generic C form).
func DotIQ2_S(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ2_S : (i+1)*sizeIQ2_S]
		dy, q8, _ := q8KBlock(a, i)
		d := fp16(x) * dy
		var bsum int32
		for ib := range QK_K / 32 {
			sc := x[offIQ2_SScales+ib]
			var sumi [2]int32
			for l := range 4 {
				s := x[offIQ2_SQs+QK_K/8+4*ib+l]
				sumi[l/2] += signedDot8(&gridIQ2S[iq2SIndex(x, ib, l)], q8[32*ib+8*l:], s)
			}
			bsum += (1+2*int32(sc&0xf))*sumi[0] + (1+2*int32(sc>>4))*sumi[1]
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.125 * sumf
}

// DotIQ3_XXS is ggml_vec_dot_iq3_xxs_q8_K (the generic C form).
func DotIQ3_XXS(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ3_XXS : (i+1)*sizeIQ3_XXS]
		dy, q8, _ := q8KBlock(a, i)
		d := fp16(x) * dy
		qs := x[offIQ3_XXSQs : offIQ3_XXSQs+96]
		var bsum int32
		for ib := range QK_K / 32 {
			aux := le32(qs[QK_K/4+4*ib:])
			var sumi int32
			for l := range 4 {
				s := ksignsIQ2XS(aux >> (7 * l))
				y := q8[32*ib+8*l:]
				sumi += signedDot4(&gridIQ3XXS[qs[8*ib+2*l]], y, s, 0)
				sumi += signedDot4(&gridIQ3XXS[qs[8*ib+2*l+1]], y[4:], s, 4)
			}
			bsum += sumi * int32(2*(aux>>28)+1)
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.25 * sumf
}

// DotIQ3_S is ggml_vec_dot_iq3_s_q8_K (the generic C form).
func DotIQ3_S(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ3_S : (i+1)*sizeIQ3_S]
		dy, q8, _ := q8KBlock(a, i)
		d := fp16(x) * dy
		var bsum int32
		for ib := range QK_K / 32 {
			var sumi int32
			for l := range 4 {
				s := x[offIQ3_SSigns+4*ib+l]
				g1, g2 := iq3SIndex(x, ib, l)
				y := q8[32*ib+8*l:]
				sumi += signedDot4(&gridIQ3S[g1], y, s, 0)
				sumi += signedDot4(&gridIQ3S[g2], y[4:], s, 4)
			}
			bsum += sumi * iq3SScale(x, ib)
		}
		sumf += float32(d * float32(bsum))
	}
	return sumf
}

// dot8 is the integer dot product of 8 grid values with 8 int8s.
func dot8(g *[8]int8, q8 []byte) int32 {
	q8 = q8[:8]
	var sum int32
	for j := range 8 {
		sum += int32(int8(q8[j])) * int32(g[j])
	}
	return sum
}

// DotIQ1_S is ggml_vec_dot_iq1_s_q8_K (the generic C form): the grid
// products and the shift (±1/8 times the Q8_K group sums) are summed as
// integers and combined once per super-block.
func DotIQ1_S(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ1_S : (i+1)*sizeIQ1_S]
		dy, q8, bs := q8KBlock(a, i)
		var sumi, sumi1 int32
		for ib := range QK_K / 32 {
			qh := le16(x[offIQ1_SQh+2*ib:])
			ls := 2*int32(qh>>12&7) + 1
			delta := int32(1)
			if qh&0x8000 != 0 {
				delta = -1
			}
			var lsum int32
			for l := range 4 {
				idx := int(x[offIQ1_SQs+4*ib+l]) | int(qh>>(3*l)&7)<<8
				lsum += dot8(&gridIQ1S[idx], q8[32*ib+8*l:])
			}
			sumi += ls * lsum
			sumi1 += ls * delta * (bsum(bs, 2*ib) + bsum(bs, 2*ib+1))
		}
		t := float32(float32(sumi) + float32(iq1Delta*float32(sumi1)))
		sumf += float32(float32(fp16(x)*dy) * t)
	}
	return sumf
}

// DotIQ1_M is ggml_vec_dot_iq1_m_q8_K (the generic C form).
func DotIQ1_M(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ1_M : (i+1)*sizeIQ1_M]
		dy, q8, _ := q8KBlock(a, i)
		var sumi1, sumi2 int32
		for ib := range QK_K / 32 {
			var sum1, sum2 [2]int32
			for l := range 4 {
				idx, sg := iq1MIndex(x, ib, l)
				y := q8[32*ib+8*l : 32*ib+8*l+8]
				var ysum int32
				for _, v := range y {
					ysum += int32(int8(v))
				}
				sum1[l/2] += dot8(&gridIQ1S[idx], y)
				sum2[l/2] += ysum * sg
			}
			ls1, ls2 := iq1MSubScales(x, ib)
			sumi1 += sum1[0]*ls1 + sum1[1]*ls2
			sumi2 += sum2[0]*ls1 + sum2[1]*ls2
		}
		t := float32(float32(sumi1) + float32(iq1Delta*float32(sumi2)))
		sumf += float32(float32(iq1MScale(x)*dy) * t)
	}
	return sumf
}

// LatticeGrid returns a copy of the expanded grid of a lattice type, for
// SIMD kernels that look grid points up themselves (package cpu): the
// points in index order, each as its 8 (IQ2_*, IQ1_*) or 4 (IQ3_*) signed
// levels, so point k is bytes [8k, 8k+8) or [4k, 4k+4). IQ1_S and IQ1_M
// share one grid. It returns nil for any other type.
func LatticeGrid(t Type) []int8 {
	var g8 [][8]int8
	var g4 [][4]int8
	switch t {
	case IQ2_XXS:
		g8 = gridIQ2XXS
	case IQ2_XS:
		g8 = gridIQ2XS
	case IQ2_S:
		g8 = gridIQ2S
	case IQ1_S, IQ1_M:
		g8 = gridIQ1S
	case IQ3_XXS:
		g4 = gridIQ3XXS
	case IQ3_S:
		g4 = gridIQ3S
	default:
		return nil
	}
	out := make([]int8, 0, 8*len(g8)+4*len(g4))
	for _, p := range g8 {
		out = append(out, p[:]...)
	}
	for _, p := range g4 {
		out = append(out, p[:]...)
	}
	return out
}
