//go:build cgo

// AVX-512 selective scan of the Mamba-2 layers: kern_avx2_ssm.c's scan in
// 16 lanes, so a state chunk of up to 128 floats (Nemotron's whole d_state)
// sits in 8 of the 32 registers while a block of tokens passes over it;
// each token's arithmetic is the same whatever the number of tokens. The
// convolution is AVX2's (fi_ssm_conv_avx2).

#ifdef FI_SIMDE
#include "kern_simde.h"
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#include <immintrin.h>
#endif
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "kern.h"
#include "kern_avx512.h"

#ifdef FI_SIMDE
// SIMDe 0.7.4 has no masked loads and stores: lanes [0, 16) where m is set
// go through a buffer (zeros elsewhere), as the native ones do.
I5 __m512 ldm16(__mmask16 m, const float *p) {
	float t[16] = {0};
	for (int j = 0; j < 16; j++)
		if (m >> j & 1) t[j] = p[j];
	return _mm512_loadu_ps(t);
}
I5 void stm16(float *p, __mmask16 m, __m512 v) {
	float t[16];
	_mm512_storeu_ps(t, v);
	for (int j = 0; j < 16; j++)
		if (m >> j & 1) p[j] = t[j];
}
#else
#define ldm16 _mm512_maskz_loadu_ps
#define stm16 _mm512_mask_storeu_ps
#endif

// SSM_T tokens per block, as in kern_avx2_ssm.c.
#define SSM_T 16

// softplus is ggml_compute_softplus_f32 as softplusf32 computes it.
static float softplus(float x) {
	if (x > 20) return x;
	return (float)log((double)(1.0f + (float)exp((double)x)));
}

// scan_chunk16 is kern_avx2_ssm.c's scan_chunk in 16 lanes: nv vectors of
// the state row at s, the last one masked by tm when masked; B and C of
// token t at bc + t·bs and bc + t·bs + cOff, x and y at t·xys.
I5 void scan_chunk16(const int nv, const int masked, __mmask16 tm, float *s, const float *bc, int64_t bs,
                     int64_t cOff, const float *xs, int64_t xys, const float *sp, const float *da, int64_t nt,
                     float *y, int first) {
	__m512 sv[8];
	UNROLL(8)
	for (int v = 0; v < nv; v++)
		sv[v] = masked && v == nv - 1 ? ldm16(tm, s + 16 * v) : _mm512_loadu_ps(s + 16 * v);
	for (int64_t t = 0; t < nt; t++) {
		const float *B = bc + t * bs, *C = B + cOff;
		const __m512 xdt = _mm512_set1_ps(xs[t * xys] * sp[t]);
		const __m512 dA = _mm512_set1_ps(da[t]);
		__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
		UNROLL(8)
		for (int v = 0; v < nv; v++) {
			__m512 b, c;
			if (masked && v == nv - 1) {
				b = ldm16(tm, B + 16 * v), c = ldm16(tm, C + 16 * v);
			} else {
				b = _mm512_loadu_ps(B + 16 * v), c = _mm512_loadu_ps(C + 16 * v);
			}
			sv[v] = _mm512_fmadd_ps(sv[v], dA, _mm512_mul_ps(b, xdt));
			if (v & 1)
				acc1 = _mm512_fmadd_ps(sv[v], c, acc1);
			else
				acc0 = _mm512_fmadd_ps(sv[v], c, acc0);
		}
		const float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
		if (first)
			y[t * xys] = sum;
		else
			y[t * xys] += sum;
	}
	UNROLL(8)
	for (int v = 0; v < nv; v++) {
		if (masked && v == nv - 1)
			stm16(s + 16 * v, tm, sv[v]);
		else
			_mm512_storeu_ps(s + 16 * v, sv[v]);
	}
}

#define SCAN_CASE(nv)                                                                                     \
	case nv:                                                                                              \
		if (masked)                                                                                       \
			scan_chunk16(nv, 1, tm, s, bc, bs, cOff, xs, xys, sp, da, nt, y, first);                      \
		else                                                                                              \
			scan_chunk16(nv, 0, tm, s, bc, bs, cOff, xs, xys, sp, da, nt, y, first);                      \
		break;

static void scan_chunk16_n(int nv, int masked, __mmask16 tm, float *s, const float *bc, int64_t bs, int64_t cOff,
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

// fi_ssm_scan_avx512: see kern.h.
int fi_ssm_scan_avx512(float *y, const float *xbc, const float *dt, const float *a, const float *d, float *state, int64_t n,
                        int64_t nh, int64_t hd, int64_t ng, int64_t ds, int64_t h0, int64_t h1) {
	const int64_t inner = nh * hd, cd = inner + 2 * ng * ds;
	const int64_t nvec = (ds + 15) / 16, rem = ds % 16;
	const __mmask16 tm = (__mmask16)(rem ? (1u << rem) - 1 : 0xffffu);
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
					scan_chunk16_n(nv, masked, tm, sh + i * ds + 16 * v0, bcb + 16 * v0, 2 * ds, ds, xb + i, hd, sp, da,
					               nt, yb + i, v0 == 0);
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
