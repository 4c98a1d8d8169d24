//go:build cgo

// Activation quantization with AVX2: one float32 row to the vec-dot type of
// a weight (Q8_0, Q8_1, Q8_K, F16, BF16, F32), byte-identical to
// quant.QuantizeRow on every input, NaN and Inf included. Each function
// states which Go expression it reproduces; the rounding steps are the same
// float32 operations in the same order (no FMA: there is no a*b+c here).

#pragma GCC target("avx2,fma,f16c")

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kern.h"

// f32_to_f16 is quant.FP32ToFP16: F16C rounding (nearest even), except NaN
// becomes sign|0x7e00 (F16C would keep payload bits).
static inline uint16_t f32_to_f16(float f) {
	uint32_t b;
	memcpy(&b, &f, 4);
	if ((b & 0x7fffffff) > 0x7f800000) {
		return (uint16_t)((b >> 16) & 0x8000) | 0x7e00;
	}
	return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

// fi_f16_avx2: see kern.h.
uint16_t fi_f16_avx2(float f) { return f32_to_f16(f); }

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

// abs_max_ps returns the largest |x| over n floats (n a multiple of 8),
// ignoring NaN like quant's absMax: max_ps returns its second operand when
// either is NaN, so a NaN element never enters the accumulator.
static inline float abs_max_ps(const float *x, int n) {
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 m = _mm256_setzero_ps();
	for (int i = 0; i < n; i += 8) {
		m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
	}
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	return _mm_cvtss_f32(h);
}

// round_q rounds x*id to the nearest integer, ties to even, as int32;
// NaN and values beyond int32 give INT32_MIN (cvtps2dq), as quant's
// roundSat8 before saturation.
static inline __m256i round_q(__m256 x, __m256 id) {
	return _mm256_cvtps_epi32(
	    _mm256_round_ps(_mm256_mul_ps(x, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// pack_sat8 packs four vectors of 8 int32 into 32 int8 with signed
// saturation, in element order.
static inline __m256i pack_sat8(__m256i a, __m256i b, __m256i c, __m256i d) {
	__m256i ab = _mm256_packs_epi32(a, b); // a0-3 b0-3 | a4-7 b4-7
	__m256i cd = _mm256_packs_epi32(c, d);
	__m256i q = _mm256_packs_epi16(ab, cd); // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
	return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// hsum_epi32 adds 8 int32 lanes with wraparound.
static inline int32_t hsum_epi32(__m256i v) {
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(s);
}

// quantize_q8 is quant.QuantizeRowQ8_0 (with_sum = 0, 34-byte blocks) and
// QuantizeRowQ8_1 (with_sum = 1, 36-byte blocks: s = fp16(d*float32(sum))
// where sum adds the rounded values before saturation, wrapping).
static inline void quantize_q8(const float *x, int64_t n, uint8_t *dst, int with_sum) {
	const int bsz = with_sum ? 36 : 34;
	const int qoff = with_sum ? 4 : 2;
	for (int64_t i = 0; i < n / 32; i++) {
		const float *xb = x + 32 * i;
		uint8_t *b = dst + bsz * i;
		float amax = abs_max_ps(xb, 32);
		float d = amax / 127.0f;
		put16(b, f32_to_f16(d));
		float idf = amax != 0.0f ? 127.0f / amax : 0.0f;
		__m256 id = _mm256_set1_ps(idf);
		__m256i i0 = round_q(_mm256_loadu_ps(xb + 0), id);
		__m256i i1 = round_q(_mm256_loadu_ps(xb + 8), id);
		__m256i i2 = round_q(_mm256_loadu_ps(xb + 16), id);
		__m256i i3 = round_q(_mm256_loadu_ps(xb + 24), id);
		_mm256_storeu_si256((__m256i *)(b + qoff), pack_sat8(i0, i1, i2, i3));
		if (with_sum) {
			__m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
			put16(b + 2, f32_to_f16(d * (float)hsum_epi32(s)));
		}
	}
}

// q8k_q is quant's int8(min(127, nearestInt(iscale*v))): round half to even,
// INT32_MIN for NaN/Inf, clamp above at 127 only, then keep the low byte
// (Go's int8 conversion truncates). Returns the 8 results in the low byte
// of each int32 lane, other bytes zero.
static inline __m256i q8k_q(__m256 x, __m256 iscale) {
	__m256i q = _mm256_min_epi32(round_q(x, iscale), _mm256_set1_epi32(127));
	return _mm256_and_si256(q, _mm256_set1_epi32(0xff));
}

// quantize_q8k is quant.QuantizeRowQ8_K: max is the first value of largest
// magnitude, iscale = -127/max, d = 1/iscale, bsums = sums of 16.
static void quantize_q8k(const float *x, int64_t n, uint8_t *dst) {
	const __m256 sign = _mm256_set1_ps(-0.0f);
	for (int64_t i = 0; i < n / 256; i++) {
		const float *xb = x + 256 * i;
		uint8_t *b = dst + 292 * i;
		float amax = abs_max_ps(xb, 256);
		if (amax == 0.0f) {
			memset(b, 0, 292);
			continue;
		}
		// first index with |x| == amax (NaN compares unequal).
		__m256 va = _mm256_set1_ps(amax);
		int first = 0;
		for (int j = 0; j < 256; j += 8) {
			__m256 e = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)), va, _CMP_EQ_OQ);
			int m = _mm256_movemask_ps(e);
			if (m) {
				first = j + __builtin_ctz(m);
				break;
			}
		}
		float iscale = -127.0f / xb[first];
		__m256 vs = _mm256_set1_ps(iscale);
		uint8_t *qs = b + 4;
		for (int j = 0; j < 256; j += 32) {
			__m256i q0 = q8k_q(_mm256_loadu_ps(xb + j + 0), vs);
			__m256i q1 = q8k_q(_mm256_loadu_ps(xb + j + 8), vs);
			__m256i q2 = q8k_q(_mm256_loadu_ps(xb + j + 16), vs);
			__m256i q3 = q8k_q(_mm256_loadu_ps(xb + j + 24), vs);
			// values are in [0, 255]: unsigned packs are exact.
			__m256i q01 = _mm256_packus_epi32(q0, q1);
			__m256i q23 = _mm256_packus_epi32(q2, q3);
			__m256i q = _mm256_packus_epi16(q01, q23);
			q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
			_mm256_storeu_si256((__m256i *)(qs + j), q);
			// bsums of the two groups of 16: sign-extend and add.
			__m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
			__m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
			__m256i s = _mm256_madd_epi16(_mm256_hadd_epi16(lo, hi), _mm256_set1_epi16(1));
			// s (int32): lo0+lo1 lo2+lo3 hi0+hi1 hi2+hi3 | lo4.. lo6.. hi4.. hi6..
			int32_t t[8];
			_mm256_storeu_si256((__m256i *)t, s);
			int16_t g0 = (int16_t)(t[0] + t[1] + t[4] + t[5]);
			int16_t g1 = (int16_t)(t[2] + t[3] + t[6] + t[7]);
			memcpy(b + 260 + 2 * (j / 16), &g0, 2);
			memcpy(b + 260 + 2 * (j / 16) + 2, &g1, 2);
		}
		float d = 1.0f / iscale;
		memcpy(b, &d, 4);
	}
}

// quantize_f16 is quant.QuantizeRowF16 (vcvtps2ph, NaN -> sign|0x7e00).
static void quantize_f16(const float *x, int64_t n, uint8_t *dst) {
	int64_t i = 0;
	const __m128i m7fff = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
	const __m128i sgn = _mm_set1_epi16((short)0x8000), qnan = _mm_set1_epi16(0x7e00);
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
		__m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, m7fff), inf);
		__m128i fix = _mm_or_si128(_mm_and_si128(h, sgn), qnan);
		_mm_storeu_si128((__m128i *)(dst + 2 * i), _mm_blendv_epi8(h, fix, nan));
	}
	for (; i < n; i++) {
		put16(dst + 2 * i, f32_to_f16(x[i]));
	}
}

// quantize_bf16 is quant.QuantizeRowBF16: nearest even; NaN keeps its top
// bits with the quiet bit set.
static void quantize_bf16(const float *x, int64_t n, uint8_t *dst) {
	int64_t i = 0;
	const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
	const __m256i r = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), q = _mm256_set1_epi32(0x40);
	for (; i + 16 <= n; i += 16) {
		__m256i v[2];
		for (int k = 0; k < 2; k++) {
			__m256i b = _mm256_loadu_si256((const __m256i *)(x + i + 8 * k));
			__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), inf);
			__m256i rn = _mm256_add_epi32(_mm256_add_epi32(b, r), _mm256_and_si256(_mm256_srli_epi32(b, 16), one));
			__m256i h = _mm256_blendv_epi8(_mm256_srli_epi32(rn, 16),
			                               _mm256_or_si256(_mm256_srli_epi32(b, 16), q), nan);
			v[k] = h;
		}
		__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v[0], v[1]), _MM_SHUFFLE(3, 1, 2, 0));
		_mm256_storeu_si256((__m256i *)(dst + 2 * i), p);
	}
	for (; i < n; i++) {
		uint32_t b;
		memcpy(&b, x + i, 4);
		uint16_t h = (b & 0x7fffffff) > 0x7f800000 ? (uint16_t)((b >> 16) | 0x40)
		                                            : (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
		put16(dst + 2 * i, h);
	}
}

// fi_act_row_bytes: see kern.h.
int64_t fi_act_row_bytes(int t, int64_t cols) {
	switch (t) {
	case FI_Q8_0: return cols / 32 * 34;
	case FI_Q8_1: return cols / 32 * 36;
	case FI_Q8_K: return cols / 256 * 292;
	case FI_F16:
	case FI_BF16: return 2 * cols;
	case FI_F32: return 4 * cols;
	}
	return -1;
}

int fi_quantize_rows_avx2(int t, const float *src, int64_t nrows, int64_t cols, uint8_t *dst) {
	const int64_t rb = fi_act_row_bytes(t, cols);
	if (rb < 0) return -1;
	for (int64_t r = 0; r < nrows; r++) {
		const float *x = src + r * cols;
		uint8_t *d = dst + r * rb;
		switch (t) {
		case FI_Q8_0: quantize_q8(x, cols, d, 0); break;
		case FI_Q8_1: quantize_q8(x, cols, d, 1); break;
		case FI_Q8_K: quantize_q8k(x, cols, d); break;
		case FI_F16: quantize_f16(x, cols, d); break;
		case FI_BF16: quantize_bf16(x, cols, d); break;
		case FI_F32: memcpy(d, x, (size_t)(4 * cols)); break;
		}
	}
	return 0;
}
