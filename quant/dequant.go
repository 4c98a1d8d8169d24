// Dequantization of rows: bytes of one type to float32, bit-identical to
// ggml's to_float functions (dequantize_row_* in ggml-quants.c, which is
// compiled without FMA contraction). Every product that feeds an addition is
// rounded to float32 explicitly (float32(a*b) + c), so the Go compiler
// cannot fuse it into an FMA on any architecture: the rounding sequence is
// exactly ggml's.
//
// The per-type functions assume well-formed sizes (len(dst) a multiple of
// the block size and src holding that many blocks) and panic otherwise;
// DequantizeRow checks the sizes and returns errors instead.

package quant

import (
	"fmt"
	"math"
)

// Supported reports whether flowinfer can compute with t: DequantizeRow
// converts it, and it is either a weight type with a dot product (DotFunc)
// or an activation type (Q8_1, Q8_K).
func (t Type) Supported() bool { return dequantizeFunc(t) != nil }

// DequantizeFunc returns the unchecked dequantizer of t (nil if t is not
// supported). The function converts len(dst) elements.
func DequantizeFunc(t Type) func(src []byte, dst []float32) { return dequantizeFunc(t) }

func dequantizeFunc(t Type) func(src []byte, dst []float32) {
	switch t {
	case F32:
		return DequantizeRowF32
	case F16:
		return DequantizeRowF16
	case BF16:
		return DequantizeRowBF16
	case Q4_0:
		return DequantizeRowQ4_0
	case Q4_1:
		return DequantizeRowQ4_1
	case Q5_0:
		return DequantizeRowQ5_0
	case Q5_1:
		return DequantizeRowQ5_1
	case Q8_0:
		return DequantizeRowQ8_0
	case Q8_1:
		return DequantizeRowQ8_1
	case Q2_K:
		return DequantizeRowQ2_K
	case Q3_K:
		return DequantizeRowQ3_K
	case Q4_K:
		return DequantizeRowQ4_K
	case Q5_K:
		return DequantizeRowQ5_K
	case Q6_K:
		return DequantizeRowQ6_K
	case Q8_K:
		return DequantizeRowQ8_K
	case IQ4_NL:
		return DequantizeRowIQ4_NL
	case IQ4_XS:
		return DequantizeRowIQ4_XS
	case MXFP4:
		return DequantizeRowMXFP4
	case IQ2_XXS:
		return DequantizeRowIQ2_XXS
	case IQ2_XS:
		return DequantizeRowIQ2_XS
	case IQ2_S:
		return DequantizeRowIQ2_S
	case IQ3_XXS:
		return DequantizeRowIQ3_XXS
	case IQ3_S:
		return DequantizeRowIQ3_S
	case IQ1_S:
		return DequantizeRowIQ1_S
	case IQ1_M:
		return DequantizeRowIQ1_M
	}
	return nil
}

// checkRow validates a row of n elements of type t stored in a buffer of
// have bytes, for the function named op.
func checkRow(op string, t Type, n, have int) error {
	if !t.Known() {
		return fmt.Errorf("quant: %s: %w %d", op, ErrUnknownType, uint32(t))
	}
	if !t.Supported() {
		return fmt.Errorf("quant: %s: %w %s", op, ErrUnsupportedType, t)
	}
	need, err := RowBytes(t, n)
	if err != nil {
		return fmt.Errorf("quant: %s: %w", op, err)
	}
	if have < need {
		return fmt.Errorf("quant: %s: %d %s elements need %d bytes, have %d", op, n, t, need, have)
	}
	return nil
}

// DequantizeRow converts len(dst) elements of type t from src to float32.
// It fails for an unknown or unsupported type, a len(dst) that is not a
// whole number of blocks, or a src shorter than those blocks.
func DequantizeRow(t Type, src []byte, dst []float32) error {
	if err := checkRow("dequantize", t, len(dst), len(src)); err != nil {
		return err
	}
	dequantizeFunc(t)(src, dst)
	return nil
}

// DequantizeRowF32 copies little-endian float32s.
func DequantizeRowF32(src []byte, dst []float32) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(le32(src[4*i:]))
	}
}

// DequantizeRowF16 widens fp16 values.
func DequantizeRowF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = FP16ToFP32(le16(src[2*i:]))
	}
}

// DequantizeRowBF16 widens bfloat16 values.
func DequantizeRowBF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = BF16ToFP32(le16(src[2*i:]))
	}
}

// DequantizeRowQ4_0 converts Q4_0 blocks: x = d * (q - 8).
func DequantizeRowQ4_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeQ4_0 : (i+1)*sizeQ4_0]
		d := fp16(b)
		qs := b[offQ4_0Qs : offQ4_0Qs+16]
		y := dst[i*qk : (i+1)*qk]
		for j, q := range qs {
			y[j] = float32(int32(q&0xf)-8) * d
			y[j+16] = float32(int32(q>>4)-8) * d
		}
	}
}

// DequantizeRowQ4_1 converts Q4_1 blocks: x = d*q + m.
func DequantizeRowQ4_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeQ4_1 : (i+1)*sizeQ4_1]
		d := fp16(b)
		m := fp16(b[offQ4_1M:])
		qs := b[offQ4_1Qs : offQ4_1Qs+16]
		y := dst[i*qk : (i+1)*qk]
		for j, q := range qs {
			y[j] = float32(float32(q&0xf)*d) + m
			y[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

// DequantizeRowQ5_0 converts Q5_0 blocks: x = d * (q - 16).
func DequantizeRowQ5_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeQ5_0 : (i+1)*sizeQ5_0]
		d := fp16(b)
		qh := le32(b[offQ5_0Qh:])
		qs := b[offQ5_0Qs : offQ5_0Qs+16]
		y := dst[i*qk : (i+1)*qk]
		for j, q := range qs {
			h0 := (qh >> j << 4) & 0x10
			h1 := (qh >> (j + 12)) & 0x10
			y[j] = float32(int32(uint32(q&0xf)|h0)-16) * d
			y[j+16] = float32(int32(uint32(q>>4)|h1)-16) * d
		}
	}
}

// DequantizeRowQ5_1 converts Q5_1 blocks: x = d*q + m.
func DequantizeRowQ5_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeQ5_1 : (i+1)*sizeQ5_1]
		d := fp16(b)
		m := fp16(b[offQ5_1M:])
		qh := le32(b[offQ5_1Qh:])
		qs := b[offQ5_1Qs : offQ5_1Qs+16]
		y := dst[i*qk : (i+1)*qk]
		for j, q := range qs {
			h0 := (qh >> j << 4) & 0x10
			h1 := (qh >> (j + 12)) & 0x10
			y[j] = float32(float32(uint32(q&0xf)|h0)*d) + m
			y[j+16] = float32(float32(uint32(q>>4)|h1)*d) + m
		}
	}
}

// DequantizeRowQ8_0 converts Q8_0 blocks: x = d*q.
func DequantizeRowQ8_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		d := fp16(b)
		qs := b[offQ8_0Qs : offQ8_0Qs+qk]
		y := dst[i*qk : (i+1)*qk]
		for j, q := range qs {
			y[j] = float32(int8(q)) * d
		}
	}
}

// DequantizeRowQ8_1 converts Q8_1 blocks: x = d*q. (ggml has no to_float
// for Q8_1; this is the obvious one, for tests.)
func DequantizeRowQ8_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeQ8_1 : (i+1)*sizeQ8_1]
		d := fp16(b)
		qs := b[offQ8_1Qs : offQ8_1Qs+qk]
		y := dst[i*qk : (i+1)*qk]
		for j, q := range qs {
			y[j] = float32(int8(q)) * d
		}
	}
}

// DequantizeRowQ2_K converts Q2_K super-blocks: x = d*sc*q - dmin*m.
func DequantizeRowQ2_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeQ2_K : (i+1)*sizeQ2_K]
		d := fp16(b[offQ2_KD:])
		dmin := fp16(b[offQ2_KDmin:])
		scales := b[offQ2_KScales : offQ2_KScales+16]
		y := dst[i*QK_K : (i+1)*QK_K]
		is := 0
		for n := 0; n < QK_K; n += 128 {
			q := b[offQ2_KQs+n/4 : offQ2_KQs+n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					sc := scales[is]
					is++
					dl := d * float32(sc&0xf)
					ml := dmin * float32(sc>>4)
					for l := 0; l < 16; l++ {
						y[l] = float32(dl*float32((q[16*half+l]>>shift)&3)) - ml
					}
					y = y[16:]
				}
			}
		}
	}
}

// q3KScales unpacks the sixteen 6-bit scales of a Q3_K block (still offset
// by 32).
func q3KScales(p []byte) (sc [16]int8) {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	a0, a1, tmp := le32(p[0:]), le32(p[4:]), le32(p[8:])
	aux := [4]uint32{
		(a0 & kmask2) | ((tmp >> 0 & kmask1) << 4),
		(a1 & kmask2) | ((tmp >> 2 & kmask1) << 4),
		(a0 >> 4 & kmask2) | ((tmp >> 4 & kmask1) << 4),
		(a1 >> 4 & kmask2) | ((tmp >> 6 & kmask1) << 4),
	}
	for k, v := range aux {
		sc[4*k+0] = int8(v)
		sc[4*k+1] = int8(v >> 8)
		sc[4*k+2] = int8(v >> 16)
		sc[4*k+3] = int8(v >> 24)
	}
	return sc
}

// DequantizeRowQ3_K converts Q3_K super-blocks: x = d * (sc-32) * q3, q3 in [-4, 3].
func DequantizeRowQ3_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeQ3_K : (i+1)*sizeQ3_K]
		dAll := fp16(b[offQ3_KD:])
		scales := q3KScales(b[offQ3_KScales : offQ3_KScales+12])
		hm := b[offQ3_KHmask : offQ3_KHmask+32]
		y := dst[i*QK_K : (i+1)*QK_K]
		is := 0
		m := byte(1)
		for n := 0; n < QK_K; n += 128 {
			q := b[offQ3_KQs+n/4 : offQ3_KQs+n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					dl := dAll * float32(int32(scales[is])-32)
					is++
					for l := 16 * half; l < 16*half+16; l++ {
						v := int32((q[l] >> shift) & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						y[l-16*half] = dl * float32(v)
					}
					y = y[16:]
				}
				m <<= 1
			}
		}
	}
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j of a Q4_K or
// Q5_K block (ggml's get_scale_min_k4).
func scaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xf) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j] >> 6) << 4)
}

// DequantizeRowQ4_K converts Q4_K super-blocks: x = d*sc*q - dmin*m.
func DequantizeRowQ4_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeQ4_K : (i+1)*sizeQ4_K]
		d := fp16(b)
		dmin := fp16(b[offQ4_KDmin:])
		scales := b[offQ4_KScales : offQ4_KScales+12]
		y := dst[i*QK_K : (i+1)*QK_K]
		for j := 0; j < 4; j++ {
			q := b[offQ4_KQs+32*j : offQ4_KQs+32*j+32]
			sc, m := scaleMinK4(2*j, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*j+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			y0, y1 := y[64*j:64*j+32], y[64*j+32:64*j+64]
			for l, v := range q {
				y0[l] = float32(d1*float32(v&0xf)) - m1
				y1[l] = float32(d2*float32(v>>4)) - m2
			}
		}
	}
}

// DequantizeRowQ5_K converts Q5_K super-blocks: x = d*sc*q - dmin*m.
func DequantizeRowQ5_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeQ5_K : (i+1)*sizeQ5_K]
		d := fp16(b)
		dmin := fp16(b[offQ5_KDmin:])
		scales := b[offQ5_KScales : offQ5_KScales+12]
		qh := b[offQ5_KQh : offQ5_KQh+32]
		y := dst[i*QK_K : (i+1)*QK_K]
		u1, u2 := byte(1), byte(2)
		for j := 0; j < 4; j++ {
			ql := b[offQ5_KQs+32*j : offQ5_KQs+32*j+32]
			sc, m := scaleMinK4(2*j, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*j+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			y0, y1 := y[64*j:64*j+32], y[64*j+32:64*j+64]
			for l, v := range ql {
				lo, hi := v&0xf, v>>4
				if qh[l]&u1 != 0 {
					lo += 16
				}
				if qh[l]&u2 != 0 {
					hi += 16
				}
				y0[l] = float32(d1*float32(lo)) - m1
				y1[l] = float32(d2*float32(hi)) - m2
			}
			u1 <<= 2
			u2 <<= 2
		}
	}
}

// DequantizeRowQ6_K converts Q6_K super-blocks: x = d * sc * (q - 32).
func DequantizeRowQ6_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeQ6_K : (i+1)*sizeQ6_K]
		d := fp16(b[offQ6_KD:])
		for n := 0; n < 2; n++ {
			ql := b[offQ6_KQl+64*n : offQ6_KQl+64*n+64]
			qh := b[offQ6_KQh+32*n : offQ6_KQh+32*n+32]
			sc := b[offQ6_KScales+8*n : offQ6_KScales+8*n+8]
			y := dst[i*QK_K+128*n : i*QK_K+128*n+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				y[l] = d * float32(int8(sc[is])) * float32(q1)
				y[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				y[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				y[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

// DequantizeRowQ8_K converts Q8_K super-blocks: x = d*q.
func DequantizeRowQ8_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeQ8_K : (i+1)*sizeQ8_K]
		d := math.Float32frombits(le32(b))
		qs := b[offQ8_KQs : offQ8_KQs+QK_K]
		y := dst[i*QK_K : (i+1)*QK_K]
		for j, q := range qs {
			y[j] = d * float32(int8(q))
		}
	}
}
