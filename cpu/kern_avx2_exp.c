//go:build cgo

// AVX2 exp for SwiGLU and softmax, giving bit for bit the results of the
// Go loops they replace (swiglu and expSub in backend_ew.go / backend_math.go):
// the same float64 polynomial, evaluated in the same order, four lanes at a
// time. Contraction into FMA is off in this file, since a fused
// multiply-add rounds once where Go rounds twice. Lanes outside the
// polynomial's range (x <= -87, x >= 88, NaN) take the scalar path, as in
// Go; there the result is float32(exp(x)) from the C library, which may
// differ from Go's math.Exp in the last place.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kern.h"
#include "kern_avx2.h"

#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453
#define ROUND_BIAS 0x1.8p52

// expf_slow is the scalar path outside (-87, 88).
static float expf_slow(float x) {
	if (x != x) return x;
	if (x >= 88.8f) return INFINITY;
	if (x < -104.0f) return 0.0f;
	return (float)exp((double)x);
}

// exp4 is Go's expf polynomial on four float64 lanes in range.
FI_INLINE __m128 exp4(__m256d f) {
	const __m256d t = _mm256_add_pd(_mm256_mul_pd(f, _mm256_set1_pd(LOG2E)), _mm256_set1_pd(ROUND_BIAS));
	const __m256d k = _mm256_sub_pd(t, _mm256_set1_pd(ROUND_BIAS));
	const __m256d r = _mm256_sub_pd(f, _mm256_mul_pd(k, _mm256_set1_pd(LN2)));
	const __m256d r2 = _mm256_mul_pd(r, r);
	const __m256d a = _mm256_add_pd(_mm256_set1_pd(1.0 / 2), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 6)));
	const __m256d b1 = _mm256_add_pd(_mm256_set1_pd(1.0 / 24), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 120)));
	const __m256d b2 = _mm256_add_pd(_mm256_set1_pd(1.0 / 720), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 5040)));
	const __m256d b = _mm256_add_pd(b1, _mm256_mul_pd(r2, b2));
	const __m256d p = _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(_mm256_set1_pd(1), r), _mm256_mul_pd(r2, a)),
	                                _mm256_mul_pd(_mm256_mul_pd(r2, r2), b));
	// 2^k: t holds k in its low mantissa bits (t = 1.5*2^52 + k)
	const __m256d s = _mm256_castsi256_pd(
	    _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(t), _mm256_set1_epi64x(1023)), 52));
	return _mm256_cvtpd_ps(_mm256_mul_pd(p, s));
}

// exp8 returns Go's expf of 8 lanes.
FI_INLINE __m256 exp8(__m256 x) {
	const __m256 in = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GT_OQ),
	                                _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_LT_OQ));
	__m256 e = _mm256_set_m128(exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))),
	                           exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
	const int m = _mm256_movemask_ps(in);
	if (m != 0xff) {
		float xs[8], es[8];
		_mm256_storeu_ps(xs, x);
		_mm256_storeu_ps(es, e);
		for (int i = 0; i < 8; i++) {
			if (!(m >> i & 1)) es[i] = expf_slow(xs[i]);
		}
		e = _mm256_loadu_ps(es);
	}
	return e;
}

// load_tail and store_tail move the last n < 8 floats through a vector
// (padding with zeros), so tails take the same code as the body.
FI_INLINE __m256 load_tail(const float *p, int64_t n) {
	float t[8] = {0};
	memcpy(t, p, (size_t)n * 4);
	return _mm256_loadu_ps(t);
}

FI_INLINE void store_tail(float *p, __m256 v, int64_t n) {
	float t[8];
	_mm256_storeu_ps(t, v);
	memcpy(p, t, (size_t)n * 4);
}

// swiglu8 is SwiGLU of 8 lanes: g / (1 + e^-g) * u, rounded as Go does.
FI_INLINE __m256 swiglu8(__m256 g, __m256 u) {
	const __m256 e = exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
	return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1), e)), u);
}

// fi_swiglu_avx2: see kern.h.
void fi_swiglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
	if (i < n) store_tail(out + i, swiglu8(load_tail(gate + i, n - i), load_tail(up + i, n - i)), n - i);
}

// fi_expsub_avx2: see kern.h.
double fi_expsub_avx2(float *row, int64_t n, float mx) {
	const __m256 m = _mm256_set1_ps(mx);
	double sum = 0;
	for (int64_t i = 0; i < n; i += 8) {
		const int64_t k = n - i < 8 ? n - i : 8;
		const __m256 x = k == 8 ? _mm256_loadu_ps(row + i) : load_tail(row + i, k);
		float e[8];
		_mm256_storeu_ps(e, exp8(_mm256_sub_ps(x, m)));
		memcpy(row + i, e, (size_t)k * 4);
		for (int j = 0; j < k; j++) sum += (double)e[j]; // in order, as Go
	}
	return sum;
}

// fi_softmax_avx2: see kern.h. Its exp is the float32 fa_exp8 (within 2
// ulp of Go's, a third of the time of exp8's float64 polynomial).
void fi_softmax_avx2(float *row, int64_t n, float scale) {
	const __m256 sc = _mm256_set1_ps(scale);
	__m256 mx = _mm256_set1_ps(-INFINITY);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + i), sc);
		_mm256_storeu_ps(row + i, x);
		mx = _mm256_max_ps(mx, x);
	}
	float m;
	{
		float l[8];
		_mm256_storeu_ps(l, mx);
		m = l[0];
		for (int k = 1; k < 8; k++) m = l[k] > m ? l[k] : m;
	}
	for (; i < n; i++) {
		row[i] *= scale;
		m = row[i] > m ? row[i] : m;
	}
	const __m256 mv = _mm256_set1_ps(m);
	// four float64 sums: with two, their adds' latency bounded the pass
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(), s2 = _mm256_setzero_pd(), s3 = _mm256_setzero_pd();
	for (i = 0; i + 16 <= n; i += 16) {
		const __m256 xa = _mm256_sub_ps(_mm256_loadu_ps(row + i), mv);
		const __m256 xb = _mm256_sub_ps(_mm256_loadu_ps(row + i + 8), mv);
		const __m256 ea = _mm256_blendv_ps(fa_exp8(xa), xa, _mm256_cmp_ps(xa, xa, _CMP_UNORD_Q));
		const __m256 eb = _mm256_blendv_ps(fa_exp8(xb), xb, _mm256_cmp_ps(xb, xb, _CMP_UNORD_Q));
		_mm256_storeu_ps(row + i, ea);
		_mm256_storeu_ps(row + i + 8, eb);
		s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(ea)));
		s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(ea, 1)));
		s2 = _mm256_add_pd(s2, _mm256_cvtps_pd(_mm256_castps256_ps128(eb)));
		s3 = _mm256_add_pd(s3, _mm256_cvtps_pd(_mm256_extractf128_ps(eb, 1)));
	}
	for (; i < n; i += 8) {
		const int64_t k = n - i < 8 ? n - i : 8;
		const __m256 x = k == 8 ? _mm256_loadu_ps(row + i) : load_tail(row + i, k);
		const __m256 xm = _mm256_sub_ps(x, mv);
		// NaN kept, as Go's exp keeps it
		__m256 e = _mm256_blendv_ps(fa_exp8(xm), xm, _mm256_cmp_ps(xm, xm, _CMP_UNORD_Q));
		if (k < 8) {
			// lanes past the end must not add to the sum
			const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
			e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), lane)));
			store_tail(row + i, e, k);
		} else {
			_mm256_storeu_ps(row + i, e);
		}
		s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
		s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
	}
	double l[4];
	_mm256_storeu_pd(l, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
	const __m256 inv = _mm256_set1_ps((float)(1 / ((l[0] + l[1]) + (l[2] + l[3]))));
	for (i = 0; i + 8 <= n; i += 8) {
		_mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), inv));
	}
	for (; i < n; i++) row[i] *= _mm256_cvtss_f32(inv);
}
