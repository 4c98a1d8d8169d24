package quant

import (
	"testing"
	"unsafe"
)

// TestBlockSizes pins every block struct to ggml's size (ggml-common.h's
// static_asserts) and to the types table.
func TestBlockSizes(t *testing.T) {
	cases := []struct {
		typ  Type
		got  uintptr
		want int
	}{
		{Q4_0, unsafe.Sizeof(blockQ4_0{}), 18},
		{Q4_1, unsafe.Sizeof(blockQ4_1{}), 20},
		{Q5_0, unsafe.Sizeof(blockQ5_0{}), 22},
		{Q5_1, unsafe.Sizeof(blockQ5_1{}), 24},
		{Q8_0, unsafe.Sizeof(blockQ8_0{}), 34},
		{Q8_1, unsafe.Sizeof(blockQ8_1{}), 36},
		{Q2_K, unsafe.Sizeof(blockQ2_K{}), 84},
		{Q3_K, unsafe.Sizeof(blockQ3_K{}), 110},
		{Q4_K, unsafe.Sizeof(blockQ4_K{}), 144},
		{Q5_K, unsafe.Sizeof(blockQ5_K{}), 176},
		{Q6_K, unsafe.Sizeof(blockQ6_K{}), 210},
		{Q8_K, unsafe.Sizeof(blockQ8_K{}), 292},
		{IQ4_NL, unsafe.Sizeof(blockIQ4_NL{}), 18},
		{IQ4_XS, unsafe.Sizeof(blockIQ4_XS{}), 136},
		{MXFP4, unsafe.Sizeof(blockMXFP4{}), 17},
		{IQ2_XXS, unsafe.Sizeof(blockIQ2_XXS{}), 66},
		{IQ2_XS, unsafe.Sizeof(blockIQ2_XS{}), 74},
		{IQ2_S, unsafe.Sizeof(blockIQ2_S{}), 82},
		{IQ3_XXS, unsafe.Sizeof(blockIQ3_XXS{}), 98},
		{IQ3_S, unsafe.Sizeof(blockIQ3_S{}), 110},
		{IQ1_S, unsafe.Sizeof(blockIQ1_S{}), 50},
		{IQ1_M, unsafe.Sizeof(blockIQ1_M{}), 56},
	}
	for _, c := range cases {
		t.Run(c.typ.String(), func(t *testing.T) {
			if int(c.got) != c.want {
				t.Errorf("sizeof = %d, want %d", c.got, c.want)
			}
			if c.typ.BlockBytes() != c.want {
				t.Errorf("types table says %d bytes", c.typ.BlockBytes())
			}
		})
	}
}

// TestBlockOffsets pins the field offsets the kernels read.
func TestBlockOffsets(t *testing.T) {
	cases := []struct {
		name      string
		got, want int
	}{
		{"q4_1.m", offQ4_1M, 2}, {"q4_1.qs", offQ4_1Qs, 4}, {"q4_0.qs", offQ4_0Qs, 2},
		{"q5_0.qh", offQ5_0Qh, 2}, {"q5_0.qs", offQ5_0Qs, 6},
		{"q5_1.m", offQ5_1M, 2}, {"q5_1.qh", offQ5_1Qh, 4}, {"q5_1.qs", offQ5_1Qs, 8},
		{"q8_0.qs", offQ8_0Qs, 2}, {"q8_1.s", offQ8_1S, 2}, {"q8_1.qs", offQ8_1Qs, 4},
		{"q2_K.qs", offQ2_KQs, 16}, {"q2_K.d", offQ2_KD, 80}, {"q2_K.dmin", offQ2_KDmin, 82},
		{"q3_K.qs", offQ3_KQs, 32}, {"q3_K.scales", offQ3_KScales, 96}, {"q3_K.d", offQ3_KD, 108},
		{"q4_K.dmin", offQ4_KDmin, 2}, {"q4_K.scales", offQ4_KScales, 4}, {"q4_K.qs", offQ4_KQs, 16},
		{"q5_K.scales", offQ5_KScales, 4}, {"q5_K.qh", offQ5_KQh, 16}, {"q5_K.qs", offQ5_KQs, 48},
		{"q6_K.qh", offQ6_KQh, 128}, {"q6_K.scales", offQ6_KScales, 192}, {"q6_K.d", offQ6_KD, 208},
		{"q8_K.qs", offQ8_KQs, 4}, {"q8_K.bsums", offQ8_KBsums, 260},
		{"iq4_nl.qs", offIQ4_NLQs, 2},
		{"iq4_xs.scales_h", offIQ4_XSScalesH, 2}, {"iq4_xs.scales_l", offIQ4_XSScalesL, 4}, {"iq4_xs.qs", offIQ4_XSQs, 8},
		{"mxfp4.qs", offMXFP4Qs, 1},
		{"iq2_xxs.qs", offIQ2_XXSQs, 2},
		{"iq2_xs.qs", offIQ2_XSQs, 2}, {"iq2_xs.scales", offIQ2_XSScales, 66},
		{"iq2_s.qs", offIQ2_SQs, 2}, {"iq2_s.qh", offIQ2_SQh, 66}, {"iq2_s.scales", offIQ2_SScales, 74},
		{"iq3_xxs.qs", offIQ3_XXSQs, 2},
		{"iq3_s.qs", offIQ3_SQs, 2}, {"iq3_s.qh", offIQ3_SQh, 66}, {"iq3_s.signs", offIQ3_SSigns, 74}, {"iq3_s.scales", offIQ3_SScales, 106},
		{"iq1_s.qs", offIQ1_SQs, 2}, {"iq1_s.qh", offIQ1_SQh, 34},
		{"iq1_m.qh", offIQ1_MQh, 32}, {"iq1_m.scales", offIQ1_MScales, 48},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s at offset %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestSupported(t *testing.T) {
	for _, typ := range []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M} {
		if !typ.Supported() {
			t.Errorf("%s not supported", typ)
		}
	}
	for _, typ := range []Type{TQ1_0, TQ2_0, NVFP4, Q1_0, I8, F64, Type(4), Type(1000)} {
		if typ.Supported() {
			t.Errorf("%s supported", typ)
		}
	}
}
