package quant

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var weightTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M}

func TestVecDotType(t *testing.T) {
	want := map[Type]Type{
		F32: F32, F16: F16, BF16: BF16,
		Q4_0: Q8_0, Q5_0: Q8_0, Q8_0: Q8_0, IQ4_NL: Q8_0, MXFP4: Q8_0, IQ4_XS: Q8_K,
		Q4_1: Q8_1, Q5_1: Q8_1,
		Q2_K: Q8_K, Q3_K: Q8_K, Q4_K: Q8_K, Q5_K: Q8_K, Q6_K: Q8_K, IQ2_XXS: Q8_K,
		Q8_1: Q8_1, Q8_K: Q8_K,
	}
	for typ, w := range want {
		if got := VecDotType(typ); got != w {
			t.Errorf("VecDotType(%s) = %s, want %s", typ, got, w)
		}
	}
	for _, typ := range weightTypes {
		if DotFunc(typ) == nil {
			t.Errorf("no DotFunc for %s", typ)
		}
	}
	for _, typ := range []Type{Q8_1, Q8_K, TQ1_0, NVFP4, I32} {
		if DotFunc(typ) != nil {
			t.Errorf("DotFunc for %s", typ)
		}
	}
}

// TestVecDot compares every dot product with the float64 dot product of
// the dequantized rows it is given, on aligned and odd block counts. The
// two differ only by float32 rounding of block terms, except for Q4_1/Q5_1
// whose min term uses the activation block's fp16 s = d*sum(q) (as ggml
// does), which is off by up to 2^-11 relative.
func TestVecDot(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, wt := range weightTypes {
		at := VecDotType(wt)
		bs := max(wt.BlockSize(), at.BlockSize(), 32)
		eps := 2e-6 // relative to sum |w_i*a_i|
		if wt == Q4_1 || wt == Q5_1 {
			eps = 1e-3
		}
		for _, blocks := range []int{1, 3, 7, 8, 16} {
			t.Run(fmt.Sprintf("%s/blocks=%d", wt, blocks), func(t *testing.T) {
				n := blocks * bs
				for trial := 0; trial < 4; trial++ {
					wf := randRow(r, n, trial%2 == 1)
					if trial == 3 {
						for i := range wf {
							wf[i] += 0.5 // asymmetric weights exercise the min terms
						}
					}
					af := randRow(r, n, trial >= 2)
					w := rowBytes(t, wt, n)
					a := rowBytes(t, at, n)
					if err := QuantizeRowRef(wt, wf, w); err != nil {
						t.Fatal(err)
					}
					if err := QuantizeRow(at, af, a); err != nil {
						t.Fatal(err)
					}
					got, err := VecDot(wt, n, w, a)
					if err != nil {
						t.Fatal(err)
					}
					if fast := DotFunc(wt)(n, w, a); fast != got {
						t.Fatalf("DotFunc = %g, VecDot = %g", fast, got)
					}
					wd := make([]float32, n)
					ad := make([]float32, n)
					if err := DequantizeRow(wt, w, wd); err != nil {
						t.Fatal(err)
					}
					if err := DequantizeRow(at, a, ad); err != nil {
						t.Fatal(err)
					}
					var want, mag float64
					for i := range wd {
						p := float64(wd[i]) * float64(ad[i])
						want += p
						mag += math.Abs(p)
					}
					if diff := math.Abs(float64(got) - want); diff > eps*mag || math.IsNaN(float64(got)) {
						t.Errorf("trial %d: dot = %.9g, float64 dot of dequantized rows = %.9g (diff %.3g, bound %.3g)",
							trial, got, want, diff, eps*mag)
					}
					// And the whole pipeline stays close to the exact dot of
					// the original float rows (quantization error only).
					var exact float64
					for i := range wf {
						exact += float64(wf[i]) * float64(af[i])
					}
					var nw, na float64
					for i := range wf {
						nw += float64(wf[i]) * float64(wf[i])
						na += float64(af[i]) * float64(af[i])
					}
					if diff := math.Abs(float64(got) - exact); diff > 0.6*math.Sqrt(nw*na) {
						t.Errorf("trial %d: dot %g too far from exact %g", trial, got, exact)
					}
				}
			})
		}
	}
}

func TestVecDotErrors(t *testing.T) {
	w := make([]byte, 4096)
	a := make([]byte, 4096)
	cases := []struct {
		name string
		typ  Type
		n    int
		w, a []byte
		want error
	}{
		{"unknown", Type(99), 32, w, a, ErrUnknownType},
		{"activation type", Q8_K, 256, w, a, ErrUnsupportedType},
		{"unsupported", TQ2_0, 256, w, a, ErrUnsupportedType},
		{"odd n", Q4_0, 48, w, a, nil},
		{"short weights", Q4_K, 512, w[:287], a, nil},
		{"short activations", Q4_K, 512, w, a[:583], nil},
		{"short f16", F16, 100, w[:199], a, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := VecDot(c.typ, c.n, c.w, c.a)
			if err == nil {
				t.Fatal("no error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v is not %v", err, c.want)
			}
		})
	}
}

func TestDotF32(t *testing.T) {
	x := []float32{1, 2, 3, 1e8}
	y := []float32{4, 5, 6, 1e-8}
	if got := DotF32(x, y); got != 33 {
		t.Errorf("DotF32 = %g, want 33", got)
	}
	b1, b2 := make([]byte, 16), make([]byte, 16)
	QuantizeRowF32(x, b1)
	QuantizeRowF32(y, b2)
	if got, _ := VecDot(F32, 4, b1, b2); got != 33 {
		t.Errorf("VecDot(F32) = %g, want 33", got)
	}
}

// TestDotAllocs: the hot-loop forms do not allocate.
func TestDotAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	const n = 1024
	x := randRow(r, n, false)
	for _, wt := range weightTypes {
		w := rowBytes(t, wt, n)
		a := rowBytes(t, VecDotType(wt), n)
		QuantizeRowRef(wt, x, w)
		quantize := QuantizeFunc(VecDotType(wt))
		dot := DotFunc(wt)
		deq := DequantizeFunc(wt)
		y := make([]float32, n)
		allocs := testing.AllocsPerRun(10, func() {
			quantize(x, a)
			dot(n, w, a)
			deq(w, y)
		})
		if allocs != 0 {
			t.Errorf("%s: %g allocations", wt, allocs)
		}
	}
}

// TestRandomBytes: arbitrary bytes (NaN scales, any codes) decode and dot
// without panicking.
func TestRandomBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const n = 512
	for _, wt := range weightTypes {
		w := rowBytes(t, wt, n)
		a := rowBytes(t, VecDotType(wt), n)
		y := make([]float32, n)
		for range 20 {
			for i := range w {
				w[i] = byte(r.Uint32())
			}
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			if err := DequantizeRow(wt, w, y); err != nil {
				t.Fatal(err)
			}
			if _, err := VecDot(wt, n, w, a); err != nil {
				t.Fatal(err)
			}
		}
	}
}
