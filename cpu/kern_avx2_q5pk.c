//go:build cgo

// Packed Q5_0 weights for AVX2, in the scheme of kern_avx2_pk.c: rows in
// groups of 8, one 32-byte vector holding 4 codes of each of 8 rows, so
// vector lanes are rows and decode needs no horizontal sums. Q5_0 is what
// llama-quantize's Q4_K_M mixture falls back to for matrices whose width is
// not a multiple of 256 (Gemma 4's expert and dense down projections), so
// it is a decode-time type, not only a legacy one.
//
// Per group of 8 rows and block of 32 (176 bytes, 22 per row: the file's
// size), step s = codes 4s..4s+3 of each of 8 rows:
//   qs   [4][8 rows][4 bytes] (128): the low 4 bits, as packed Q4_0's:
//        vector c holds step c in the low nibbles, step c+4 in the high
//   hb   [8 rows][4 bytes] (32): bit c + 4h of byte k of row r is the fifth
//        bit of code 4c+16h+k, so one 16-bit shift and a mask move it to
//        bit 4 of the step's nibble (packed Q5_K's trick)
//   d    [8 rows] fp16 (16)
// The code is q in 0..31, x = d*(q-16) (ggml's dequantize_row_q5_0).
//
// Decode sums q*a in int16 (two steps, 4 products of at most 2 x 31 x 127
// = 7874 each: 31496 < 32767), widens, and subtracts 16*sum(a), the same
// for all 8 rows. Prefill expands packed groups into Q8_0 records
// (kern_avx2_rp.h) with the codes q-16 in [-16, 15], whose 8 steps
// accumulate in int16 as micro_q4_0 does (8 x 2 x 16 x 127 = 32512). Both
// form the same exact int32 block sum and the same float operations in the
// same order, so a weight row times an activation row has the same bits
// whatever the batch.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_rp.h"

#define PK_Q50 176

// PF_AHEAD: how far ahead (bytes) decode prefetches (as kern_avx2_pk.c).
#define PF_AHEAD 2048

FI_INLINE void prefetch_rec(const uint8_t *p, int n) {
	for (int o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + PF_AHEAD + o), _MM_HINT_T0);
}

// pack_q5_0 packs Q5_0 blocks (d fp16, qh 32 bits little-endian, qs[16]:
// code j < 16 is qs[j] & 15 | bit j of qh << 4, code j + 16 is qs[j] >> 4 |
// bit j+16 of qh << 4).
static void pack_q5_0(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_Q50;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 22 * i;
				memcpy(p + 160 + 2 * r, x, 2);
				const uint32_t qh = (uint32_t)x[2] | (uint32_t)x[3] << 8 | (uint32_t)x[4] << 16 | (uint32_t)x[5] << 24;
				for (int ch = 0; ch < 4; ch++) {
					for (int k = 0; k < 4; k++) p[32 * ch + 4 * r + k] = x[6 + 4 * ch + k];
				}
				for (int k = 0; k < 4; k++) {
					uint8_t b = 0;
					for (int h = 0; h < 2; h++) {
						for (int c = 0; c < 4; c++) b |= (uint8_t)(((qh >> (4 * c + 16 * h + k)) & 1) << (c + 4 * h));
					}
					p[128 + 4 * r + k] = b;
				}
			}
		}
	}
}

// q5_codes sets *lo and *hi to the codes 0..31 of steps c and c+4 of a
// packed record: the low and high nibbles of v with the fifth bits from
// hb. The 16-bit shifts move no bit across a byte into bit 4 (shifts <= 4).
FI_INLINE void q5_codes(__m256i v, __m256i hb, int c, __m256i *lo, __m256i *hi) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
	*lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4 - c), m16));
	*hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, c), m16));
}

static void gemv_q5_0(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) {
	const __m256i ones = _mm256_set1_epi16(1), sixteens = _mm256_set1_epi8(16);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_Q50;
			const uint8_t *y = a + 34 * i;
			FI_MCA_BEGIN("avx2_q5_0", 1);
			prefetch_rec(p, PK_Q50);
			const __m256i hb = ld256(p + 128);
			__m256i s[2];
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				s[h] = _mm256_setzero_si256();
#pragma GCC unroll 2
				for (int c = 2 * h; c < 2 * h + 2; c++) {
					__m256i lo, hi;
					q5_codes(ld256(p + 32 * c), hb, c, &lo, &hi);
					s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(lo, bcast32(y + 2 + 4 * c)));
					s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(hi, bcast32(y + 18 + 4 * c)));
				}
			}
			// minus 16 * sum(a), the same for all 8 rows: reduce and broadcast
			__m256i sa = _mm256_madd_epi16(_mm256_maddubs_epi16(sixteens, ld256(y + 2)), ones);
			sa = _mm256_add_epi32(sa, _mm256_shuffle_epi32(sa, 0x4e));
			sa = _mm256_add_epi32(sa, _mm256_shuffle_epi32(sa, 0xb1));
			sa = _mm256_add_epi32(sa, _mm256_permute2x128_si256(sa, sa, 1));
			const __m256i isum = _mm256_sub_epi32(
			    _mm256_add_epi32(_mm256_madd_epi16(s[0], ones), _mm256_madd_epi16(s[1], ones)), sa);
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 160)), _mm256_set1_ps(ld_f16(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// expand_q5_0 writes Q8_0 records (Q80_REC) of packed groups: codes q-16
// and d as floats.
static void expand_q5_0(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	const __m256i m16 = _mm256_set1_epi8(16);
	for (int64_t i = 0; i < nb; i++, rec += Q80_REC) {
		const uint8_t *p = grp + i * PK_Q50;
		const __m256i hb = ld256(p + 128);
		for (int c = 0; c < 4; c++) {
			__m256i lo, hi;
			q5_codes(ld256(p + 32 * c), hb, c, &lo, &hi);
			_mm256_storeu_si256((__m256i *)(rec + 32 * c), _mm256_sub_epi8(lo, m16));
			_mm256_storeu_si256((__m256i *)(rec + 32 * (c + 4)), _mm256_sub_epi8(hi, m16));
		}
		_mm256_storeu_ps((float *)(rec + 256), _mm256_cvtph_ps(ld128(p + 160)));
	}
}

// micro_q4_0's int16 accumulation holds for |q-16| <= 16 (header comment).
FI_DEFINE_RP(pk_gemm_q5_0, expand_q5_0, micro_q4_0, Q80_REC, 32, 34)

int64_t fi_avx2_q5_packed_size(int wt, int64_t rows, int64_t cols) {
	if (wt != FI_Q5_0 || rows % 8 != 0) return -1;
	return rows / 8 * (cols / 32) * PK_Q50;
}

int fi_avx2_q5_pack(int wt, const uint8_t *w, int64_t ws, int64_t rows, int64_t cols, uint8_t *dst) {
	if (wt != FI_Q5_0) return -1;
	pack_q5_0(w, ws, rows, cols / 32, dst);
	return 0;
}

int fi_avx2_q5_gemm_packed(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                           int64_t as, int64_t nact, float *out, int64_t os) {
	if (wt != FI_Q5_0) return -1;
	if (r1 <= r0 || nact <= 0) return 0;
	const int64_t nb = cols / 32;
	if (nact >= FI_RP_MIN_ACTS && pk_gemm_q5_0(pk, nb * PK_Q50 / 8, cols, r0, r1, a, as, nact, out, os) == r1 - r0)
		return 0;
	for (int64_t t = 0; t < nact; t++) gemv_q5_0(pk, nb, r0 / 8, r1 / 8, a + t * as, out + t * os);
	return 0;
}
