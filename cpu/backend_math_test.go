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

func BenchmarkSwiGLU(b *testing.B) {
	const n = 8192
	g, u, o := make([]float32, n), make([]float32, n), make([]float32, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range g {
		g[i], u[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	for b.Loop() {
		swiglu(o, g, u)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
}
