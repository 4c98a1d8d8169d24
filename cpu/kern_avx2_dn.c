//go:build cgo

// AVX2 kernels of the gated delta net's recurrent layers (kern_dn.go):
// the delta rule of one value head over n tokens, and the short causal
// convolution with SiLU.
//
// The delta rule (ggml_compute_forward_gated_delta_net_one_chunk, state
// stored transposed: row j of s is column j of S) is, per token and per
// row j: s_j ← a·s_j; δ_j = (v_j − s_j·k)·β; s_j += δ_j·k; o_j = s_j·q·scale.
// Each row is its own recurrence (it reads only k, q, v_j, a and β), so the
// kernel runs blocks of 8 rows through a block of tokens while those rows
// stay in L1, sharing each load of k and q between the 8 rows, and sums
// the 8 rows' dot products in one transposed reduction. Per row and token
// it computes s_j·k before the decay (a·(s_j·k) in place of (a·s_j)·k) and
// the update as fma(k, δ_j, a·s_j), so it differs from the Go loop in the
// rounding of the sums (tolerance: kern_dn.go).
//
// The convolution adds its k products in the Go loop's order, without
// FMA, eight channels per vector, and takes SiLU from fi_swiglu_avx2 with
// an up-projection of ones: bit for bit the Go loop's results.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kern.h"
#include "kern_avx2.h"

// DN_TOKENS is the token block: its k and q rows (2·DN_TOKENS·d floats)
// stay in L1 while every block of 8 state rows meets them.
#define DN_TOKENS 16

// reduce8 returns the vector whose lane r is the sum of the lanes of a[r].
FI_INLINE __m256 reduce8(const __m256 *a) {
	const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
	const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
	const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// fi_dn_delta_avx2: see kern.h.
int fi_dn_delta_avx2(float *s, int64_t d, int64_t n, const float *q, const float *k, const float *v, int64_t xs,
                     const float *g, const float *beta, int64_t gs, float *out, int64_t os, float scale) {
	if (d <= 0 || d % 8 != 0) return -1;
	const int64_t nc = d / 8;
	float dec[DN_TOKENS], bet[DN_TOKENS];
	for (int64_t t0 = 0; t0 < n; t0 += DN_TOKENS) {
		const int64_t tn = n - t0 < DN_TOKENS ? n - t0 : DN_TOKENS;
		for (int64_t t = 0; t < tn; t++) {
			dec[t] = (float)exp((double)g[(t0 + t) * gs]);
			bet[t] = beta[(t0 + t) * gs];
		}
		for (int64_t j0 = 0; j0 < d; j0 += 8) {
			float *sj = s + j0 * d;
			for (int64_t t = 0; t < tn; t++) {
				const int64_t x = (t0 + t) * xs;
				const float *kt = k + x, *qt = q + x;
				__m256 acc[8];
#pragma GCC unroll 8
				for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
				for (int64_t c = 0; c < nc; c++) {
					const __m256 kc = _mm256_loadu_ps(kt + 8 * c);
#pragma GCC unroll 8
					for (int r = 0; r < 8; r++)
						acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(sj + r * d + 8 * c), kc, acc[r]);
				}
				const __m256 a = _mm256_set1_ps(dec[t]);
				// δ = (v − a·(s·k))·β for the 8 rows
				const __m256 dl = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + x + j0), _mm256_mul_ps(a, reduce8(acc))),
				                                _mm256_set1_ps(bet[t]));
				float dd[8];
				_mm256_storeu_ps(dd, dl);
#pragma GCC unroll 8
				for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
				for (int64_t c = 0; c < nc; c++) {
					const __m256 kc = _mm256_loadu_ps(kt + 8 * c), qc = _mm256_loadu_ps(qt + 8 * c);
#pragma GCC unroll 8
					for (int r = 0; r < 8; r++) {
						float *p = sj + r * d + 8 * c;
						const __m256 sv = _mm256_fmadd_ps(kc, _mm256_broadcast_ss(dd + r), _mm256_mul_ps(_mm256_loadu_ps(p), a));
						_mm256_storeu_ps(p, sv);
						acc[r] = _mm256_fmadd_ps(sv, qc, acc[r]);
					}
				}
				_mm256_storeu_ps(out + (t0 + t) * os + j0, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale)));
			}
		}
	}
	return 0;
}

// ONES is the up-projection of ones the convolution hands fi_swiglu_avx2.
#define DN_ONES 256
static const float dn_ones[DN_ONES] = {
#define O8 1, 1, 1, 1, 1, 1, 1, 1
#define O64 O8, O8, O8, O8, O8, O8, O8, O8
    O64, O64, O64, O64,
#undef O64
#undef O8
};

// fi_dn_conv_avx2: see kern.h.
int fi_dn_conv_avx2(float *out, const float *x, float *state, const float *w, int64_t n, int64_t ch, int64_t c0,
                    int64_t c1, int64_t kw) {
	if (kw < 2 || kw > 16 || (c1 - c0) % 8 != 0) return -1;
	// lane l reads channel c+l: taps and state are channel-major, so each
	// tap (state value) of 8 channels is one gather (no store-to-load
	// stall of a vector assembled from scalar stores)
	const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i wi = _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)kw));
	const __m256i si = _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)(kw - 1)));
	for (int64_t c = c0; c < c1; c += 8) {
		// the 8 channels' taps, one vector per tap; their windows: kw-1
		// state values then the inputs, slid
		__m256 wv[16], win[16];
		for (int64_t i = 0; i < kw; i++) wv[i] = _mm256_i32gather_ps(w + c * kw + i, wi, 4);
		for (int64_t i = 0; i < kw - 1; i++) win[i] = _mm256_i32gather_ps(state + c * (kw - 1) + i, si, 4);
		for (int64_t t = 0; t < n; t++) {
			win[kw - 1] = _mm256_loadu_ps(x + t * ch + c);
			__m256 sum = _mm256_setzero_ps();
			for (int64_t i = 0; i < kw; i++) sum = _mm256_add_ps(sum, _mm256_mul_ps(win[i], wv[i]));
			_mm256_storeu_ps(out + t * ch + c, sum);
			for (int64_t i = 0; i < kw - 1; i++) win[i] = win[i + 1];
		}
		float tmp[8];
		for (int64_t i = 0; i < kw - 1; i++) {
			_mm256_storeu_ps(tmp, win[i]);
			for (int l = 0; l < 8; l++) state[(c + l) * (kw - 1) + i] = tmp[l];
		}
	}
	// SiLU: x/(1+e^-x)·1, row by row of the channels [c0, c1)
	for (int64_t t = 0; t < n; t++) {
		for (int64_t c = c0; c < c1; c += DN_ONES) {
			const int64_t m = c1 - c < DN_ONES ? c1 - c : DN_ONES;
			fi_swiglu_avx2(out + t * ch + c, out + t * ch + c, dn_ones, m);
		}
	}
	return 0;
}
