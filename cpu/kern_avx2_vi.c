//go:build cgo

// AVX2 integer V sums of decode attention (Go's kern_wint.go is their
// reference, and the arithmetic is exact, so every path gives the same
// sums): the rows' scales gathered, the softmax weights times the scales
// rounded to int16, then pmaddwd of int16 weight pairs (two rows) by the
// two rows' integer values (q4_0's bare nibbles, q8_0's int8s,
// TurboQuant's codebook as int8), 16 products per instruction where an FMA
// makes 8. pmaddwd runs at two per cycle on Zen 3, as the FMAs do
// (docs/decisions.md, "Integer decode V sums"). AVX-512 machines run these
// kernels too.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"

// vi_kind is a row kind these kernels sum: q4_0, q8_0, 3- or 4-bit
// TurboQuant.
enum { VI_Q4_0, VI_Q8_0, VI_TQ3, VI_TQ4 };

static inline int vi_kind(int t, int bits) {
	if (bits == 3) return VI_TQ3;
	if (bits == 4) return VI_TQ4;
	if (bits == 0 && t == FI_Q4_0) return VI_Q4_0;
	if (bits == 0 && t == FI_Q8_0) return VI_Q8_0;
	return -1;
}

// vi_blocks reports whether rows of kind are blocks of 32 values with an
// f16 scale each (q4_0, q8_0), and vi_block_bytes their bytes.
static inline int vi_blocks(int kind) { return kind == VI_Q4_0 || kind == VI_Q8_0; }
static inline int64_t vi_block_bytes(int kind) { return kind == VI_Q4_0 ? 18 : kind == VI_Q8_0 ? 34 : 0; }

// ld16 reads the uint16 at p.
FI_INLINE uint16_t ld16(const uint8_t *p) {
	uint16_t h;
	memcpy(&h, p, 2);
	return h;
}

// gather8 returns the f16 scales at p, p + stride, ..., 8 rows, widened.
FI_INLINE __m256 gather8(const uint8_t *p, int64_t stride) {
	// assembled in two 64-bit registers: 8 stores read back as a vector
	// stalled on store forwarding (half this kernel's time)
#define H16(i) ((uint64_t)ld16(p + (i) * stride) << (16 * ((i) % 4)))
	const uint64_t u0 = H16(0) | H16(1) | H16(2) | H16(3), u1 = H16(4) | H16(5) | H16(6) | H16(7);
#undef H16
	return _mm256_cvtph_ps(_mm_set_epi64x((int64_t)u1, (int64_t)u0));
}

// scales_max is fi_kv_scales_avx2's loop over the rows of group b (bs its
// bytes into a row) for ng heads.
FI_INLINE void scales_max(const int ng, const uint8_t *src, int64_t stride, int64_t n, int64_t nb, int64_t b,
                          int64_t bs, float *sc, int64_t ls, const float *w, int64_t lw, float *m) {
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 mx[8], bad[8];
	_Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) mx[g] = bad[g] = _mm256_setzero_ps();
	int64_t r = 0;
	for (; r + 8 <= n; r += 8) {
		const __m256 s = gather8(src + r * stride + b * bs, stride);
		_mm256_storeu_ps(sc + b * ls + r, s);
		_Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) {
			const __m256 p = _mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(w + g * lw + r), s), abs);
			bad[g] = _mm256_or_ps(bad[g], _mm256_cmp_ps(p, p, _CMP_UNORD_Q));
			mx[g] = _mm256_max_ps(p, mx[g]);
		}
	}
	for (int g = 0; g < ng; g++) {
		float u[8], v = m[g * nb + b];
		_mm256_storeu_ps(u, mx[g]);
		for (int i = 0; i < 8; i++) v = u[i] > v ? u[i] : v;
		m[g * nb + b] = _mm256_movemask_ps(bad[g]) ? __builtin_nanf("") : v;
	}
	for (; r < n; r++) {
		const float s = ld_f16(src + r * stride + b * bs);
		sc[b * ls + r] = s;
		for (int g = 0; g < ng; g++) {
			float p = w[g * lw + r] * s, v = m[g * nb + b];
			p = p < 0 ? -p : p;
			m[g * nb + b] = p != p || p > v ? p : v; // a NaN stays
		}
	}
}

// fi_kv_scales_avx2: see kern.h.
int fi_kv_scales_avx2(int t, int bits, const uint8_t *src, int64_t stride, int64_t n, int64_t nb, float *sc,
                      int64_t ls, const float *w, int64_t lw, int64_t G, float *m) {
	const int kind = vi_kind(t, bits);
	if (kind < 0) return -1;
	const int64_t bs = vi_block_bytes(kind);
	for (int64_t b = 0; b < nb; b++) {
		if (G == 4) { // llama-1b's group, and most models'
			scales_max(4, src, stride, n, nb, b, bs, sc, ls, w, lw, m);
			continue;
		}
		for (int64_t g = 0; g < G; g += 8) { // up to 8 heads' maxima in registers
			const int ng = G - g < 8 ? (int)(G - g) : 8;
			scales_max(ng, src, stride, n, nb, b, bs, sc, ls, w + g * lw, lw, m + g * nb);
		}
	}
	return 0;
}

// fi_wint_round_avx2: see kern.h.
int fi_wint_round_avx2(const float *w, int64_t lw, int64_t G, int64_t n, const float *sc, int64_t nb, const float *mo,
                       int16_t *wq, int64_t *wsum) {
	for (int64_t g = 0; g < G; g++) {
		for (int64_t b = 0; b < nb; b++) {
			const float *wg = w + g * lw, *sb = sc + b * n;
			const float m = mo[g * nb + b];
			int16_t *q = wq + (g * nb + b) * n;
			if (m == 0) { // every product is 0: so are the weights
				memset(q, 0, (size_t)n * sizeof *q);
				wsum[g * nb + b] = 0;
				continue;
			}
			if (!(m > 0 && m <= 0x1p64f)) return -1;
			const float ps = m < 0x1p-64f ? 0x1p96f : 1.0f; // tinyScale (kern_wint.go)
			const float inv = 32767.0f / (m * ps);
			const __m256 vinv = _mm256_set1_ps(inv), vps = _mm256_set1_ps(ps);
			int64_t tot = 0;
			__m256i s32 = _mm256_setzero_si256();
			int64_t r = 0;
			for (; r + 8 <= n; r += 8) {
				const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(wg + r), _mm256_loadu_ps(sb + r)), vps);
				const __m256i i = _mm256_cvtps_epi32(_mm256_mul_ps(p, vinv));
				_mm_storeu_si128((__m128i *)(q + r),
				                 _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
				s32 = _mm256_add_epi32(s32, i);
				if ((r & 0xffff) == 0xfff8) { // each lane holds at most 8192 of the 32767s
					int32_t u[8];
					_mm256_storeu_si256((__m256i *)u, s32);
					for (int k = 0; k < 8; k++) tot += u[k];
					s32 = _mm256_setzero_si256();
				}
			}
			int32_t u[8];
			_mm256_storeu_si256((__m256i *)u, s32);
			for (int k = 0; k < 8; k++) tot += u[k];
			for (; r < n; r++) {
				const float p = wg[r] * sb[r] * ps;
				const int i = _mm_cvtss_si32(_mm_set_ss(p * inv));
				q[r] = (int16_t)i;
				tot += i;
			}
			wsum[g * nb + b] = tot;
		}
	}
	return 0;
}

// zrow stands for the row after a call's last when their number is odd
// (its weight is 0).
static const uint8_t zrow[4 * FI_AD_MAXDIM];

// VI_PAIRS is the row pairs summed in int32 before the int64 sums take
// them: |value| ≤ 128 (q8_0, TurboQuant) or 15 (q4_0's bare nibbles),
// |weight| ≤ 32767, so a lane's 2·128 products stay under 2^31.
#define VI_PAIRS 128

// add8 adds the 8 int32 lanes of a to the int64s at s[0], s[step], ...
FI_INLINE void add8(int64_t *s, int64_t step, __m256i a) {
	int32_t u[8];
	_mm256_storeu_si256((__m256i *)u, a);
	for (int i = 0; i < 8; i++) s[i * step] += u[i];
}

// decode16 sets x[0], x[1] to the int16 pairs (row at a, row at b) of 8
// values each, 16 values of the rows from value d on:
//   - q4_0 (d%32 is 0 or 8): x[0] values d..d+7 (the low nibbles of bytes
//     d%32.. of the block, bare), x[1] the 8 values 16 further (their high
//     nibbles);
//   - 4-bit TurboQuant: x[0] the even values d, d+2, ..., x[1] the odd;
//   - q8_0 (d%32 is 0 or 16): x[0] values d..d+7, x[1] values d+8..d+15;
//   - 3-bit TurboQuant: x[0] values d..d+7, x[1] values d+8..d+15 (with
//     the sums in arrays this took more registers than there are, and GCC
//     kept half the sums on the stack; sum16x4 names them).
FI_INLINE void decode16(const int kind, const uint8_t *a, const uint8_t *b, int64_t d, __m256i tab0, __m256i tab1,
                        __m256i *x) {
	const __m256i m4 = _mm256_set1_epi16(0x0f);
	switch (kind) {
	case VI_Q4_0: {
		const int64_t o = d / 32 * 18 + 2 + d % 32; // d % 32 is 0 or 8
		const __m256i y = _mm256_cvtepu8_epi16(
		    _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(a + o)), _mm_loadl_epi64((const __m128i *)(b + o))));
		x[0] = _mm256_and_si256(y, m4);
		x[1] = _mm256_srli_epi16(y, 4);
		break;
	}
	case VI_Q8_0: {
		const int64_t o = d / 32 * 34 + 2 + d % 32; // d % 32 is 0 or 16
		x[0] = _mm256_cvtepi8_epi16(
		    _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(a + o)), _mm_loadl_epi64((const __m128i *)(b + o))));
		x[1] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(a + o + 8)),
		                                              _mm_loadl_epi64((const __m128i *)(b + o + 8))));
		break;
	}
	case VI_TQ4: {
		const __m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(a + 2 + d / 2)),
		                                    _mm_loadl_epi64((const __m128i *)(b + 2 + d / 2)));
		const __m128i f = _mm_set1_epi8(15), t = _mm256_castsi256_si128(tab0);
		x[0] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(t, _mm_and_si128(v, f)));
		x[1] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(v, 4), f)));
		break;
	}
	case VI_TQ3: {
		// as ld8k: the 4 bytes from the one before the codes, lane j
		// shifted right by 8 + 3j; vpermd reads an index's low 3 bits
		const __m256i sh = _mm256_setr_epi32(8, 11, 14, 17, 20, 23, 26, 29);
		for (int k = 0; k < 2; k++) {
			uint32_t u, v;
			memcpy(&u, a + 1 + 3 * (d + 8 * k) / 8, 4);
			memcpy(&v, b + 1 + 3 * (d + 8 * k) / 8, 4);
			const __m256i iu = _mm256_srlv_epi32(_mm256_set1_epi32((int)u), sh);
			const __m256i iv = _mm256_srlv_epi32(_mm256_set1_epi32((int)v), sh);
			x[k] = _mm256_or_si256(_mm256_permutevar8x32_epi32(tab0, iu), _mm256_permutevar8x32_epi32(tab1, iv));
		}
		break;
	}
	}
}

// PF issues a prefetch of the next line of the cursor *pf while it is
// below pe: the rows the next chunk will read (fi_wint_chunk_avx2), one
// line per row pair summed, so that they arrive while this chunk computes.
#define PF(pf, pe)                                                                                                      \
	do {                                                                                                               \
		if (pf < pe) {                                                                                                 \
			_mm_prefetch((const char *)pf, _MM_HINT_T0);                                                               \
			pf += 64;                                                                                                  \
		}                                                                                                              \
	} while (0)

// ldw2 returns the int16 pair at p in each int32 lane.
FI_INLINE __m256i ldw2(const int16_t *p) {
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

// step16 adds the products of the rows at x0 and x1 (values d.., as
// decode16) by the weight pairs wp(g) to a0[g], a1[g].
#define STEP16(x0, x1, wp)                                                                                              \
	do {                                                                                                               \
		__m256i x_[2];                                                                                                 \
		decode16(kind, x0, x1, d, tab0, tab1, x_);                                                                     \
		_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) {                                                         \
			const __m256i w_ = wp;                                                                                     \
			a0[g] = _mm256_add_epi32(a0[g], _mm256_madd_epi16(x_[0], w_));                                             \
			a1[g] = _mm256_add_epi32(a1[g], _mm256_madd_epi16(x_[1], w_));                                             \
		}                                                                                                              \
	} while (0)

// sum16 adds to S the products of rows [r0, r1) (r1 - r0 ≤ 2·VI_PAIRS) by
// the weights of heads g0..g0+ng-1 (ng ≤ 4), for the values decode16 reads from d on;
// wq points at head g0's weights of the values' group, gstep apart. An odd
// last row is paired with zrow, at weight 0.
FI_INLINE void sum16(const int kind, const uint8_t *src, int64_t stride, int64_t r0, int64_t r1, int64_t d,
                     const int16_t *wq, int64_t gstep, const int ng, __m256i tab0, __m256i tab1, int64_t *S,
                     int64_t dim, const uint8_t **pfp, const uint8_t *pe) {
	const uint8_t *pf = *pfp;
	__m256i a0[4], a1[4];
	_Pragma("GCC unroll 4") for (int g = 0; g < ng; g++) a0[g] = a1[g] = _mm256_setzero_si256();
	int64_t r = r0;
	for (; r + 1 < r1; r += 2) {
		const uint8_t *x0 = src + r * stride;
		STEP16(x0, x0 + stride, ldw2(wq + g * gstep + r));
		PF(pf, pe);
	}
	*pfp = pf;
	if (r < r1) STEP16(src + r * stride, zrow, _mm256_set1_epi32((uint16_t)wq[g * gstep + r]));
	for (int g = 0; g < ng; g++) {
		int64_t *s = S + g * dim + d;
		switch (kind) {
		case VI_Q4_0: add8(s, 1, a0[g]), add8(s + 16, 1, a1[g]); break;
		case VI_TQ4: add8(s, 2, a0[g]), add8(s + 1, 2, a1[g]); break;
		case VI_Q8_0:
		case VI_TQ3: add8(s, 1, a0[g]), add8(s + 8, 1, a1[g]); break;
		}
	}
}

// sum16x4 is sum16 for 4 heads, its 8 sums named: held in arrays, they
// made GCC copy each sum to another register and to the stack on every
// row pair (42 instructions a pair for 32; llvm-mca, znver3: a block
// throughput of 7.0 cycles a pair for 5.3).
FI_INLINE void sum16x4(const int kind, const uint8_t *src, int64_t stride, int64_t r0, int64_t r1, int64_t d,
                       const int16_t *wq, int64_t gstep, __m256i tab0, __m256i tab1, int64_t *S, int64_t dim,
                       const uint8_t **pfp, const uint8_t *pe) {
	const uint8_t *pf = *pfp;
	__m256i p0 = _mm256_setzero_si256(), p1 = p0, p2 = p0, p3 = p0, q0 = p0, q1 = p0, q2 = p0, q3 = p0;
	const int16_t *w0 = wq, *w1 = wq + gstep, *w2 = wq + 2 * gstep, *w3 = wq + 3 * gstep;
	// HEAD adds head h's products by the weight pair W(w_h) to p_h, q_h
#define HEAD(W, w, p, q)                                                                                               \
	do {                                                                                                               \
		const __m256i w_ = W(w);                                                                                       \
		p = _mm256_add_epi32(p, _mm256_madd_epi16(x_[0], w_));                                                         \
		q = _mm256_add_epi32(q, _mm256_madd_epi16(x_[1], w_));                                                         \
	} while (0)
#define PAIR(w) ldw2((w) + r)
#define LONE(w) _mm256_set1_epi32((uint16_t)(w)[r])
	int64_t r = r0;
	for (; r + 1 < r1; r += 2) {
		const uint8_t *x0 = src + r * stride;
		__m256i x_[2];
		decode16(kind, x0, x0 + stride, d, tab0, tab1, x_);
		HEAD(PAIR, w0, p0, q0);
		HEAD(PAIR, w1, p1, q1);
		HEAD(PAIR, w2, p2, q2);
		HEAD(PAIR, w3, p3, q3);
		PF(pf, pe);
	}
	*pfp = pf;
	if (r < r1) {
		__m256i x_[2];
		decode16(kind, src + r * stride, zrow, d, tab0, tab1, x_);
		HEAD(LONE, w0, p0, q0);
		HEAD(LONE, w1, p1, q1);
		HEAD(LONE, w2, p2, q2);
		HEAD(LONE, w3, p3, q3);
	}
#undef HEAD
#undef PAIR
#undef LONE
	const __m256i a0[4] = {p0, p1, p2, p3}, a1[4] = {q0, q1, q2, q3};
	for (int g = 0; g < 4; g++) {
		int64_t *s = S + g * dim + d;
		switch (kind) {
		case VI_Q4_0: add8(s, 1, a0[g]), add8(s + 16, 1, a1[g]); break;
		case VI_TQ4: add8(s, 2, a0[g]), add8(s + 1, 2, a1[g]); break;
		case VI_Q8_0:
		case VI_TQ3: add8(s, 1, a0[g]), add8(s + 8, 1, a1[g]); break;
		}
	}
}

// sum_rows runs sum16 over the rows, 16 values at a time (q4_0:
// from the first and the ninth value of each block), row pairs in chunks
// of VI_PAIRS.
FI_INLINE void sum_rows(const int kind, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                        const int16_t *wq, int64_t lw, int64_t G, int64_t nb, __m256i tab0, __m256i tab1,
                        int64_t *S, const uint8_t *pf, const uint8_t *pe) {
	for (int64_t r0 = 0; r0 < n; r0 += 2 * VI_PAIRS) {
		const int64_t r1 = n - r0 < 2 * VI_PAIRS ? n : r0 + 2 * VI_PAIRS;
		for (int64_t d = 0; d < dim; d += kind == VI_Q4_0 ? (d % 32 == 0 ? 8 : 24) : 16) {
			const int64_t b = nb > 1 ? d / 32 : 0; // the weights' group (a block's, or the row's)
			for (int64_t g = 0; g < G; g += 4) {
				const int ng = G - g < 4 ? (int)(G - g) : 4;
				const int16_t *q = wq + (g * nb + b) * lw;
				if (ng == 4) {
					sum16x4(kind, src, stride, r0, r1, d, q, nb * lw, tab0, tab1, S + g * dim, dim, &pf, pe);
				} else {
					sum16(kind, src, stride, r0, r1, d, q, nb * lw, ng, tab0, tab1, S + g * dim, dim, &pf, pe);
				}
			}
		}
	}
}

// sum_qi is fi_attn_sum_qi_avx2, prefetching [pf, pe) as it goes.
static int sum_qi(int t, int bits, const int8_t *c8, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                  const int16_t *wq, int64_t lw, int64_t G, int64_t nb, int64_t *S, const uint8_t *pf, const uint8_t *pe) {
	const int kind = vi_kind(t, bits);
	if (kind < 0 || dim % (vi_blocks(kind) ? 32 : 16) != 0 || dim > FI_AD_MAXDIM) return -1;
	if (nb != (vi_blocks(kind) ? dim / 32 : 1)) return -1;
	__m256i tab0 = _mm256_setzero_si256(), tab1 = tab0;
	if (kind == VI_TQ4) {
		tab0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)c8));
	} else if (kind == VI_TQ3) {
		int32_t lo[8], hi[8];
		for (int c = 0; c < 8; c++) lo[c] = (uint16_t)c8[c], hi[c] = (int32_t)((uint32_t)(int32_t)c8[c] << 16);
		tab0 = _mm256_loadu_si256((const __m256i *)lo);
		tab1 = _mm256_loadu_si256((const __m256i *)hi);
	}
	switch (kind) {
	case VI_Q4_0: sum_rows(VI_Q4_0, src, stride, n, dim, wq, lw, G, nb, tab0, tab1, S, pf, pe); break;
	case VI_Q8_0: sum_rows(VI_Q8_0, src, stride, n, dim, wq, lw, G, nb, tab0, tab1, S, pf, pe); break;
	case VI_TQ4: sum_rows(VI_TQ4, src, stride, n, dim, wq, lw, G, nb, tab0, tab1, S, pf, pe); break;
	case VI_TQ3: sum_rows(VI_TQ3, src, stride, n, dim, wq, lw, G, nb, tab0, tab1, S, pf, pe); break;
	}
	return 0;
}

// fi_attn_sum_qi_avx2: see kern.h.
int fi_attn_sum_qi_avx2(int t, int bits, const int8_t *c8, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                        const int16_t *wq, int64_t lw, int64_t G, int64_t nb, int64_t *S) {
	return sum_qi(t, bits, c8, src, stride, n, dim, wq, lw, G, nb, S, NULL, NULL);
}

// fold adds a chunk's sums S (less 8·wsum per group for q4_0), times each
// group's step (m/32767)·cs, to F in float64: WInt.Fold's arithmetic, a
// product then a sum (no FMA). The sums are below 2^51 in magnitude (256
// rows of int16 weights by values below 2^8), so adding 1.5·2^52 to their
// bits converts them exactly.
static void fold(int q40, float cs, const int64_t *S, const int64_t *wsum, const float *m, int64_t G, int64_t nb,
                 int64_t dim, double *F) {
	const int64_t wd = dim / nb; // values per group
	const __m256d magic = _mm256_set1_pd(0x1.8p52);
	for (int64_t g = 0; g < G; g++) {
		for (int64_t b = 0; b < nb; b++) {
			const int64_t i = g * nb + b, off = q40 ? 8 * wsum[i] : 0;
			const float mi = m[i];
			double f = (double)(mi / 32767.0f) * (double)cs;
			if (mi > 0 && mi < 0x1p-64f) f = (double)(mi * 0x1p96f / 32767.0f) / 0x1p96 * (double)cs; // tinyScale
			const int64_t *s = S + g * dim + b * wd;
			double *o = F + g * dim + b * wd;
			const __m256i voff = _mm256_set1_epi64x(off);
			const __m256d vf = _mm256_set1_pd(f);
			int64_t d = 0;
			for (; d + 4 <= wd; d += 4) {
				const __m256i x = _mm256_add_epi64(_mm256_sub_epi64(_mm256_loadu_si256((const __m256i *)(s + d)), voff),
				                                   _mm256_castpd_si256(magic));
				__m256d p = _mm256_mul_pd(_mm256_sub_pd(_mm256_castsi256_pd(x), magic), vf);
				__asm__("" : "+x"(p)); // a product, then a sum, as Go
				_mm256_storeu_pd(o + d, _mm256_add_pd(_mm256_loadu_pd(o + d), p));
			}
			for (; d < wd; d++) {
				volatile double p = (double)(s[d] - off) * f;
				o[d] += p;
			}
		}
	}
}

// fi_wint_chunk_avx2: see kern.h.
int fi_wint_chunk_avx2(int t, int bits, const int8_t *c8, float cs, const uint8_t *src, int64_t stride, int64_t n,
                       int64_t dim, const float *w, int64_t lw, int64_t G, int64_t nb, float *sc, float *m, int16_t *wq,
                       int64_t *wsum, int64_t *S, double *F, const uint8_t *pf, int64_t pfn) {
	const int kind = vi_kind(t, bits);
	if (kind < 0 || dim % (vi_blocks(kind) ? 32 : 16) != 0 || dim > FI_AD_MAXDIM) return -1;
	if (nb != (vi_blocks(kind) ? dim / 32 : 1) || n > 256 || dim % nb != 0) return -1;
	memset(m, 0, (size_t)(G * nb) * sizeof *m);
	memset(S, 0, (size_t)(G * dim) * sizeof *S);
	if (n == 0 || G == 0) return 0;
	fi_kv_scales_avx2(t, bits, src, stride, n, nb, sc, n, w, lw, G, m);
	if (fi_wint_round_avx2(w, lw, G, n, sc, nb, m, wq, wsum)) return -2;
	sum_qi(t, bits, c8, src, stride, n, dim, wq, n, G, nb, S, pf, pf ? pf + pfn : NULL);
	fold(kind == VI_Q4_0, cs, S, wsum, m, G, nb, dim, F);
	return 0;
}
