//go:build cgo

// Weights packed once at load time (Q4_0, Q4_K, Q6_K, Q8_0) for AVX2: rows in groups of
// 8, interleaved so one 32-byte vector holds 4 codes of each of 8 rows, and
// scales grouped per (sub-)block across the 8 rows. Vector lanes are rows,
// so the matrix-vector product (decode) needs no horizontal sums and no
// per-row scale unpacking: about half the instructions per weight byte of
// the row-wise dots in kern_avx2_k.c / kern_avx2_q.c. llama.cpp's
// CPU_REPACK (q4_K_8x8, q4_0_8x8) rests on the same idea; these layouts are
// our own. The prefill GEMM expands packed groups into the records of
// kern_avx2_rp.h (cheaper than from the file layout: no transposes).
//
// Q4_K, per group of 8 rows and super-block (1184 bytes, 148 per row):
//   qs   [8 sub-blocks][4 chunks][8 rows][4 bytes]  (1024): byte k of row r
//        in chunk c holds code 4c+k of the sub-block in its low nibble and
//        code 4c+16+k in its high nibble
//   sc   [8 sub-blocks][8 rows]  6-bit scales (64)
//   mn   [8 sub-blocks][8 rows]  6-bit mins (64)
//   d    [8 rows] fp16, dmin [8 rows] fp16 (32)
// Q6_K, per group of 8 rows and super-block (1680 bytes, 210 per row), with
// "step" s of a 16-element sub-block = codes 4s..4s+3 of each of 8 rows:
//   ql   [16 sub-blocks][2][8 rows][4 bytes] (1024): vector c holds the low
//        4 bits of step c (low nibbles) and of step c+2 (high nibbles)
//   qh   [16 sub-blocks][8 rows][4 bytes] (512): bits 2s..2s+1 of byte k
//        are the high 2 bits of code 4s+k
//   sc   [16 sub-blocks][8 rows] int8 (128)
//   d    [8 rows] fp16 (16)
// Q4_0, per group of 8 rows and block of 32 (144 bytes, 18 per row), step s
// = codes 4s..4s+3 of each of 8 rows:
//   qs   [4][8 rows][4 bytes] (128): vector c holds step c in the low
//        nibbles and step c+4 in the high nibbles (codes 0..15, x = d*(q-8))
//   d    [8 rows] fp16 (16)
// Q8_0, per group of 8 rows and block of 32 (272 bytes, 34 per row):
//   qs   [8 steps][8 rows][4 bytes] int8 (256)
//   d    [8 rows] fp16 (16)

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_rp.h"

#define PK_Q4K 1184
#define PK_Q80 272
#define PK_Q6K 1680
#define PK_Q40 144

// PF_AHEAD: how far ahead (bytes) the matrix-vector products prefetch. A
// packed record is hundreds of instructions long, so out-of-order execution
// alone sees too little of the next one to keep enough misses in flight.
#define PF_AHEAD 2048

// prefetch_rec requests the n bytes at p + PF_AHEAD.
FI_INLINE void prefetch_rec(const uint8_t *p, int n) {
	for (int o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + PF_AHEAD + o), _MM_HINT_T0);
}

// ---- packing ---------------------------------------------------------------

static void pack_q4_K(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q4K;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 144 * i;
				memcpy(p + 1152 + 2 * r, x, 2);
				memcpy(p + 1168 + 2 * r, x + 2, 2);
				const uint8_t *q = x + 4;
				for (int j = 0; j < 8; j++) {
					int s, m;
					if (j < 4) {
						s = q[j] & 63, m = q[j + 4] & 63;
					} else {
						s = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
						m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
					}
					p[1024 + 8 * j + r] = (uint8_t)s;
					p[1088 + 8 * j + r] = (uint8_t)m;
				}
				for (int k = 0; k < 4; k++) {
					// sub-blocks 2k (low nibbles) and 2k+1 (high nibbles) of qs[32k..]
					const __m256i v = ld256(x + 16 + 32 * k);
					const __m256i c[2] = {_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)};
					for (int h = 0; h < 2; h++) {
						// codes 0..15 | codes 16..31 << 4
						const __m128i pk = _mm_or_si128(_mm256_castsi256_si128(c[h]),
						                                _mm_slli_epi16(_mm256_extracti128_si256(c[h], 1), 4));
						uint32_t d4[4];
						_mm_storeu_si128((__m128i *)d4, pk);
						for (int ch = 0; ch < 4; ch++) memcpy(p + 128 * (2 * k + h) + 32 * ch + 4 * r, &d4[ch], 4);
					}
				}
			}
		}
	}
}

// q6_codes writes the 256 codes (0..63) of one Q6_K super-block x in
// element order (as quant.DequantizeRowQ6_K reads them).
static void q6_codes(const uint8_t *x, uint8_t *codes) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
	for (int h = 0; h < 2; h++) {
		const __m256i l0 = ld256(x + 64 * h), l1 = ld256(x + 64 * h + 32), qh = ld256(x + 128 + 32 * h);
		const __m256i v[4] = {
		    _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
		    _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
		    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
		                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
		    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
		                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
		};
		for (int k = 0; k < 4; k++) _mm256_storeu_si256((__m256i *)(codes + 128 * h + 32 * k), v[k]);
	}
}

static void pack_q6_K(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	uint8_t codes[256];
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q6K;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 210 * i;
				q6_codes(x, codes);
				memcpy(p + 1664 + 2 * r, x + 208, 2);
				for (int sb = 0; sb < 16; sb++) {
					p[1536 + 8 * sb + r] = x[192 + sb];
					uint32_t st[4];
					memcpy(st, codes + 16 * sb, 16);
					const uint32_t n4 = 0x0f0f0f0f, h2 = 0x03030303;
					const uint32_t c0 = (st[0] & n4) | (st[2] & n4) << 4, c1 = (st[1] & n4) | (st[3] & n4) << 4;
					const uint32_t hb = ((st[0] >> 4) & h2) | ((st[1] >> 4) & h2) << 2 | ((st[2] >> 4) & h2) << 4 |
					                    ((st[3] >> 4) & h2) << 6;
					memcpy(p + 64 * sb + 4 * r, &c0, 4);
					memcpy(p + 64 * sb + 32 + 4 * r, &c1, 4);
					memcpy(p + 1024 + 32 * sb + 4 * r, &hb, 4);
				}
			}
		}
	}
}

static void pack_q4_0(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q40;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 18 * i;
				memcpy(p + 128 + 2 * r, x, 2);
				// code e (0..31): e < 16 low nibble of qs[e], else high nibble of qs[e-16]
				uint8_t c[32];
				for (int e = 0; e < 16; e++) c[e] = x[2 + e] & 0xf, c[e + 16] = x[2 + e] >> 4;
				for (int ch = 0; ch < 4; ch++) {
					for (int k = 0; k < 4; k++) p[32 * ch + 4 * r + k] = (uint8_t)(c[4 * ch + k] | c[4 * ch + 16 + k] << 4);
				}
			}
		}
	}
}

static void pack_q8_0(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q80;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 34 * i;
				memcpy(p + 256 + 2 * r, x, 2);
				for (int s = 0; s < 8; s++) memcpy(p + 32 * s + 4 * r, x + 2 + 4 * s, 4);
			}
		}
	}
}

// ---- matrix-vector products (one activation row) ---------------------------

// gemv_q4_K writes out[8g + r] for groups [g0, g1).
static void gemv_q4_K(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q4K;
			const uint8_t *y = a + Q8K * i;
			prefetch_rec(p, PK_Q4K);
			__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				// int16 sums: 8 products x 15 x 127 per lane pair, < 32767
				__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
				for (int c = 0; c < 4; c++) {
					const __m256i v = ld256(p + 128 * j + 32 * c);
					const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
					s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo, bcast32(y + 4 + 32 * j + 4 * c)));
					s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi, bcast32(y + 4 + 32 * j + 16 + 4 * c)));
				}
				const __m128i sc8 = _mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j));
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc8, sc8))));
				FI_KEEP(isum);
			}
			// mins: rows' (m_2q, m_2q+1) against the activation's 32-element
			// sums (bsum pairs), two sub-blocks per pmaddwd.
			const __m256i bsp = _mm256_madd_epi16(ld256(y + 260), _mm256_set1_epi16(1));
			const __m256i bsp16 = _mm256_packs_epi32(bsp, bsp); // |sums| <= 4064: exact
			__m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int q = 0; q < 4; q++) {
				const __m128i m0 = _mm_loadl_epi64((const __m128i *)(p + 1088 + 16 * q));
				const __m128i m1 = _mm_loadl_epi64((const __m128i *)(p + 1096 + 16 * q));
				const __m256i mm = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m0, m1));
				const __m256i pair = _mm256_permutevar8x32_epi32(bsp16, _mm256_set1_epi32((q & 1) + 4 * (q >> 1)));
				msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mm, pair));
			}
			const __m256 dy = _mm256_set1_ps(ld_f32(y));
			const __m256 d = _mm256_cvtph_ps(ld128(p + 1152)), dm = _mm256_cvtph_ps(ld128(p + 1168));
			acc = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum), acc);
			acc = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dy), _mm256_cvtepi32_ps(msum), acc);
			FI_KEEP(acc);
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// q6_steps rebuilds the 4 steps (codes 0..63) of sub-block sb.
FI_INLINE void q6_steps(const uint8_t *p, int sb, __m256i v[4]) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
	const __m256i l0 = ld256(p + 64 * sb), l1 = ld256(p + 64 * sb + 32), h = ld256(p + 1024 + 32 * sb);
	v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
	v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
	v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30));
	v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}

// i8pairs widens 8 signed bytes x (row r) and y to int16 pairs (x_r, y_r).
FI_INLINE __m256i i8pairs(const uint8_t *x, const uint8_t *y) {
	return _mm256_cvtepi8_epi16(
	    _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)x), _mm_loadl_epi64((const __m128i *)y)));
}

static void gemv_q6_K(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q6K;
			const uint8_t *y = a + Q8K * i;
			prefetch_rec(p, PK_Q6K);
			__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 16
			for (int sb = 0; sb < 16; sb++) {
				__m256i v[4];
				q6_steps(p, sb, v);
				const uint8_t *yq = y + 4 + 16 * sb;
				const uint8_t *sc = p + 1536 + 8 * sb;
				const __m256i s = i8pairs(sc, sc);
				// int16 sums: 2 products x 2 steps x 63 x 127 = 32004 < 32767
				const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], bcast32(yq)), _mm256_maddubs_epi16(v[1], bcast32(yq + 4)));
				const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], bcast32(yq + 8)), _mm256_maddubs_epi16(v[3], bcast32(yq + 12)));
				isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p01, s), _mm256_madd_epi16(p23, s)));
				FI_KEEP(isum);
			}
			// the -32 of every code: 32 * sum of sc * bsum, two sub-blocks per pmaddwd
			__m256i osum = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int q = 0; q < 8; q++) {
				osum = _mm256_add_epi32(osum, _mm256_madd_epi16(i8pairs(p + 1536 + 16 * q, p + 1544 + 16 * q), bcast32(y + 260 + 4 * q)));
			}
			isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(osum, 5));
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 1664)), _mm256_set1_ps(ld_f32(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

static void gemv_q4_0(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), eights = _mm256_set1_epi8(8);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q40;
			const uint8_t *y = a + 34 * i;
			prefetch_rec(p, PK_Q40);
			// int16 sums: 8 steps x 2 products x 15 x 127 = 30480 < 32767
			__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				const __m256i v = ld256(p + 32 * c);
				const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
				s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo, bcast32(y + 2 + 4 * c)));
				s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi, bcast32(y + 18 + 4 * c)));
			}
			// minus 8 * sum(a), the same for all 8 rows: reduce and broadcast
			__m256i sa = _mm256_madd_epi16(_mm256_maddubs_epi16(eights, ld256(y + 2)), ones);
			sa = _mm256_add_epi32(sa, _mm256_shuffle_epi32(sa, 0x4e));
			sa = _mm256_add_epi32(sa, _mm256_shuffle_epi32(sa, 0xb1));
			sa = _mm256_add_epi32(sa, _mm256_permute2x128_si256(sa, sa, 1));
			const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(s, ones), sa);
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 128)), _mm256_set1_ps(ld_f16(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

static void gemv_q8_0(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	const __m256i ones = _mm256_set1_epi16(1);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q80;
			const uint8_t *y = a + 34 * i;
			prefetch_rec(p, PK_Q80);
			__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++) {
				const __m256i wv = ld256(p + 32 * s);
				const __m256i pr = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(bcast32(y + 2 + 4 * s), wv));
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pr, ones));
				FI_KEEP(isum);
			}
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 256)), _mm256_set1_ps(ld_f16(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// ---- GEMM: packed groups expanded into kern_avx2_rp.h records --------------

static void expand_q4_K(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t i = 0; i < nb; i++, rec += Q4K_REC) {
		const uint8_t *p = grp + i * PK_Q4K;
		for (int j = 0; j < 8; j++) {
			for (int c = 0; c < 4; c++) {
				const __m256i v = ld256(p + 128 * j + 32 * c);
				_mm256_storeu_si256((__m256i *)(rec + 256 * j + 32 * c), _mm256_and_si256(v, m4));
				_mm256_storeu_si256((__m256i *)(rec + 256 * j + 32 * (c + 4)),
				                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
			}
			const __m128i s8 = _mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j));
			const __m128i m8 = _mm_loadl_epi64((const __m128i *)(p + 1088 + 8 * j));
			_mm256_storeu_si256((__m256i *)(rec + 2048 + 32 * j), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8)));
			_mm256_storeu_si256((__m256i *)(rec + 2304 + 32 * j), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)));
		}
		_mm256_storeu_ps((float *)(rec + 2560), _mm256_cvtph_ps(ld128(p + 1152)));
		_mm256_storeu_ps((float *)(rec + 2592), _mm256_cvtph_ps(ld128(p + 1168)));
	}
}

static void expand_q6_K(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	for (int64_t i = 0; i < nb; i++, rec += Q6K_REC) {
		const uint8_t *p = grp + i * PK_Q6K;
		for (int sb = 0; sb < 16; sb++) {
			__m256i v[4];
			q6_steps(p, sb, v);
			for (int st = 0; st < 4; st++) _mm256_storeu_si256((__m256i *)(rec + 128 * sb + 32 * st), v[st]);
			const uint8_t *sc = p + 1536 + 8 * sb;
			_mm256_storeu_si256((__m256i *)(rec + 2048 + 32 * sb), i8pairs(sc, sc));
		}
		for (int q = 0; q < 8; q++) {
			_mm256_storeu_si256((__m256i *)(rec + 2560 + 32 * q), i8pairs(p + 1536 + 16 * q, p + 1544 + 16 * q));
		}
		_mm256_storeu_ps((float *)(rec + 2816), _mm256_cvtph_ps(ld128(p + 1664)));
	}
}

static void expand_q4_0(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	const __m256i m4 = _mm256_set1_epi8(0x0f), m8 = _mm256_set1_epi8(8);
	for (int64_t i = 0; i < nb; i++, rec += Q80_REC) {
		const uint8_t *p = grp + i * PK_Q40;
		for (int c = 0; c < 4; c++) {
			const __m256i v = ld256(p + 32 * c);
			_mm256_storeu_si256((__m256i *)(rec + 32 * c), _mm256_sub_epi8(_mm256_and_si256(v, m4), m8));
			_mm256_storeu_si256((__m256i *)(rec + 32 * (c + 4)),
			                    _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), m8));
		}
		_mm256_storeu_ps((float *)(rec + 256), _mm256_cvtph_ps(ld128(p + 128)));
	}
}

static void expand_q8_0(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	for (int64_t i = 0; i < nb; i++, rec += Q80_REC) {
		const uint8_t *p = grp + i * PK_Q80;
		memcpy(rec, p, 256);
		_mm256_storeu_ps((float *)(rec + 256), _mm256_cvtph_ps(ld128(p + 256)));
	}
}

// The GEMM driver addresses group g of rows at w + 8*g*ws: with ws the
// packed bytes per row, that is the packed group.
FI_DEFINE_RP(pk_gemm_q4_K, expand_q4_K, micro_q4_K, Q4K_REC, 256, Q8K)
FI_DEFINE_RP(pk_gemm_q4_0, expand_q4_0, micro_q4_0, Q80_REC, 32, 34)
FI_DEFINE_RP(pk_gemm_q6_K, expand_q6_K, micro_q6_K, Q6K_REC, 256, Q8K)
FI_DEFINE_RP(pk_gemm_q8_0, expand_q8_0, micro_q8_0, Q80_REC, 32, 34)

// ---- entry points (kern.h) -------------------------------------------------

int64_t fi_packed_size_avx2(int wt, int64_t rows, int64_t cols) {
	if (rows % 8 != 0) return -1;
	switch (wt) {
	case FI_Q4_0: return rows / 8 * (cols / 32) * PK_Q40;
	case FI_Q4_K: return rows / 8 * (cols / 256) * PK_Q4K;
	case FI_Q6_K: return rows / 8 * (cols / 256) * PK_Q6K;
	case FI_Q8_0: return rows / 8 * (cols / 32) * PK_Q80;
	}
	return -1;
}

int fi_pack_avx2(int wt, const uint8_t *w, int64_t ws, int64_t rows, int64_t cols, uint8_t *dst) {
	switch (wt) {
	case FI_Q4_0: pack_q4_0(w, ws, rows, cols / 32, dst); return 0;
	case FI_Q4_K: pack_q4_K(w, ws, rows, cols / 256, dst); return 0;
	case FI_Q6_K: pack_q6_K(w, ws, rows, cols / 256, dst); return 0;
	case FI_Q8_0: pack_q8_0(w, ws, rows, cols / 32, dst); return 0;
	}
	return -1;
}

int fi_gemm_packed_avx2(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                        int64_t as, int64_t nact, float *out, int64_t os) {
	void (*gemv)(const uint8_t *, int64_t, int64_t, int64_t, const uint8_t *, float *);
	int64_t (*gemm)(const uint8_t *, int64_t, int64_t, int64_t, int64_t, const uint8_t *, int64_t, int64_t, float *,
	                int64_t);
	int64_t nb, row_bytes;
	switch (wt) {
	case FI_Q4_0: gemv = gemv_q4_0, gemm = pk_gemm_q4_0, nb = cols / 32, row_bytes = nb * PK_Q40 / 8; break;
	case FI_Q4_K: gemv = gemv_q4_K, gemm = pk_gemm_q4_K, nb = cols / 256, row_bytes = nb * PK_Q4K / 8; break;
	case FI_Q6_K: gemv = gemv_q6_K, gemm = pk_gemm_q6_K, nb = cols / 256, row_bytes = nb * PK_Q6K / 8; break;
	case FI_Q8_0: gemv = gemv_q8_0, gemm = pk_gemm_q8_0, nb = cols / 32, row_bytes = nb * PK_Q80 / 8; break;
	default: return -1;
	}
	if (r1 <= r0 || nact <= 0) return 0;
	if (nact >= FI_RP_MIN_ACTS && gemm(pk, row_bytes, cols, r0, r1, a, as, nact, out, os) == r1 - r0) return 0;
	for (int64_t t = 0; t < nact; t++) gemv(pk, nb, r0 / 8, r1 / 8, a + t * as, out + t * os);
	return 0;
}
