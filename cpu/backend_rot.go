package cpu

import "sync/atomic"

// rotPiece is the pieces of x a worker claims at a time in Hadamard.
const rotPiece = 64

// rotMinValues is the values below which the caller rotates them alone
// (a decode step's few rows cost less than a dispatch).
const rotMinValues = 1 << 14

// rotTask is one Hadamard call.
type rotTask struct {
	k      *Kernels
	x      []float32
	n      int // piece size
	pieces int
	next   atomic.Int64
}

// Hadamard implements model.Rotator: each piece of n values of x (n a
// power of two, len(x) a multiple of n) is multiplied by the orthonormal
// Walsh-Hadamard matrix (quant.Hadamard, through Kernels.Hadamard), pieces
// split over the workers; the result does not depend on the split.
func (b *Backend) Hadamard(x []float32, n int) {
	r := &b.rot
	r.k, r.x, r.n, r.pieces = b.k, x, n, len(x)/n
	r.next.Store(0)
	if b.workers.count() == 1 || len(x) < rotMinValues {
		r.run(0)
		return
	}
	b.workers.run(r)
}

func (r *rotTask) run(int) {
	for {
		p0 := int(r.next.Add(rotPiece)) - rotPiece
		if p0 >= r.pieces {
			return
		}
		r.k.Hadamard(r.x[p0*r.n:min(p0+rotPiece, r.pieces)*r.n], r.n)
	}
}
