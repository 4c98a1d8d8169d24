//go:build cgo

// Packed weights of the 4-bit table types (IQ4_NL, MXFP4, IQ4_XS) for AVX2,
// in the scheme of kern_avx2_pk.c: rows in groups of 8, one 32-byte vector
// holding 4 codes of each of 8 rows, so vector lanes are rows and decode
// needs no horizontal sums. ggml repacks IQ4_NL and MXFP4 the same way on
// AVX2 (block_iq4_nlx8, block_mxfp4x8; not IQ4_XS); these layouts are ours.
//
// IQ4_NL, per group of 8 rows and block of 32 (144 bytes, 18 per row):
//   qs   [4 chunks][8 rows][4 bytes] (128): byte k of row r in chunk c is
//        byte 4c+k of the row's block: code 4c+k in its low nibble, code
//        4c+16+k in its high nibble (packed Q4_0's layout)
//   d    [8 rows] fp16 (16)
// MXFP4, likewise (136 bytes, 17 per row): qs (128), e [8 rows] E8M0 (8).
// IQ4_XS, per group of 8 rows and super-block (1104 bytes, 138 per row):
//   qs   [8 sub-blocks][4 chunks][8 rows][4 bytes] (1024), each sub-block
//        as IQ4_NL's block
//   sc   [8 sub-blocks][8 rows] int8 ls-32 (64)
//   d    [8 rows] fp16 (16)
//
// Decode (one activation row) looks the levels up per step (4 codes of 8
// rows; kern_avx2_iq.h), multiplies them with 4 broadcast activation
// bytes (the sign trick turned around: below), and adds each block's exact int32 sum times d_w·d_a into a float
// lane per row with one FMA. Prefill expands packed groups into the records
// of kern_avx2_rp.h with the levels already looked up (IQ4_NL and MXFP4
// into Q8_0's record: int8 levels and float scales; IQ4_XS into a record of
// its own), then runs kern_avx2_rp.h's driver. A record's micro-kernel
// forms the same exact integer sums and the same float operations in the
// same order as the decode kernel, so a weight row times an activation row
// has the same bits whatever the batch (TestMatMulBatchInvariant).

#pragma GCC target("avx2,fma,f16c")

#include "kern.h"
#include "kern_avx2.h"
#include "kern_avx2_iq.h"
#include "kern_avx2_rp.h"

#define PK_IQ4NL 144
#define PK_MXFP4 136
#define PK_IQ4XS 1104

// PF_AHEAD: how far ahead (bytes) decode prefetches (as kern_avx2_pk.c).
#define PF_AHEAD 2048

FI_INLINE void prefetch_rec(const uint8_t *p, int n) {
	for (int o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + PF_AHEAD + o), _MM_HINT_T0);
}

// ---- packing ---------------------------------------------------------------

// pack_b32 packs rows of 32-element blocks of bb bytes, a scale of sb bytes
// then 16 nibble bytes (IQ4_NL: 18, 2; MXFP4: 17, 1), into records of
// 128 + 8·sb bytes. Chunk c of a row is bytes 4c..4c+3 of its nibbles as
// they are: the file's byte 4c+k already pairs codes 4c+k and 4c+16+k.
static void pack_b32(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, int bb, int sb, uint8_t *dst) {
	const int64_t rec = 128 + 8 * sb;
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * rec;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + bb * i;
				memcpy(p + 128 + sb * r, x, (size_t)sb);
				for (int c = 0; c < 4; c++) memcpy(p + 32 * c + 4 * r, x + sb + 4 * c, 4);
			}
		}
	}
}

static void pack_iq4_xs(const uint8_t *w, int64_t ws, int64_t rows, int64_t nb, uint8_t *dst) {
	for (int64_t g = 0; g < rows / 8; g++) {
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *p = dst + (g * nb + i) * PK_IQ4XS;
			for (int r = 0; r < 8; r++) {
				const uint8_t *x = w + (8 * g + r) * ws + 136 * i;
				const uint64_t sc = iq4xs_scales(x);
				memcpy(p + 1088 + 2 * r, x, 2);
				for (int j = 0; j < 8; j++) {
					p[1024 + 8 * j + r] = (uint8_t)(sc >> (8 * j));
					for (int c = 0; c < 4; c++) memcpy(p + 128 * j + 32 * c + 4 * r, x + 8 + 16 * j + 4 * c, 4);
				}
			}
		}
	}
}

// ---- matrix-vector products (one activation row) ---------------------------
//
// Per step, the rows' levels w (one pshufb) meet 4 activation bytes y
// broadcast to every row as pmaddubsw(|y|, sign(w, y)) = w·y: |y| is the
// same for all rows and groups, so it is taken once per call (abs_codes)
// rather than |w| once per step and row group. A pmaddubsw pair is then at
// most 2·127·127 = 32258 (IQ4_NL, IQ4_XS: widened to int32 at once) or
// 2·127·12 (MXFP4: a block's 8 steps summed in int16, 24384 at most).

// AY_BYTES: the |y| buffer on the stack; longer rows are taken in parts
// (the output lanes carry the float sums over, unchanged).
#define AY_BYTES 16384

// abs_codes writes |y| of the n codes at a + off of each of nblk
// activation blocks, stride bytes apart, to dst (n bytes per block).
static void abs_codes(const uint8_t *a, int64_t nblk, int64_t stride, int off, int n, uint8_t *dst) {
	for (int64_t i = 0; i < nblk; i++) {
		for (int o = 0; o < n; o += 32) {
			_mm256_storeu_si256((__m256i *)(dst + n * i + o), _mm256_abs_epi8(ld256(a + stride * i + off + o)));
		}
	}
}

// iq_step returns pmaddubsw(|y|, sign(w, y)) for the levels w of the codes
// idx (0..15 per byte) and the 4 activation bytes at y (|y| at ay)
// broadcast to every row: per row, two int16 sums of two products.
FI_INLINE __m256i iq_step(__m256i tbl, __m256i idx, const uint8_t *y, const uint8_t *ay) {
	return _mm256_maddubs_epi16(bcast32(ay), _mm256_sign_epi8(_mm256_shuffle_epi8(tbl, idx), bcast32(y)));
}

// FI_IQ_GEMV(name, blocks, BLK, ABLK, QOFF) defines the decode driver name
// of the kernel blocks(pk, nb, i0, i1, g0, g1, a, ay, out, add), which
// adds blocks [i0, i1) of groups [g0, g1) to out (add 0: sets them): |y|
// of BLK codes per ABLK-byte activation block (codes at QOFF), in parts.
#define FI_IQ_GEMV(name, blocks, BLK, ABLK, QOFF)                                                       \
	static void name(const uint8_t *pk, int64_t nb, int64_t g0, int64_t g1, const uint8_t *a, float *out) { \
		uint8_t ay[AY_BYTES];                                                                          \
		const int64_t part = AY_BYTES / (BLK);                                                         \
		for (int64_t i0 = 0; i0 < nb; i0 += part) {                                                    \
			const int64_t i1 = i0 + part < nb ? i0 + part : nb;                                        \
			abs_codes(a + (ABLK) * i0, i1 - i0, ABLK, QOFF, BLK, ay);                                  \
			blocks(pk, nb, i0, i1, g0, g1, a, ay, out, i0 > 0);                                        \
		}                                                                                              \
	}

static void gemv_iq4_nl_blocks(const uint8_t *pk, int64_t nb, int64_t i0, int64_t i1, int64_t g0, int64_t g1,
                               const uint8_t *a, const uint8_t *ay, float *out, int add) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), tbl = iq_table(fi_kv_iq4nl);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = add ? _mm256_loadu_ps(out + 8 * g) : _mm256_setzero_ps();
		for (int64_t i = i0; i < i1; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_IQ4NL;
			const uint8_t *y = a + 34 * i, *yq = ay + 32 * (i - i0);
			FI_MCA_BEGIN("avx2_iq4_nl", 1);
			prefetch_rec(p, PK_IQ4NL);
			__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				const __m256i v = ld256(p + 32 * c);
				const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(iq_step(tbl, lo, y + 2 + 4 * c, yq + 4 * c), ones));
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(iq_step(tbl, hi, y + 18 + 4 * c, yq + 16 + 4 * c), ones));
				FI_KEEP(isum);
			}
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 128)), _mm256_set1_ps(ld_f16(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

static void gemv_mxfp4_blocks(const uint8_t *pk, int64_t nb, int64_t i0, int64_t i1, int64_t g0, int64_t g1,
                              const uint8_t *a, const uint8_t *ay, float *out, int add) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), tbl = iq_table(fi_kv_mxfp4);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = add ? _mm256_loadu_ps(out + 8 * g) : _mm256_setzero_ps();
		for (int64_t i = i0; i < i1; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_MXFP4;
			const uint8_t *y = a + 34 * i, *yq = ay + 32 * (i - i0);
			FI_MCA_BEGIN("avx2_mxfp4", 1);
			prefetch_rec(p, PK_MXFP4);
			__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				const __m256i v = ld256(p + 32 * c);
				const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
				s = _mm256_add_epi16(s, iq_step(tbl, lo, y + 2 + 4 * c, yq + 4 * c));
				s = _mm256_add_epi16(s, iq_step(tbl, hi, y + 18 + 4 * c, yq + 16 + 4 * c));
			}
			const __m256 d = _mm256_mul_ps(e8m0_half8(p + 128), _mm256_set1_ps(ld_f16(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones)), acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

// gemv_iq4_xs_blocks: each step's pairs times the rows' sub-block scales
// (pmaddwd with (ls_r, ls_r) per row), summed in int32 over the
// super-block.
static void gemv_iq4_xs_blocks(const uint8_t *pk, int64_t nb, int64_t i0, int64_t i1, int64_t g0, int64_t g1,
                               const uint8_t *a, const uint8_t *ay, float *out, int add) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), tbl = iq_table(fi_kv_iq4nl);
	for (int64_t g = g0; g < g1; g++) {
		__m256 acc = add ? _mm256_loadu_ps(out + 8 * g) : _mm256_setzero_ps();
		for (int64_t i = i0; i < i1; i++) {
			const uint8_t *p = pk + (g * nb + i) * PK_IQ4XS;
			const uint8_t *y = a + Q8K * i, *yq = ay + 256 * (i - i0);
			FI_MCA_BEGIN("avx2_iq4_xs", 1);
			prefetch_rec(p, PK_IQ4XS);
			__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				const __m128i sc8 = _mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j));
				const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc8, sc8));
#pragma GCC unroll 4
				for (int c = 0; c < 4; c++) {
					const __m256i v = ld256(p + 128 * j + 32 * c);
					const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
					const int o = 32 * j + 4 * c;
					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(iq_step(tbl, lo, y + 4 + o, yq + o), sc));
					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(iq_step(tbl, hi, y + 20 + o, yq + 16 + o), sc));
					FI_KEEP(isum);
				}
			}
			const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(ld128(p + 1088)), _mm256_set1_ps(ld_f32(y)));
			acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
			FI_KEEP(acc);
			FI_MCA_END();
		}
		_mm256_storeu_ps(out + 8 * g, acc);
	}
}

FI_IQ_GEMV(gemv_iq4_nl, gemv_iq4_nl_blocks, 32, 34, 2)
FI_IQ_GEMV(gemv_mxfp4, gemv_mxfp4_blocks, 32, 34, 2)
FI_IQ_GEMV(gemv_iq4_xs, gemv_iq4_xs_blocks, 256, Q8K, 4)

// ---- GEMM: packed groups expanded into records -----------------------------

// expand_b32 writes Q8_0 records (kern_avx2_rp.h: 8 steps of int8 levels,
// 8 float scales) from packed IQ4_NL (mx 0) or MXFP4 (mx 1) groups: step c
// from chunk c's low nibbles, step c+4 from its high nibbles.
FI_INLINE void expand_b32(const uint8_t *grp, int64_t nb, uint8_t *rec, const int mx) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), tbl = iq_table(mx ? fi_kv_mxfp4 : fi_kv_iq4nl);
	for (int64_t i = 0; i < nb; i++, rec += Q80_REC) {
		const uint8_t *p = grp + i * (mx ? PK_MXFP4 : PK_IQ4NL);
		for (int c = 0; c < 4; c++) {
			const __m256i v = ld256(p + 32 * c);
			_mm256_storeu_si256((__m256i *)(rec + 32 * c), _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4)));
			_mm256_storeu_si256((__m256i *)(rec + 32 * (c + 4)),
			                    _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
		}
		_mm256_storeu_ps((float *)(rec + 256), mx ? e8m0_half8(p + 128) : _mm256_cvtph_ps(ld128(p + 128)));
	}
}

static void expand_iq4_nl(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	expand_b32(grp, nb, rec, 0);
}

static void expand_mxfp4(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	expand_b32(grp, nb, rec, 1);
}

// IQ4_XS record per super-block and group of 8 rows:
//   q   [8 sub-blocks][8 steps][32]  int8 levels (2048 bytes)
//   sc  [8][16 x int16]  (ls_r, ls_r) per row (256)
//   d   [8 x float]  (32)
#define IQ4XS_REC 2336

static void expand_iq4_xs(const uint8_t *grp, int64_t ws, int64_t nb, uint8_t *rec) {
	(void)ws;
	const __m256i m4 = _mm256_set1_epi8(0x0f), tbl = iq_table(fi_kv_iq4nl);
	for (int64_t i = 0; i < nb; i++, rec += IQ4XS_REC) {
		const uint8_t *p = grp + i * PK_IQ4XS;
		for (int j = 0; j < 8; j++) {
			for (int c = 0; c < 4; c++) {
				const __m256i v = ld256(p + 128 * j + 32 * c);
				_mm256_storeu_si256((__m256i *)(rec + 256 * j + 32 * c), _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4)));
				_mm256_storeu_si256((__m256i *)(rec + 256 * j + 32 * (c + 4)),
				                    _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
			}
			const __m128i sc8 = _mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j));
			_mm256_storeu_si256((__m256i *)(rec + 2048 + 32 * j), _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc8, sc8)));
		}
		_mm256_storeu_ps((float *)(rec + 2304), _mm256_cvtph_ps(ld128(p + 1088)));
	}
}

// micro_iq4_xs adds one super-block of 8 rows times na activation rows to
// acc[t*8 + r] (y: activation row 0's Q8_K block, rows as apart): the
// integer sums and float operations of gemv_iq4_xs.
FI_INLINE void micro_iq4_xs(const uint8_t *rec, const uint8_t *y, int64_t as, float *acc, const int na) {
	__m256i isum[4];
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int sb = 0; sb < 8; sb++) {
		const __m256i sc = ld256(rec + 2048 + 32 * sb);
#pragma GCC unroll 8
		for (int s = 0; s < 8; s++) {
			const __m256i wv = ld256(rec + 256 * sb + 32 * s);
			const __m256i aw = _mm256_sign_epi8(wv, wv);
			_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
				const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(y + t * as + 4 + 32 * sb + 4 * s), wv));
				isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc));
				FI_KEEP(isum[t]);
			}
		}
	}
	const __m256 d = _mm256_loadu_ps((const float *)(rec + 2304));
	_Pragma("GCC unroll 4") for (int t = 0; t < na; t++) {
		const __m256 dy = _mm256_set1_ps(ld_f32(y + t * as));
		__m256 s = _mm256_loadu_ps(acc + 8 * t);
		s = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum[t]), s);
		_mm256_storeu_ps(acc + 8 * t, s);
	}
}

// IQ4_NL's levels reach ±127: Q8_0's micro-kernel (each step widened at
// once). MXFP4's are at most 12: Q4_0's (a block summed in int16).
FI_DEFINE_RP(pk_gemm_iq4_nl, expand_iq4_nl, micro_q8_0, Q80_REC, 32, 34)
FI_DEFINE_RP(pk_gemm_mxfp4, expand_mxfp4, micro_q4_0, Q80_REC, 32, 34)
FI_DEFINE_RP(pk_gemm_iq4_xs, expand_iq4_xs, micro_iq4_xs, IQ4XS_REC, 256, Q8K)

// ---- entry points (kern_avx2.h; kern_avx2_pk.c's call these) ---------------

int64_t fi_avx2_iq_packed_size(int wt, int64_t rows, int64_t cols) {
	switch (wt) {
	case FI_IQ4_NL: return rows / 8 * (cols / 32) * PK_IQ4NL;
	case FI_MXFP4: return rows / 8 * (cols / 32) * PK_MXFP4;
	case FI_IQ4_XS: return rows / 8 * (cols / 256) * PK_IQ4XS;
	}
	return -1;
}

int fi_avx2_iq_pack(int wt, const uint8_t *w, int64_t ws, int64_t rows, int64_t cols, uint8_t *dst) {
	switch (wt) {
	case FI_IQ4_NL: pack_b32(w, ws, rows, cols / 32, 18, 2, dst); return 0;
	case FI_MXFP4: pack_b32(w, ws, rows, cols / 32, 17, 1, dst); return 0;
	case FI_IQ4_XS: pack_iq4_xs(w, ws, rows, cols / 256, dst); return 0;
	}
	return -1;
}

int fi_avx2_iq_gemm_packed(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                           int64_t as, int64_t nact, float *out, int64_t os) {
	void (*gemv)(const uint8_t *, int64_t, int64_t, int64_t, const uint8_t *, float *);
	int64_t (*gemm)(const uint8_t *, int64_t, int64_t, int64_t, int64_t, const uint8_t *, int64_t, int64_t, float *,
	                int64_t);
	int64_t nb, row_bytes;
	switch (wt) {
	case FI_IQ4_NL: gemv = gemv_iq4_nl, gemm = pk_gemm_iq4_nl, nb = cols / 32, row_bytes = nb * PK_IQ4NL / 8; break;
	case FI_MXFP4: gemv = gemv_mxfp4, gemm = pk_gemm_mxfp4, nb = cols / 32, row_bytes = nb * PK_MXFP4 / 8; break;
	case FI_IQ4_XS: gemv = gemv_iq4_xs, gemm = pk_gemm_iq4_xs, nb = cols / 256, row_bytes = nb * PK_IQ4XS / 8; break;
	default: return -1;
	}
	if (r1 <= r0 || nact <= 0) return 0;
	if (nact >= FI_RP_MIN_ACTS && gemm(pk, row_bytes, cols, r0, r1, a, as, nact, out, os) == r1 - r0) return 0;
	for (int64_t t = 0; t < nact; t++) gemv(pk, nb, r0 / 8, r1 / 8, a + t * as, out + t * os);
	return 0;
}
