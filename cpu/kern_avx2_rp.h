//go:build cgo

// Micro-kernels of the prefill GEMM on weights expanded into 8-row records
// (see kern_avx2_rp.c for the scheme), shared by the GEMM on weights as
// stored in files (kern_avx2_rp.c) and on packed weights (kern_avx2_pk.c),
// which differ only in how a record is filled. Included after
// kern_avx2.h under the AVX2 target pragma.

#ifndef FLOWINFER_KERN_AVX2_RP_H
#define FLOWINFER_KERN_AVX2_RP_H

#include <stdlib.h>

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

// micro_k4 adds one super-block of 8 rows x na activation rows to
// acc[t*8 + r]; y points at activation row 0's Q8_K block, rows as apart.
// split: steps summed in int16 before they are widened (8 for Q4_K's codes
// 0..15; 4 for Q5_K's 0..31: 4 x 2 x 31 x 127 = 31496 < 32767).
FI_INLINE void micro_k4(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na, const int split) {
	__m256i isum[4], p[4];
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int sb = 0; sb < 8; sb++) {
		const uint8_t *q = rec + 256 * sb;
#pragma GCC unroll 8
		for (int s = 0; s < 8; s++) {
			const __m256i wv = ld256(q + 32 * s);
			_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
				const __m256i m = _mm256_maddubs_epi16(wv, bcast32(y + t * as + 4 + 32 * sb + 4 * s));
				p[t] = s % split == 0 ? m : _mm256_add_epi16(p[t], m);
				FI_KEEP(p[t]);
			}
			if (s % split != split - 1) continue;
			const __m256i sc = ld256(rec + 2048 + 32 * sb);
			_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
				isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], sc));
				FI_KEEP(isum[t]);
			}
		}
	}
	// mins: sum over sub-blocks of m * (bsum[2sb] + bsum[2sb+1]), reusing p.
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) p[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int sb = 0; sb < 8; sb++) {
		const __m256i mn = ld256(rec + 2304 + 32 * sb);
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			p[t] = _mm256_add_epi32(p[t], _mm256_madd_epi16(mn, bcast32(y + t * as + 260 + 4 * sb)));
			FI_KEEP(p[t]); // else GCC defers the adds and spills the products
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

FI_INLINE void micro_q4_K(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	micro_k4(rec, y, as, acc, na, 8);
}

// micro_q5_K: Q5_K's codes 0..31 in a Q4_K record.
FI_INLINE void micro_q5_K(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	micro_k4(rec, y, as, acc, na, 4);
}

// ---- Q6_K -----------------------------------------------------------------
// Record per super-block and group of 8 rows:
//   q   [16 sub-blocks][4 steps][32]  codes 0..63 (2048 bytes)
//   sc  [16][16 x int16]  (sc_r, sc_r) per row (512)
//   scp [8][16 x int16]   (sc_r,2p, sc_r,2p+1) per row, for the bsums (256)
//   d   [8 x float]  (32)
// int16 sums: 2 steps x 2 products x 63 x 127 = 32004 < 32767.
#define Q6K_REC 2848

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
			FI_KEEP(p[t]);
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

// ---- Q4_0 -----------------------------------------------------------------
// Record per block of 32 and group of 8 rows: as Q8_0's (Q80_REC), with the
// codes stored signed, q-8 in [-8, 7]. pmaddubsw(|w|, sign(a, w)) as for
// Q8_0, but |w| <= 8 lets a block's 8 steps accumulate in int16:
// 8 x 2 x 8 x 127 = 16256 < 32767.
FI_INLINE void micro_q4_0(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	__m256i p[4];
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) p[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int s = 0; s < 8; s++) {
		const __m256i wv = ld256(rec + 32 * s);
		const __m256i aw = _mm256_sign_epi8(wv, wv);
		_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
			p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(y + t * as + 2 + 4 * s), wv)));
			FI_KEEP(p[t]);
		}
	}
	const __m256 d = _mm256_loadu_ps((const float *)(rec + 256));
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
		const __m256i isum = _mm256_madd_epi16(p[t], _mm256_set1_epi16(1));
		const __m256 dy = _mm256_set1_ps(ld_f16(y + t * as));
		__m256 a = _mm256_loadu_ps(acc + 8 * t);
		a = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum), a);
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
						for (; t + 4 <= nc; t += 4) {                                                         \
							FI_MCA_BEGIN("avx2_" #name, 4);                                                   \
							micro(ri, yi + t * as, as, acc + 8 * t, 4);                                       \
							FI_MCA_END();                                                                     \
						}                                                                                     \
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

#endif
