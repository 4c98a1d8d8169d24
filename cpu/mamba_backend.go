package cpu

// mamba_backend.go: the Backend's model.Mamba (nemotron_h's Mamba-2
// layers) split over the workers: the convolution by channels, the scan
// by heads (each head's state is its own), the grouped norm by rows. The
// convolution and the scan run the kernels (kern_ssm.go: SIMD on AVX2 and
// AVX-512, within the tolerances TestSSMKernels states of the Ref's; the
// Go path gives the Ref's bits); the norm is the Ref's loop. No sum is
// split across workers, so results do not depend on the worker count.

import (
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
)

var _ model.Mamba = (*Backend)(nil)

type mbKind uint8

const (
	mbConv mbKind = iota
	mbScan
	mbNorm
)

// mbTask is one Mamba operation split into units (channels, heads or rows)
// that the workers claim.
type mbTask struct {
	kind                mbKind
	k                   *Kernels
	out, x, st, w, bias []float32
	dt, a, d            []float32
	n, ch, taps         int
	nHead, hd, ng, ds   int
	groups              int
	eps                 float32
	units, size         int
	next                atomic.Int64
}

func (t *mbTask) run(int) {
	k := t.k
	for {
		c := int(t.next.Add(1) - 1)
		if c*t.size >= t.units {
			return
		}
		u0, u1 := c*t.size, min((c+1)*t.size, t.units)
		switch t.kind {
		case mbConv:
			k.SSMConv(t.out, t.x, t.st, t.w, t.bias, t.n, t.ch, t.taps, u0, u1)
		case mbScan:
			k.SSMScan(t.out, t.x, t.dt, t.a, t.d, t.st, t.n, t.nHead, t.hd, t.ng, t.ds, u0, u1)
		case mbNorm:
			groupRMSNormRows(t.out[u0*t.ch:u1*t.ch], t.x[u0*t.ch:u1*t.ch], t.w, u1-u0, t.ch, t.groups, t.eps)
		}
	}
}

// dispatchMamba runs t over units of about cost float operations each.
func (b *Backend) dispatchMamba(t *mbTask, units, cost int) {
	t.units = units
	workers := b.workers.count()
	t.next.Store(0)
	if workers == 1 || units < 2 || units*cost < parallelMin {
		t.size = units
		t.run(0)
		return
	}
	t.size = max(1, units/(4*workers))
	b.workers.run(t)
}

// SSMConv implements model.Mamba, split by channels.
func (b *Backend) SSMConv(out, x, state, w, bias []float32, n, ch, k int) {
	t := &b.mb
	t.kind, t.k, t.out, t.x, t.st, t.w, t.bias, t.n, t.ch, t.taps = mbConv, b.k, out, x, state, w, bias, n, ch, k
	b.dispatchMamba(t, ch, n*k*expCost)
}

// SSMScan implements model.Mamba, split by heads.
func (b *Backend) SSMScan(y, xbc, dt, a, d, state []float32, n, nHead, headDim, nGroup, dState int) {
	t := &b.mb
	t.kind, t.k, t.out, t.x, t.dt, t.a, t.d, t.st = mbScan, b.k, y, xbc, dt, a, d, state
	t.n, t.nHead, t.hd, t.ng, t.ds = n, nHead, headDim, nGroup, dState
	b.dispatchMamba(t, nHead, 4*n*headDim*dState)
}

// GroupRMSNorm implements model.Mamba, split by rows.
func (b *Backend) GroupRMSNorm(out, x []float32, w model.Vector, n, dim, groups int, eps float32) {
	t := &b.mb
	t.kind, t.out, t.x, t.w, t.ch, t.groups, t.eps = mbNorm, out, x, w, dim, groups, eps
	b.dispatchMamba(t, n, 3*dim)
}

// ReluSqr implements model.Mamba.
func (b *Backend) ReluSqr(x []float32) { reluSqr(x) }
