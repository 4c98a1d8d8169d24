package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpf checks expf against float32(math.Exp) over the range softmax
// and SwiGLU use, the limits and NaN: at most one ulp apart.
func TestExpf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	xs := []float32{0, -0, 1, -1, 88.7, 88.8, 89, -87, -103.9, -104, -105, float32(math.Inf(1)), float32(math.Inf(-1))}
	for range 200000 {
		xs = append(xs, float32(r.Float64()*200-110))
	}
	for _, x := range xs {
		got, want := expf(x), float32(math.Exp(float64(x)))
		d := int64(math.Float32bits(got)) - int64(math.Float32bits(want))
		if d < -1 || d > 1 {
			t.Fatalf("expf(%g) = %g, want %g (%d ulp)", x, got, want, d)
		}
	}
	if nan := expf(float32(math.NaN())); nan == nan {
		t.Errorf("expf(NaN) = %g", nan)
	}
}

// TestInlinedExpf: expSub and swiglu, which repeat expf's body by hand,
// give exactly expf's results, in and out of the fast range.
func TestInlinedExpf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n := 5000
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(r.Float64()*220 - 120)
	}
	xs = append(xs, 0, 88.7, 89, -87, -104, -105, float32(math.Inf(-1)))
	n = len(xs)
	row := append([]float32(nil), xs...)
	const mx = 1.5
	sum := expSub(row, mx)
	var want float64
	for i, x := range xs {
		e := expf(x - mx)
		want += float64(e)
		if math.Float32bits(row[i]) != math.Float32bits(e) {
			t.Fatalf("expSub: element %d (x=%g) = %g, expf gives %g", i, x, row[i], e)
		}
	}
	if sum != want {
		t.Errorf("expSub sum %g, want %g", sum, want)
	}
	up := make([]float32, n)
	for i := range up {
		up[i] = float32(r.NormFloat64())
	}
	out := make([]float32, n)
	swiglu(out, xs, up)
	for i, g := range xs {
		if w := g / (1 + expf(-g)) * up[i]; math.Float32bits(out[i]) != math.Float32bits(w) {
			t.Fatalf("swiglu: element %d (g=%g) = %g, with expf %g", i, g, out[i], w)
		}
	}
}

func BenchmarkSwiGLU(b *testing.B) {
	const n = 8192
	g, u, o := make([]float32, n), make([]float32, n), make([]float32, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range g {
		g[i], u[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	for _, isa := range Available() {
		k := KernelsFor(isa)
		b.Run("isa="+isa.String(), func(b *testing.B) {
			for b.Loop() {
				k.SwiGLU(o, g, u)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}

// TestKernelsExp checks every path's SwiGLU and ExpSub against the Go
// loops: bit for bit where the exp's argument is in (-87, 88), within one
// ulp elsewhere; lengths that are and are not multiples of the vector width,
// and guard values past the end.
func TestKernelsExp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ulps := func(a, b float32) int64 {
		if a != a && b != b {
			return 0
		}
		d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
		return max(d, -d)
	}
	special := []float32{0, 86.9, 87, 88, 88.7, 89, -87, -88, -103.9, -104, -105,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for _, isa := range Available() {
		k := KernelsFor(isa)
		for _, n := range []int{1, 7, 8, 9, 64, 1001} {
			for _, wide := range []bool{false, true} {
				xs := make([]float32, n)
				for i := range xs {
					if wide { // reach the slow path and the limits
						xs[i] = float32(r.Float64()*240 - 120)
						if r.IntN(8) == 0 {
							xs[i] = special[r.IntN(len(special))]
						}
					} else {
						xs[i] = float32(r.NormFloat64() * 4)
					}
				}
				up := make([]float32, n)
				for i := range up {
					up[i] = float32(r.NormFloat64())
				}
				want := make([]float32, n)
				swiglu(want, xs, up)
				got := make([]float32, n+1)
				got[n] = 42
				k.SwiGLU(got, xs, up)
				if got[n] != 42 {
					t.Fatalf("%s SwiGLU n=%d: wrote past the end", isa, n)
				}
				for i := range n {
					if d := ulps(got[i], want[i]); d != 0 && (xs[i] > -87 && xs[i] < 87 || d > 1) {
						t.Fatalf("%s SwiGLU n=%d: gate %g up %g: %g, Go %g", isa, n, xs[i], up[i], got[i], want[i])
					}
				}
				const mx = 1.25
				wantRow := append([]float32(nil), xs...)
				wantSum := expSub(wantRow, mx)
				row := append(append([]float32(nil), xs...), 42)
				sum := k.ExpSub(row[:n], mx)
				if row[n] != 42 {
					t.Fatalf("%s ExpSub n=%d: wrote past the end", isa, n)
				}
				exact := true
				for i := range n {
					x := xs[i] - mx
					if d := ulps(row[i], wantRow[i]); d != 0 {
						if x > -87 && x < 88 || d > 1 {
							t.Fatalf("%s ExpSub n=%d: x %g: %g, Go %g", isa, n, x, row[i], wantRow[i])
						}
						exact = false
					}
				}
				if exact && math.Float64bits(sum) != math.Float64bits(wantSum) && !(sum != sum && wantSum != wantSum) {
					t.Fatalf("%s ExpSub n=%d: sum %v, Go %v", isa, n, sum, wantSum)
				}
			}
		}
	}
}
