//go:build cgo

// The row kinds the tiled decode scores (kern_avx2_kt.c,
// kern_avx512_kt.c) read in place, included after a file's target pragma.

#ifndef FLOWINFER_KERN_KT_H
#define FLOWINFER_KERN_KT_H

#include "kern.h"

// Tiled row kinds with kernels of their own.
enum { T_F32, T_F16, T_BF16, T_Q8_0, T_Q4_0, T_TQ4, T_TQ3 };

// tkind returns the kind of rows of type t (bits > 0: TurboQuant codes of
// that many bits), -1 for rows the kernels untranspose first.
static inline int tkind(int t, int bits) {
	if (bits == 4) return T_TQ4;
	if (bits == 3) return T_TQ3;
	if (bits > 0) return -1;
	switch (t) {
	case FI_F32: return T_F32;
	case FI_F16: return T_F16;
	case FI_BF16: return T_BF16;
	case FI_Q8_0: return T_Q8_0;
	case FI_Q4_0: return T_Q4_0;
	}
	return -1;
}

// tlevels fills l with the codebook of a bits-bit TurboQuant type indexed
// by a code's low 4 bits (3 bits: twice over), zeros for other types.
static inline void tlevels(int bits, const float *levels, float *l) {
	for (int i = 0; i < 16; i++) l[i] = bits == 3 || bits == 4 ? levels[i % (1 << bits)] : 0;
}

// BY_TKIND runs M(k) with k the constant equal to kind.
#define BY_TKIND(kind, M)                                                                                              \
	switch (kind) {                                                                                                    \
	case T_F32: M(T_F32); break;                                                                                       \
	case T_F16: M(T_F16); break;                                                                                       \
	case T_BF16: M(T_BF16); break;                                                                                     \
	case T_Q8_0: M(T_Q8_0); break;                                                                                     \
	case T_Q4_0: M(T_Q4_0); break;                                                                                     \
	case T_TQ4: M(T_TQ4); break;                                                                                       \
	case T_TQ3: M(T_TQ3); break;                                                                                       \
	}

// Tiled kinds scored in integers (Go's kern_qint.go) against queries Go
// rounds (QInt.Round): fi_attn_scores_qi_*.
static inline int qi_kind(int kind) { return kind == T_Q4_0 || kind == T_TQ4; }

// qi_takes reports whether the integer kernels take rows of kind of dim
// values: q4_0 in whole blocks, TurboQuant in steps of 8, up to
// FI_AD_MAXDIM (the int32 sums' bound, kern_qint.go).
static inline int qi_takes(int kind, int64_t dim) {
	return qi_kind(kind) && dim % (kind == T_Q4_0 ? 32 : 8) == 0 && dim <= FI_AD_MAXDIM;
}

// qi_args is what the integer kernels meet a tile with (fi_attn_scores_qi_*
// in kern.h): the rounded heads' pairs, q4_0's corrections, each head's
// scale and the TurboQuant codebook as int8.
typedef struct {
	const int32_t *qp, *corr;
	const float *kq;
	const int8_t *c8;
} qi_args;

// BY_QIKIND runs M(k) with k the constant equal to kind (qi_kind).
#define BY_QIKIND(kind, M)                                                                                             \
	if ((kind) == T_Q4_0) {                                                                                            \
		M(T_Q4_0);                                                                                                     \
	} else {                                                                                                           \
		M(T_TQ4);                                                                                                      \
	}

#endif
