//go:build cgo

// AVX2 prefill GEMM on weights repacked on the fly (Q4_0, Q4_K, Q6_K, Q8_0): the
// matrix product of many activation rows, where a weight row's decoding can
// be paid once for all of them.
//
// Weight rows are taken in groups of 8 and decoded into a scratch record per
// super-block (or block) in which a 32-byte vector holds 4 consecutive codes
// of each of the 8 rows ("step" s: row 0 codes 4s..4s+3, row 1 ..., row 7),
// plus the scales already widened per row. Vector lanes are then rows: 4
// activation bytes are broadcast and one pmaddubsw multiplies them with 8
// rows at once, products of a sub-block accumulate in int16 (no overflow for
// these code ranges, checked per type below) and one pmaddwd applies the 8
// rows' scales. No horizontal sums, and one result vector per activation row
// holds 8 outputs. This is the shape of llama.cpp's CPU_REPACK gemm, but the
// repacking happens inside the call (weights stay as in the file), costing a
// few percent of the product at 16+ activation rows.
//
// Loop order: weight groups in blocks that fit in L2 with a chunk of
// activation rows; per group and super-block the 8 rows' record (~2.6 KiB)
// stays in L1 while every activation tile of the chunk passes.
//
// Results differ from the dot kernels (and quant) only in float rounding:
// each super-block's exact integer sum is scaled and accumulated with FMA.

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_rp.h"

// Filling records from weights as stored in files (layouts in kern_avx2_rp.h).

static void decode_q4_K(const uint8_t *w, int64_t ws, int64_t nb, uint8_t *rec) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t i = 0; i < nb; i++, rec += Q4K_REC) {
		int16_t *sc = (int16_t *)(rec + 2048), *mn = (int16_t *)(rec + 2304);
		float *d = (float *)(rec + 2560), *dm = (float *)(rec + 2592);
		for (int k = 0; k < 4; k++) {
			__m256i lo[8], hi[8];
			for (int r = 0; r < 8; r++) {
				const __m256i q = ld256(w + r * ws + 144 * i + 16 + 32 * k);
				lo[r] = _mm256_and_si256(q, m4);
				hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			}
			store_rows8(rec + (2 * k) * 256, lo);
			store_rows8(rec + (2 * k + 1) * 256, hi);
		}
		for (int r = 0; r < 8; r++) {
			const uint8_t *x = w + r * ws + 144 * i;
			d[r] = ld_f16(x);
			dm[r] = ld_f16(x + 2);
			const uint8_t *q = x + 4;
			for (int j = 0; j < 8; j++) {
				int s, m;
				scale_min_k4(q, j, &s, &m);
				sc[16 * j + 2 * r] = sc[16 * j + 2 * r + 1] = (int16_t)s;
				mn[16 * j + 2 * r] = mn[16 * j + 2 * r + 1] = (int16_t)m;
			}
		}
	}
}

static void decode_q6_K(const uint8_t *w, int64_t ws, int64_t nb, uint8_t *rec) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
	for (int64_t i = 0; i < nb; i++, rec += Q6K_REC) {
		int16_t *sc = (int16_t *)(rec + 2048), *scp = (int16_t *)(rec + 2560);
		float *d = (float *)(rec + 2816);
		for (int h = 0; h < 2; h++) {
			__m256i v[4][8];
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + r * ws + 210 * i;
				const __m256i l0 = ld256(x + 64 * h), l1 = ld256(x + 64 * h + 32), qh = ld256(x + 128 + 32 * h);
				v[0][r] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
				v[1][r] = _mm256_or_si256(_mm256_and_si256(l1, m4),
				                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
				v[2][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
				                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
				v[3][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
				                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
			}
			// vector k holds elements 128h+32k.. = sub-blocks 8h+2k, 8h+2k+1.
			for (int k = 0; k < 4; k++) store_rows8(rec + (32 * h + 8 * k) * 32, v[k]);
		}
		for (int r = 0; r < 8; r++) {
			const uint8_t *x = w + r * ws + 210 * i;
			d[r] = ld_f16(x + 208);
			for (int j = 0; j < 16; j++) {
				const int16_t v = (int8_t)x[192 + j];
				sc[16 * j + 2 * r] = sc[16 * j + 2 * r + 1] = v;
				scp[16 * (j / 2) + 2 * r + (j & 1)] = v;
			}
		}
	}
}

static void decode_q8_0(const uint8_t *w, int64_t ws, int64_t nb, uint8_t *rec) {
	for (int64_t i = 0; i < nb; i++, rec += Q80_REC) {
		__m256i v[8];
		float *d = (float *)(rec + 256);
		for (int r = 0; r < 8; r++) {
			v[r] = ld256(w + r * ws + 34 * i + 2);
			d[r] = ld_f16(w + r * ws + 34 * i);
		}
		store_rows8(rec, v);
	}
}

static void decode_q4_0(const uint8_t *w, int64_t ws, int64_t nb, uint8_t *rec) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m8 = _mm256_set1_epi8(8);
	for (int64_t i = 0; i < nb; i++, rec += Q80_REC) {
		__m256i v[8];
		float *d = (float *)(rec + 256);
		for (int r = 0; r < 8; r++) {
			const uint8_t *x = w + r * ws + 18 * i;
			const __m128i q = ld128(x + 2);
			v[r] = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4), m8);
			d[r] = ld_f16(x);
		}
		store_rows8(rec, v);
	}
}

FI_DEFINE_RP(rp_q4_0, decode_q4_0, micro_q4_0, Q80_REC, 32, 34)
FI_DEFINE_RP(rp_q4_K, decode_q4_K, micro_q4_K, Q4K_REC, 256, Q8K)
FI_DEFINE_RP(rp_q6_K, decode_q6_K, micro_q6_K, Q6K_REC, 256, Q8K)
FI_DEFINE_RP(rp_q8_0, decode_q8_0, micro_q8_0, Q80_REC, 32, 34)

// fi_avx2_gemm_rp runs the repacked GEMM for rows [r0, r0+8k) and returns
// how many rows it computed (0 for a type it does not handle).
int64_t fi_avx2_gemm_rp(int wt, const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
                        const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os) {
	if (r1 - r0 < 8) return 0;
	switch (wt) {
	case FI_Q4_0: return rp_q4_0(w, ws, cols, r0, r1, a, as, nact, out, os);
	case FI_Q4_K: return rp_q4_K(w, ws, cols, r0, r1, a, as, nact, out, os);
	case FI_Q6_K: return rp_q6_K(w, ws, cols, r0, r1, a, as, nact, out, os);
	case FI_Q8_0: return rp_q8_0(w, ws, cols, r0, r1, a, as, nact, out, os);
	}
	return 0;
}
