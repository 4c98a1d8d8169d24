//go:build cgo

// AVX2 dot products of float weights with activations of the same type
// (F32 x F32, F16 x F16, BF16 x BF16). Halves are widened exactly to
// float32 (vcvtph2ps; bf16 by a shift), so every product is exact for F16
// and BF16; products accumulate with FMA in float32 lanes, 8 elements per
// step, one chain per output (quant's scalar dots accumulate in float64:
// the difference is float32 rounding of the sums). Any cols works; a tail
// of fewer than 8 elements is done in scalar code.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

FI_INLINE __m256 ld8_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
FI_INLINE __m256 ld8_f16(const uint8_t *p) { return _mm256_cvtph_ps(ld128(p)); }
FI_INLINE __m256 ld8_bf16(const uint8_t *p) {
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16));
}
FI_INLINE float ld1_f32(const uint8_t *p) { return ld_f32(p); }
FI_INLINE float ld1_f16(const uint8_t *p) { return ld_f16(p); }
FI_INLINE float ld1_bf16(const uint8_t *p) {
	uint16_t h;
	memcpy(&h, p, 2);
	uint32_t b = (uint32_t)h << 16;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

// FI_FLOAT_TILE(name, esz, ld8, ld1) defines a tile of nr weight rows (w,
// w + ws, ...) times na activation rows (nr ≤ 2 and na ≤ 4, or nr = 4 and
// na = 1), elements of esz bytes loaded 8 at a time by ld8 and singly by
// ld1; it writes out[j*os + k] (row k, activation j). Every output is
// summed in one order whatever nr and na: one float32 FMA chain over
// 8-element steps, hsum_ps's tree, then the tail's products fused in
// order. So a row's product has the same bits alone and in a batch of any
// size (TestGemmRowsBatchInvariant), as the integer-summed quantized
// products do. Per 8 elements: nr + na loads for nr·na FMAs.
#define FI_FLOAT_TILE(name, esz, ld8, ld1)                                                               \
	FI_INLINE void name(const uint8_t *w, int64_t ws, int64_t cols, const uint8_t *a, int64_t as,         \
	                    float *out, int64_t os, const int nr, const int na) {                            \
		__m256 c[4][4];                                                                                  \
		_Pragma("GCC unroll 4") for (int k = 0; k < nr; k++)                                             \
		    _Pragma("GCC unroll 4") for (int j = 0; j < na; j++) c[k][j] = _mm256_setzero_ps();          \
		int64_t i = 0;                                                                                   \
		for (; i + 8 <= cols; i += 8) {                                                                  \
			__m256 wv[4];                                                                                \
			_Pragma("GCC unroll 4") for (int k = 0; k < nr; k++) wv[k] = ld8(w + k * ws + (esz) * i);   \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                       \
				const __m256 y = ld8(a + j * as + (esz) * i);                                            \
				_Pragma("GCC unroll 4") for (int k = 0; k < nr; k++) c[k][j] = _mm256_fmadd_ps(wv[k], y, c[k][j]); \
			}                                                                                            \
		}                                                                                                \
		_Pragma("GCC unroll 4") for (int k = 0; k < nr; k++) {                                           \
			float s[4];                                                                                  \
			if (na == 4) {                                                                               \
				hsum4_ps(c[k][0], c[k][1], c[k][2], c[k][3], s);                                         \
			} else {                                                                                     \
				_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) s[j] = hsum_ps(c[k][j]);            \
			}                                                                                            \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                       \
				for (int64_t m = i; m < cols; m++)                                                       \
					s[j] = __builtin_fmaf(ld1(w + k * ws + (esz) * m), ld1(a + j * as + (esz) * m), s[j]); \
				out[j * os + k] = s[j];                                                                  \
			}                                                                                            \
		}                                                                                                \
	}

// hsum4_ps sets s[0..3] to hsum_ps of a, b, c and d, in hsum_ps's order:
// x = low half + high half, then (x0 + x2) + (x1 + x3) (a float add is
// commutative, so only the grouping matters), four at a time.
FI_INLINE void hsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d, float *s) {
	const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
	const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
	// per 128-bit half (a|b, c|d): x0 + x2, y0 + y2, x1 + x3, y1 + y3
	const __m256 r = _mm256_add_ps(_mm256_unpacklo_ps(ab, cd), _mm256_unpackhi_ps(ab, cd));
	float u[8];
	_mm256_storeu_ps(u, _mm256_add_ps(r, _mm256_permute_ps(r, _MM_SHUFFLE(1, 0, 3, 2))));
	s[0] = u[0], s[1] = u[4], s[2] = u[1], s[3] = u[5];
}

FI_FLOAT_TILE(tile_f32, 4, ld8_f32, ld1_f32)
FI_FLOAT_TILE(tile_f16, 2, ld8_f16, ld1_f16)
FI_FLOAT_TILE(tile_bf16, 2, ld8_bf16, ld1_bf16)

// FI_DEFINE_GEMM_F(name, tile) defines a float GEMM (fi_gemm_fn) on tile.
// Decode (FI_FLOAT_DECODE): weight rows in fours (four FMA chains, one
// per output, so a row gets the same bits alone or batched; two chains
// per row ran F16 as fast and F32 slower), the fours after next
// prefetched. Several activation
// rows (FI_FLOAT_ROWS): weight rows in pairs (an odd last row alone), up
// to 4 activation rows a tile, in blocks of weight rows that stay in L2
// across the activation tiles (FI_DEFINE_GEMM_DR).
#define FI_FLOAT_DECODE(tile)                                                                            \
	int64_t r = r0;                                                                                      \
	for (; r + 4 <= r1; r += 4) {                                                                        \
		fi_prefetch(w + (r + 4 * FI_PF_ROWS) * ws, 4 * ws);                                              \
		tile(w + r * ws, ws, cols, a, as, out + r, os, 4, 1);                                            \
	}                                                                                                    \
	for (; r < r1; r++) tile(w + r * ws, ws, cols, a, as, out + r, os, 1, 1)
#define FI_FLOAT_ROWS(tile)                                                                              \
	for (int64_t r = rs; r < re; r += 2) {                                                               \
		if (re - r >= 2) {                                                                               \
			tile(w + r * ws, ws, cols, at, as, ot + r, os, 2, NA);                                       \
		} else {                                                                                         \
			tile(w + r * ws, ws, cols, at, as, ot + r, os, 1, NA);                                       \
		}                                                                                                \
	}
#define FI_DEFINE_GEMM_F(name, tile) FI_DEFINE_GEMM_DR(name, FI_FLOAT_DECODE(tile), FI_FLOAT_ROWS(tile))

FI_DEFINE_GEMM_F(gemm_f32, tile_f32)
FI_DEFINE_GEMM_F(gemm_f16, tile_f16)
FI_DEFINE_GEMM_F(gemm_bf16, tile_bf16)

fi_gemm_fn fi_avx2_gemm_f(int wt) {
	switch (wt) {
	case FI_F32: return gemm_f32;
	case FI_F16: return gemm_f16;
	case FI_BF16: return gemm_bf16;
	}
	return 0;
}

// fi_gemm_avx2: see kern.h.
int fi_gemm_avx2(int wt, const uint8_t *w, int64_t w_stride, int64_t cols, int64_t r0, int64_t r1,
                 const uint8_t *a, int64_t a_stride, int64_t nact, float *out, int64_t out_stride) {
	fi_gemm_fn f = fi_avx2_gemm_f(wt);
	if (!f) f = fi_avx2_gemm_q(wt);
	if (!f) f = fi_avx2_gemm_k(wt);
	if (!f) f = fi_avx2_gemm_iq(wt);
	if (!f) f = fi_avx2_gemm_iql(wt);
	if (!f) f = fi_avx2_gemm_iq1(wt);
	if (!f) return -1;
	if (nact >= FI_RP_MIN_ACTS) r0 += fi_avx2_gemm_rp(wt, w, w_stride, cols, r0, r1, a, a_stride, nact, out, out_stride);
	if (r1 > r0 && nact > 0) f(w, w_stride, cols, r0, r1, a, a_stride, nact, out, out_stride);
	return 0;
}

// ---- weighted sums of rows (attention's V sum) ------------------------------

// wsum_tile adds to ng (1..4) output rows of 16 columns at out (stride
// dim) the sums over j < n of w[g*ws + j] * v[j*vs + c].
FI_INLINE void wsum_tile(float *out, int64_t dim, const int ng, const float *w, int64_t ws, const float *v,
                         int64_t vs, int64_t n) {
	__m256 a0[4], a1[4];
	_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
		a0[g] = _mm256_loadu_ps(out + g * dim), a1[g] = _mm256_loadu_ps(out + g * dim + 8);
	}
	for (int64_t j = 0; j < n; j++) {
		const __m256 v0 = _mm256_loadu_ps(v + j * vs), v1 = _mm256_loadu_ps(v + j * vs + 8);
		_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
			const __m256 s = _mm256_broadcast_ss(w + g * ws + j);
			a0[g] = _mm256_fmadd_ps(s, v0, a0[g]);
			a1[g] = _mm256_fmadd_ps(s, v1, a1[g]);
		}
	}
	_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {
		_mm256_storeu_ps(out + g * dim, a0[g]), _mm256_storeu_ps(out + g * dim + 8, a1[g]);
	}
}

// fi_wsum_avx2: see kern.h.
void fi_wsum_avx2(float *out, int64_t nout, int64_t dim, const float *w, int64_t ws, const float *v, int64_t vs,
                  int64_t n) {
	int64_t c = 0;
	for (; c + 16 <= dim; c += 16) {
		int64_t g = 0;
		for (; g + 4 <= nout; g += 4) wsum_tile(out + g * dim + c, dim, 4, w + g * ws, ws, v + c, vs, n);
		for (; g < nout; g++) wsum_tile(out + g * dim + c, dim, 1, w + g * ws, ws, v + c, vs, n);
	}
	for (int64_t g = 0; g < nout; g++) {
		for (int64_t j = 0; j < n; j++) {
			const float s = w[g * ws + j];
			for (int64_t k = c; k < dim; k++) out[g * dim + k] += s * v[j * vs + k];
		}
	}
}
