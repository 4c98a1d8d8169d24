// Dot products of one weight row with one activation row, in the form
// llama.cpp's CPU backend computes them: the activation row is first
// converted to the weight type's vec_dot_type (VecDotType; QuantizeRow does
// the conversion exactly as the x86 backend does) and the dot runs on the
// two encoded rows.
//
// What is exact and what is not: the per-block integer sums are exact, as in
// every ggml kernel. How the per-block float terms are summed differs
// between ggml's kernels (AVX2/AVX-512 vec_dot, tinyBLAS, repacked gemm/gemv
// each order the float additions differently); here each block's term is
// formed as ggml's scalar code forms it and accumulated in float32 in block
// order. F32, F16 and BF16 accumulate each float32 product in float64, as
// ggml's scalar ggml_vec_dot_f32/f16/bf16 do (their SIMD forms accumulate in
// float32 lanes). Expect agreement with llama.cpp to about 1e-6 relative.

package quant

import (
	"fmt"
	"math"
)

// VecDotType returns the type llama.cpp converts activations to before a
// dot product with weights of type t (type_traits_cpu[t].vec_dot_type).
// Types without a dot product (the activation types Q8_1 and Q8_K, the
// integer types) return t itself.
func VecDotType(t Type) Type {
	switch t {
	case Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4, NVFP4, Q1_0, Q2_0:
		return Q8_0
	case Q4_1, Q5_1:
		return Q8_1
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0:
		return Q8_K
	}
	return t
}

// DotFunc returns the dot product for weights of type wt, or nil if there is
// none. The function takes n elements: w holds n elements of type wt and a
// holds n elements of VecDotType(wt); it does not check sizes (it panics on
// short slices) and does not allocate.
func DotFunc(wt Type) func(n int, w, a []byte) float32 {
	switch wt {
	case F32:
		return dotF32Bytes
	case F16:
		return DotF16
	case BF16:
		return DotBF16
	case Q4_0:
		return DotQ4_0
	case Q4_1:
		return DotQ4_1
	case Q5_0:
		return DotQ5_0
	case Q5_1:
		return DotQ5_1
	case Q8_0:
		return DotQ8_0
	case Q2_K:
		return DotQ2_K
	case Q3_K:
		return DotQ3_K
	case Q4_K:
		return DotQ4_K
	case Q5_K:
		return DotQ5_K
	case Q6_K:
		return DotQ6_K
	case IQ4_NL:
		return DotIQ4_NL
	case IQ4_XS:
		return DotIQ4_XS
	case MXFP4:
		return DotMXFP4
	case IQ2_XXS:
		return DotIQ2_XXS
	case IQ2_XS:
		return DotIQ2_XS
	case IQ2_S:
		return DotIQ2_S
	case IQ3_XXS:
		return DotIQ3_XXS
	case IQ3_S:
		return DotIQ3_S
	case IQ1_S:
		return DotIQ1_S
	case IQ1_M:
		return DotIQ1_M
	}
	return nil
}

// VecDot returns the dot product of n elements: w holds them as type wt, a
// as VecDotType(wt). It fails for a type without a dot product, an n that
// is not a whole number of blocks, or a short slice.
func VecDot(wt Type, n int, w, a []byte) (float32, error) {
	if !wt.Known() {
		return 0, fmt.Errorf("quant: dot: %w %d", ErrUnknownType, uint32(wt))
	}
	f := DotFunc(wt)
	if f == nil {
		return 0, fmt.Errorf("quant: dot: %w %s", ErrUnsupportedType, wt)
	}
	if err := checkRow("dot (weights)", wt, n, len(w)); err != nil {
		return 0, err
	}
	if err := checkRow("dot (activations)", VecDotType(wt), n, len(a)); err != nil {
		return 0, err
	}
	return f(n, w, a), nil
}

// DotF32 returns sum(x[i]*y[i]) over len(x) elements, each product rounded
// to float32 and accumulated in float64 (ggml's scalar ggml_vec_dot_f32).
func DotF32(x, y []float32) float32 {
	y = y[:len(x)]
	var sum float64
	for i, v := range x {
		sum += float64(v * y[i])
	}
	return float32(sum)
}

func dotF32Bytes(n int, w, a []byte) float32 {
	w, a = w[:4*n], a[:4*n]
	var sum float64
	for i := 0; i < n; i++ {
		x := math.Float32frombits(le32(w[4*i:]))
		y := math.Float32frombits(le32(a[4*i:]))
		sum += float64(x * y)
	}
	return float32(sum)
}

// DotF16 is the dot product of two fp16 rows (ggml_vec_dot_f16): products
// are exact in float32 and accumulate in float64.
func DotF16(n int, w, a []byte) float32 {
	w, a = w[:2*n], a[:2*n]
	var sum float64
	for i := 0; i < n; i++ {
		sum += float64(FP16ToFP32(le16(w[2*i:])) * FP16ToFP32(le16(a[2*i:])))
	}
	return float32(sum)
}

// DotBF16 is the dot product of two bfloat16 rows (ggml_vec_dot_bf16):
// products are exact in float32 and accumulate in float64.
func DotBF16(n int, w, a []byte) float32 {
	w, a = w[:2*n], a[:2*n]
	var sum float64
	for i := 0; i < n; i++ {
		sum += float64(BF16ToFP32(le16(w[2*i:])) * BF16ToFP32(le16(a[2*i:])))
	}
	return float32(sum)
}

// dotI8 is the exact integer dot product of two int8 vectors of equal length.
func dotI8(x, y []byte) int32 {
	y = y[:len(x)]
	var s int32
	for i, v := range x {
		s += int32(int8(v)) * int32(int8(y[i]))
	}
	return s
}

// DotQ4_0 is ggml_vec_dot_q4_0_q8_0.
func DotQ4_0(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeQ4_0 : (i+1)*sizeQ4_0]
		y := a[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		qs, q8 := x[offQ4_0Qs:offQ4_0Qs+16], y[offQ8_0Qs:offQ8_0Qs+qk]
		var sumi int32
		for j, q := range qs {
			sumi += (int32(q&0xf)-8)*int32(int8(q8[j])) + (int32(q>>4)-8)*int32(int8(q8[j+16]))
		}
		sum += float32(fp16(x)*fp16(y)) * float32(sumi)
	}
	return sum
}

// DotQ4_1 is ggml_vec_dot_q4_1_q8_1: d_w*d_a*sumi + m_w*s_a, where s_a is
// the activation block's stored fp16 d*sum(q).
func DotQ4_1(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeQ4_1 : (i+1)*sizeQ4_1]
		y := a[i*sizeQ8_1 : (i+1)*sizeQ8_1]
		qs, q8 := x[offQ4_1Qs:offQ4_1Qs+16], y[offQ8_1Qs:offQ8_1Qs+qk]
		var sumi int32
		for j, q := range qs {
			sumi += int32(q&0xf)*int32(int8(q8[j])) + int32(q>>4)*int32(int8(q8[j+16]))
		}
		sum += float32(float32(fp16(x)*fp16(y))*float32(sumi)) + float32(fp16(x[offQ4_1M:])*fp16(y[offQ8_1S:]))
	}
	return sum
}

// DotQ5_0 is ggml_vec_dot_q5_0_q8_0.
func DotQ5_0(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeQ5_0 : (i+1)*sizeQ5_0]
		y := a[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		qh := le32(x[offQ5_0Qh:])
		qs, q8 := x[offQ5_0Qs:offQ5_0Qs+16], y[offQ8_0Qs:offQ8_0Qs+qk]
		var sumi int32
		for j, q := range qs {
			x0 := int32(uint32(q&0xf)|(qh>>j<<4)&0x10) - 16
			x1 := int32(uint32(q>>4)|(qh>>(j+12))&0x10) - 16
			sumi += x0*int32(int8(q8[j])) + x1*int32(int8(q8[j+16]))
		}
		sum += float32(fp16(x)*fp16(y)) * float32(sumi)
	}
	return sum
}

// DotQ5_1 is ggml_vec_dot_q5_1_q8_1.
func DotQ5_1(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeQ5_1 : (i+1)*sizeQ5_1]
		y := a[i*sizeQ8_1 : (i+1)*sizeQ8_1]
		qh := le32(x[offQ5_1Qh:])
		qs, q8 := x[offQ5_1Qs:offQ5_1Qs+16], y[offQ8_1Qs:offQ8_1Qs+qk]
		var sumi int32
		for j, q := range qs {
			x0 := int32(uint32(q&0xf) | (qh>>j<<4)&0x10)
			x1 := int32(uint32(q>>4) | (qh>>(j+12))&0x10)
			sumi += x0*int32(int8(q8[j])) + x1*int32(int8(q8[j+16]))
		}
		sum += float32(float32(fp16(x)*fp16(y))*float32(sumi)) + float32(fp16(x[offQ5_1M:])*fp16(y[offQ8_1S:]))
	}
	return sum
}

// DotQ8_0 is ggml_vec_dot_q8_0_q8_0.
func DotQ8_0(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		y := a[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		sumi := dotI8(x[offQ8_0Qs:offQ8_0Qs+qk], y[offQ8_0Qs:offQ8_0Qs+qk])
		sum += float32(fp16(x)*fp16(y)) * float32(sumi)
	}
	return sum
}

// q8KBlock returns the scale, values and group sums of the i-th Q8_K block.
func q8KBlock(a []byte, i int) (d float32, q8, bsums []byte) {
	y := a[i*sizeQ8_K : (i+1)*sizeQ8_K]
	return math.Float32frombits(le32(y)), y[offQ8_KQs : offQ8_KQs+QK_K], y[offQ8_KBsums : offQ8_KBsums+32]
}

// bsum returns the j-th group sum of a Q8_K block.
func bsum(bsums []byte, j int) int32 { return int32(int16(le16(bsums[2*j:]))) }

// DotQ2_K is ggml_vec_dot_q2_K_q8_K.
func DotQ2_K(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeQ2_K : (i+1)*sizeQ2_K]
		dy, q8, bs := q8KBlock(a, i)
		sc := x[offQ2_KScales : offQ2_KScales+16]
		var summs int32
		for j := 0; j < 16; j++ {
			summs += bsum(bs, j) * int32(sc[j]>>4)
		}
		var isum int32
		is := 0
		for k := 0; k < 2; k++ {
			q2 := x[offQ2_KQs+32*k : offQ2_KQs+32*k+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					var s int32
					for l := 16 * half; l < 16*half+16; l++ {
						s += int32(int8(q8[l])) * int32((q2[l]>>shift)&3)
					}
					isum += int32(sc[is]&0xf) * s
					is++
				}
				q8 = q8[32:]
			}
		}
		dall := dy * fp16(x[offQ2_KD:])
		dmin := dy * fp16(x[offQ2_KDmin:])
		sum += float32(dall*float32(isum)) - float32(dmin*float32(summs))
	}
	return sum
}

// DotQ3_K is ggml_vec_dot_q3_K_q8_K.
func DotQ3_K(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeQ3_K : (i+1)*sizeQ3_K]
		dy, q8, _ := q8KBlock(a, i)
		scales := q3KScales(x[offQ3_KScales : offQ3_KScales+12])
		hm := x[offQ3_KHmask : offQ3_KHmask+32]
		var isum int32
		is := 0
		m := byte(1)
		for k := 0; k < 2; k++ {
			q3 := x[offQ3_KQs+32*k : offQ3_KQs+32*k+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					var s int32
					for l := 16 * half; l < 16*half+16; l++ {
						v := int32((q3[l] >> shift) & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						s += int32(int8(q8[l])) * v
					}
					isum += (int32(scales[is]) - 32) * s
					is++
				}
				q8 = q8[32:]
				m <<= 1
			}
		}
		sum += float32(fp16(x[offQ3_KD:])*dy) * float32(isum)
	}
	return sum
}

// DotQ4_K is ggml_vec_dot_q4_K_q8_K.
func DotQ4_K(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeQ4_K : (i+1)*sizeQ4_K]
		dy, q8, bs := q8KBlock(a, i)
		scales := x[offQ4_KScales : offQ4_KScales+12]
		qs := x[offQ4_KQs : offQ4_KQs+128]
		var isum, summs int32
		for j := 0; j < QK_K/32; j++ {
			sc, m := scaleMinK4(j, scales)
			summs += (bsum(bs, 2*j) + bsum(bs, 2*j+1)) * int32(m)
			q := qs[32*(j/2) : 32*(j/2)+32]
			y := q8[32*j : 32*j+32]
			shift := uint(4 * (j & 1))
			var s int32
			for l, v := range q {
				s += int32(int8(y[l])) * int32((v>>shift)&0xf)
			}
			isum += int32(sc) * s
		}
		d := fp16(x) * dy
		dmin := fp16(x[offQ4_KDmin:]) * dy
		sum += float32(d*float32(isum)) - float32(dmin*float32(summs))
	}
	return sum
}

// DotQ5_K is ggml_vec_dot_q5_K_q8_K.
func DotQ5_K(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeQ5_K : (i+1)*sizeQ5_K]
		dy, q8, bs := q8KBlock(a, i)
		scales := x[offQ5_KScales : offQ5_KScales+12]
		qs := x[offQ5_KQs : offQ5_KQs+128]
		qh := x[offQ5_KQh : offQ5_KQh+32]
		var isum, summs int32
		for j := 0; j < QK_K/32; j++ {
			sc, m := scaleMinK4(j, scales)
			summs += (bsum(bs, 2*j) + bsum(bs, 2*j+1)) * int32(m)
			q := qs[32*(j/2) : 32*(j/2)+32]
			y := q8[32*j : 32*j+32]
			shift := uint(4 * (j & 1))
			hbit := byte(1) << j
			var s int32
			for l, v := range q {
				c := int32((v >> shift) & 0xf)
				if qh[l]&hbit != 0 {
					c += 16
				}
				s += int32(int8(y[l])) * c
			}
			isum += int32(sc) * s
		}
		d := fp16(x) * dy
		dmin := fp16(x[offQ5_KDmin:]) * dy
		sum += float32(d*float32(isum)) - float32(dmin*float32(summs))
	}
	return sum
}

// DotQ6_K is ggml_vec_dot_q6_K_q8_K.
func DotQ6_K(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeQ6_K : (i+1)*sizeQ6_K]
		dy, q8, _ := q8KBlock(a, i)
		sc := x[offQ6_KScales : offQ6_KScales+16]
		var isum int32
		for h := 0; h < 2; h++ {
			ql := x[offQ6_KQl+64*h : offQ6_KQl+64*h+64]
			qh := x[offQ6_KQh+32*h : offQ6_KQh+32*h+32]
			y := q8[128*h : 128*h+128]
			var s [8]int32 // sub-blocks 8h .. 8h+7, 16 values each
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				s[is+0] += q1 * int32(int8(y[l]))
				s[is+2] += q2 * int32(int8(y[l+32]))
				s[is+4] += q3 * int32(int8(y[l+64]))
				s[is+6] += q4 * int32(int8(y[l+96]))
			}
			for k, v := range s {
				isum += int32(int8(sc[8*h+k])) * v
			}
		}
		sum += float32(fp16(x[offQ6_KD:])*dy) * float32(isum)
	}
	return sum
}
