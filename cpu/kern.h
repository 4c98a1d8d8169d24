//go:build cgo

// C side of the SIMD kernels (kern*.c), called from kern_cgo.go. Every
// entry point works on a whole matrix or block of rows, never one element:
// a cgo call costs ~27 ns.
//
// Type numbers are ggml's (quant.Type). Byte layouts are ggml-common.h's
// (quant/blocks.go pins them); all multi-byte fields are little-endian and
// read with memcpy, so no pointer needs any alignment.

#ifndef FLOWINFER_KERN_H
#define FLOWINFER_KERN_H

#include <stdint.h>

// ISA bits reported by fi_cpu_features.
enum {
	FI_AVX2 = 1,       // AVX2 + FMA + F16C (the kern_avx2*.c files)
	FI_AVX512 = 2,     // AVX-512 F, BW, VL, DQ and VNNI (kern_avx512.c)
	FI_AVX512BF16 = 4, // AVX512_BF16 (vdpbf16ps)
	FI_AMD = 8,        // an AMD CPU (kernel choices measured per vendor)
};

// ggml type numbers used by the kernels.
enum {
	FI_F32 = 0,
	FI_F16 = 1,
	FI_Q4_0 = 2,
	FI_Q4_1 = 3,
	FI_Q5_0 = 6,
	FI_Q5_1 = 7,
	FI_Q8_0 = 8,
	FI_Q8_1 = 9,
	FI_Q2_K = 10,
	FI_Q3_K = 11,
	FI_Q4_K = 12,
	FI_Q5_K = 13,
	FI_Q6_K = 14,
	FI_Q8_K = 15,
	FI_IQ2_XXS = 16,
	FI_IQ2_XS = 17,
	FI_IQ3_XXS = 18,
	FI_IQ3_S = 21,
	FI_IQ2_S = 22,
	FI_IQ1_S = 19,
	FI_IQ1_M = 29,
	FI_IQ4_NL = 20,
	FI_IQ4_XS = 23,
	FI_BF16 = 30,
	FI_MXFP4 = 39,
};

// fi_cpu_features returns the FI_* bits the CPU and OS support (asked once;
// a build with FI_SIMDE adds the AVX-512 bits: kern_simde.h).
int fi_cpu_features(void);

// fi_quantize_rows_avx2 converts nrows rows of cols floats (row-major) to
// type t (Q8_0, Q8_1, Q8_K, F16, BF16 or F32), rows packed back to back in
// dst, byte-identical to quant.QuantizeRow. Returns 0, or -1 for a type it
// does not handle (nothing is written then).
int fi_quantize_rows_avx2(int t, const float *src, int64_t nrows, int64_t cols, uint8_t *dst);

// fi_act_row_bytes returns the bytes of a row of cols elements of
// activation type t (a type fi_quantize_rows_avx2 writes), else -1.
int64_t fi_act_row_bytes(int t, int64_t cols);

// fi_quantize_rows_avx512 is fi_quantize_rows_avx2 with 512-bit code for
// Q8_0, Q8_1 and Q8_K (the AVX2 code for the other types), byte-identical.
// fi_f16_avx2 is quant.FP32ToFP16 (F16C, NaN as sign|0x7e00).
int fi_quantize_rows_avx512(int t, const float *src, int64_t nrows, int64_t cols, uint8_t *dst);
uint16_t fi_f16_avx2(float f);

// fi_gemm_avx2 computes out[j*out_stride + r] = dot(weight row r, activation
// row j) for r in [r0, r1) and j in [0, nact). Weight row r starts at
// w + r*w_stride; activation row j (type VecDotType(wt)) at a + j*a_stride.
// cols is the row length in elements (a whole number of blocks). Returns 0,
// or -1 for a weight type it does not handle (nothing is written then).
int fi_gemm_avx2(int wt, const uint8_t *w, int64_t w_stride, int64_t cols, int64_t r0, int64_t r1,
                 const uint8_t *a, int64_t a_stride, int64_t nact, float *out, int64_t out_stride);

// Packed weights (kern_avx2_pk.c; IQ4_NL, IQ4_XS and MXFP4 in
// kern_avx2_iqpk.c): rows in groups of 8 in a kernel layout.
// fi_packed_size_avx2 returns the bytes of a packed rows x cols matrix of
// type wt, or -1 if wt (or a rows count that is not a multiple of 8) has no
// packed form. fi_pack_avx2 writes it (weight row r at w + r*w_stride);
// fi_gemm_packed_avx2 is fi_gemm_avx2 on packed weights, r0 and r1
// multiples of 8. Both return 0, or -1 for a type without a packed form.
int64_t fi_packed_size_avx2(int wt, int64_t rows, int64_t cols);
int fi_pack_avx2(int wt, const uint8_t *w, int64_t w_stride, int64_t rows, int64_t cols, uint8_t *dst);
int fi_gemm_packed_avx2(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                        int64_t a_stride, int64_t nact, float *out, int64_t out_stride);

// AVX-512 (kern_avx512.c), on the packed layouts of fi_pack_avx2:
// fi_gemm_packed_avx512 is fi_gemm_packed_avx2 with 512-bit VNNI kernels
// (IQ4_NL, IQ4_XS and MXFP4: kern_avx512_iq.c, whose decode runs 256-bit
// vpdpbusd on one 8-row group at a time);
// fi_gemm_avx512 runs F32 and F16 weights with 512-bit FMAs, BF16 weights
// with vdpbf16ps when the CPU has AVX512_BF16, and every other type as
// fi_gemm_avx2 does.
int fi_gemm_avx512(int wt, const uint8_t *w, int64_t w_stride, int64_t cols, int64_t r0, int64_t r1,
                   const uint8_t *a, int64_t a_stride, int64_t nact, float *out, int64_t out_stride);
int fi_gemm_packed_avx512(int wt, const uint8_t *pk, int64_t cols, int64_t r0, int64_t r1, const uint8_t *a,
                          int64_t a_stride, int64_t nact, float *out, int64_t out_stride);

// fi_q6_perm writes the codes of nb Q8_K super-blocks at a in the step
// order of packed Q6_K (256 bytes each; kern_avx2_pk.c). SSE2 only.
void fi_q6_perm(const uint8_t *a, int64_t nb, uint8_t *dst);

// fi_hadamard_avx2 applies quant.Hadamard to each of the count pieces of n
// values at x (n a power of two, at least 8; else -1 and nothing done),
// with the same bits.
int fi_hadamard_avx2(float *x, int64_t n, int64_t count);

// fi_iql_set_grid copies the n bytes of quant.LatticeGrid(wt) into the
// lattice kernels' table of wt (kern_avx2_iql.c); 0, or -1 if wt has no
// kernel or n is not its grid's size. Called once, as the package loads,
// before any product; a type whose grid was not set has no C kernel.
int fi_iql_set_grid(int wt, const int8_t *g, int64_t n);

// fi_iq1_set_grid copies the n bytes of quant.LatticeGrid(IQ1_S) (shared by
// IQ1_M) into the IQ1 kernels' table (kern_avx2_iq1.c); 0, or -1 if n is
// not its size or a coordinate is not -1, 0 or 1. Called once, as the
// package loads; until it is, IQ1_S and IQ1_M have no C kernel.
int fi_iq1_set_grid(const int8_t *g, int64_t n);

// fi_softmax_avx2 sets row[i] = exp(s·row[i] - m) / Σ_j exp(s·row[j] - m)
// (s = scale, m the largest s·row[j]): softmax, its exp in float32 (within
// 2 ulp), its sum in float64 in four lanes (not in order, unlike
// fi_expsub_avx2).
void fi_softmax_avx2(float *row, int64_t n, float scale);
// fi_softmax_avx512 is fi_softmax_avx2 with 16 lanes (kern_avx512_ad.c).
void fi_softmax_avx512(float *row, int64_t n, float scale);

// fi_dequant_avx2 converts rows rows of cols values of type t (FI_F16,
// FI_BF16, FI_Q8_0, FI_Q4_0; cols a whole number of blocks), row r at
// src + r*stride bytes, to float32s at dst + r*dstride; -1 if t is not
// one of those.
int fi_dequant_avx2(int t, const uint8_t *src, int64_t stride, int64_t rows, int64_t cols, float *dst, int64_t dstride);

// fi_turbo_decode_avx2 decodes rows rows of TurboQuant codes (a float16
// scale, then n codes of bits bits packed from the low bit; n a multiple
// of 8) into the rotated domain: dst[r*dstride + i] = scale·levels[code i].
void fi_turbo_decode_avx2(int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t rows, int64_t n,
                          float *dst, int64_t dstride);

// FI_RP_MIN_ACTS: fewest activation rows for which fi_gemm_avx2 repacks
// unpacked Q4_0, Q4_K, Q6_K and Q8_0 weights on the fly (kern_avx2_rp.c):
// there it pays. Those rows' products sum each block in another float
// order than the dot kernels', so they may differ from a row's product
// alone in the last bits (the packed kernels have no such threshold). The
// Backend multiplies by packed copies (kern_pack.go: a matrix whose rows are
// not a multiple of 8 has its last rows taken one activation row at a
// time), so only its NoPack (bench --no-pack) meets this.
#define FI_RP_MIN_ACTS 8

// The float32 exp of the SIMD paths (fa_exp8 in kern_avx2.h, exp16 in
// kern_avx512_ad.c): Cephes' expf, within 2 ulp. x is clamped to
// [FI_EXPF_MIN, FI_EXPF_MAX], e^x = 2^n·e^r with n = round(x·log2 e) and
// r = x - n·ln 2 (ln 2 in two parts), e^r = 1 + r + r²·P(r).
#define FI_EXPF_MIN (-87.3f)
#define FI_EXPF_MAX 88.3f
#define FI_EXPF_LOG2E 1.44269504088896341f
#define FI_EXPF_LN2_HI 0.693359375f
#define FI_EXPF_LN2_LO (-2.12194440e-4f)
#define FI_EXPF_P5 1.9875691500e-4f
#define FI_EXPF_P4 1.3981999507e-3f
#define FI_EXPF_P3 8.3334519073e-3f
#define FI_EXPF_P2 4.1665795894e-2f
#define FI_EXPF_P1 1.6666665459e-1f
#define FI_EXPF_P0 5.0000001201e-1f

// fi_attn_scores_avx2 sets s[g*ls + j] = Σ_d q[g*dim + d] · x_j[d] for
// g < G, j < n: a group of query heads' scores against n cached rows,
// x_j the row at src + j*stride of type t (FI_F32, FI_F16, FI_BF16,
// FI_Q8_0, FI_Q4_0) widened as fi_dequant_avx2 does, or, bits > 0, a
// TurboQuant row decoded as fi_turbo_decode_avx2 does with levels. -1 if
// t is none of those or dim is not a multiple of 8 up to FI_AD_MAXDIM
// (kern_avx2_ad.c).
#define FI_AD_MAXDIM 512
// FI_AD_TILE is the rows those kernels widen at a time (32 rows of 64
// values are 8 KiB: they stay in L1 between widening and use).
#define FI_AD_TILE 32
int fi_attn_scores_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                        int64_t dim, const float *q, int64_t G, float *s, int64_t ls);

// fi_attn_sum_avx2 adds to acc[g*dim + d] (g < G, d < dim) the sums over
// j < n, in order of j, of w[g*lw + j] · x_j[d], the rows x_j as in
// fi_attn_scores_avx2: attention's weighted sum of cached V rows. -1 as
// fi_attn_scores_avx2.
int fi_attn_sum_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                     const float *w, int64_t lw, int64_t G, float *acc);

// fi_kv_tile_avx2 sets rp[r] (r < m) to row j0+r of src (stride bytes
// apart, type t or TurboQuant codes of bits bits) as n float32s: the row
// itself for FI_F32, else widened into buf + r*n as fi_dequant_avx2 and
// fi_turbo_decode_avx2 widen it.
void fi_kv_tile_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t j0, int64_t m,
                     int64_t n, float *buf, const float **rp);

// fi_attn_scores_avx512 and fi_attn_sum_avx512 are fi_attn_scores_avx2 and
// fi_attn_sum_avx2 with 512-bit FMAs (kern_avx512_ad.c), for dim a
// multiple of 16 (else -1). The sums run in the same order as AVX2's, so
// fi_attn_sum_avx512's results equal fi_attn_sum_avx2's bit for bit.
int fi_attn_scores_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                          int64_t dim, const float *q, int64_t G, float *s, int64_t ls);
int fi_attn_sum_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t stride, int64_t n,
                       int64_t dim, const float *w, int64_t lw, int64_t G, float *acc);

// fi_untile copies rows r0..r0+n-1 of the transposed tiles at src (the
// layout of Go's quant.TileRows: 16 rows of rb bytes in units of u bytes,
// tile i at src + i*16*rb) to dst, rb bytes apart (kern_kt.c).
void fi_untile(const uint8_t *src, int64_t rb, int64_t u, int64_t r0, int64_t n, uint8_t *dst);

// fi_attn_scores_t_avx2 and fi_attn_scores_t_avx512 are the scores of
// fi_attn_scores_avx2 for rows stored in transposed tiles: row j < n (its
// scores at s[g*ls + j]) is row r0+j of the tiles at src, as fi_untile
// reads it. The kernels of kern_avx512_kt.c and kern_avx2_kt.c read f32,
// f16, bf16, q8_0, q4_0 and 3- and 4-bit TurboQuant tiles in place; other
// rows go through fi_attn_scores_t_rows, which untransposes the tiles one
// at a time into a buffer and runs the row kernel of its ISA (avx512
// non-zero: fi_attn_scores_avx512) on them. -1 as fi_attn_scores_avx2.
int fi_attn_scores_t_avx2(int t, int bits, const float *levels, const uint8_t *src, int64_t rb, int64_t u, int64_t r0,
                          int64_t n, int64_t dim, const float *q, int64_t G, float *s, int64_t ls);
int fi_attn_scores_t_avx512(int t, int bits, const float *levels, const uint8_t *src, int64_t rb, int64_t u,
                            int64_t r0, int64_t n, int64_t dim, const float *q, int64_t G, float *s, int64_t ls);
int fi_attn_scores_t_rows(int avx512, int t, int bits, const float *levels, const uint8_t *src, int64_t rb, int64_t u,
                          int64_t r0, int64_t n, int64_t dim, const float *q, int64_t G, float *s, int64_t ls);

// The integer V sums of decode attention (kern_avx2_vi.c; Go's
// kern_wint.go is their reference, and their sums are exact, so every path
// gives the same): rows of q4_0 and q8_0 (t FI_Q4_0, FI_Q8_0, bits 0) and
// 3- and 4-bit TurboQuant (bits). AVX-512 machines run them too. Each returns -1
// (nothing written) for rows it does not take.
//
// fi_kv_scales_avx2 sets sc[b*ls + r] (r < n, b < nb) to group b's scale
// of row r (src + r*stride): q4_0's or q8_0's block b's, TurboQuant's row
// scale (nb 1);
// and m[g*nb + b] (g < G) to the largest of itself and the |w[g*lw +
// r]*sc[b*ls + r]| (float32 products), NaN if one is.
int fi_kv_scales_avx2(int t, int bits, const uint8_t *src, int64_t stride, int64_t n, int64_t nb, float *sc,
                      int64_t ls, const float *w, int64_t lw, int64_t G, float *m);
// fi_wint_round_avx2 rounds, for each head g < G and group b < nb, the n
// products p_r = w[g*lw + r] * sc[b*n + r] (float32) to int16 steps of
// m/32767, m = mo[g*nb + b] their largest |p_r|: wq[(g*nb + b)*n + r] =
// round-to-even(p_r * (32767/m)), wsum[g*nb + b] their sum (all 0 when m
// is 0); when m < 2^-64, p_r and m times 2^96 (tinyScale). -1 when an m is
// NaN or above 2^64.
int fi_wint_round_avx2(const float *w, int64_t lw, int64_t G, int64_t n, const float *sc, int64_t nb, const float *mo,
                       int16_t *wq, int64_t *wsum);
// fi_attn_sum_qi_avx2 adds to S[g*dim + d] (g < G, d < dim) the sums over
// rows r < n of wq[(g*nb + b)*lw + r] times row r's integer value d:
// q4_0's bare nibble or q8_0's int8 (b = d/32, nb = dim/32), TurboQuant's
// c8[code] (b = 0, nb 1).
int fi_attn_sum_qi_avx2(int t, int bits, const int8_t *c8, const uint8_t *src, int64_t stride, int64_t n, int64_t dim,
                        const int16_t *wq, int64_t lw, int64_t G, int64_t nb, int64_t *S);
// fi_wint_chunk_avx2 is WInt's Chunk(n), then its three kernels and Fold
// on one run of n ≤ 256 rows at src, the chunk's weights at w (head g's
// at w[g*lw]): the scales into sc, the maxima into m, the weights into wq
// and wsum, the sums into S, added, scaled, to F; meanwhile it prefetches
// the pfn bytes at pf (NULL: none), the rows the next chunk reads. -2
// when the weights are refused (fi_wint_round_avx2), -1 (nothing written)
// for rows it does not take.
int fi_wint_chunk_avx2(int t, int bits, const int8_t *c8, float cs, const uint8_t *src, int64_t stride, int64_t n,
                       int64_t dim, const float *w, int64_t lw, int64_t G, int64_t nb, float *sc, float *m, int16_t *wq,
                       int64_t *wsum, int64_t *S, double *F, const uint8_t *pf, int64_t pfn);

// fi_attn_scores_qi_avx2 and fi_attn_scores_qi_avx512 are
// fi_attn_scores_t_* for the integer kinds (q4_0, 4-bit TurboQuant: Go's
// kern_qint.go, whose arithmetic they follow bit for bit) against queries
// rounded by Go's QInt.Round: qp the G heads' int16 pairs (dim/2 each),
// corr q4_0's 8·Σ per block (dim/32 per head), kq each head's scale, c8
// the TurboQuant codebook as int8 multiples of its step. -1 (nothing
// written) for other rows or a dim they do not take.
int fi_attn_scores_qi_avx2(int t, int bits, const uint8_t *src, int64_t rb, int64_t r0, int64_t n, int64_t dim,
                           const int32_t *qp, const int32_t *corr, const float *kq, const int8_t *c8, int64_t G, float *s,
                           int64_t ls);
int fi_attn_scores_qi_avx512(int t, int bits, const uint8_t *src, int64_t rb, int64_t r0, int64_t n, int64_t dim,
                             const int32_t *qp, const int32_t *corr, const float *kq, const int8_t *c8, int64_t G, float *s,
                             int64_t ls);

// fi_wsum_avx2 adds to out[g*dim + c] (g < nout, c < dim) the sums over
// j < n of w[g*ws + j] * v[j*vs + c]: attention's weighted sum of V rows
// for a group of query heads.
void fi_wsum_avx2(float *out, int64_t nout, int64_t dim, const float *w, int64_t ws, const float *v, int64_t vs,
                  int64_t n);

// fi_swiglu_avx2 sets out[i] = gate[i] / (1 + exp(-gate[i])) * up[i], and
// fi_expsub_avx2 sets row[i] = exp(row[i] - mx) and returns their sum in
// float64, both bit-identical to the Go loops (kern_avx2_exp.c).
void fi_swiglu_avx2(float *out, const float *gate, const float *up, int64_t n);
double fi_expsub_avx2(float *row, int64_t n, float mx);

// fi_rmsnorm_avx2 sets each of rows rows of dim floats to x·(1/sqrt(mean
// of squares + eps))·w (w may be NULL), and fi_rope_avx2 rotates the first
// half pairs of each of nhead heads (hdim floats apart) in each of rows
// rows, with cs holding 4·half floats per row: for neox pairs (v[i],
// v[i+half]), cos and sin of pair i at cs[i] and cs[2·half+i]; otherwise,
// for pairs (v[2i], v[2i+1]), cos at cs[2i] and cs[2i+1], and -sin, sin at
// cs[2·half+2i] and cs[2·half+2i+1]. Both are bit-identical to the Go loops
// (kern_avx2_norm.c).
void fi_rmsnorm_avx2(float *out, const float *x, const float *w, int64_t rows, int64_t dim, float eps);
void fi_rope_avx2(float *x, const float *cs, int64_t rows, int64_t nhead, int64_t hdim, int64_t half, int neox);

// fi_fa_tile_avx2 runs one tile of prefill attention (flash attention,
// kern_avx2_fa.c; cpu.FlashTile): query rows r < R (rp, a multiple of 16,
// with padding) against the L cached positions j0... whose K rows are at
// kp + j*dk and whose V is vp in cpu.FlashPackV's layout for vn positions.
// qt holds the pre-scaled query rows as rp/16 blocks of dk x 16 floats
// (row r, element d at qt[(r/16*dk + d)*16 + r%16]); pos[r] is row r's
// position (with mask != 0, positions j0+j > pos[r] are left out, and with
// win > 0 also those j0+j <= pos[r]-win: a sliding window). m (rp
// floats) and l (rp doubles) are the running max and sum, updated (m stays
// -inf for a row with nothing unmasked yet); acc (R
// rows of dv) becomes acc*exp(m_old-m_new) + P*V. scratch holds
// L*(rp+16) + rp floats. Returns 0, or -1 when dv is not a multiple of 8
// or rp of 16 (nothing written then).
int fi_fa_tile_avx2(const float *qt, int64_t rp, int64_t R, int64_t dk, int64_t dv, const float *kp, const float *vp,
                    int64_t vn, int64_t L, int64_t j0, const int32_t *pos, int mask, int64_t win, float *m, double *l,
                    float *acc, float *scratch);

// fi_fma_peak_avx2 and fi_fma_peak_avx512 run n steps of 12 (24) independent
// 8-lane (16-lane) FMAs: 192·n (768·n) flops, for measuring the F32 FMA
// peak (kern_peak.c). They return a sum of the chains; the AVX-512 one NaN
// in the SIMDe build, where it cannot run.
float fi_fma_peak_avx2(int64_t n);
float fi_fma_peak_avx512(int64_t n);

// fi_madd_peak_avx2 runs n steps of 12 independent chains of vpmaddwd then
// vpaddd (16 int16 multiply-adds each: 384·n operations, counting 2 per
// multiply-add), the integer decode kernels' arithmetic on AVX2 (and their
// V sums on AVX-512); fi_dpwssd_peak_avx512 n steps of 24 chains of
// vpdpwssd (1536·n), AVX-512's integer scores: -1 in the SIMDe build,
// where it cannot run. Both return a sum of the chains (kern_peak.c).
int32_t fi_madd_peak_avx2(int64_t n);
int fi_dpwssd_peak_avx512(int64_t n, int32_t *out);

// The gated delta net's recurrent layers (kern_avx2_dn.c, kern_dn.go).
// fi_dn_delta_avx2 runs the gated delta rule of one value head over n
// tokens on its d×d state s (row j = column j of S): token t reads q, k
// and v at q/k/v + t·xs, the gate g and beta at t·gs, and writes d outputs
// at out + t·os. Returns 0, or -1 (nothing done) unless d is a multiple
// of 8.
int fi_dn_delta_avx2(float *s, int64_t d, int64_t n, const float *q, const float *k, const float *v, int64_t xs,
                     const float *g, const float *beta, int64_t gs, float *out, int64_t os, float scale);
// fi_dn_conv_avx2 runs ConvSiLU (model.DeltaNet) on channels [c0, c1) of
// n rows of ch, taps w (kw per channel), state kw-1 per channel. Returns
// 0, or -1 (nothing done) unless c1-c0 is a multiple of 8 and kw in
// [2, 16].
int fi_dn_conv_avx2(float *out, const float *x, float *state, const float *w, int64_t n, int64_t ch, int64_t c0,
                    int64_t c1, int64_t kw);

// The Mamba-2 kernels (kern_avx2_ssm.c, kern_avx512_ssm.c; Go: mamba.go).
// fi_ssm_scan_avx2 and fi_ssm_scan_avx512 run model.Mamba's SSMScan on
// heads [h0, h1) for n tokens: xbc rows of nh·hd + 2·ng·ds floats (x, B,
// C), dt rows of nh, a and d of nh, state nh × hd × ds (head-major), y
// rows of nh·hd; a prefill of n tokens gives the bits of n calls of one.
// They return 0, or -1 when their scratch cannot be allocated (nothing
// written then).
// fi_ssm_conv_avx2 runs SSMConv on channels [c0, c1) of ch, k taps (2 to
// 16: -1 for other k), bias NULL for none; it returns as the scans do.
int fi_ssm_scan_avx2(float *y, const float *xbc, const float *dt, const float *a, const float *d, float *state,
                     int64_t n, int64_t nh, int64_t hd, int64_t ng, int64_t ds, int64_t h0, int64_t h1);
int fi_ssm_scan_avx512(float *y, const float *xbc, const float *dt, const float *a, const float *d, float *state,
                       int64_t n, int64_t nh, int64_t hd, int64_t ng, int64_t ds, int64_t h0, int64_t h1);
int fi_ssm_conv_avx2(float *out, const float *x, float *state, const float *w, const float *bias, int64_t n,
                     int64_t ch, int64_t k, int64_t c0, int64_t c1);

#endif
