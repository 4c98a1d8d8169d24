// Conversions between float32 and the two 16-bit float formats ggml uses,
// bit-exact with ggml's:
//
//   - FP16ToFP32 is exact for every input (normals, subnormals, ±0, ±Inf;
//     NaNs keep sign and payload and come out quiet), as ggml's
//     ggml_compute_fp16_to_fp32 and the F16C instruction vcvtph2ps.
//   - FP32ToFP16 rounds to nearest, ties to even, with correct subnormals and
//     overflow to ±Inf (values of magnitude >= 65520), as
//     ggml_compute_fp32_to_fp16 (llama-quantize) and vcvtps2ph with
//     imm 0 (the CPU backend's activation conversion on x86). NaN becomes
//     the canonical quiet NaN 0x7E00 with the input's sign, as
//     ggml_compute_fp32_to_fp16 does (F16C would keep the payload's top bits).
//   - BF16ToFP32 is a shift; FP32ToBF16 rounds to nearest even and turns NaN
//     quiet, as ggml_compute_fp32_to_bf16. Subnormals are kept (not flushed).

package quant

import "math"

// FP16ToFP32 returns the float32 value of the IEEE half float with bits h.
func FP16ToFP32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		if mant != 0 {
			// NaN: keep the payload, make it quiet.
			return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0:
		// Zero or subnormal: mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// FP32ToFP16 returns the IEEE half float nearest to f (ties to even).
func FP32ToFP16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	if exp == 0 {
		// float32 zero or subnormal: far below half's smallest subnormal.
		return sign
	}
	m := mant | 0x800000 // 24-bit significand, value m * 2^(exp-127-23)
	he := exp - 127 + 15 // half exponent field if the result is normal
	if he >= 1 {
		// Normal half: keep 11 of the 24 significand bits.
		r := m >> 13
		rem := m & 0x1fff
		if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
			r++
		}
		// r is in [0x400, 0x800]; 0x800 carries into the exponent.
		h := uint32(he)<<10 + r - 0x400
		if h >= 0x7c00 {
			return sign | 0x7c00
		}
		return sign | uint16(h)
	}
	// Subnormal half: the result counts units of 2^-24, i.e. m >> shift.
	shift := uint32(14 - he) // >= 14
	if shift > 24 {
		return sign // below half of the smallest subnormal: rounds to zero
	}
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++ // may become 0x400, the smallest normal: still the right encoding
	}
	return sign | uint16(r)
}

// BF16ToFP32 returns the float32 value of the bfloat16 with bits h.
func BF16ToFP32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FP32ToBF16 returns the bfloat16 nearest to f (ties to even); NaN stays
// NaN with bit 6 (the bf16 quiet bit) set.
func FP32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
