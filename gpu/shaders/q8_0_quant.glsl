// q8_0_quant.glsl: Q8_0 quantization of float32 values bit for bit as
// the CPU's (quant.QuantizeRowQ8_0, ggml's x86 quantize_row_q8_0): per
// block of 32 values, amax = max |x| (NaNs skipped), d = fp16(amax/127),
// q = round-half-even(x·(127/amax)) saturated to int8 (NaN, ±Inf and
// |x·id| ≥ 2^31 give -128, as roundSat8). Both divisions are rounded to
// nearest even by integer long division and the fp16 conversion is done
// on the bits, since a device's float division may be off by 2.5 ULP and
// packHalf2x16's rounding is the implementation's; the product x·id must
// be computed `precise` by the caller. (A device that flushes subnormal
// floats may differ on subnormal inputs.) Used by the Q8_0 KV store and
// by the MXFP4 products, which quantize their activations as ggml's CPU
// does (MXFP4's vec_dot_type is Q8_0).

// norm splits finite nonzero float bits b into a 24-bit significand
// (bit 23 set) and an unbiased exponent.
void norm(uint b, out uint m, out int e) {
	e = int((b >> 23) & 0xFFu);
	m = b & 0x7FFFFFu;
	if (e == 0) { // subnormal
		e = 1;
		while (m < 0x800000u) {
			m <<= 1;
			e--;
		}
	} else {
		m |= 0x800000u;
	}
	e -= 127;
}

// div_rn returns a/b rounded to nearest even for positive non-NaN a and b
// given as bits: +Inf on overflow, 0 below the normal range (only
// amax/127 gets there, and its fp16 is 0 either way).
float div_rn(uint a, uint b) {
	if (a == 0x7F800000u || b == 0x7F800000u) {
		return a == 0x7F800000u ? uintBitsToFloat(0x7F800000u) : 0.0; // one is +Inf (127 is finite)
	}
	uint ma, mb;
	int ea, eb;
	norm(a, ma, ea);
	norm(b, mb, eb);
	int e = ea - eb + 127; // biased exponent of the quotient
	if (ma < mb) {
		ma <<= 1;
		e--;
	}
	// ma/mb in [1, 2): 25 quotient bits, 24 significand bits and a round bit
	uint q = 0u, rem = ma;
	for (uint i = 0u; i < 25u; i++) {
		q <<= 1;
		if (rem >= mb) {
			rem -= mb;
			q |= 1u;
		}
		rem <<= 1;
	}
	uint sig = q >> 1;
	if ((q & 1u) != 0u && (rem != 0u || (sig & 1u) != 0u)) {
		sig++;
	}
	if (sig == 0x1000000u) {
		sig >>= 1;
		e++;
	}
	if (e >= 255) {
		return uintBitsToFloat(0x7F800000u);
	}
	if (e <= 0) {
		return 0.0;
	}
	return uintBitsToFloat((uint(e) << 23) | (sig & 0x7FFFFFu));
}

// fp16 returns the fp16 bits nearest to float bits b, ties to even, as
// quant.FP32ToFP16 (float32 subnormals give ±0).
uint fp16(uint b) {
	const uint sign = (b >> 16) & 0x8000u;
	const int ex = int((b >> 23) & 0xFFu);
	const uint mant = b & 0x7FFFFFu;
	if (ex == 0xFF) {
		return sign | (mant != 0u ? 0x7E00u : 0x7C00u);
	}
	if (ex == 0) {
		return sign;
	}
	const uint m = mant | 0x800000u;
	const int he = ex - 127 + 15;
	if (he >= 1) {
		uint r = m >> 13;
		const uint rem = m & 0x1FFFu;
		if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) == 1u)) {
			r++;
		}
		const uint h = (uint(he) << 10) + r - 0x400u;
		return h >= 0x7C00u ? sign | 0x7C00u : sign | h;
	}
	const uint shift = uint(14 - he);
	if (shift > 24u) {
		return sign;
	}
	uint r = m >> shift;
	const uint rem = m & ((1u << shift) - 1u);
	const uint hf = 1u << (shift - 1u);
	if (rem > hf || (rem == hf && (r & 1u) == 1u)) {
		r++;
	}
	return sign | r;
}

// q8 is quant's roundSat8: f rounded to nearest even and saturated to
// int8; NaN, ±Inf and |f| ≥ 2^31 give -128.
int q8(float f) {
	const float a = abs(f);
	if (a < 256.0) {
		return clamp(int(roundEven(f)), -128, 127);
	}
	if (a < 2147483648.0) {
		return f > 0.0 ? 127 : -128;
	}
	return -128; // NaN, ±Inf, beyond int32
}

// sat8 is q8 as a byte.
uint sat8(float f) { return uint(q8(f)) & 0xFFu; }

// amax_bits folds |v| into amax, the largest |x| so far as float bits
// (ordered as the floats for non-NaN values): NaNs are skipped, as
// quant's absMax skips them.
uint amax_bits(uint amax, float v) {
	const uint a = floatBitsToUint(v) & 0x7FFFFFFFu;
	return (a <= 0x7F800000u && a > amax) ? a : amax;
}

// q8_scales gives the Q8_0 scales of a block whose largest |x| has bits
// amax: h = fp16(amax/127) as fp16 bits and id = 127/amax (0 for an
// all-zero block), both divisions rounded to nearest even (div_rn).
void q8_scales(uint amax, out uint h, out float id) {
	h = amax == 0u ? 0u : fp16(floatBitsToUint(div_rn(amax, floatBitsToUint(127.0))));
	id = amax == 0u ? 0.0 : div_rn(floatBitsToUint(127.0), amax);
}
