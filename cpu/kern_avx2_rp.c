//go:build cgo

// AVX2 prefill GEMM on weights repacked on the fly (Q4_K, Q6_K, Q8_0): the
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

#include <stdlib.h>

#include "kern.h"
#include "kern_avx2.h"

#define Q8K 292

// Budgets (bytes) for a block of decoded weight groups and for a chunk of
// activation rows, together within the 512 KiB L2.
#define RP_W_BYTES (160 * 1024)
#define RP_A_BYTES (160 * 1024)

// tr8x8 transposes 8 vectors of 8 dwords: afterwards v[c] holds dword c of
// the former v[0..7].
FI_INLINE void tr8x8(__m256i v[8]) {
	__m256i t[8], u[8];
	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
	}
	for (int i = 0; i < 2; i++) {
		u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
		u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
		u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
		u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
	}
	for (int c = 0; c < 4; c++) {
		v[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
		v[c + 4] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
	}
}

// store_rows8 writes 8 dword vectors (one per row, in element order) as 8
// interleaved steps at dst (8 x 32 bytes).
FI_INLINE void store_rows8(uint8_t *dst, __m256i v[8]) {
	tr8x8(v);
	for (int s = 0; s < 8; s++) _mm256_storeu_si256((__m256i *)(dst + 32 * s), v[s]);
}

FI_INLINE __m256i bcast32(const uint8_t *p) { return _mm256_set1_epi32((int)ld_u32(p)); }

// ---- Q4_K -----------------------------------------------------------------
// Record per super-block and group of 8 rows:
//   q   [8 sub-blocks][8 steps][32]  codes 0..15 (2048 bytes)
//   sc  [8][16 x int16]  (sc_r, sc_r) per row r: pmaddwd operand (256)
//   mn  [8][16 x int16]  (m_r, m_r) per row (256)
//   d, dmin [8 x float]  (64)
// int16 sums: 8 steps x 2 products x 15 x 127 = 30480 < 32767.
#define Q4K_REC 2624

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
				if (j < 4) {
					s = q[j] & 63, m = q[j + 4] & 63;
				} else {
					s = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
					m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
				}
				sc[16 * j + 2 * r] = sc[16 * j + 2 * r + 1] = (int16_t)s;
				mn[16 * j + 2 * r] = mn[16 * j + 2 * r + 1] = (int16_t)m;
			}
		}
	}
}

// micro_q4_K adds one super-block of 8 rows x na activation rows to
// acc[t*8 + r]; y points at activation row 0's Q8_K block, rows as apart.
FI_INLINE void micro_q4_K(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	__m256i isum[4], p[4];
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int sb = 0; sb < 8; sb++) {
		const uint8_t *q = rec + 256 * sb;
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			p[t] = _mm256_maddubs_epi16(ld256(q), bcast32(y + t * as + 4 + 32 * sb));
		}
#pragma GCC unroll 7
		for (int s = 1; s < 8; s++) {
			const __m256i wv = ld256(q + 32 * s);
			_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
				p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(wv, bcast32(y + t * as + 4 + 32 * sb + 4 * s)));
				FI_KEEP(p[t]);
			}
		}
		const __m256i sc = ld256(rec + 2048 + 32 * sb);
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], sc));
			FI_KEEP(isum[t]);
		}
	}
	// mins: sum over sub-blocks of m * (bsum[2sb] + bsum[2sb+1]), reusing p.
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) p[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int sb = 0; sb < 8; sb++) {
		const __m256i mn = ld256(rec + 2304 + 32 * sb);
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			p[t] = _mm256_add_epi32(p[t], _mm256_madd_epi16(mn, bcast32(y + t * as + 260 + 4 * sb)));
		}
	}
	const __m256 d = _mm256_loadu_ps((const float *)(rec + 2560));
	const __m256 dm = _mm256_loadu_ps((const float *)(rec + 2592));
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
		const __m256 dy = _mm256_set1_ps(ld_f32(y + t * as));
		__m256 s = _mm256_loadu_ps(acc + 8 * t);
		s = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum[t]), s);
		s = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dy), _mm256_cvtepi32_ps(p[t]), s);
		_mm256_storeu_ps(acc + 8 * t, s);
	}
}

// ---- Q6_K -----------------------------------------------------------------
// Record per super-block and group of 8 rows:
//   q   [16 sub-blocks][4 steps][32]  codes 0..63 (2048 bytes)
//   sc  [16][16 x int16]  (sc_r, sc_r) per row (512)
//   scp [8][16 x int16]   (sc_r,2p, sc_r,2p+1) per row, for the bsums (256)
//   d   [8 x float]  (32)
// int16 sums: 2 steps x 2 products x 63 x 127 = 32004 < 32767.
#define Q6K_REC 2848

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

FI_INLINE void micro_q6_K(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	__m256i isum[4], p[4];
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 16
	for (int sb = 0; sb < 16; sb++) {
		const uint8_t *q = rec + 128 * sb;
		const __m256i sc = ld256(rec + 2048 + 32 * sb);
#pragma GCC unroll 2
		for (int hf = 0; hf < 2; hf++) {
			const __m256i w0 = ld256(q + 64 * hf), w1 = ld256(q + 64 * hf + 32);
			_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
				const uint8_t *yq = y + t * as + 4 + 16 * sb + 8 * hf;
				p[t] = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast32(yq)), _mm256_maddubs_epi16(w1, bcast32(yq + 4)));
				isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], sc));
				FI_KEEP(isum[t]);
			}
		}
	}
	// the -32 of every code: 32 * sum over sub-blocks of sc * bsum.
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) p[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		const __m256i scp = ld256(rec + 2560 + 32 * j);
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			p[t] = _mm256_add_epi32(p[t], _mm256_madd_epi16(scp, bcast32(y + t * as + 260 + 4 * j)));
		}
	}
	const __m256 d = _mm256_loadu_ps((const float *)(rec + 2816));
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
		const __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(p[t], 5));
		const __m256 dy = _mm256_set1_ps(ld_f32(y + t * as));
		__m256 a = _mm256_loadu_ps(acc + 8 * t);
		a = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(s), a);
		_mm256_storeu_ps(acc + 8 * t, a);
	}
}

// ---- Q8_0 -----------------------------------------------------------------
// Record per block of 32 and group of 8 rows:
//   q [8 steps][32]  int8 weights (256 bytes)
//   d [8 x float]    (32)
// Signed x signed: pmaddubsw(|w|, sign(a, w)) per step, widened at once
// (one product pair reaches 2 x 127 x 127 = 32258: no int16 accumulation).
#define Q80_REC 288

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

FI_INLINE void micro_q8_0(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	__m256i isum[4];
	const __m256i ones = _mm256_set1_epi16(1);
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int s = 0; s < 8; s++) {
		const __m256i wv = ld256(rec + 32 * s);
		const __m256i aw = _mm256_sign_epi8(wv, wv);
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(y + t * as + 2 + 4 * s), wv));
			isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, ones));
			FI_KEEP(isum[t]);
		}
	}
	const __m256 d = _mm256_loadu_ps((const float *)(rec + 256));
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
		const __m256 dy = _mm256_set1_ps(ld_f16(y + t * as));
		__m256 a = _mm256_loadu_ps(acc + 8 * t);
		a = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum[t]), a);
		_mm256_storeu_ps(acc + 8 * t, a);
	}
}

// FI_DEFINE_RP(name, decode, micro, REC, BLK, ABLK) defines
//   static int64_t name(w, ws, cols, r0, r1, a, as, nact, out, os)
// computing rows [r0, r0 + 8*groups) and returning how many rows it did
// (0 if scratch memory was not available): BLK elements per super-block,
// REC record bytes per super-block and group, ABLK activation block bytes.
#define FI_DEFINE_RP(name, decode, micro, REC, BLK, ABLK)                                                 \
	static int64_t name(const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a, \
	                    int64_t as, int64_t nact, float *out, int64_t os) {                                   \
		const int64_t nb = cols / (BLK), ngroups = (r1 - r0) / 8;                                             \
		int64_t gpb = RP_W_BYTES / (nb * (REC));                                                              \
		if (gpb < 1) gpb = 1;                                                                                 \
		if (gpb > ngroups) gpb = ngroups;                                                                     \
		int64_t chunk = (RP_A_BYTES / (nb * (ABLK))) & ~(int64_t)3;                                          \
		if (chunk < 4) chunk = 4;                                                                             \
		if (chunk > nact) chunk = nact;                                                                       \
		uint8_t *rec = aligned_alloc(64, (size_t)((gpb * nb * (REC) + chunk * 32 + 63) & ~(int64_t)63));     \
		if (!rec) return 0;                                                                                   \
		float *acc = (float *)(rec + gpb * nb * (REC));                                                       \
		for (int64_t g0 = 0; g0 < ngroups; g0 += gpb) {                                                       \
			const int64_t ng = ngroups - g0 < gpb ? ngroups - g0 : gpb;                                       \
			for (int64_t g = 0; g < ng; g++) {                                                                \
				decode(w + (r0 + 8 * (g0 + g)) * ws, ws, nb, rec + g * nb * (REC));                          \
			}                                                                                                 \
			for (int64_t c0 = 0; c0 < nact; c0 += chunk) {                                                    \
				const int64_t nc = nact - c0 < chunk ? nact - c0 : chunk;                                     \
				for (int64_t g = 0; g < ng; g++) {                                                            \
					memset(acc, 0, (size_t)(nc * 32));                                                        \
					for (int64_t i = 0; i < nb; i++) {                                                        \
						const uint8_t *ri = rec + (g * nb + i) * (REC);                                       \
						const uint8_t *yi = a + c0 * as + i * (ABLK);                                         \
						int64_t t = 0;                                                                        \
						for (; t + 4 <= nc; t += 4) micro(ri, yi + t * as, as, acc + 8 * t, 4);               \
						switch (nc - t) {                                                                     \
						case 1: micro(ri, yi + t * as, as, acc + 8 * t, 1); break;                            \
						case 2: micro(ri, yi + t * as, as, acc + 8 * t, 2); break;                            \
						case 3: micro(ri, yi + t * as, as, acc + 8 * t, 3); break;                            \
						}                                                                                     \
					}                                                                                         \
					float *o = out + c0 * os + r0 + 8 * (g0 + g);                                             \
					for (int64_t t = 0; t < nc; t++) {                                                        \
						_mm256_storeu_ps(o + t * os, _mm256_load_ps(acc + 8 * t));                            \
					}                                                                                         \
				}                                                                                             \
			}                                                                                                 \
		}                                                                                                     \
		free(rec);                                                                                            \
		return 8 * ngroups;                                                                                   \
	}

FI_DEFINE_RP(rp_q4_K, decode_q4_K, micro_q4_K, Q4K_REC, 256, Q8K)
FI_DEFINE_RP(rp_q6_K, decode_q6_K, micro_q6_K, Q6K_REC, 256, Q8K)
FI_DEFINE_RP(rp_q8_0, decode_q8_0, micro_q8_0, Q80_REC, 32, 34)

// fi_avx2_gemm_rp runs the repacked GEMM for rows [r0, r0+8k) and returns
// how many rows it computed (0 for a type it does not handle).
int64_t fi_avx2_gemm_rp(int wt, const uint8_t *w, int64_t ws, int64_t cols, int64_t r0, int64_t r1,
                        const uint8_t *a, int64_t as, int64_t nact, float *out, int64_t os) {
	if (r1 - r0 < 8) return 0;
	switch (wt) {
	case FI_Q4_K: return rp_q4_K(w, ws, cols, r0, r1, a, as, nact, out, os);
	case FI_Q6_K: return rp_q6_K(w, ws, cols, r0, r1, a, as, nact, out, os);
	case FI_Q8_0: return rp_q8_0(w, ws, cols, r0, r1, a, as, nact, out, os);
	}
	return 0;
}
