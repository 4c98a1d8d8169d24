package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

// hadamardInput is count pieces of n values of mixed magnitudes (so that
// the butterflies round), with an infinity and a NaN in one piece when
// special is set.
func hadamardInput(rng *rand.Rand, n, count int, special bool) []float32 {
	x := make([]float32, n*count)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
	}
	if special && n > 2 {
		x[rng.IntN(n)] = float32(math.Inf(-1))
		x[rng.IntN(n)] = float32(math.NaN())
	}
	return x
}

// sameBits fails t unless got and want hold the same bits.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d is %g (%#x), quant's %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i],
				math.Float32bits(want[i]))
		}
	}
}

// TestHadamardBits: Kernels.Hadamard gives quant.Hadamard's bits on every
// path, for every power of two up to 1024, one to three pieces, ordinary
// values and pieces holding an infinity and a NaN; it refuses a piece size
// that is not a power of two.
func TestHadamardBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for n := 1; n <= 1024; n <<= 1 {
			for count := 1; count <= 3; count++ {
				for _, special := range []bool{false, true} {
					x := hadamardInput(rng, n, count, special)
					want := append([]float32(nil), x...)
					for i := 0; i < len(want); i += n {
						quant.Hadamard(want[i : i+n])
					}
					k.Hadamard(x, n)
					sameBits(t, fmt.Sprintf("isa=%s n=%d count=%d special=%v", isa, n, count, special), x, want)
				}
			}
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("isa=%s: Hadamard took pieces of 48 values", isa)
				}
			}()
			k.Hadamard(make([]float32, 96), 48)
		}()
	}
}

// TestTurboRotateBits: Kernels.TurboRotate and TurboUnrotate give
// quant.Turbo's Rotate and Unrotate bits on every path, for widths that
// are a power of two and widths that pad.
func TestTurboRotateBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, dim := range []int{8, 64, 80, 128} {
			for _, bits := range []int{3, 4} {
				tq, err := quant.NewTurbo(dim, bits, uint64(dim*bits))
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("isa=%s dim=%d bits=%d", isa, dim, bits)
				x := hadamardInput(rng, dim, 1, false)
				got, want := make([]float32, tq.Padded()), make([]float32, tq.Padded())
				for i := range got { // stale values the padding must overwrite
					got[i] = 7
				}
				k.TurboRotate(tq, got, x)
				tq.Rotate(want, x)
				sameBits(t, what+" rotate", got, want)
				y := hadamardInput(rng, tq.Padded(), 1, false)
				y2 := append([]float32(nil), y...)
				gotU, wantU := make([]float32, dim), make([]float32, dim)
				k.TurboUnrotate(tq, gotU, y)
				tq.Unrotate(wantU, y2)
				sameBits(t, what+" unrotate", gotU, wantU)
				sameBits(t, what+" unrotate's scratch", y, y2)
			}
		}
	}
}

// BenchmarkHadamard: a decode step's rotations of one layer of the llama-1b
// preset with a q8_0 or q4_0 cache (queries, keys, values and outputs: 80
// heads of 64), per path.
func BenchmarkHadamard(b *testing.B) {
	const n, heads = 64, 80
	x := randomF32(n*heads, 1)
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		b.Run(fmt.Sprintf("isa=%s/n=%d/heads=%d", isa, n, heads), func(b *testing.B) {
			for b.Loop() {
				k.Hadamard(x, n) // orthonormal: the values keep their size
			}
		})
	}
}
