package cpu

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// Hadamard applies quant.Hadamard (the orthonormal Walsh-Hadamard
// transform) to each piece of n values of x: n a power of two, len(x) a
// multiple of n. The SIMD paths (n ≥ 8) run the same butterflies in the
// same order and give the same bits.
func (k *Kernels) Hadamard(x []float32, n int) {
	if n <= 0 || n&(n-1) != 0 || len(x)%n != 0 {
		panic(fmt.Sprintf("cpu: Hadamard: pieces of %d values in %d", n, len(x)))
	}
	if len(x) == 0 || k.isa != ISAScalarGo && n >= 8 && hadamardC(x, n) {
		return
	}
	for i := 0; i < len(x); i += n {
		quant.Hadamard(x[i : i+n])
	}
}

// TurboRotate is tq.Rotate(dst, x) (dst: tq.Padded() values), through
// Hadamard: the same bits.
func (k *Kernels) TurboRotate(tq *quant.Turbo, dst, x []float32) {
	tq.Sign(dst, x)
	k.Hadamard(dst[:tq.Padded()], tq.Padded())
}

// TurboUnrotate is tq.Unrotate(dst, y) (y, Padded values, is modified),
// through Hadamard: the same bits.
func (k *Kernels) TurboUnrotate(tq *quant.Turbo, dst, y []float32) {
	k.Hadamard(y[:tq.Padded()], tq.Padded())
	tq.Unsign(dst, y)
}
