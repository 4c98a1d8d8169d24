// Package quant defines ggml's tensor data types: their block layouts, a
// table from type to block size and byte size, and plain-Go reference
// (de)quantizers and dot products.
//
// Everything here is scalar reference code: it is the oracle that fast
// kernels in package cpu (SIMD) and gpu (Vulkan) are tested against. It does
// not allocate tensors or know about models.
package quant

import (
	"errors"
	"fmt"
)

// Type is a ggml tensor type, numbered exactly as enum ggml_type in ggml.h
// (the number stored in GGUF tensor infos).
type Type uint32

// ggml types. Gaps (4, 5, 31-33, 36-38) are types ggml removed; they are
// unknown here as they are in llama.cpp.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
	NVFP4   Type = 40
	Q1_0    Type = 41
	Q2_0    Type = 42
)

// QK_K is the super-block size of the K-quants.
const QK_K = 256

type typeInfo struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
}

// types maps every type ggml knows (at llama.cpp 34af94cd9) to its layout,
// from ggml.c's type_traits and ggml-common.h's static_asserts. Knowing a
// layout lets the GGUF reader validate tensor sizes even for types we
// cannot compute with; Supported says which ones we can.
var types = map[Type]typeInfo{
	F32:     {"f32", 1, 4},
	F16:     {"f16", 1, 2},
	Q4_0:    {"q4_0", 32, 18},
	Q4_1:    {"q4_1", 32, 20},
	Q5_0:    {"q5_0", 32, 22},
	Q5_1:    {"q5_1", 32, 24},
	Q8_0:    {"q8_0", 32, 34},
	Q8_1:    {"q8_1", 32, 36},
	Q2_K:    {"q2_K", QK_K, 84},
	Q3_K:    {"q3_K", QK_K, 110},
	Q4_K:    {"q4_K", QK_K, 144},
	Q5_K:    {"q5_K", QK_K, 176},
	Q6_K:    {"q6_K", QK_K, 210},
	Q8_K:    {"q8_K", QK_K, 292},
	IQ2_XXS: {"iq2_xxs", QK_K, 66},
	IQ2_XS:  {"iq2_xs", QK_K, 74},
	IQ3_XXS: {"iq3_xxs", QK_K, 98},
	IQ1_S:   {"iq1_s", QK_K, 50},
	IQ4_NL:  {"iq4_nl", 32, 18},
	IQ3_S:   {"iq3_s", QK_K, 110},
	IQ2_S:   {"iq2_s", QK_K, 82},
	IQ4_XS:  {"iq4_xs", QK_K, 136},
	I8:      {"i8", 1, 1},
	I16:     {"i16", 1, 2},
	I32:     {"i32", 1, 4},
	I64:     {"i64", 1, 8},
	F64:     {"f64", 1, 8},
	IQ1_M:   {"iq1_m", QK_K, 56},
	BF16:    {"bf16", 1, 2},
	TQ1_0:   {"tq1_0", QK_K, 54},
	TQ2_0:   {"tq2_0", QK_K, 66},
	MXFP4:   {"mxfp4", 32, 17},
	NVFP4:   {"nvfp4", 64, 36},
	Q1_0:    {"q1_0", 128, 18},
	Q2_0:    {"q2_0", 64, 18},
}

// ErrUnknownType is returned for a type number ggml does not define.
var ErrUnknownType = errors.New("unknown tensor type")

// ErrUnsupportedType is returned for a type ggml defines but flowinfer cannot
// compute with.
var ErrUnsupportedType = errors.New("unsupported tensor type")

// Known reports whether t is a type ggml defines.
func (t Type) Known() bool { _, ok := types[t]; return ok }

// String returns ggml's name for the type (ggml_type_name), or "type(N)".
func (t Type) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize returns the number of elements per block (1 for plain types),
// or 0 for an unknown type.
func (t Type) BlockSize() int { return types[t].blockSize }

// BlockBytes returns the bytes per block, or 0 for an unknown type.
func (t Type) BlockBytes() int { return types[t].blockBytes }

// IsQuantized reports whether t stores elements in blocks of more than one.
func (t Type) IsQuantized() bool { return types[t].blockSize > 1 }

// RowBytes returns the bytes of a row of n elements of type t. It fails for
// an unknown type or an n that is not a whole number of blocks.
func RowBytes(t Type, n int) (int, error) {
	ti, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrUnknownType, uint32(t))
	}
	if n < 0 || n%ti.blockSize != 0 {
		return 0, fmt.Errorf("row of %d elements is not a whole number of %s blocks of %d", n, ti.name, ti.blockSize)
	}
	return n / ti.blockSize * ti.blockBytes, nil
}

// TypeByName returns the type with ggml's name (case-insensitive for the
// letters, so "Q4_K" and "q4_k" both work).
func TypeByName(name string) (Type, bool) {
	for t, ti := range types {
		if equalFold(ti.name, name) {
			return t, true
		}
	}
	return 0, false
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}
