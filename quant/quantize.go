// Quantization of rows, in two flavours that differ only for Q8_0 and Q8_1:
//
//   - QuantizeRow is what llama.cpp's CPU backend does to an activation row
//     before a matrix multiplication on x86 (type_traits_cpu[t].from_float,
//     arch/x86/quants.c at the reference commit, AVX2/AVX-512 build): Q8_0 and
//     Q8_1 use id = 127/amax and round half to even (_mm256_round_ps); Q8_K
//     is ggml's reference quantize_row_q8_K_ref; F16 rounds to nearest even
//     (F16C); BF16 rounds to nearest even. See NUMERICS.md.
//   - QuantizeRowRef is what llama-quantize writes into files without an
//     importance matrix (quantize_row_*_ref in ggml-quants.c): Q8_0 and Q8_1
//     use id = 1/(amax/127) and roundf (half away from zero).
//
// For every other type the two are the same function. The weight quantizers
// reproduce ggml's reference ones bit for bit: every product that feeds an
// addition is rounded to float32 explicitly so no FMA can change the result
// (ggml-quants.c is compiled without FMA).
//
// The per-type functions assume len(src) is a multiple of the block size and
// dst holds the blocks, and panic otherwise; QuantizeRow and QuantizeRowRef
// check sizes and return errors.

package quant

import (
	"fmt"
	"math"
)

// QuantizeFunc returns the unchecked form of QuantizeRow for t, or nil if
// flowinfer cannot quantize to t.
func QuantizeFunc(t Type) func(src []float32, dst []byte) {
	switch t {
	case Q8_0:
		return QuantizeRowQ8_0
	case Q8_1:
		return QuantizeRowQ8_1
	}
	return QuantizeRefFunc(t)
}

// QuantizeRefFunc returns the unchecked form of QuantizeRowRef for t, or nil
// if flowinfer cannot quantize to t.
func QuantizeRefFunc(t Type) func(src []float32, dst []byte) {
	switch t {
	case F32:
		return QuantizeRowF32
	case F16:
		return QuantizeRowF16
	case BF16:
		return QuantizeRowBF16
	case Q4_0:
		return QuantizeRowQ4_0
	case Q4_1:
		return QuantizeRowQ4_1
	case Q5_0:
		return QuantizeRowQ5_0
	case Q5_1:
		return QuantizeRowQ5_1
	case Q8_0:
		return QuantizeRowQ8_0Ref
	case Q8_1:
		return QuantizeRowQ8_1Ref
	case Q2_K:
		return QuantizeRowQ2_K
	case Q3_K:
		return QuantizeRowQ3_K
	case Q4_K:
		return QuantizeRowQ4_K
	case Q5_K:
		return QuantizeRowQ5_K
	case Q6_K:
		return QuantizeRowQ6_K
	case Q8_K:
		return QuantizeRowQ8_K
	case IQ4_NL:
		return QuantizeRowIQ4_NL
	case IQ4_XS:
		return QuantizeRowIQ4_XS
	case MXFP4:
		return QuantizeRowMXFP4
	case IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M:
		return iqRefFunc(t)
	}
	return nil
}

// QuantizeRow converts len(src) float32s to type t as llama.cpp's x86 CPU
// backend converts activations (see the file comment). It fails for a type
// it cannot produce, a len(src) that is not a whole number of blocks, or a
// dst too short.
func QuantizeRow(t Type, src []float32, dst []byte) error {
	return quantizeChecked("quantize", t, QuantizeFunc(t), src, dst)
}

// QuantizeRowRef converts len(src) float32s to type t as llama-quantize does
// without an importance matrix. IQ2_XXS, IQ2_XS and IQ1_S, which ggml
// refuses to quantize without one, get an importance matrix of all ones
// (see iq_quantize.go).
func QuantizeRowRef(t Type, src []float32, dst []byte) error {
	return quantizeChecked("quantize (ref)", t, QuantizeRefFunc(t), src, dst)
}

func quantizeChecked(op string, t Type, f func([]float32, []byte), src []float32, dst []byte) error {
	if !t.Known() {
		return fmt.Errorf("quant: %s: %w %d", op, ErrUnknownType, uint32(t))
	}
	if f == nil {
		return fmt.Errorf("quant: %s: %w %s", op, ErrUnsupportedType, t)
	}
	need, err := RowBytes(t, len(src))
	if err != nil {
		return fmt.Errorf("quant: %s: %w", op, err)
	}
	if len(dst) < need {
		return fmt.Errorf("quant: %s: %d %s elements need %d bytes, have %d", op, len(src), t, need, len(dst))
	}
	f(src, dst)
	return nil
}

// nearestInt rounds to the nearest integer, ties to even, as ggml's
// nearest_int (which adds 1.5*2^23) for |f| < 2^22. Taking a float32
// argument rounds the caller's product first, as C does.
func nearestInt(f float32) int32 { return int32(math.RoundToEven(float64(f))) }

// roundSat8 rounds f to the nearest integer, ties to even, and converts it
// to int8 the way x86 does (cvtps2dq, then signed saturating packs): NaN and
// values beyond int32 give -128, others saturate to [-128, 127]. It also
// returns the int32 before saturation (what ggml's q8_1 sums).
func roundSat8(f float32) (int8, int32) {
	if f > -256 && f < 256 {
		// Adding 1.5*2^23 rounds to an integer (ties to even) in the low
		// mantissa bits, as ggml's nearest_int; exact for |f| < 2^22.
		i := int32(math.Float32bits(f+12582912)&0x7fffff) - 0x400000
		return int8(min(max(i, -128), 127)), i
	}
	r := math.RoundToEven(float64(f))
	if r != r || r >= 1<<31 || r < -(1<<31) {
		return -128, math.MinInt32
	}
	i := int32(r)
	return int8(min(max(i, -128), 127)), i
}

// absMax returns the largest |x| of xs (0 for an empty or all-NaN slice).
func absMax(xs []float32) float32 {
	var amax float32
	for _, v := range xs {
		if a := abs32(v); a > amax {
			amax = a
		}
	}
	return amax
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// QuantizeRowF32 stores float32s little-endian.
func QuantizeRowF32(src []float32, dst []byte) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		put32(dst[4*i:], math.Float32bits(v))
	}
}

// QuantizeRowF16 stores fp16s (round to nearest even).
func QuantizeRowF16(src []float32, dst []byte) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		put16(dst[2*i:], FP32ToFP16(v))
	}
}

// QuantizeRowBF16 stores bfloat16s (round to nearest even).
func QuantizeRowBF16(src []float32, dst []byte) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		put16(dst[2*i:], FP32ToBF16(v))
	}
}

// QuantizeRowQ8_0 quantizes activations to Q8_0 as ggml's x86
// quantize_row_q8_0 (and ggml_quantize_mat_q8_0_4x8, which repacked Q4_0
// weights use): d = amax/127 stored as fp16, q = round-half-even(x * 127/amax).
func QuantizeRowQ8_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		amax := absMax(x)
		put16(b, FP32ToFP16(amax/127))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		qs := b[offQ8_0Qs : offQ8_0Qs+qk]
		for j, v := range x {
			q, _ := roundSat8(float32(v * id))
			qs[j] = byte(q)
		}
	}
}

// QuantizeRowQ8_1 quantizes activations to Q8_1 as ggml's x86
// quantize_row_q8_1: as QuantizeRowQ8_0, plus s = fp16(d * sum(q)).
func QuantizeRowQ8_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ8_1 : (i+1)*sizeQ8_1]
		amax := absMax(x)
		d := amax / 127
		put16(b, FP32ToFP16(d))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		qs := b[offQ8_1Qs : offQ8_1Qs+qk]
		var sum int32
		for j, v := range x {
			q, iv := roundSat8(float32(v * id))
			qs[j] = byte(q)
			sum += iv
		}
		put16(b[offQ8_1S:], FP32ToFP16(d*float32(sum)))
	}
}

// QuantizeRowQ8_0Ref quantizes to Q8_0 as ggml's quantize_row_q8_0_ref
// (llama-quantize): id = 1/d, q = roundf(x*id).
func QuantizeRowQ8_0Ref(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		d := absMax(x) / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		put16(b, FP32ToFP16(d))
		qs := b[offQ8_0Qs : offQ8_0Qs+qk]
		for j, v := range x {
			qs[j] = byte(int8(math.Round(float64(v * id))))
		}
	}
}

// QuantizeRowQ8_1Ref quantizes to Q8_1 as ggml's quantize_row_q8_1_ref.
func QuantizeRowQ8_1Ref(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ8_1 : (i+1)*sizeQ8_1]
		d := absMax(x) / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		put16(b, FP32ToFP16(d))
		qs := b[offQ8_1Qs : offQ8_1Qs+qk]
		var sum int32
		for j, v := range x {
			q := int8(math.Round(float64(v * id)))
			qs[j] = byte(q)
			sum += int32(q)
		}
		put16(b[offQ8_1S:], FP32ToFP16(float32(sum)*d))
	}
}

// QuantizeRowQ8_K quantizes activations to Q8_K as ggml's
// quantize_row_q8_K_ref, which is what x86 runs (quantize_row_q8_K calls it;
// the 4-row ggml_quantize_mat_q8_K_4x8 used for repacked Q4_K/Q2_K weights
// gives the same products d*q). The scale is -127/max where max is the
// first value of largest magnitude, so that value becomes -127.
func QuantizeRowQ8_K(src []float32, dst []byte) {
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeQ8_K : (i+1)*sizeQ8_K]
		var amax, max float32
		for _, v := range x {
			if a := abs32(v); a > amax {
				amax, max = a, v
			}
		}
		qs := b[offQ8_KQs : offQ8_KQs+QK_K]
		bsums := b[offQ8_KBsums : offQ8_KBsums+32]
		if amax == 0 {
			put32(b, 0)
			clear(qs)
			clear(bsums)
			continue
		}
		iscale := -127 / max
		for j, v := range x {
			qs[j] = byte(int8(min(127, nearestInt(iscale*v))))
		}
		for j := 0; j < QK_K/16; j++ {
			var sum int32
			for _, q := range qs[16*j : 16*j+16] {
				sum += int32(int8(q))
			}
			put16(bsums[2*j:], uint16(int16(sum)))
		}
		put32(b, math.Float32bits(1/iscale))
	}
}

// QuantizeRowQ4_0 quantizes to Q4_0 as ggml's quantize_row_q4_0_ref.
func QuantizeRowQ4_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ4_0 : (i+1)*sizeQ4_0]
		var amax, max float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax, max = a, v
			}
		}
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		put16(b, FP32ToFP16(d))
		qs := b[offQ4_0Qs : offQ4_0Qs+16]
		for j := range qs {
			x0 := min(15, truncInt8(float32(x[j]*id)+8.5))
			x1 := min(15, truncInt8(float32(x[j+16]*id)+8.5))
			qs[j] = byte(x0) | byte(x1)<<4
		}
	}
}

// QuantizeRowQ4_1 quantizes to Q4_1 as ggml's quantize_row_q4_1_ref.
func QuantizeRowQ4_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ4_1 : (i+1)*sizeQ4_1]
		lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			lo = min(lo, v)
			hi = max(hi, v)
		}
		d := (hi - lo) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		put16(b, FP32ToFP16(d))
		put16(b[offQ4_1M:], FP32ToFP16(lo))
		qs := b[offQ4_1Qs : offQ4_1Qs+16]
		for j := range qs {
			x0 := min(15, truncInt8(float32((x[j]-lo)*id)+0.5))
			x1 := min(15, truncInt8(float32((x[j+16]-lo)*id)+0.5))
			qs[j] = byte(x0) | byte(x1)<<4
		}
	}
}

// QuantizeRowQ5_0 quantizes to Q5_0 as ggml's quantize_row_q5_0_ref.
func QuantizeRowQ5_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ5_0 : (i+1)*sizeQ5_0]
		var amax, max float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax, max = a, v
			}
		}
		d := max / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		put16(b, FP32ToFP16(d))
		qs := b[offQ5_0Qs : offQ5_0Qs+16]
		var qh uint32
		for j := range qs {
			x0 := uint8(min(31, truncInt8(float32(x[j]*id)+16.5)))
			x1 := uint8(min(31, truncInt8(float32(x[j+16]*id)+16.5)))
			qs[j] = x0&0xf | (x1&0xf)<<4
			qh |= uint32(x0&0x10) >> 4 << j
			qh |= uint32(x1&0x10) >> 4 << (j + 16)
		}
		put32(b[offQ5_0Qh:], qh)
	}
}

// QuantizeRowQ5_1 quantizes to Q5_1 as ggml's quantize_row_q5_1_ref.
func QuantizeRowQ5_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeQ5_1 : (i+1)*sizeQ5_1]
		lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			lo = min(lo, v)
			hi = max(hi, v)
		}
		d := (hi - lo) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		put16(b, FP32ToFP16(d))
		put16(b[offQ5_1M:], FP32ToFP16(lo))
		qs := b[offQ5_1Qs : offQ5_1Qs+16]
		var qh uint32
		for j := range qs {
			x0 := truncUint8(float32((x[j]-lo)*id) + 0.5)
			x1 := truncUint8(float32((x[j+16]-lo)*id) + 0.5)
			qs[j] = x0&0xf | (x1&0xf)<<4
			qh |= uint32(x0&0x10) >> 4 << j
			qh |= uint32(x1&0x10) >> 4 << (j + 16)
		}
		put32(b[offQ5_1Qh:], qh)
	}
}

// truncInt8 converts to int8 truncating toward zero as C's (int8_t) cast of
// an in-range float; out-of-range values (not produced by finite inputs)
// are clamped instead of being undefined.
func truncInt8(f float32) int8 {
	switch {
	case f != f:
		return 0
	case f >= 127:
		return 127
	case f <= -128:
		return -128
	}
	return int8(f)
}

// truncUint8 converts to uint8 truncating toward zero, like C's (uint8_t)
// cast of an in-range float.
func truncUint8(f float32) uint8 {
	switch {
	case f != f || f <= 0:
		return 0
	case f >= 255:
		return 255
	}
	return uint8(f)
}
