package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// randRow returns n values ~ N(0, 1), with a few outliers when heavy is set.
func randRow(r *rand.Rand, n int, heavy bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if heavy && r.IntN(64) == 0 {
			x[i] *= 8
		}
	}
	return x
}

func rowBytes(t testing.TB, typ Type, n int) []byte {
	t.Helper()
	nb, err := RowBytes(typ, n)
	if err != nil {
		t.Fatal(err)
	}
	return make([]byte, nb)
}

// TestRoundTrip quantizes random rows and checks the reconstruction error,
// relative to the row's RMS, against a bound per type (about 1.3 times the
// measured value; in half the rows 1 value in 64 is scaled by 8).
func TestRoundTrip(t *testing.T) {
	cases := []struct {
		typ    Type
		maxRel float64 // bound on RMS(error)/RMS(x)
	}{
		{F32, 0},
		{F16, 3e-4},
		{BF16, 2.3e-3},
		{Q8_0, 0.0115},
		{Q8_1, 0.0115},
		{Q8_K, 0.021},
		{Q4_0, 0.185},
		{Q4_1, 0.125},
		{Q5_0, 0.085},
		{Q5_1, 0.06},
		{Q2_K, 0.43},
		{Q3_K, 0.245},
		{Q4_K, 0.115},
		{Q5_K, 0.058},
		{Q6_K, 0.033},
		{IQ4_NL, 0.13},
		{IQ4_XS, 0.13},
		{MXFP4, 0.195},
		{IQ3_XXS, 0.29}, {IQ3_S, 0.21}, {IQ2_XXS, 0.51}, {IQ2_XS, 0.41}, {IQ2_S, 0.45}, {IQ1_S, 0.62}, {IQ1_M, 0.62},
	}
	r := rand.New(rand.NewPCG(7, 7))
	const n = 4096
	for _, c := range cases {
		for _, ref := range []bool{false, true} {
			name := c.typ.String()
			quantize := QuantizeRow
			if ref {
				name += "/ref"
				quantize = QuantizeRowRef
			}
			t.Run(name, func(t *testing.T) {
				var sumErr, sumX float64
				for _, heavy := range []bool{false, true} {
					x := randRow(r, n, heavy)
					q := rowBytes(t, c.typ, n)
					if err := quantize(c.typ, x, q); err != nil {
						t.Fatal(err)
					}
					y := make([]float32, n)
					if err := DequantizeRow(c.typ, q, y); err != nil {
						t.Fatal(err)
					}
					for i := range x {
						e := float64(y[i]) - float64(x[i])
						sumErr += e * e
						sumX += float64(x[i]) * float64(x[i])
					}
				}
				rel := math.Sqrt(sumErr / sumX)
				t.Logf("relative RMS error %.3g", rel)
				if rel > c.maxRel || math.IsNaN(rel) {
					t.Errorf("relative RMS error %.3g > %.3g", rel, c.maxRel)
				}
			})
		}
	}
}

// TestQuantizeZeros: an all-zero row quantizes to zeros for every type.
func TestQuantizeZeros(t *testing.T) {
	for _, typ := range []Type{F16, BF16, Q8_0, Q8_1, Q8_K, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M} {
		for _, ref := range []bool{false, true} {
			x := make([]float32, 512)
			q := rowBytes(t, typ, 512)
			for i := range q {
				q[i] = 0xa5 // garbage that must be overwritten
			}
			f := QuantizeFunc(typ)
			if ref {
				f = QuantizeRefFunc(typ)
			}
			f(x, q)
			y := make([]float32, 512)
			DequantizeFunc(typ)(q, y)
			for i, v := range y {
				if v != 0 {
					t.Fatalf("%s (ref %v): element %d = %g, want 0", typ, ref, i, v)
				}
			}
		}
	}
}

// TestQ8_0Rounding pins the difference between the x86 activation
// quantizer (round half to even, id = 127/amax) and the reference one
// (roundf: half away from zero, id = 1/(amax/127)).
func TestQ8_0Rounding(t *testing.T) {
	// amax = 127 makes id exactly 1 in both forms, so x*id is x itself.
	x := make([]float32, 32)
	x[0] = 127
	x[1], x[2], x[3], x[4] = 2.5, -2.5, 3.5, 0.5
	act := make([]byte, 34)
	ref := make([]byte, 34)
	QuantizeRowQ8_0(x, act)
	QuantizeRowQ8_0Ref(x, ref)
	wantAct := []int8{127, 2, -2, 4, 0}
	wantRef := []int8{127, 3, -3, 4, 1}
	for i := range wantAct {
		if got := int8(act[2+i]); got != wantAct[i] {
			t.Errorf("x86 q[%d] = %d, want %d", i, got, wantAct[i])
		}
		if got := int8(ref[2+i]); got != wantRef[i] {
			t.Errorf("ref q[%d] = %d, want %d", i, got, wantRef[i])
		}
	}
	if d := fp16(act); d != 1 {
		t.Errorf("d = %g, want 1", d)
	}
	// Q8_1 additionally stores s = fp16(d*sum(q)).
	a1 := make([]byte, 36)
	QuantizeRowQ8_1(x, a1)
	if s := fp16(a1[offQ8_1S:]); s != 127+2-2+4 {
		t.Errorf("q8_1 s = %g, want 131", s)
	}
}

// TestQ8_K checks the activation super-block: the first value of largest
// magnitude maps to -127, d = -max/127, and bsums are the group sums.
func TestQ8_K(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	x := randRow(r, 512, true)
	x[300] = 100 // largest in the second block, positive
	x[301] = -100
	q := rowBytes(t, Q8_K, 512)
	QuantizeRowQ8_K(x, q)
	for b := 0; b < 2; b++ {
		blk := q[b*292 : (b+1)*292]
		d := math.Float32frombits(le32(blk))
		if b == 1 {
			if got := int8(blk[4+300-256]); got != -127 {
				t.Errorf("max value quantized to %d, want -127", got)
			}
			if d != 1/(-127/float32(100)) {
				t.Errorf("d = %g", d)
			}
		}
		for g := 0; g < 16; g++ {
			var s int32
			for _, v := range blk[4+16*g : 4+16*g+16] {
				s += int32(int8(v))
			}
			if got := bsum(blk[offQ8_KBsums:], g); got != s {
				t.Errorf("block %d bsum %d = %d, want %d", b, g, got, s)
			}
		}
	}
}

func TestQuantizeErrors(t *testing.T) {
	x := make([]float32, 256)
	cases := []struct {
		name string
		typ  Type
		src  []float32
		dst  []byte
		want error
	}{
		{"unknown type", Type(1000), x, make([]byte, 1000), ErrUnknownType},
		{"unsupported type", TQ1_0, x, make([]byte, 1000), ErrUnsupportedType},
		{"not whole blocks", Q4_K, x[:100], make([]byte, 1000), nil},
		{"short dst", Q4_K, x, make([]byte, 143), nil},
		{"short dst q8_0", Q8_0, x, make([]byte, 8*34-1), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, f := range []func(Type, []float32, []byte) error{QuantizeRow, QuantizeRowRef} {
				err := f(c.typ, c.src, c.dst)
				if err == nil {
					t.Fatal("no error")
				}
				if c.want != nil && !errors.Is(err, c.want) {
					t.Errorf("error %v is not %v", err, c.want)
				}
			}
		})
	}
}

func TestDequantizeErrors(t *testing.T) {
	cases := []struct {
		name string
		typ  Type
		src  []byte
		n    int
		want error
	}{
		{"unknown type", Type(33), make([]byte, 1000), 32, ErrUnknownType},
		{"unsupported type", TQ1_0, make([]byte, 1000), 256, ErrUnsupportedType},
		{"not whole blocks", Q4_0, make([]byte, 1000), 33, nil},
		{"short src", Q6_K, make([]byte, 209), 256, nil},
		{"short src f16", F16, make([]byte, 7), 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := DequantizeRow(c.typ, c.src, make([]float32, c.n))
			if err == nil {
				t.Fatal("no error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v is not %v", err, c.want)
			}
		})
	}
}

// TestDequantizeGuard: DequantizeRow writes exactly len(dst) elements and
// reads only the bytes of those blocks.
func TestDequantizeGuard(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, typ := range []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K} {
		n := 3 * max(typ.BlockSize(), 32) * 8
		if typ.BlockSize() == QK_K {
			n = 3 * QK_K
		}
		x := randRow(r, n, false)
		q := rowBytes(t, typ, n)
		if err := QuantizeRow(typ, x, q); err != nil {
			t.Fatal(err)
		}
		buf := make([]float32, n+8)
		for i := range buf {
			buf[i] = 12345
		}
		if err := DequantizeRow(typ, q, buf[:n]); err != nil {
			t.Fatal(err)
		}
		for i := n; i < len(buf); i++ {
			if buf[i] != 12345 {
				t.Fatalf("%s: guard element %d overwritten", typ, i)
			}
		}
	}
}

// TestHandMadeBlocks decodes blocks built by hand from the layouts.
func TestHandMadeBlocks(t *testing.T) {
	t.Run("q4_0", func(t *testing.T) {
		b := make([]byte, 18)
		put16(b, FP32ToFP16(0.5))
		for j := 0; j < 16; j++ {
			b[2+j] = byte(j) | byte(15-j)<<4
		}
		y := make([]float32, 32)
		DequantizeRowQ4_0(b, y)
		for j := 0; j < 16; j++ {
			if y[j] != 0.5*float32(j-8) || y[j+16] != 0.5*float32(7-j) {
				t.Fatalf("element %d: %g %g", j, y[j], y[j+16])
			}
		}
	})
	t.Run("q5_1", func(t *testing.T) {
		b := make([]byte, 24)
		put16(b, FP32ToFP16(2))
		put16(b[2:], FP32ToFP16(-1))
		put32(b[4:], 0x80000001) // fifth bit of elements 0 and 31
		for j := range 16 {
			b[8+j] = 0xff
		}
		y := make([]float32, 32)
		DequantizeRowQ5_1(b, y)
		for j, v := range y {
			q := 15
			if j == 0 || j == 31 {
				q = 31
			}
			if v != 2*float32(q)-1 {
				t.Fatalf("element %d = %g, want %d", j, v, 2*q-1)
			}
		}
	})
	t.Run("q4_K", func(t *testing.T) {
		b := make([]byte, 144)
		put16(b, FP32ToFP16(1))
		put16(b[2:], FP32ToFP16(0.5))
		sc := b[4:16]
		// sub-block j: scale j+1, min 2j (j >= 4 use the packed form).
		for j := 0; j < 8; j++ {
			packScalesK4(sc, j, uint8(j+1)+40*uint8(j/7), uint8(2*j)+32*uint8(j/6))
		}
		for j := range 128 {
			b[16+j] = 0x31 // low nibble 1, high nibble 3
		}
		y := make([]float32, 256)
		DequantizeRowQ4_K(b, y)
		for j := 0; j < 8; j++ {
			s, m := scaleMinK4(j, sc)
			wantS, wantM := byte(j+1)+40*byte(j/7), byte(2*j)+32*byte(j/6)
			if s != wantS || m != wantM {
				t.Fatalf("sub-block %d: scale/min %d/%d, want %d/%d", j, s, m, wantS, wantM)
			}
			q := float32(1)
			if j%2 == 1 {
				q = 3
			}
			want := float32(s)*q - 0.5*float32(m)
			for _, v := range y[32*j : 32*j+32] {
				if v != want {
					t.Fatalf("sub-block %d: %g, want %g", j, v, want)
				}
			}
		}
	})
	t.Run("q6_K", func(t *testing.T) {
		b := make([]byte, 210)
		put16(b[208:], FP32ToFP16(0.25))
		for j := range 16 {
			b[192+j] = byte(int8(j - 8))
		}
		for j := range 128 {
			b[j] = 0xf0 // low nibble 0, high nibble 15
		}
		for j := range 64 {
			b[128+j] = 0xe4 // 2-bit fields 0, 1, 2, 3
		}
		y := make([]float32, 256)
		DequantizeRowQ6_K(b, y)
		for i, v := range y {
			h, rem := i/128, i%128
			quarter := rem / 32 // which of the 4 runs of 32 in this half
			low := []int{0, 0, 15, 15}[quarter]
			q := low | quarter<<4
			sub := i / 16
			want := float32(0.25) * float32(int8(sub-8)) * float32(q-32)
			if v != want {
				t.Fatalf("element %d (half %d): %g, want %g", i, h, v, want)
			}
		}
	})
}

// TestRoundSat8 checks the fast rounding against math.RoundToEven and the
// x86 conversion rules for values the fast path does not take.
func TestRoundSat8(t *testing.T) {
	vals := []float32{0, 0.5, -0.5, 1.5, -1.5, 2.5, 126.5, 127.49998, 127.5, -127.5, -128.5, 128, 255.5, -255.5,
		300, -300, 1e9, -1e9, 3e9, -3e9, float32(math.Inf(1)), float32(math.NaN()), math.Nextafter32(0.5, 1)}
	r := rand.New(rand.NewPCG(9, 9))
	for range 10000 {
		vals = append(vals, float32(r.NormFloat64()*100), float32(r.IntN(600)-300)+0.5)
	}
	for _, v := range vals {
		q, i := roundSat8(v)
		rr := math.RoundToEven(float64(v))
		wantI := int32(math.MinInt32)
		if !math.IsNaN(rr) && rr < 1<<31 && rr >= -(1<<31) {
			wantI = int32(rr)
		}
		wantQ := int8(min(max(wantI, -128), 127))
		if q != wantQ || i != wantI {
			t.Errorf("roundSat8(%g) = %d, %d; want %d, %d", v, q, i, wantQ, wantI)
		}
	}
}

// TestNonFiniteInputs: NaN, Inf and huge values must not panic anywhere.
func TestNonFiniteInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 3e38, -3e38, 1e-45}
	for _, typ := range []Type{F16, BF16, Q8_0, Q8_1, Q8_K, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M} {
		for k := range special {
			x := randRow(r, 512, false)
			for i := k; i < len(x); i += 37 {
				x[i] = special[(i+k)%len(special)]
			}
			q := rowBytes(t, typ, 512)
			y := make([]float32, 512)
			for _, f := range []func(Type, []float32, []byte) error{QuantizeRow, QuantizeRowRef} {
				if err := f(typ, x, q); err != nil {
					t.Fatal(err)
				}
				if err := DequantizeRow(typ, q, y); err != nil {
					t.Fatal(err)
				}
				if dot := DotFunc(typ); dot != nil {
					a := rowBytes(t, VecDotType(typ), 512)
					if err := QuantizeRow(VecDotType(typ), x, a); err != nil {
						t.Fatal(err)
					}
					dot(512, q, a)
				}
			}
		}
	}
}
