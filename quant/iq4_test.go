package quant

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
)

// testdata/iq4_mxfp4.bin holds test vectors written by ggml's own code
// (llama.cpp commit d32676d77426540327835040d5d3279728f0b4c8): a throwaway
// C program, kept outside the repository, linked against that commit's
// libggml-base (dequantize_row_*, quantize_row_mxfp4_ref, quantize_iq4_nl
// and quantize_iq4_xs with a NULL importance matrix, quantize_row_q8_0_ref,
// quantize_row_q8_K_ref) and ggml-cpu/quants.c compiled with gcc -std=c11
// -O2 for the generic dot products (ggml_vec_dot_{mxfp4,iq4_nl}_q8_0_generic,
// ggml_vec_dot_iq4_xs_q8_K_generic), from a fixed-seed splitmix64 generator.
//
// Layout, little-endian: the magic "FIQ4MX01"; the tables as ggml computes
// them: 16 float32 from dequantizing an IQ4_NL block with d = 1 and codes
// 0..15 in the low nibbles, 16 float32 from an MXFP4 block with e = 128
// (scale 1), 256 float32 GGML_E8M0_TO_FP32_HALF(0..255); a uint32 case
// count; per case: uint32 ggml type, uint32 n, float32[n] weights xw, the
// row ggml's quantizer made of xw, a row of random blocks (random codes and
// scale bits; MXFP4 rows of 8 blocks start with e = 0, 1, 2, 3, 254, 255),
// float32[n] the dequantization of each of the two rows, float32[n]
// activations xa, xa quantized to the vec-dot type (Q8_0 or Q8_K, ggml's
// _ref quantizer), and float32 the dot product of each weight row with it.
// Rows are 1, 3 and 8 blocks, twice per type with different data.
type iq4Vectors struct {
	iq4nl, mxfp4 [16]float32
	e8m0Half     [256]float32
	cases        []iq4Case
}

type iq4Case struct {
	typ        Type
	n          int
	xw         []float32
	wq, wr     []byte
	dq, dr     []float32
	xa         []float32
	a          []byte
	dotq, dotr float32
}

func loadIQ4Vectors(t *testing.T) *iq4Vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/iq4_mxfp4.bin")
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != "FIQ4MX01" {
		t.Fatalf("bad magic %q", b[:8])
	}
	b = b[8:]
	fail := func() { t.Fatalf("test vector file truncated") }
	u32 := func() uint32 {
		if len(b) < 4 {
			fail()
		}
		v := binary.LittleEndian.Uint32(b)
		b = b[4:]
		return v
	}
	f32s := func(dst []float32) {
		for i := range dst {
			dst[i] = math.Float32frombits(u32())
		}
	}
	bytes := func(n int) []byte {
		if len(b) < n {
			fail()
		}
		v := b[:n:n]
		b = b[n:]
		return v
	}
	v := &iq4Vectors{}
	f32s(v.iq4nl[:])
	f32s(v.mxfp4[:])
	f32s(v.e8m0Half[:])
	nc := int(u32())
	for range nc {
		c := iq4Case{typ: Type(u32()), n: int(u32())}
		rb, err := RowBytes(c.typ, c.n)
		if err != nil {
			t.Fatal(err)
		}
		ab, err := RowBytes(VecDotType(c.typ), c.n)
		if err != nil {
			t.Fatal(err)
		}
		c.xw, c.dq, c.dr, c.xa = make([]float32, c.n), make([]float32, c.n), make([]float32, c.n), make([]float32, c.n)
		f32s(c.xw)
		c.wq, c.wr = bytes(rb), bytes(rb)
		f32s(c.dq)
		f32s(c.dr)
		f32s(c.xa)
		c.a = bytes(ab)
		c.dotq, c.dotr = math.Float32frombits(u32()), math.Float32frombits(u32())
		v.cases = append(v.cases, c)
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left over", len(b))
	}
	if len(v.cases) == 0 {
		t.Fatal("no cases")
	}
	return v
}

// sameBits reports whether two floats are the same bits, or both NaN (the
// NaN payload of inf-inf differs between CPUs).
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// e2m1 decodes an FP4 E2M1 code from its definition (OCP MX spec: 1 sign,
// 2 exponent bits with bias 1, 1 mantissa bit; exponent 0 is subnormal).
func e2m1(c int) float64 {
	s, e, m := c>>3, (c>>1)&3, c&1
	v := float64(m) / 2 // subnormal: 0.m × 2^0
	if e != 0 {
		v = math.Ldexp(1+float64(m)/2, e-1)
	}
	if s != 0 {
		v = -v
	}
	return v
}

// TestIQ4Tables checks the code tables and the E8M0 scale against an
// independent derivation (E2M1 and E8M0 from their definitions) and against
// what ggml's dequantizers produce.
func TestIQ4Tables(t *testing.T) {
	v := loadIQ4Vectors(t)
	for c := range 16 {
		if want := 2 * e2m1(c); float64(kvaluesMXFP4[c]) != want {
			t.Errorf("kvaluesMXFP4[%d] = %d, E2M1 definition gives 2×%g", c, kvaluesMXFP4[c], want/2)
		}
		if float32(kvaluesMXFP4[c]) != v.mxfp4[c] {
			t.Errorf("kvaluesMXFP4[%d] = %d, ggml dequantizes code %d at scale 1 to %g", c, kvaluesMXFP4[c], c, v.mxfp4[c])
		}
		if float32(kvaluesIQ4NL[c]) != v.iq4nl[c] {
			t.Errorf("kvaluesIQ4NL[%d] = %d, ggml dequantizes code %d at d = 1 to %g", c, kvaluesIQ4NL[c], c, v.iq4nl[c])
		}
		if c > 0 && kvaluesIQ4NL[c] <= kvaluesIQ4NL[c-1] {
			t.Errorf("kvaluesIQ4NL not increasing at %d (best_index_int8's binary search needs it)", c)
		}
	}
	for e := range 256 {
		want := math.Ldexp(1, e-127) / 2 // E8M0: 2^(e-127), halved for the doubled E2M1 levels
		got := e8m0Half(byte(e))
		if float64(got) != want {
			t.Errorf("e8m0Half(%d) = %g, want 2^(%d-127)/2 = %g", e, got, e, want)
		}
		if !sameBits(got, v.e8m0Half[e]) {
			t.Errorf("e8m0Half(%d) = %g, ggml's GGML_E8M0_TO_FP32_HALF = %g", e, got, v.e8m0Half[e])
		}
	}
}

// TestIQ4AgainstGGML compares dequantization, quantization from float32 and
// dot products of MXFP4, IQ4_NL and IQ4_XS with ggml's, bit for bit, on
// rows of 1, 3 and 8 blocks.
func TestIQ4AgainstGGML(t *testing.T) {
	v := loadIQ4Vectors(t)
	seen := map[Type]int{}
	for i, c := range v.cases {
		seen[c.typ]++
		t.Run(c.typ.String(), func(t *testing.T) {
			got := make([]float32, c.n)
			for _, r := range []struct {
				name string
				w    []byte
				dq   []float32
				dot  float32
			}{{"quantized", c.wq, c.dq, c.dotq}, {"random", c.wr, c.dr, c.dotr}} {
				if err := DequantizeRow(c.typ, r.w, got); err != nil {
					t.Fatal(err)
				}
				bad := 0
				for j := range got {
					if !sameBits(got[j], r.dq[j]) {
						if bad++; bad <= 3 {
							t.Errorf("case %d n=%d %s row: dequantized[%d] = %g, ggml %g", i, c.n, r.name, j, got[j], r.dq[j])
						}
					}
				}
				d, err := VecDot(c.typ, c.n, r.w, c.a)
				if err != nil {
					t.Fatal(err)
				}
				if !sameBits(d, r.dot) {
					t.Errorf("case %d n=%d %s row: dot = %g (%#x), ggml %g (%#x)", i, c.n, r.name, d, math.Float32bits(d), r.dot, math.Float32bits(r.dot))
				}
			}
			q := make([]byte, len(c.wq))
			if err := QuantizeRowRef(c.typ, c.xw, q); err != nil {
				t.Fatal(err)
			}
			bs, bb := c.typ.BlockSize(), c.typ.BlockBytes()
			for b := 0; b < c.n/bs; b++ {
				if string(q[b*bb:(b+1)*bb]) != string(c.wq[b*bb:(b+1)*bb]) {
					t.Errorf("case %d n=%d: quantized block %d = %x, ggml %x", i, c.n, b, q[b*bb:(b+1)*bb], c.wq[b*bb:(b+1)*bb])
				}
			}
			// The activations: ggml's _ref quantizer (QuantizeRowRef).
			a := make([]byte, len(c.a))
			if err := QuantizeRowRef(VecDotType(c.typ), c.xa, a); err != nil {
				t.Fatal(err)
			}
			if string(a) != string(c.a) {
				t.Errorf("case %d: activations quantize differently from ggml's %s ref", i, VecDotType(c.typ))
			}
		})
	}
	for _, typ := range []Type{MXFP4, IQ4_NL, IQ4_XS} {
		if seen[typ] == 0 {
			t.Errorf("no %s cases", typ)
		}
	}
}
