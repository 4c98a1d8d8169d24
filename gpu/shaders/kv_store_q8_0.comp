#version 450
// Stores n rows of float32 K or V values into a Q8_0 cache, bit for bit
// as the CPU's cache stores them (quant.QuantizeRowQ8_0, ggml's x86
// quantize_row_q8_0): per block of 32 values, amax = max |x| (NaNs
// skipped), d = fp16(amax/127), q = round-half-even(x·(127/amax))
// saturated to int8 (NaN, ±Inf and |x·id| ≥ 2^31 give -128, as
// roundSat8). Both divisions are rounded to nearest even by integer long
// division and the fp16 conversion is done on the bits, since a device's
// float division may be off by 2.5 ULP and packHalf2x16's rounding is the
// implementation's. (A device that flushes subnormal floats may differ on
// subnormal inputs.)
//
// Row t goes to cell (seq, pos) = idx[2t], idx[2t+1], at row seq·n_ctx +
// pos of dim values (dim/32 blocks of 34 bytes; dim a multiple of 64, so
// that rows start 4-aligned). Invocation x of workgroup row y stores the
// pair of blocks x of row y: 68 bytes, 17 whole words, so no two
// invocations write one word.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 64;

layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform Push {
	uint s_off;   // float offset of row 0
	uint idx_off; // int offset of row 0's (seq, pos)
	uint dim;     // values per row, a multiple of 64
	uint n_ctx;
} p;

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

// sat8 is quant's roundSat8 as a byte.
uint sat8(float f) {
	const float a = abs(f);
	int q;
	if (a < 256.0) {
		q = clamp(int(roundEven(f)), -128, 127);
	} else if (a < 2147483648.0) {
		q = f > 0.0 ? 127 : -128;
	} else {
		q = -128; // NaN, ±Inf, beyond int32
	}
	return uint(q) & 0xFFu;
}

uint bytes[68];

// block quantizes the 32 values from s[sb] into bytes[o..o+33].
void block(uint sb, uint o) {
	uint amax = 0u; // |x| bits: ordered as the floats for non-NaN x
	for (uint j = 0u; j < 32u; j++) {
		const uint a = floatBitsToUint(s[sb + j]) & 0x7FFFFFFFu;
		if (a <= 0x7F800000u && a > amax) {
			amax = a;
		}
	}
	const uint h = amax == 0u ? 0u : fp16(floatBitsToUint(div_rn(amax, floatBitsToUint(127.0))));
	bytes[o] = h & 0xFFu;
	bytes[o + 1u] = h >> 8;
	const float id = amax == 0u ? 0.0 : div_rn(floatBitsToUint(127.0), amax);
	for (uint j = 0u; j < 32u; j++) {
		precise const float f = s[sb + j] * id;
		bytes[o + 2u + j] = sat8(f);
	}
}

void main() {
	const uint t = gl_WorkGroupID.y;
	const uint i = gl_GlobalInvocationID.x; // pair of blocks
	if (i >= p.dim / 64u) {
		return;
	}
	const uint cell = uint(idx[p.idx_off + 2u * t]) * p.n_ctx + uint(idx[p.idx_off + 2u * t + 1u]);
	const uint sb = p.s_off + t * p.dim + 64u * i;
	block(sb, 0u);
	block(sb + 32u, 34u);
	const uint db = cell * (p.dim / 64u) * 17u + 17u * i;
	for (uint k = 0u; k < 17u; k++) {
		d[db + k] = bytes[4u * k] | (bytes[4u * k + 1u] << 8) | (bytes[4u * k + 2u] << 16) | (bytes[4u * k + 3u] << 24);
	}
}
