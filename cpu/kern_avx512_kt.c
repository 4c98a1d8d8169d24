//go:build cgo

// AVX-512 decode scores against K rows stored in transposed tiles
// (quant.TileRows: 16 rows, unit-major). A vector loaded from one unit's
// run holds that value of all 16 rows, so a query head's scores of a tile
// are a chain of FMAs of the broadcast query value by those vectors, and
// land in the lanes without sums across lanes (the row-major kernels of
// kern_avx512_ad.c spend most of their time above the FMAs on those sums:
// docs/decisions.md). Block types and TurboQuant rows are summed per block
// on their integer values or codebook levels and scaled once per block and
// row (16 scales in a vector): the products are the same values as the
// row kernels', rounded in another order.

#ifdef FI_SIMDE
#include "kern_simde.h"
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include <immintrin.h>
#endif

#include <stdint.h>
#include <string.h>

#include "kern.h"
#include "kern_kt.h"
#include "kern_avx512.h"

// u8s widens the 16 bytes at p (one byte of every row) to int32 lanes.
I5 __m512i u8s(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

// scales returns the 16 rows' fp16 scales whose low bytes are at p and
// high bytes at p + 16 (a 2-byte field in units of 1 byte), widened.
I5 __m512 scales(const uint8_t *p) {
	const __m128i lo = _mm_loadu_si128((const __m128i *)p), hi = _mm_loadu_si128((const __m128i *)(p + 16));
	return _mm512_cvtph_ps(_mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi)));
}

// FMA2 adds value d of the NH query heads at q (dim apart) times k to the
// chains a (d even) or b (d odd): two chains per head hide the FMA latency.
#define FMA2(d, k)                                                                                                     \
	do {                                                                                                               \
		const __m512 k_ = (k);                                                                                         \
		UNROLL(4) for (int h = 0; h < NH; h++) {                                                                       \
			if ((d) % 2 == 0) {                                                                                        \
				a[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * dim + (d)]), k_, a[h]);                                   \
			} else {                                                                                                   \
				b[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * dim + (d)]), k_, b[h]);                                   \
			}                                                                                                          \
		}                                                                                                              \
	} while (0)

// tile sets o[h] (h < NH) to the scores of query heads q + h·dim against
// the 16 rows of tile t (the kind fixes its layout); lv is the TurboQuant
// codebook indexed by a code's low 4 bits.
I5 void tile(const int kind, const int NH, const uint8_t *t, int64_t dim, const float *q, __m512 lv, __m512 *o) {
	__m512 a[4], b[4];
	UNROLL(4) for (int h = 0; h < NH; h++) a[h] = b[h] = o[h] = _mm512_setzero_ps();
	switch (kind) {
	case T_F32:
		UNROLL(8) for (int64_t d = 0; d < dim; d++) FMA2(d, _mm512_loadu_ps((const float *)(t + d * 64)));
		break;
	case T_F16:
		UNROLL(8) for (int64_t d = 0; d < dim; d++) {
			FMA2(d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t + d * 32))));
		}
		break;
	case T_BF16:
		UNROLL(8) for (int64_t d = 0; d < dim; d++) {
			const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(t + d * 32)));
			FMA2(d, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
		}
		break;
	case T_Q8_0: // blocks of a 2-byte scale and 32 int8 values
		for (int64_t c = 0; c < dim; c += 32) {
			const uint8_t *blk = t + c / 32 * 34 * 16;
			UNROLL(8) for (int64_t i = 0; i < 32; i++) {
				const __m512i w = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + (2 + i) * 16)));
				FMA2(c + i, _mm512_cvtepi32_ps(w));
			}
			const __m512 sc = scales(blk);
			UNROLL(4) for (int h = 0; h < NH; h++) {
				o[h] = _mm512_fmadd_ps(sc, _mm512_add_ps(a[h], b[h]), o[h]);
				a[h] = b[h] = _mm512_setzero_ps();
			}
		}
		return;
	case T_Q4_0: // blocks of a 2-byte scale and 16 bytes: value i in byte i's low nibble, i+16 in its high one
		for (int64_t c = 0; c < dim; c += 32) {
			const uint8_t *blk = t + c / 32 * 18 * 16;
			const __m512i eight = _mm512_set1_epi32(8);
			UNROLL(8) for (int64_t i = 0; i < 16; i++) {
				const __m512i w = u8s(blk + (2 + i) * 16);
				const __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(w, _mm512_set1_epi32(15)), eight));
				const __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(w, 4), eight));
				UNROLL(4) for (int h = 0; h < NH; h++) {
					a[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * dim + c + i]), lo, a[h]);
					b[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * dim + c + 16 + i]), hi, b[h]);
				}
			}
			const __m512 sc = scales(blk);
			UNROLL(4) for (int h = 0; h < NH; h++) {
				o[h] = _mm512_fmadd_ps(sc, _mm512_add_ps(a[h], b[h]), o[h]);
				a[h] = b[h] = _mm512_setzero_ps();
			}
		}
		return;
	case T_TQ4: // a 2-byte scale, then code 2i in byte i's low nibble, 2i+1 in its high one
		UNROLL(8) for (int64_t i = 0; i < dim / 2; i++) {
			const __m512i w = u8s(t + (2 + i) * 16);
			FMA2(2 * i, _mm512_permutexvar_ps(w, lv));
			FMA2(2 * i + 1, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), lv));
		}
		break;
	case T_TQ3: // a 2-byte scale, then code j at bit 3j: 8 codes in 3 bytes
		UNROLL(2) for (int64_t j = 0; j < dim; j += 8) {
			const uint8_t *p = t + (2 + 3 * j / 8) * 16;
			const __m512i w = _mm512_or_si512(_mm512_or_si512(u8s(p), _mm512_slli_epi32(u8s(p + 16), 8)),
			                                  _mm512_slli_epi32(u8s(p + 32), 16));
			FMA2(j, _mm512_permutexvar_ps(w, lv));
			FMA2(j + 1, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 3), lv));
			FMA2(j + 2, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 6), lv));
			FMA2(j + 3, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 9), lv));
			FMA2(j + 4, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 12), lv));
			FMA2(j + 5, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 15), lv));
			FMA2(j + 6, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 18), lv));
			FMA2(j + 7, _mm512_permutexvar_ps(_mm512_srli_epi32(w, 21), lv));
		}
		break;
	}
	if (kind == T_TQ4 || kind == T_TQ3) {
		const __m512 sc = scales(t);
		UNROLL(4) for (int h = 0; h < NH; h++) o[h] = _mm512_mul_ps(sc, _mm512_add_ps(a[h], b[h]));
		return;
	}
	UNROLL(4) for (int h = 0; h < NH; h++) o[h] = _mm512_add_ps(a[h], b[h]);
}

// NOFUSE keeps a product a product: the compiler would contract it and
// the add after it into an FMA, which Go's reference does not do.
#ifdef FI_SIMDE
#define NOFUSE(v) __asm__("" : "+m"(v))
#else
#define NOFUSE(v) __asm__("" : "+v"(v))
#endif

// itile is tile for the integer kinds (kern_kt.h; kern_qint.go is the
// reference, kern_avx2_kt.c's itile the same sums): a tile's 16 bytes of
// a row pair, unpacked into 16 int16 pairs (TurboQuant codes through tab,
// the codebook on its 8-bit grid; q4_0 nibbles as they are), meet each
// head's pair qp[i] in one vpdpwssd, an int32 lane per row. kq is each
// head's scale, corr each q4_0 block's 8·Σ of the rounded query.
I5 void itile(const int kind, const int NH, const uint8_t *t, int64_t dim, const int32_t *qp, __m128i tab,
              const float *kq, const int32_t *corr, __m512 *o) {
	__m512i a[4];
	UNROLL(4) for (int h = 0; h < NH; h++) {
		a[h] = _mm512_setzero_si512();
		o[h] = _mm512_setzero_ps();
	}
	const __m128i m4 = _mm_set1_epi8(15);
#define STEP(p, i)                                                                                                     \
	do {                                                                                                               \
		const __m128i x_ = _mm_loadu_si128((const __m128i *)(p));                                                      \
		const __m128i lo_ = _mm_and_si128(x_, m4), hi_ = _mm_and_si128(_mm_srli_epi16(x_, 4), m4);                     \
		__m128i c0_ = _mm_unpacklo_epi8(lo_, hi_), c1_ = _mm_unpackhi_epi8(lo_, hi_);                                  \
		__m512i v_;                                                                                                    \
		if (kind == T_TQ4) {                                                                                           \
			v_ = _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_shuffle_epi8(tab, c1_), _mm_shuffle_epi8(tab, c0_)));      \
		} else {                                                                                                       \
			v_ = _mm512_cvtepu8_epi16(_mm256_set_m128i(c1_, c0_));                                                     \
		}                                                                                                              \
		UNROLL(4) for (int h = 0; h < NH; h++) {                                                                       \
			a[h] = _mm512_dpwssd_epi32(a[h], v_, _mm512_set1_epi32(qp[h * (dim / 2) + (i)]));                          \
		}                                                                                                              \
	} while (0)
	if (kind == T_TQ4) {
		UNROLL(4) for (int64_t i = 0; i < dim / 2; i++) STEP(t + (2 + i) * 16, i);
		const __m512 sc = scales(t);
		UNROLL(4) for (int h = 0; h < NH; h++) {
			o[h] = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a[h]), _mm512_set1_ps(kq[h])), sc);
		}
		return;
	}
	for (int64_t c = 0; c < dim; c += 32) {
		const uint8_t *blk = t + c / 32 * 18 * 16;
		UNROLL(4) for (int64_t i = 0; i < 16; i++) STEP(blk + (2 + i) * 16, c / 2 + i);
		const __m512 sc = scales(blk);
		UNROLL(4) for (int h = 0; h < NH; h++) {
			const __m512i k8 = _mm512_set1_epi32(corr[h * (dim / 32) + c / 32]);
			__m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a[h], k8)), _mm512_mul_ps(sc, _mm512_set1_ps(kq[h])));
			NOFUSE(p);
			o[h] = _mm512_add_ps(o[h], p);
			a[h] = _mm512_setzero_si512();
		}
	}
#undef STEP
}

// put stores lanes [lo, hi) of v at o + lo.
I5 void put(float *o, __m512 v, int64_t lo, int64_t hi) {
	if (lo == 0 && hi == 16) {
		_mm512_storeu_ps(o, v);
		return;
	}
	float t[16];
	_mm512_storeu_ps(t, v);
	for (int64_t r = lo; r < hi; r++) o[r] = t[r];
}

// tiles runs tile (qa non-NULL, an integer kind: itile against qa's
// rounded queries) over the tiles of rows [r0, r0+n) for every group of
// up to 4 query heads, storing row r0+j's scores at column j.
I5 void tiles(const int kind, const uint8_t *src, int64_t rb, int64_t r0, int64_t n, int64_t dim, const float *q,
              int64_t G, float *s, int64_t ls, __m512 lv, const qi_args *qa) {
	const int ints = qi_kind(kind) && qa; // a constant false for the other kinds
	const __m128i tab = ints ? _mm_loadu_si128((const __m128i *)qa->c8) : _mm_setzero_si128();
	for (int64_t i = 0; i * 16 < r0 + n; i++) {
		const int64_t lo = i == 0 ? r0 : 0, hi = r0 + n - i * 16 < 16 ? r0 + n - i * 16 : 16;
		const uint8_t *t = src + i * 16 * rb;
		const int64_t col = i * 16 - r0; // lane r is column col + r
		__m512 o[4];
		int64_t g = 0;
		for (; g + 4 <= G; g += 4) {
			if (ints) {
				itile(kind, 4, t, dim, qa->qp + g * dim / 2, tab, qa->kq + g, qa->corr + g * (dim / 32), o);
			} else {
				tile(kind, 4, t, dim, q + g * dim, lv, o);
			}
			UNROLL(4) for (int h = 0; h < 4; h++) put(s + (g + h) * ls + col, o[h], lo, hi);
		}
		for (; g < G; g++) {
			if (ints) {
				itile(kind, 1, t, dim, qa->qp + g * dim / 2, tab, qa->kq + g, qa->corr + g * (dim / 32), o);
			} else {
				tile(kind, 1, t, dim, q + g * dim, lv, o);
			}
			put(s + g * ls + col, o[0], lo, hi);
		}
	}
}

#define TILES(k)                                                                                                       \
	do {                                                                                                               \
		if (dim == 64) {                                                                                               \
			tiles(k, src, rb, r0, n, 64, q, G, s, ls, lv, qa);                                                             \
		} else if (dim == 128) {                                                                                       \
			tiles(k, src, rb, r0, n, 128, q, G, s, ls, lv, qa);                                                            \
		} else {                                                                                                       \
			tiles(k, src, rb, r0, n, dim, q, G, s, ls, lv, qa);                                                            \
		}                                                                                                              \
	} while (0)

// fi_attn_scores_t_avx512: see kern.h.
int fi_attn_scores_t_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t rb, int64_t u,
                            int64_t r0, int64_t n, int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (dim % 16 != 0 || dim > FI_AD_MAXDIM) return -1;
	const int kind = tkind(t, bits);
	if (kind < 0) return fi_attn_scores_t_rows(1, t, bits, levels, src, rb, u, r0, n, dim, q, G, s, ls);
	float l[16];
	tlevels(bits, levels, l);
	const __m512 lv = _mm512_loadu_ps(l);
	const qi_args *qa = NULL;
	BY_TKIND(kind, TILES);
	return 0;
}

// fi_attn_scores_qi_avx512: see kern.h.
int fi_attn_scores_qi_avx512(int t, int bits, const uint8_t *src, int64_t rb, int64_t r0, int64_t n, int64_t dim,
                             const int32_t *qp, const int32_t *corr, const float *kq, const int8_t *c8, int64_t G, float *s,
                             int64_t ls) {
	const int kind = tkind(t, bits);
	if (!qi_takes(kind, dim)) return -1;
	const qi_args a = {qp, corr, kq, c8}, *qa = &a;
	const float *q = NULL;
	const __m512 lv = _mm512_setzero_ps();
	BY_QIKIND(kind, TILES);
	return 0;
}
