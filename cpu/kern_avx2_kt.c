//go:build cgo

// AVX2 decode scores against K rows stored in transposed tiles
// (quant.TileRows): kern_avx512_kt.c's kernels with 8 lanes, a tile's 16
// rows in two vectors, so each loaded query value feeds both halves' FMAs
// and the chains are a head's halves.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_kt.h"
#include "kern_avx2.h"

#define FI_PRAGMA(x) _Pragma(#x)
#define UNROLL(n) FI_PRAGMA(GCC unroll n)

// u8s widens 8 bytes at p (one byte of 8 rows) to int32 lanes.
FI_INLINE __m256i u8s(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

// scales returns 8 rows' fp16 scales whose low bytes are at p and high
// bytes at p + 16, widened.
FI_INLINE __m256 scales(const uint8_t *p) {
	return _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)p), _mm_loadl_epi64((const __m128i *)(p + 16))));
}

// lut16 looks up the low 4 bits of each lane of c in the 16 levels l0
// (codes 0-7) and l1 (8-15).
FI_INLINE __m256 lut16(__m256i c, __m256 l0, __m256 l1) {
	return _mm256_blendv_ps(_mm256_permutevar8x32_ps(l0, c), _mm256_permutevar8x32_ps(l1, c),
	                        _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

// FMA2 adds value d of the NH query heads at q (dim apart) times the rows'
// values k0 (rows 0-7) and k1 (rows 8-15) to their chains.
#define FMA2(d, k0, k1)                                                                                                \
	do {                                                                                                               \
		const __m256 x0_ = (k0), x1_ = (k1);                                                                           \
		UNROLL(4) for (int h = 0; h < NH; h++) {                                                                       \
			const __m256 qv_ = _mm256_broadcast_ss(q + h * dim + (d));                                                 \
			a[h] = _mm256_fmadd_ps(qv_, x0_, a[h]);                                                                    \
			b[h] = _mm256_fmadd_ps(qv_, x1_, b[h]);                                                                    \
		}                                                                                                              \
	} while (0)

// tile sets o[2h] and o[2h+1] (h < NH) to the scores of query heads
// q + h·dim against rows 0-7 and 8-15 of tile t; l0
// and l1 are the TurboQuant codebook.
FI_INLINE void tile(const int kind, const int NH, const uint8_t *t, int64_t dim, const float *q, __m256 l0,
                    __m256 l1, __m256 *o) {
	__m256 a[4], b[4];
	UNROLL(4) for (int h = 0; h < NH; h++) a[h] = b[h] = o[2 * h] = o[2 * h + 1] = _mm256_setzero_ps();
	switch (kind) {
	case T_F32:
		UNROLL(8) for (int64_t d = 0; d < dim; d++) {
			const float *p = (const float *)(t + d * 64);
			FMA2(d, _mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));
		}
		break;
	case T_F16:
		UNROLL(8) for (int64_t d = 0; d < dim; d++) {
			const uint8_t *p = t + d * 32;
			FMA2(d, _mm256_cvtph_ps(ld128(p)), _mm256_cvtph_ps(ld128(p + 16)));
		}
		break;
	case T_BF16:
		UNROLL(8) for (int64_t d = 0; d < dim; d++) {
			const uint8_t *p = t + d * 32;
			FMA2(d, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16)),
			     _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p + 16)), 16)));
		}
		break;
	case T_Q8_0: // blocks of a 2-byte scale and 32 int8 values
		for (int64_t c = 0; c < dim; c += 32) {
			const uint8_t *blk = t + c / 32 * 34 * 16;
			UNROLL(8) for (int64_t i = 0; i < 32; i++) {
				const uint8_t *p = blk + (2 + i) * 16;
				FMA2(c + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))),
				     _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))));
			}
			const __m256 s0 = scales(blk), s1 = scales(blk + 8);
			UNROLL(4) for (int h = 0; h < NH; h++) {
				o[2 * h] = _mm256_fmadd_ps(s0, a[h], o[2 * h]);
				o[2 * h + 1] = _mm256_fmadd_ps(s1, b[h], o[2 * h + 1]);
				a[h] = b[h] = _mm256_setzero_ps();
			}
		}
		return;
	case T_Q4_0: // blocks of a 2-byte scale and 16 bytes: value i in byte i's low nibble, i+16 in its high one
		for (int64_t c = 0; c < dim; c += 32) {
			const uint8_t *blk = t + c / 32 * 18 * 16;
			const __m256i eight = _mm256_set1_epi32(8), m4 = _mm256_set1_epi32(15);
			__m256 e[4], f[4]; // the high nibbles' chains
			UNROLL(4) for (int h = 0; h < NH; h++) e[h] = f[h] = _mm256_setzero_ps();
			UNROLL(4) for (int64_t i = 0; i < 16; i++) {
				const uint8_t *p = blk + (2 + i) * 16;
				const __m256i w0 = u8s(p), w1 = u8s(p + 8);
				FMA2(c + i, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(w0, m4), eight)),
				     _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(w1, m4), eight)));
				const __m256 y0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(w0, 4), eight));
				const __m256 y1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(w1, 4), eight));
				UNROLL(4) for (int h = 0; h < NH; h++) {
					const __m256 qv = _mm256_broadcast_ss(q + h * dim + c + 16 + i);
					e[h] = _mm256_fmadd_ps(qv, y0, e[h]);
					f[h] = _mm256_fmadd_ps(qv, y1, f[h]);
				}
			}
			const __m256 s0 = scales(blk), s1 = scales(blk + 8);
			UNROLL(4) for (int h = 0; h < NH; h++) {
				o[2 * h] = _mm256_fmadd_ps(s0, _mm256_add_ps(a[h], e[h]), o[2 * h]);
				o[2 * h + 1] = _mm256_fmadd_ps(s1, _mm256_add_ps(b[h], f[h]), o[2 * h + 1]);
				a[h] = b[h] = _mm256_setzero_ps();
			}
		}
		return;
	case T_TQ4: // a 2-byte scale, then code 2i in byte i's low nibble, 2i+1 in its high one
		UNROLL(4) for (int64_t i = 0; i < dim / 2; i++) {
			const uint8_t *p = t + (2 + i) * 16;
			const __m256i w0 = u8s(p), w1 = u8s(p + 8);
			FMA2(2 * i, lut16(w0, l0, l1), lut16(w1, l0, l1));
			FMA2(2 * i + 1, lut16(_mm256_srli_epi32(w0, 4), l0, l1), lut16(_mm256_srli_epi32(w1, 4), l0, l1));
		}
		break;
	case T_TQ3: // a 2-byte scale, then code j at bit 3j: 8 codes in 3 bytes; vpermps reads an index's low 3 bits
		UNROLL(2) for (int64_t j = 0; j < dim; j += 8) {
			const uint8_t *p = t + (2 + 3 * j / 8) * 16;
			const __m256i w0 = _mm256_or_si256(_mm256_or_si256(u8s(p), _mm256_slli_epi32(u8s(p + 16), 8)),
			                                   _mm256_slli_epi32(u8s(p + 32), 16));
			const __m256i w1 = _mm256_or_si256(_mm256_or_si256(u8s(p + 8), _mm256_slli_epi32(u8s(p + 24), 8)),
			                                   _mm256_slli_epi32(u8s(p + 40), 16));
			UNROLL(8) for (int k = 0; k < 8; k++) {
				FMA2(j + k, _mm256_permutevar8x32_ps(l0, _mm256_srli_epi32(w0, 3 * k)),
				     _mm256_permutevar8x32_ps(l0, _mm256_srli_epi32(w1, 3 * k)));
			}
		}
		break;
	}
	if (kind == T_TQ4 || kind == T_TQ3) {
		const __m256 s0 = scales(t), s1 = scales(t + 8);
		UNROLL(4) for (int h = 0; h < NH; h++) {
			o[2 * h] = _mm256_mul_ps(s0, a[h]);
			o[2 * h + 1] = _mm256_mul_ps(s1, b[h]);
		}
		return;
	}
	UNROLL(4) for (int h = 0; h < NH; h++) {
		o[2 * h] = a[h];
		o[2 * h + 1] = b[h];
	}
}

// NOFUSE keeps a product a product: GCC would contract it and the add
// after it into an FMA, which Go's reference does not do.
#define NOFUSE(v) __asm__("" : "+x"(v))

// itile is tile for the integer kinds (kern_kt.h; kern_qint.go is the
// reference): qp the NH heads' int16 pairs (dim/2 apart), kq each head's
// scale (TurboQuant: qs·cs; q4_0: qs); tab the TurboQuant codebook on its
// 8-bit grid, corr each q4_0 block's 8·Σ of the rounded query (dim/32 per
// head). A tile's byte holds two values of a row, unpacked into an int16
// pair, so pmaddwd's pairs are one row's and an int32 lane sums one row.
FI_INLINE void itile(const int kind, const int NH, const uint8_t *t, int64_t dim, const int32_t *qp, __m128i tab,
                     const float *kq, const int32_t *corr, __m256 *o) {
	__m256i a[4], b[4];
	UNROLL(4) for (int h = 0; h < NH; h++) {
		a[h] = b[h] = _mm256_setzero_si256();
		o[2 * h] = o[2 * h + 1] = _mm256_setzero_ps();
	}
	const __m128i m4 = _mm_set1_epi8(15);
	// STEP adds pair i of each head times the codes of the 16 bytes at p
	// (rows 0-7 and 8-15), through tab (TurboQuant) or as they are (q4_0).
#define STEP(p, i)                                                                                                     \
	do {                                                                                                               \
		const __m128i x_ = ld128(p);                                                                                   \
		const __m128i lo_ = _mm_and_si128(x_, m4), hi_ = _mm_and_si128(_mm_srli_epi16(x_, 4), m4);                     \
		__m128i c0_ = _mm_unpacklo_epi8(lo_, hi_), c1_ = _mm_unpackhi_epi8(lo_, hi_);                                  \
		__m256i v0_, v1_;                                                                                              \
		if (kind == T_TQ4) {                                                                                           \
			v0_ = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(tab, c0_));                                                    \
			v1_ = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(tab, c1_));                                                    \
		} else {                                                                                                       \
			v0_ = _mm256_cvtepu8_epi16(c0_);                                                                           \
			v1_ = _mm256_cvtepu8_epi16(c1_);                                                                           \
		}                                                                                                              \
		UNROLL(4) for (int h = 0; h < NH; h++) {                                                                       \
			const __m256i qv_ = _mm256_set1_epi32(qp[h * (dim / 2) + (i)]);                                            \
			a[h] = _mm256_add_epi32(a[h], _mm256_madd_epi16(v0_, qv_));                                                \
			b[h] = _mm256_add_epi32(b[h], _mm256_madd_epi16(v1_, qv_));                                                \
		}                                                                                                              \
	} while (0)
	if (kind == T_TQ4) { // a 2-byte scale, then code 2i in byte i's low nibble, 2i+1 in its high one
		UNROLL(4) for (int64_t i = 0; i < dim / 2; i++) STEP(t + (2 + i) * 16, i);
		const __m256 s0 = scales(t), s1 = scales(t + 8);
		UNROLL(4) for (int h = 0; h < NH; h++) {
			const __m256 k = _mm256_broadcast_ss(kq + h);
			o[2 * h] = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a[h]), k), s0);
			o[2 * h + 1] = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(b[h]), k), s1);
		}
		return;
	}
	// q4_0: blocks of a 2-byte scale and 16 bytes, value i in byte i's low
	// nibble, i+16 in its high one; the nibbles are summed as they are,
	// less 8·Σ of the block's query values
	// the float sums wait in memory between blocks: held in registers
	// beside the 8 integer ones, they made GCC spill an integer sum, a
	// store and a reload on every step's chain
	float ob[8 * 8] __attribute__((aligned(32)));
	for (int64_t c = 0; c < dim; c += 32) {
		const uint8_t *blk = t + c / 32 * 18 * 16;
		UNROLL(4) for (int64_t i = 0; i < 16; i++) STEP(blk + (2 + i) * 16, c / 2 + i);
		const __m256 s0 = scales(blk), s1 = scales(blk + 8);
		UNROLL(4) for (int h = 0; h < NH; h++) {
			const __m256i k8 = _mm256_set1_epi32(corr[h * (dim / 32) + c / 32]);
			const __m256 k = _mm256_broadcast_ss(kq + h);
			__m256 p0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(a[h], k8)), _mm256_mul_ps(s0, k));
			__m256 p1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(b[h], k8)), _mm256_mul_ps(s1, k));
			NOFUSE(p0);
			NOFUSE(p1);
			const __m256 o0 = c == 0 ? _mm256_setzero_ps() : _mm256_load_ps(ob + 16 * h);
			const __m256 o1 = c == 0 ? _mm256_setzero_ps() : _mm256_load_ps(ob + 16 * h + 8);
			_mm256_store_ps(ob + 16 * h, _mm256_add_ps(o0, p0));
			_mm256_store_ps(ob + 16 * h + 8, _mm256_add_ps(o1, p1));
			a[h] = b[h] = _mm256_setzero_si256();
		}
		__asm__ volatile("" : : "r"(ob) : "memory"); // keeps ob in memory
	}
	UNROLL(4) for (int h = 0; h < NH; h++) {
		o[2 * h] = _mm256_load_ps(ob + 16 * h);
		o[2 * h + 1] = _mm256_load_ps(ob + 16 * h + 8);
	}
#undef STEP
}

// put stores lanes [lo, hi) of the 16 lanes v0, v1 at o + lo.
FI_INLINE void put(float *o, __m256 v0, __m256 v1, int64_t lo, int64_t hi) {
	if (lo == 0 && hi == 16) {
		_mm256_storeu_ps(o, v0);
		_mm256_storeu_ps(o + 8, v1);
		return;
	}
	float t[16];
	_mm256_storeu_ps(t, v0);
	_mm256_storeu_ps(t + 8, v1);
	for (int64_t r = lo; r < hi; r++) o[r] = t[r];
}

// tiles runs tile (qa non-NULL, an integer kind: itile against qa's
// rounded queries) over the tiles of rows [r0, r0+n) for every group of
// up to 4 query heads, storing row r0+j's scores at column j.
FI_INLINE void tiles(const int kind, const uint8_t *src, int64_t rb, int64_t r0, int64_t n, int64_t dim,
                     const float *q, int64_t G, float *s, int64_t ls, __m256 l0, __m256 l1, const qi_args *qa) {
	const int ints = qi_kind(kind) && qa; // a constant false for the other kinds
	const __m128i tab = ints ? ld128((const uint8_t *)qa->c8) : _mm_setzero_si128();
	for (int64_t i = 0; i * 16 < r0 + n; i++) {
		const int64_t lo = i == 0 ? r0 : 0, hi = r0 + n - i * 16 < 16 ? r0 + n - i * 16 : 16;
		const uint8_t *t = src + i * 16 * rb;
		const int64_t col = i * 16 - r0; // lane r is column col + r
		__m256 o[8];
		int64_t g = 0;
		for (; g + 4 <= G; g += 4) {
			if (ints) {
				itile(kind, 4, t, dim, qa->qp + g * dim / 2, tab, qa->kq + g, qa->corr + g * (dim / 32), o);
			} else {
				tile(kind, 4, t, dim, q + g * dim, l0, l1, o);
			}
			UNROLL(4) for (int h = 0; h < 4; h++) put(s + (g + h) * ls + col, o[2 * h], o[2 * h + 1], lo, hi);
		}
		for (; g < G; g++) {
			if (ints) {
				itile(kind, 1, t, dim, qa->qp + g * dim / 2, tab, qa->kq + g, qa->corr + g * (dim / 32), o);
			} else {
				tile(kind, 1, t, dim, q + g * dim, l0, l1, o);
			}
			put(s + g * ls + col, o[0], o[1], lo, hi);
		}
	}
}

#define TILES(k)                                                                                                       \
	do {                                                                                                               \
		if (dim == 64) {                                                                                               \
			tiles(k, src, rb, r0, n, 64, q, G, s, ls, l0, l1, qa);                                                         \
		} else if (dim == 128) {                                                                                       \
			tiles(k, src, rb, r0, n, 128, q, G, s, ls, l0, l1, qa);                                                        \
		} else {                                                                                                       \
			tiles(k, src, rb, r0, n, dim, q, G, s, ls, l0, l1, qa);                                                        \
		}                                                                                                              \
	} while (0)

// fi_attn_scores_t_avx2: see kern.h.
int fi_attn_scores_t_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t rb, int64_t u, int64_t r0,
                          int64_t n, int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (dim % 8 != 0 || dim > FI_AD_MAXDIM) return -1;
	const int kind = tkind(t, bits);
	if (kind < 0) return fi_attn_scores_t_rows(0, t, bits, levels, src, rb, u, r0, n, dim, q, G, s, ls);
	float l[16];
	tlevels(bits, levels, l);
	const __m256 l0 = _mm256_loadu_ps(l), l1 = _mm256_loadu_ps(l + 8);
	const qi_args *qa = NULL;
	BY_TKIND(kind, TILES);
	return 0;
}

// fi_attn_scores_qi_avx2: see kern.h.
int fi_attn_scores_qi_avx2(int t, int bits, const uint8_t *src, int64_t rb, int64_t r0, int64_t n, int64_t dim,
                           const int32_t *qp, const int32_t *corr, const float *kq, const int8_t *c8, int64_t G, float *s,
                           int64_t ls) {
	const int kind = tkind(t, bits);
	if (!qi_takes(kind, dim)) return -1;
	const qi_args a = {qp, corr, kq, c8}, *qa = &a;
	const float *q = NULL;
	const __m256 l0 = _mm256_setzero_ps(), l1 = l0;
	BY_QIKIND(kind, TILES);
	return 0;
}
