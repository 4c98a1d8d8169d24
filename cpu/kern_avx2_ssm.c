//go:build cgo

// AVX2 kernels of the Mamba-2 layers (model.Mamba; the plain Go versions
// are ssmScanHead and ssmConvRows in mamba.go): the selective scan with a
// scalar decay per head and the D skip (ggml_ssm_scan's Mamba-2 path), and
// the causal convolution with its bias and SiLU (ggml_ssm_conv).
//
// The scan runs token by token, for prefill as for decode, with the same
// arithmetic per token whatever the number of tokens, so a prefill of n
// tokens gives bit for bit the outputs and state of n single-token calls.
// A state row (d_state floats) is updated in chunks of up to 64 floats
// held in 8 registers while a block of SSM_T tokens passes over it (B, C
// and x of those tokens are copied to a scratch, where they stay in L1),
// so the state is read and written once per block, not once per token. Per element: s = fma(s, dA, B·x·Δ), y += s·C
// (fused, in 8 lanes and two partial sums per chunk): not the Go loop's
// order or rounding, within the tolerance TestSSMKernels states.
//
// The convolution runs token by token along the rows, 8 channels at a
// time, its taps and state transposed into a scratch (tap major) so that
// every load is a row; each sum from tap 0, unfused, as the Go loop, so
// its sums are the Go loop's bits;
// its SiLU takes fa_exp8 (within 2 ulp) where Go takes math.Exp.
// Contraction into FMA is off in this file: the convolution's products
// round before they are added, as in Go; the scan's fused steps are
// written as FMA intrinsics.

#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_avx2.h"

// SSM_T tokens per block: their B and C (2·d_state floats each) and the
// state chunk stay in L1 while the block passes over every row.
#define SSM_T 16

// softplus is ggml_compute_softplus_f32 as softplusf32 computes it.
static float softplus(float x) {
	if (x > 20) return x;
	return (float)log((double)(1.0f + (float)exp((double)x)));
}

// tail_mask8 has lanes [0, r) set (r in 1..8).
FI_INLINE __m256i tail_mask8(int64_t r) {
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// scan_chunk advances nv vectors (the last one masked by tm when masked) of
// one state row at s over nt tokens: B and C of token t at bc + t·bs and
// bc + t·bs + cOff, its input x at xs[t·xys]; each token's partial sum
// goes to (first) or is added to y[t·xys].
FI_INLINE void scan_chunk(const int nv, const int masked, __m256i tm, float *s, const float *bc, int64_t bs,
                          int64_t cOff, const float *xs, int64_t xys, const float *sp, const float *da, int64_t nt,
                          float *y, int first) {
	__m256 sv[8];
#pragma GCC unroll 8
	for (int v = 0; v < nv; v++)
		sv[v] = masked && v == nv - 1 ? _mm256_maskload_ps(s + 8 * v, tm) : _mm256_loadu_ps(s + 8 * v);
	for (int64_t t = 0; t < nt; t++) {
		const float *B = bc + t * bs, *C = B + cOff;
		const __m256 xdt = _mm256_set1_ps(xs[t * xys] * sp[t]);
		const __m256 dA = _mm256_set1_ps(da[t]);
		__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) {
			__m256 b, c;
			if (masked && v == nv - 1) {
				b = _mm256_maskload_ps(B + 8 * v, tm), c = _mm256_maskload_ps(C + 8 * v, tm);
			} else {
				b = _mm256_loadu_ps(B + 8 * v), c = _mm256_loadu_ps(C + 8 * v);
			}
			sv[v] = _mm256_fmadd_ps(sv[v], dA, _mm256_mul_ps(b, xdt));
			if (v & 1)
				acc1 = _mm256_fmadd_ps(sv[v], c, acc1);
			else
				acc0 = _mm256_fmadd_ps(sv[v], c, acc0);
		}
		const float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
		if (first)
			y[t * xys] = sum;
		else
			y[t * xys] += sum;
	}
#pragma GCC unroll 8
	for (int v = 0; v < nv; v++) {
		if (masked && v == nv - 1)
			_mm256_maskstore_ps(s + 8 * v, tm, sv[v]);
		else
			_mm256_storeu_ps(s + 8 * v, sv[v]);
	}
}

#define SCAN_CASE(nv)                                                                                     \
	case nv:                                                                                              \
		if (masked)                                                                                       \
			scan_chunk(nv, 1, tm, s, bc, bs, cOff, xs, xys, sp, da, nt, y, first);                        \
		else                                                                                              \
			scan_chunk(nv, 0, tm, s, bc, bs, cOff, xs, xys, sp, da, nt, y, first);                        \
		break;

// scan_chunk_n is scan_chunk for a run-time nv in 1..8.
static void scan_chunk_n(int nv, int masked, __m256i tm, float *s, const float *bc, int64_t bs, int64_t cOff,
                         const float *xs, int64_t xys, const float *sp, const float *da, int64_t nt, float *y,
                         int first) {
	switch (nv) {
		SCAN_CASE(1)
		SCAN_CASE(2)
		SCAN_CASE(3)
		SCAN_CASE(4)
		SCAN_CASE(5)
		SCAN_CASE(6)
		SCAN_CASE(7)
		SCAN_CASE(8)
	}
}

// fi_ssm_scan_avx2: see kern.h.
int fi_ssm_scan_avx2(float *y, const float *xbc, const float *dt, const float *a, const float *d, float *state, int64_t n,
                      int64_t nh, int64_t hd, int64_t ng, int64_t ds, int64_t h0, int64_t h1) {
	const int64_t inner = nh * hd, cd = inner + 2 * ng * ds;
	const int64_t nvec = (ds + 7) / 8, rem = ds % 8;
	const __m256i tm = tail_mask8(rem ? rem : 8);
	// A block's B and C (2·ds floats a token), x and y (hd floats a token
	// each) are copied to and from this scratch: rows of xbc and y are
	// 4 KiB multiples apart for Nemotron's shapes, so in place the block's
	// 16 tokens would share a few L1 sets and evict each other.
	float *const scratch = malloc((size_t)SSM_T * (size_t)(2 * ds + 2 * hd) * sizeof(float));
	if (!scratch) return -1;
	float *const bcb = scratch, *const xb = bcb + SSM_T * 2 * ds, *const yb = xb + SSM_T * hd;
	float sp[SSM_T], da[SSM_T];
	for (int64_t h = h0; h < h1; h++) {
		const int64_t g = h / (nh / ng);
		float *sh = state + h * hd * ds;
		const float ah = a[h], dh = d[h];
		for (int64_t t0 = 0; t0 < n; t0 += SSM_T) {
			const int64_t nt = n - t0 < SSM_T ? n - t0 : SSM_T;
			for (int64_t t = 0; t < nt; t++) {
				const float *row = xbc + (t0 + t) * cd;
				sp[t] = softplus(dt[(t0 + t) * nh + h]);
				da[t] = (float)exp((double)(sp[t] * ah));
				memcpy(bcb + t * 2 * ds, row + inner + g * ds, (size_t)ds * sizeof(float));
				memcpy(bcb + t * 2 * ds + ds, row + inner + (ng + g) * ds, (size_t)ds * sizeof(float));
				memcpy(xb + t * hd, row + h * hd, (size_t)hd * sizeof(float));
			}
			for (int64_t i = 0; i < hd; i++) {
				for (int64_t v0 = 0; v0 < nvec; v0 += 8) {
					const int nv = (int)(nvec - v0 < 8 ? nvec - v0 : 8);
					const int masked = rem != 0 && v0 + nv == nvec;
					scan_chunk_n(nv, masked, tm, sh + i * ds + 8 * v0, bcb + 8 * v0, 2 * ds, ds, xb + i, hd, sp, da, nt,
					             yb + i, v0 == 0);
				}
			}
			for (int64_t t = 0; t < nt; t++) {
				float *yo = y + (t0 + t) * inner + h * hd;
				const float *xt = xb + t * hd, *yt = yb + t * hd;
				for (int64_t i = 0; i < hd; i++) yo[i] = yt[i] + xt[i] * dh; // the D skip
			}
		}
	}
	free(scratch);
	return 0;
}

// fi_ssm_conv_avx2: see kern.h.
int fi_ssm_conv_avx2(float *out, const float *x, float *state, const float *w, const float *bias, int64_t n,
                     int64_t ch, int64_t k, int64_t c0, int64_t c1) {
	if (k < 2 || k > 16) return -1; // in[] below holds 16 rows
	const int64_t k1 = k - 1, nc = c1 - c0;
	// the range's taps and state values transposed, tap (state index)
	// major, so that each token reads rows: wt[i·nc + c] is tap i of
	// channel c0+c, st[j·nc + c] its state value j
	float *const wt = malloc((size_t)(k + k1) * (size_t)nc * sizeof(float));
	if (!wt) return -1;
	float *const st = wt + k * nc;
	for (int64_t c = 0; c < nc; c++) {
		for (int64_t i = 0; i < k; i++) wt[i * nc + c] = w[(c0 + c) * k + i];
		for (int64_t j = 0; j < k1; j++) st[j * nc + c] = state[(c0 + c) * k1 + j];
	}
	const __m256i tm = tail_mask8(nc % 8 ? nc % 8 : 8);
	for (int64_t t = 0; t < n; t++) {
		// the k input rows of token t: state rows, then x's
		const float *in[16];
		for (int64_t i = 0; i < k; i++) {
			const int64_t j = t + i;
			in[i] = j < k1 ? st + j * nc : x + (j - k1) * ch + c0;
		}
		float *o = out + t * ch + c0;
		for (int64_t c = 0; c < nc; c += 8) {
			const int tail = nc - c < 8;
			__m256 s = _mm256_setzero_ps();
			for (int64_t i = 0; i < k; i++) {
				const __m256 v = tail ? _mm256_maskload_ps(in[i] + c, tm) : _mm256_loadu_ps(in[i] + c);
				const __m256 wv = tail ? _mm256_maskload_ps(wt + i * nc + c, tm) : _mm256_loadu_ps(wt + i * nc + c);
				s = _mm256_add_ps(s, _mm256_mul_ps(v, wv)); // from tap 0, unfused
			}
			if (bias) s = _mm256_add_ps(s, tail ? _mm256_maskload_ps(bias + c0 + c, tm) : _mm256_loadu_ps(bias + c0 + c));
			const __m256 e = fa_exp8(_mm256_sub_ps(_mm256_setzero_ps(), s));
			const __m256 r = _mm256_div_ps(s, _mm256_add_ps(_mm256_set1_ps(1), e));
			if (tail)
				_mm256_maskstore_ps(o + c, tm, r);
			else
				_mm256_storeu_ps(o + c, r);
		}
	}
	// the new state: each channel's last k-1 values of state ++ inputs
	for (int64_t j = 0; j < k1; j++) {
		const int64_t jj = n + j; // index in state ++ inputs
		for (int64_t c = 0; c < nc; c++)
			state[(c0 + c) * k1 + j] = jj < k1 ? st[jj * nc + c] : x[(jj - k1) * ch + c0 + c];
	}
	free(wt);
	return 0;
}
