package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TestSwiGLUOAI: the Backend's clamped SwiGLU (gpt-oss's experts) against
// Ref's on sizes below and above the parallel threshold, with inputs past
// the clamp on both sides, huge ones (exp overflows to +Inf: the result is
// -0 or a small negative), NaN and guard elements after the output: at
// most two ulps apart (expPoly's exp is within one ulp of math.Exp's, and
// the division and the product round once more each), NaN where Ref has
// NaN.
// Ref itself is checked against hand-computed values of ggml's formula.
func TestSwiGLUOAI(t *testing.T) {
	ref := cpu.NewRef()
	const alpha, limit = model.SwiGLUOAIAlpha, model.SwiGLUOAILimit
	// hand-checked: x = min(g, 7), y = clamp(u, ±7), x/(1+e^(-1.702x))·(y+1)
	one := []float32{0}
	for _, c := range []struct{ g, u, want float64 }{
		{1, 0, 1 / (1 + math.Exp(-1.702))},
		{10, 10, 7 / (1 + math.Exp(-1.702*7)) * 8},
		{-2, -10, -2 / (1 + math.Exp(1.702*2)) * -6},
	} {
		ref.SwiGLUOAI(one, []float32{float32(c.g)}, []float32{float32(c.u)}, alpha, limit)
		if d := math.Abs(float64(one[0]) - c.want); d > 1e-6*math.Abs(c.want) {
			t.Errorf("Ref(gate %g, up %g) = %g, want %g", c.g, c.u, one[0], c.want)
		}
	}
	for _, threads := range []int{1, 2} {
		be := cpu.NewBackend(threads, nil)
		defer be.Close()
		for _, n := range []int{1, 7, 13, 256, 4096, 1 << 15} {
			t.Run(fmt.Sprintf("threads=%d/n=%d", threads, n), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(n), 9))
				gate, up := make([]float32, n), make([]float32, n)
				for i := range gate {
					gate[i] = float32(r.NormFloat64() * 6)
					up[i] = float32(r.NormFloat64() * 6)
				}
				special := []float32{-100, -60, -51.3, 7, 7.5, 1e30, -1e30, float32(math.Inf(-1)), float32(math.NaN())}
				for i, v := range special {
					if i < n {
						gate[i] = v
					}
				}
				want := make([]float32, n)
				got := make([]float32, n+3)
				for i := n; i < len(got); i++ {
					got[i] = 42
				}
				ref.SwiGLUOAI(want, gate, up, alpha, limit)
				be.SwiGLUOAI(got[:n], gate, up, alpha, limit)
				for i := n; i < len(got); i++ {
					if got[i] != 42 {
						t.Fatalf("wrote past the end (element %d = %g)", i, got[i])
					}
				}
				for i := range want {
					w, g := want[i], got[i]
					if w != w || g != g {
						if (w != w) != (g != g) {
							t.Fatalf("element %d (gate %g, up %g): %g, Ref %g", i, gate[i], up[i], g, w)
						}
						continue
					}
					if d := int64(math.Float32bits(g)) - int64(math.Float32bits(w)); d < -2 || d > 2 {
						t.Fatalf("element %d (gate %g, up %g): %g, Ref %g (%d ulp)", i, gate[i], up[i], g, w, d)
					}
				}
			})
		}
	}
}
