package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/model"
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

// TestInlinedExpf: expSub and swiglu, which repeat expf's body around
// expPoly, give exactly expf's results, in and out of the fast range.
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

// TestKernelsNormRope checks every path's RMSNorm and Rope against the Go
// loops bit for bit: row lengths and pair counts that are and are not
// multiples of the vector width, partial rotation (2·half < headDim), both
// pair layouts, with and without a weight, and guard values past the end.
func TestKernelsNormRope(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	randn := func(n int, s float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * s)
		}
		return x
	}
	same := func(got, want []float32) int {
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				return i
			}
		}
		return -1
	}
	const guard = 42
	for _, isa := range Available() {
		k := KernelsFor(isa)
		for _, dim := range []int{1, 3, 4, 7, 8, 12, 17, 64, 100, 2048, 2051} {
			for _, rows := range []int{1, 3} {
				x := randn(rows*dim, 3)
				for _, w := range [][]float32{nil, randn(dim, 1)} {
					want := make([]float32, len(x))
					rmsNormRows(want, x, w, dim, 1e-6)
					got := append(make([]float32, len(x)), guard)
					k.RMSNorm(got[:len(x)], x, w, dim, 1e-6)
					if got[len(x)] != guard {
						t.Fatalf("%s RMSNorm dim=%d: wrote past the end", isa, dim)
					}
					if i := same(got, want); i >= 0 {
						t.Fatalf("%s RMSNorm dim=%d rows=%d weight=%v: element %d = %g, Go %g",
							isa, dim, rows, w != nil, i, got[i], want[i])
					}
				}
			}
		}
		// Rows whose float32 result depends on the order of the float64
		// additions: the mean lands on a float32 tie (0.5+2^-25), which
		// the squares c = y² (2^-52 < c < 2^-51) break upwards only when
		// added to each other before 4 (row a: the lanes' sums combined in
		// another order; row b: one running sum).
		y := float32(1.2 / (1 << 26))
		tie := []float32{2, 1.0 / (1 << 11), y, y, 0, 0, 0, 0, y, y, 1.0 / (1 << 11), 0, 2, 0, 0, 0}
		want := make([]float32, len(tie))
		rmsNormRows(want, tie, nil, 8, 0)
		got := make([]float32, len(tie))
		k.RMSNorm(got, tie, nil, 8, 0)
		if i := same(got, want); i >= 0 {
			t.Fatalf("%s RMSNorm, float64 tie rows: element %d = %g, Go %g", isa, i, got[i], want[i])
		}
		if want[0] != 2*float32(math.Sqrt2) || want[12] != 2*float32(math.Sqrt2) {
			t.Fatalf("tie rows: Go gives %g and %g, want 2·sqrt(2) for both (test data wrong?)", want[0], want[12])
		}

		for _, sh := range []struct{ nHead, headDim, half int }{
			{1, 2, 1}, {3, 10, 5}, {2, 16, 8}, {2, 24, 8}, {4, 32, 13}, {3, 64, 32}, {2, 128, 32}, {2, 128, 64}, {5, 34, 17},
		} {
			for _, neox := range []bool{false, true} {
				const rows = 3
				rp := &model.Rope{Type: model.RopeNorm, Dim: 2 * sh.half, Base: 10000, Scale: 1}
				if neox {
					// YaRN (factor 4, original context 32): cos and sin
					// scaled by 1.1·(1 + 0.1·ln 4).
					rp = &model.Rope{Type: model.RopeNeox, Dim: 2 * sh.half, Base: 10000, Scale: 0.25, ExtFactor: 1,
						AttnFactor: 1.1, Corr: model.YarnCorrDims(2*sh.half, 32, 10000, 32, 1)}
				}
				cs := make([]float32, rows*4*sh.half)
				for t := range rows {
					rp.Table(cs[t*4*sh.half:], int32(37*t+5))
				}
				x := randn(rows*sh.nHead*sh.headDim, 2)
				want := append([]float32(nil), x...)
				rotate(want, cs, rows, sh.nHead, sh.headDim, sh.half, neox)
				got := append(append([]float32(nil), x...), guard)
				k.Rope(got[:len(x)], cs, rows, sh.nHead, sh.headDim, sh.half, neox)
				if got[len(x)] != guard {
					t.Fatalf("%s Rope %+v: wrote past the end", isa, sh)
				}
				if i := same(got, want); i >= 0 {
					t.Fatalf("%s Rope %+v neox=%v: element %d = %g, Go %g", isa, sh, neox, i, got[i], want[i])
				}
			}
		}
	}
}
