package cpu

// backend_deltanet.go: the Backend's model.DeltaNet (qwen35's recurrent
// layers): the Ref's arithmetic (deltanet.go) split over the workers, the
// convolution by channels, the delta rule by value heads (each head's
// state is its own), the norms by rows. Results equal the Ref's exactly:
// no sum is split.

import (
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
)

var _ model.DeltaNet = (*Backend)(nil)

type dnKind uint8

const (
	dnConv dnKind = iota
	dnDelta
	dnL2
	dnGatedNorm
)

// dnTask is one DeltaNet operation split into units (channels, heads or
// rows) that the workers claim.
type dnTask struct {
	kind             dnKind
	out, x, y, z, st []float32
	w                []float32
	n, ch, k, hk, hv int
	d                int
	eps              float32
	units, size      int
	next             atomic.Int64
	delta            [][]float32 // per worker: d floats of scratch
}

func (t *dnTask) run(worker int) {
	for {
		c := int(t.next.Add(1) - 1)
		if c*t.size >= t.units {
			return
		}
		u0, u1 := c*t.size, min((c+1)*t.size, t.units)
		switch t.kind {
		case dnConv:
			convSiLURows(t.out, t.x, t.st, t.w, t.n, t.ch, t.k, u0, u1)
		case dnDelta:
			for h := u0; h < u1; h++ {
				deltaNetHead(t.out, t.x, t.y, t.z, t.st[h*t.d*t.d:(h+1)*t.d*t.d], t.delta[worker][:t.d], t.n, t.hk, t.hv, t.d, h)
			}
		case dnL2:
			l2NormRows(t.x[u0*t.d:u1*t.d], u1-u0, t.d, t.eps)
		case dnGatedNorm:
			gatedRMSNormRows(t.out[u0*t.d:u1*t.d], t.x[u0*t.d:u1*t.d], t.z[u0*t.d:u1*t.d], t.w, u1-u0, t.d, t.eps)
		}
	}
}

// dispatch runs t over units of about cost float operations each.
func (b *Backend) dispatch(t *dnTask, units, cost int) {
	t.units = units
	workers := b.workers.count()
	if workers == 1 || units < 2 || units*cost < parallelMin {
		t.size = units
		t.next.Store(0)
		t.run(0)
		return
	}
	t.units, t.size = units, max(1, units/(4*workers))
	t.next.Store(0)
	b.workers.run(t)
}

// ConvSiLU implements model.DeltaNet, split by channels.
func (b *Backend) ConvSiLU(out, x, state, w []float32, n, ch, k int) {
	t := &b.dn
	t.kind, t.out, t.x, t.st, t.w, t.n, t.ch, t.k = dnConv, out, x, state, w, n, ch, k
	b.dispatch(t, ch, n*k*expCost)
}

// L2Norm implements model.DeltaNet, split by rows.
func (b *Backend) L2Norm(x []float32, n, dim int, eps float32) {
	t := &b.dn
	t.kind, t.x, t.d, t.eps = dnL2, x, dim, eps
	b.dispatch(t, n, dim)
}

// GatedDeltaNet implements model.DeltaNet, split by value heads.
func (b *Backend) GatedDeltaNet(out, qkv, g, beta, state []float32, n, hk, hv, d int) {
	t := &b.dn
	if len(t.delta) < b.workers.count() {
		t.delta = make([][]float32, b.workers.count())
	}
	for i := range t.delta {
		t.delta[i] = grow(t.delta[i], d)
	}
	t.kind, t.out, t.x, t.y, t.z, t.st, t.n, t.hk, t.hv, t.d = dnDelta, out, qkv, g, beta, state, n, hk, hv, d
	b.dispatch(t, hv, 4*n*d*d)
}

// GatedRMSNorm implements model.DeltaNet, split by rows.
func (b *Backend) GatedRMSNorm(out, x, z []float32, w model.Vector, n, dim int, eps float32) {
	t := &b.dn
	t.kind, t.out, t.x, t.z, t.w, t.d, t.eps = dnGatedNorm, out, x, z, w, dim, eps
	b.dispatch(t, n, dim*expCost)
}

// SigmoidMul implements model.DeltaNet.
func (b *Backend) SigmoidMul(x, g []float32) {
	for i, gi := range g {
		x[i] *= 1 / (1 + expf32(-gi))
	}
}
