//go:build cgo

// Weights packed once at load time (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0; IQ4_NL,
// IQ4_XS and MXFP4 in kern_avx2_iqpk.c, behind the same entry points) for AVX2: rows in groups of
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
// Q5_K, per group of 8 rows and super-block (1440 bytes, 180 per row): Q4_K's
// layout of the low 4 bits, scales, mins and d/dmin, then
//   hb   [8 sub-blocks][8 rows][4 bytes]  (256): bit c + 4h of byte k holds
//        the fifth bit of code 4c+16h+k of the sub-block, so one 16-bit
//        shift and a mask move it to bit 4 of the step's nibble
// Q6_K, per group of 8 rows and super-block (1680 bytes, 210 per row). The
// 16 sub-blocks go in pairs q = (2q, 2q+1), and a row's 32-bit lane holds
// two codes of each: "step" k (0..7) of pair q is, per row, the bytes
// (c[2q][2k], c[2q][2k+1], c[2q+1][2k], c[2q+1][2k+1]). pmaddubsw then sums
// each sub-block into its own int16 of the lane, and one pmaddwd with the
// row's scale pair (sc[2q], sc[2q+1]) applies both scales. Codes are stored
// whole (6 bits) with the fourth step's bits spread over the top 2 bits of
// the other three, so the rebuild is 11 operations per 4 steps instead of
// 17 with the file's split of 4 low and 2 high bits (the layout before):
//   qs   [8 pairs][2 halves][3 vectors A,B,C][8 rows][4 bytes] (1536): in
//        half h, A/B/C hold steps 4h, 4h+1, 4h+2 in bits 0..5 and bits
//        0-1 / 2-3 / 4-5 of step 4h+3 in bits 6..7
//   sc   [8 pairs][8 rows][2] int8 (128)
//   d    [8 rows] fp16 (16)
// The activation's codes are permuted to match once per call (fi_q6_perm).
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
#define PK_Q5K 1440
#define PK_Q80 272
#define PK_Q6K 1680
#define PK_Q40 144

// PF_AHEAD: how far ahead (bytes) the matrix-vector products prefetch. A
// packed record is hundreds of instructions long, so out-of-order execution
// alone sees too little of the next one to keep enough misses in flight.
#ifndef PF_AHEAD
#define PF_AHEAD 2048
#endif

// prefetch_rec requests the n bytes at p + PF_AHEAD.
FI_INLINE void prefetch_rec(const uint8_t *p, int n) {
	for (int o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + PF_AHEAD + o), _MM_HINT_T0);
}

// ---- packing ---------------------------------------------------------------

// pack_k4_row writes row r's part of a Q4_K-layout record p from the
// super-block x (scales and mins at x + 4, d and dmin at x) whose low
// nibbles are the 128 bytes at qs (Q4_K: x + 16; Q5_K: x + 48).
static void pack_k4_row(const uint8_t *x, const uint8_t *qs, int r, uint8_t *p) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	memcpy(p + 1152 + 2 * r, x, 2);
	memcpy(p + 1168 + 2 * r, x + 2, 2);
	const uint8_t *q = x + 4;
	for (int j = 0; j < 8; j++) {
		int sc, m;
		scale_min_k4(q, j, &sc, &m);
		p[1024 + 8 * j + r] = (uint8_t)sc;
		p[1088 + 8 * j + r] = (uint8_t)m;
	}
	for (int k = 0; k < 4; k++) {
		// sub-blocks 2k (low nibbles) and 2k+1 (high nibbles) of qs[32k..]
		const __m256i v = ld256(qs + 32 * k);
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

static void pack_q4_K(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q4K;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 144 * i;
				pack_k4_row(x, x + 16, r, p);
			}
		}
	}
}

// Q5_K super-block: d, dmin, scales[12], qh[32] (bit 2k+s of qh[l]: fifth
// bit of element l of sub-block 2k+s), qs[128] (as Q4_K's).
static void pack_q5_K(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q5K;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 176 * i, *qh = x + 16;
				pack_k4_row(x, x + 48, r, p);
				// qh reordered so that byte 8k + 4h + c is qh[4c + 16h + k]:
				// then bit j of every byte, gathered by movemask, is row r's
				// 4 hb bytes of sub-block j
				uint8_t t[32];
				for (int k = 0; k < 4; k++) {
					for (int h = 0; h < 2; h++) {
						for (int c = 0; c < 4; c++) t[8 * k + 4 * h + c] = qh[4 * c + 16 * h + k];
					}
				}
				const __m256i v = ld256(t);
				for (int j = 0; j < 8; j++) {
					// bit j of each byte to bit 7 (16-bit shift: bit 7 of
					// either byte comes from bit j of the same byte)
					const uint32_t b = (uint32_t)_mm256_movemask_epi8(_mm256_sll_epi16(v, _mm_cvtsi32_si128(7 - j)));
					memcpy(p + 1184 + 32 * j + 4 * r, &b, 4);
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
				for (int q = 0; q < 8; q++) {
					p[1536 + 16 * q + 2 * r] = x[192 + 2 * q];
					p[1536 + 16 * q + 2 * r + 1] = x[192 + 2 * q + 1];
					// byte j of step k: code 2k+j of sub-block 2q (j < 2), 2k+j-2 of 2q+1.
					// Steps 4h..4h+3 are the 16-bit interleave of the two
					// sub-blocks' halves (st[s][j], s-major); step 4h+v (v < 3)
					// is stored with the two bits 2v, 2v+1 of step 4h+3 on top.
					const __m128i c0 = _mm_loadu_si128((const __m128i *)(codes + 32 * q));
					const __m128i c1 = _mm_loadu_si128((const __m128i *)(codes + 32 * q + 16));
					for (int h = 0; h < 2; h++) {
						const __m128i st = h ? _mm_unpackhi_epi16(c0, c1) : _mm_unpacklo_epi16(c0, c1);
						const __m128i s3 = _mm_shuffle_epi32(st, 0xff);
						const __m128i top = _mm_slli_epi32(
						    _mm_and_si128(_mm_srlv_epi32(s3, _mm_setr_epi32(0, 2, 4, 0)), _mm_set1_epi8(3)), 6);
						const __m128i o = _mm_or_si128(st, top);
						uint8_t *b = p + 192 * q + 96 * h + 4 * r;
						const uint32_t o0 = (uint32_t)_mm_cvtsi128_si32(o), o1 = (uint32_t)_mm_extract_epi32(o, 1),
						               o2 = (uint32_t)_mm_extract_epi32(o, 2);
						memcpy(b, &o0, 4);
						memcpy(b + 32, &o1, 4);
						memcpy(b + 64, &o2, 4);
					}
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

// k4_finish adds to acc one Q4_K/Q5_K record's result: d * dy * isum (the
// scaled code sums) minus dmin * dy * the mins against the activation's
// sub-block sums, two sub-blocks per pmaddwd.
FI_INLINE __m256 k4_finish(const uint8_t *p, const uint8_t *y, __m256i isum, __m256 acc) {
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
	return _mm256_fnmadd_ps(_mm256_mul_ps(dm, dy), _mm256_cvtepi32_ps(msum), acc);
}

// gemv_q4_K writes out[8g + r] for groups [g0, g1).
static void gemv_q4_K(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q4K;
			const uint8_t *y = a + Q8K * i;
			FI_MCA_BEGIN("avx2_q4_K", 1);
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
			acc = k4_finish(p, y, isum, acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// k5_codes sets *lo and *hi to the codes 0..31 of chunk c of a packed Q5_K
// sub-block: the low and high nibbles of v with the fifth bits from hb.
FI_INLINE void k5_codes(__m256i v, __m256i hb, int c, __m256i *lo, __m256i *hi) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
	*lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4 - c), m16));
	*hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, c), m16));
}

// gemv_q5_K is gemv_q4_K with each code's fifth bit or-ed in as 16: int16
// sums of 8 products x 31 x 127 at most, so each sub-block's two halves
// (chunks 0-1, 2-3) are widened separately.
static void gemv_q5_K(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q5K;
			const uint8_t *y = a + Q8K * i;
			FI_MCA_BEGIN("avx2_q5_K", 1);
			prefetch_rec(p, PK_Q5K);
			__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				const __m256i hb = ld256(p + 1184 + 32 * j);
				const __m128i sc8 = _mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j));
				const __m256i sc = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc8, sc8));
#pragma GCC unroll 2
				for (int c0 = 0; c0 < 4; c0 += 2) {
					__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 2
					for (int c = c0; c < c0 + 2; c++) {
						__m256i lo, hi;
						k5_codes(ld256(p + 128 * j + 32 * c), hb, c, &lo, &hi);
						s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo, bcast32(y + 4 + 32 * j + 4 * c)));
						s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi, bcast32(y + 4 + 32 * j + 16 + 4 * c)));
					}
					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s, sc));
					FI_KEEP(isum);
				}
			}
			acc = k4_finish(p, y, isum, acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// q6_half rebuilds steps 4h..4h+3 (codes 0..63) of a pair from its three
// vectors at v.
FI_INLINE void q6_half(const uint8_t *v, __m256i s[4]) {
	const __m256i m6 = _mm256_set1_epi8(0x3f);
	const __m256i a = ld256(v), b = ld256(v + 32), c = ld256(v + 64);
	s[0] = _mm256_and_si256(a, m6);
	s[1] = _mm256_and_si256(b, m6);
	s[2] = _mm256_and_si256(c, m6);
	s[3] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 6), _mm256_set1_epi8(0x03)),
	                                       _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0c))),
	                       _mm256_and_si256(_mm256_srli_epi16(c, 2), _mm256_set1_epi8(0x30)));
}

// Q6_PERM_NB: super-blocks whose activation codes fi_q6_perm reorders at a
// time (a 16 KiB buffer on the stack).
#define Q6_PERM_NB 64

// fi_q6_perm (kern.h) writes the codes of nb Q8_K super-blocks at a in the
// order of the packed Q6_K steps: per pair q, the 16-bit units of
// sub-blocks 2q and 2q+1 interleaved, so step k of the pair is one 32-bit
// broadcast.
void fi_q6_perm(const uint8_t *a, int64_t nb, uint8_t *yp) {
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *y = a + Q8K * i + 4;
		for (int q = 0; q < 8; q++) {
			const __m128i lo = ld128(y + 32 * q), hi = ld128(y + 32 * q + 16);
			_mm_storeu_si128((__m128i *)(yp + 256 * i + 32 * q), _mm_unpacklo_epi16(lo, hi));
			_mm_storeu_si128((__m128i *)(yp + 256 * i + 32 * q + 16), _mm_unpackhi_epi16(lo, hi));
		}
	}
}

// gemv_q6_K_blocks adds the products of super-blocks [i0, i1) of groups
// [g0, g1) to out (yp: fi_q6_perm's codes of those super-blocks).
static void gemv_q6_K_blocks(const uint8_t *pk, int64_t nb, int64_t i0, int64_t i1, int64_t g0, int64_t g1,
                             const uint8_t *a, const uint8_t *yp, float *out, int add) {
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = add ? _mm256_loadu_ps(out + 8 * g) : _mm256_setzero_ps();
		for (int64_t i = i0; i < i1; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q6K;
			const uint8_t *y = a + Q8K * i, *yq = yp + 256 * (i - i0);
			FI_MCA_BEGIN("avx2_q6_K", 1);
			prefetch_rec(p, PK_Q6K);
			__m256i isum = _mm256_setzero_si256(), osum = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int q = 0; q < 8; q++) {
				// (sc[2q], sc[2q+1]) per row
				const __m256i sc = _mm256_cvtepi8_epi16(ld128(p + 1536 + 16 * q));
				__m256i s[8];
				q6_half(p + 192 * q, s);
				q6_half(p + 192 * q + 96, s + 4);
				// int16 sums: 2 steps x 2 products x 63 x 128 = 32256 < 32767
				const uint8_t *yk = yq + 32 * q;
				const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(s[0], bcast32(yk)), _mm256_maddubs_epi16(s[1], bcast32(yk + 4)));
				const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(s[2], bcast32(yk + 8)), _mm256_maddubs_epi16(s[3], bcast32(yk + 12)));
				const __m256i p45 = _mm256_add_epi16(_mm256_maddubs_epi16(s[4], bcast32(yk + 16)), _mm256_maddubs_epi16(s[5], bcast32(yk + 20)));
				const __m256i p67 = _mm256_add_epi16(_mm256_maddubs_epi16(s[6], bcast32(yk + 24)), _mm256_maddubs_epi16(s[7], bcast32(yk + 28)));
				isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p01, sc), _mm256_madd_epi16(p23, sc)));
				isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p45, sc), _mm256_madd_epi16(p67, sc)));
				// the -32 of every code: sc against the pair's bsums
				osum = _mm256_add_epi32(osum, _mm256_madd_epi16(sc, bcast32(y + 260 + 4 * q)));
				FI_KEEP(isum);
				FI_KEEP(osum); // else GCC defers these adds and spills the products
			}
			isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(osum, 5));
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 1664)), _mm256_set1_ps(ld_f32(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

static void gemv_q6_K(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	uint8_t yp[256 * Q6_PERM_NB];
	for (int64_t i0 = 0; i0 < nb; i0 += Q6_PERM_NB) {
		const int64_t i1 = i0 + Q6_PERM_NB < nb ? i0 + Q6_PERM_NB : nb;
		fi_q6_perm(a + Q8K * i0, i1 - i0, yp);
		gemv_q6_K_blocks(pk, nb, i0, i1, g0, g1, a, yp, out, i0 > 0);
	}
}

static void gemv_q4_0(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), eights = _mm256_set1_epi8(8);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q40;
			const uint8_t *y = a + 34 * i;
			FI_MCA_BEGIN("avx2_q4_0", 1);
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
			FI_MCA_END();
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
			FI_MCA_BEGIN("avx2_q8_0", 1);
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
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// ---- GEMM: packed groups expanded into kern_avx2_rp.h records --------------

// expand_k4 expands packed Q4_K (q5 = 0) or Q5_K (q5 = 1) groups into
// Q4_K records (kern_avx2_rp.h): codes 0..15 or 0..31 per step, scales
// and mins widened, d and dmin as floats.
FI_INLINE void expand_k4(const uint8_t *grp, int64_t nb, uint8_t *rec, const int q5) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t i = 0; i < nb; i++, rec += Q4K_REC) {
		const uint8_t *p = grp + i * (q5 ? PK_Q5K : PK_Q4K);
		for (int j = 0; j < 8; j++) {
			const __m256i hb = q5 ? ld256(p + 1184 + 32 * j) : _mm256_setzero_si256();
			for (int c = 0; c < 4; c++) {
				const __m256i v = ld256(p + 128 * j + 32 * c);
				__m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
				if (q5) k5_codes(v, hb, c, &lo, &hi);
				_mm256_storeu_si256((__m256i *)(rec + 256 * j + 32 * c), lo);
				_mm256_storeu_si256((__m256i *)(rec + 256 * j + 32 * (c + 4)), hi);
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

static void expand_q4_K(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	expand_k4(grp, nb, rec, 0);
}

// expand_q5_K: codes 0..31 in Q4_K's record (micro_q5_K sums them).
static void expand_q5_K(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	expand_k4(grp, nb, rec, 1);
}

static void expand_q6_K(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	for (int64_t i = 0; i < nb; i++, rec += Q6K_REC) {
		const uint8_t *p = grp + i * PK_Q6K;
		for (int q = 0; q < 8; q++) {
			__m256i s[8];
			q6_half(p + 192 * q, s);
			q6_half(p + 192 * q + 96, s + 4);
			// record step t of sub-block 2q: codes 4t..4t+3 = low halves of
			// steps 2t and 2t+1; of sub-block 2q+1: their high halves
			for (int t = 0; t < 4; t++) {
				const __m256i e = s[2 * t], o = s[2 * t + 1];
				_mm256_storeu_si256((__m256i *)(rec + 128 * (2 * q) + 32 * t),
				                    _mm256_blend_epi16(e, _mm256_slli_epi32(o, 16), 0xaa));
				_mm256_storeu_si256((__m256i *)(rec + 128 * (2 * q + 1) + 32 * t),
				                    _mm256_blend_epi16(_mm256_srli_epi32(e, 16), o, 0xaa));
			}
			const __m256i sc = _mm256_cvtepi8_epi16(ld128(p + 1536 + 16 * q)); // (sc[2q], sc[2q+1]) per row
			_mm256_storeu_si256((__m256i *)(rec + 2048 + 32 * (2 * q)),
			                    _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sc, 0xa0), 0xa0));
			_mm256_storeu_si256((__m256i *)(rec + 2048 + 32 * (2 * q + 1)),
			                    _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sc, 0xf5), 0xf5));
			_mm256_storeu_si256((__m256i *)(rec + 2560 + 32 * q), sc);
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
FI_DEFINE_RP(pk_gemm_q5_K, expand_q5_K, micro_q5_K, Q4K_REC, 256, Q8K)
FI_DEFINE_RP(pk_gemm_q6_K, expand_q6_K, micro_q6_K, Q6K_REC, 256, Q8K)
FI_DEFINE_RP(pk_gemm_q8_0, expand_q8_0, micro_q8_0, Q80_REC, 32, 34)

// ---- entry points (kern.h) -------------------------------------------------

int64_t fi_packed_size_avx2(int wt, int64_t rows, int64_t cols) {
	if (rows % 8 != 0) return -1;
	switch (wt) {
	case FI_Q4_0: return rows / 8 * (cols / 32) * PK_Q40;
	case FI_Q4_K: return rows / 8 * (cols / 256) * PK_Q4K;
	case FI_Q5_K: return rows / 8 * (cols / 256) * PK_Q5K;
	case FI_Q6_K: return rows / 8 * (cols / 256) * PK_Q6K;
	case FI_Q8_0: return rows / 8 * (cols / 32) * PK_Q80;
	}
	return fi_avx2_iq_packed_size(wt, rows, cols);
}

int fi_pack_avx2(int wt, const uint8_t *w, int64_t ws, int64_t rows, int64_t cols, uint8_t *dst) {
	switch (wt) {
	case FI_Q4_0: pack_q4_0(w, ws, rows, cols / 32, dst); return 0;
	case FI_Q4_K: pack_q4_K(w, ws, rows, cols / 256, dst); return 0;
	case FI_Q5_K: pack_q5_K(w, ws, rows, cols / 256, dst); return 0;
	case FI_Q6_K: pack_q6_K(w, ws, rows, cols / 256, dst); return 0;
	case FI_Q8_0: pack_q8_0(w, ws, rows, cols / 32, dst); return 0;
	}
	return fi_avx2_iq_pack(wt, w, ws, rows, cols, dst);
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
	case FI_Q5_K: gemv = gemv_q5_K, gemm = pk_gemm_q5_K, nb = cols / 256, row_bytes = nb * PK_Q5K / 8; break;
	case FI_Q6_K: gemv = gemv_q6_K, gemm = pk_gemm_q6_K, nb = cols / 256, row_bytes = nb * PK_Q6K / 8; break;
	case FI_Q8_0: gemv = gemv_q8_0, gemm = pk_gemm_q8_0, nb = cols / 32, row_bytes = nb * PK_Q80 / 8; break;
	default: return fi_avx2_iq_gemm_packed(wt, pk, cols, r0, r1, a, as, nact, out, os);
	}
	if (r1 <= r0 || nact <= 0) return 0;
	if (nact >= FI_RP_MIN_ACTS && gemm(pk, row_bytes, cols, r0, r1, a, as, nact, out, os) == r1 - r0) return 0;
	for (int64_t t = 0; t < nact; t++) gemv(pk, nb, r0 / 8, r1 / 8, a + t * as, out + t * os);
	return 0;
}
