//go:build cgo

// AVX2 dot products of float weights with activations of the same type
// (F32 x F32, F16 x F16, BF16 x BF16). Halves are widened exactly to
// float32 (vcvtph2ps; bf16 by a shift), so every product is exact for F16
// and BF16; products accumulate with FMA in float32 lanes, 16 elements per
// step in two lane sets per activation row (quant's scalar dots accumulate
// in float64: the difference is float32 rounding of the sums). Any cols
// works; a tail of fewer than 8 elements is done in scalar code.

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

// FI_FLOAT_TILE(name, esz, ld8, ld1) defines a tile for elements of esz
// bytes loaded 8 at a time by ld8 and singly by ld1.
#define FI_FLOAT_TILE(name, esz, ld8, ld1)                                                               \
	FI_INLINE void name(const uint8_t *w, int64_t cols, const uint8_t *a, int64_t as, float *out,         \
	                    int64_t os, const int na) {                                                      \
		__m256 acc0[4], acc1[4];                                                                         \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc0[j] = _mm256_setzero_ps(), acc1[j] = _mm256_setzero_ps();        \
		int64_t i = 0;                                                                                   \
		for (; i + 16 <= cols; i += 16) {                                                                \
			const __m256 w0 = ld8(w + (esz) * i), w1 = ld8(w + (esz) * (i + 8));                          \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                                               \
				const uint8_t *y = a + j * as + (esz) * i;                                               \
				acc0[j] = _mm256_fmadd_ps(w0, ld8(y), acc0[j]);                                          \
				acc1[j] = _mm256_fmadd_ps(w1, ld8(y + 8 * (esz)), acc1[j]);                              \
			}                                                                                            \
		}                                                                                                \
		if (i + 8 <= cols) {                                                                             \
			const __m256 w0 = ld8(w + (esz) * i);                                                        \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) acc0[j] = _mm256_fmadd_ps(w0, ld8(a + j * as + (esz) * i), acc0[j]); \
			i += 8;                                                                                      \
		}                                                                                                \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                                                   \
			float s = hsum_ps(_mm256_add_ps(acc0[j], acc1[j]));                                          \
			for (int64_t k = i; k < cols; k++) s += ld1(w + (esz) * k) * ld1(a + j * as + (esz) * k);   \
			out[j * os] = s;                                                                             \
		}                                                                                                \
	}

// FI_FLOAT_TILE2(name, esz, ld8, ld1) defines a tile of two weight rows (w
// and w + ws) times na activation rows, one accumulator per pair: per 8
// elements 2 + na loads for 2·na FMAs, against 1 + na loads for na FMAs in
// a one-row tile, so that with several activation rows the FMAs, not the
// loads, bound it. It writes out[j*os] and out[j*os + 1].
#define FI_FLOAT_TILE2(name, esz, ld8, ld1)                                                              \
	FI_INLINE void name(const uint8_t *w, int64_t ws, int64_t cols, const uint8_t *a, int64_t as,         \
	                    float *out, int64_t os, const int na) {                                          \
		__m256 c0[4], c1[4];                                                                             \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) c0[j] = _mm256_setzero_ps(), c1[j] = _mm256_setzero_ps(); \
		int64_t i = 0;                                                                                   \
		for (; i + 8 <= cols; i += 8) {                                                                  \
			const __m256 w0 = ld8(w + (esz) * i), w1 = ld8(w + ws + (esz) * i);                            \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                       \
				const __m256 y = ld8(a + j * as + (esz) * i);                                            \
				c0[j] = _mm256_fmadd_ps(w0, y, c0[j]);                                                   \
				c1[j] = _mm256_fmadd_ps(w1, y, c1[j]);                                                   \
			}                                                                                            \
		}                                                                                                \
		float s0[4], s1[4];                                                                              \
		if (na == 4) {                                                                                   \
			_mm_storeu_ps(s0, hsum4_ps(c0[0], c0[1], c0[2], c0[3]));                                     \
			_mm_storeu_ps(s1, hsum4_ps(c1[0], c1[1], c1[2], c1[3]));                                     \
		} else {                                                                                         \
			_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) s0[j] = hsum_ps(c0[j]), s1[j] = hsum_ps(c1[j]); \
		}                                                                                                \
		_Pragma("GCC unroll 4") for (int j = 0; j < na; j++) {                                           \
			for (int64_t k = i; k < cols; k++) {                                                         \
				const float y = ld1(a + j * as + (esz) * k);                                             \
				s0[j] += ld1(w + (esz) * k) * y;                                                         \
				s1[j] += ld1(w + ws + (esz) * k) * y;                                                    \
			}                                                                                            \
			out[j * os] = s0[j];                                                                         \
			out[j * os + 1] = s1[j];                                                                     \
		}                                                                                                \
	}

// hsum4_ps returns the lane sums of a, b, c and d.
FI_INLINE __m128 hsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d) {
	const __m256 g = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
	return _mm_add_ps(_mm256_castps256_ps128(g), _mm256_extractf128_ps(g, 1));
}

FI_FLOAT_TILE(tile_f32, 4, ld8_f32, ld1_f32)
FI_FLOAT_TILE(tile_f16, 2, ld8_f16, ld1_f16)
FI_FLOAT_TILE(tile_bf16, 2, ld8_bf16, ld1_bf16)
FI_FLOAT_TILE2(tile2_f32, 4, ld8_f32, ld1_f32)
FI_FLOAT_TILE2(tile2_f16, 2, ld8_f16, ld1_f16)
FI_FLOAT_TILE2(tile2_bf16, 2, ld8_bf16, ld1_bf16)

// FI_FLOAT_ROWS(tile, tile2): with several activation rows, float weight
// rows go in pairs through tile2, an odd last row through tile.
#define FI_FLOAT_ROWS(tile, tile2)                                                                       \
	int64_t r = rs;                                                                                      \
	for (; r + 2 <= re; r += 2) tile2(w + r * ws, ws, cols, at, as, ot + r, os, NA);                     \
	if (r < re) tile(w + r * ws, cols, at, as, ot + r, os, NA)

#define FI_DEFINE_GEMM_F(name, tile, tile2) FI_DEFINE_GEMM_ROWS(name, tile, FI_FLOAT_ROWS(tile, tile2))

FI_DEFINE_GEMM_F(gemm_f32, tile_f32, tile2_f32)
FI_DEFINE_GEMM_F(gemm_f16, tile_f16, tile2_f16)
FI_DEFINE_GEMM_F(gemm_bf16, tile_bf16, tile2_bf16)

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
