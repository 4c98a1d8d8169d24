package cpu_test

// Tests of the row-wise kernels (kern_ew.go) on every ISA path: softmax
// against the Go loop. SwiGLU's and softmax's exp, RMSNorm and RoPE are
// held to their Go loops bit for bit in backend_math_test.go.

import (
	"math"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
)

// TestSoftmax: every path's softmax is the Go loop's (in-order float64
// sum) to a relative 1e-6 per weight (the SIMD paths sum in 16 lanes),
// for odd and aligned lengths, with scores spanning the exp's range.
func TestSoftmax(t *testing.T) {
	goK := cpu.KernelsFor(cpu.ISAScalarGo)
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, n := range []int{1, 7, 8, 9, 63, 300, 8192} {
			x := randomF32(n, uint64(n))
			for i := range x {
				x[i] *= 40 // some weights underflow to 0
			}
			want, got := slices.Clone(x), slices.Clone(x)
			goK.Softmax(want, 0.7)
			k.Softmax(got, 0.7)
			var sum float64
			for i := range got {
				sum += float64(got[i])
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*math.Abs(float64(want[i]))+1e-30 {
					t.Fatalf("%s n=%d: [%d] = %v, want %v", isa, n, i, got[i], want[i])
				}
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Errorf("%s n=%d: weights sum to %v", isa, n, sum)
			}
		}
	}
}
