package cpu

// backend_deltanet.go: the Backend's model.DeltaNet (qwen35's recurrent
// layers) split over the workers: the convolution by channels, the delta
// rule by value heads (each head's state is its own), the norms by rows.
// With ISAScalarGo kernels each unit runs the Ref's loops (deltanet.go)
// and results equal the Ref's exactly (no sum is split); the SIMD paths
// run the kernels of kern_dn.go and SwiGLU for the gated norm's gate,
// within the bounds kern_dn.go states.

import (
	"fmt"
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
	kind              dnKind
	k                 *Kernels
	out, x, y, z, st  []float32
	w                 []float32
	n, ch, kw, hk, hv int
	d                 int
	eps               float32
	units, size       int
	next              atomic.Int64
	delta             [][]float32 // per worker: d floats of scratch
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
			t.k.convSiLU(t.out, t.x, t.st, t.w, t.n, t.ch, t.kw, u0, u1)
		case dnDelta:
			for h := u0; h < u1; h++ {
				t.k.deltaHead(t.out, t.x, t.y, t.z, t.st[h*t.d*t.d:(h+1)*t.d*t.d], t.delta[worker][:t.d], t.n, t.hk, t.hv, t.d, h)
			}
		case dnL2:
			l2NormRows(t.x[u0*t.d:u1*t.d], u1-u0, t.d, t.eps)
		case dnGatedNorm:
			out, x, z := t.out[u0*t.d:u1*t.d], t.x[u0*t.d:u1*t.d], t.z[u0*t.d:u1*t.d]
			if t.k.isa == ISAScalarGo {
				gatedRMSNormRows(out, x, z, t.w, u1-u0, t.d, t.eps)
				continue
			}
			// x·scale·w into out, then out·silu(z) as SwiGLU(z, out):
			// the Go loop's products in another order of a commutative
			// multiply, so the same bits but for SwiGLU's exp (kern_ew.go)
			rmsScaleRows(out, x, t.w, u1-u0, t.d, t.eps)
			t.k.SwiGLU(out, z, out)
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
	if n < 0 || ch < 0 || k < 1 || len(out) < n*ch || len(x) < n*ch || len(state) < ch*(k-1) || len(w) < ch*k {
		panic(fmt.Sprintf("cpu: ConvSiLU: %d rows of %d channels, %d taps: %d inputs, %d outputs, %d state, %d weights",
			n, ch, k, len(x), len(out), len(state), len(w)))
	}
	t := &b.dn
	t.kind, t.k, t.out, t.x, t.st, t.w, t.n, t.ch, t.kw = dnConv, b.k, out, x, state, w, n, ch, k
	b.dispatch(t, ch, n*k*expCost)
}

// L2Norm implements model.DeltaNet, split by rows.
func (b *Backend) L2Norm(x []float32, n, dim int, eps float32) {
	t := &b.dn
	t.kind, t.k, t.x, t.d, t.eps = dnL2, b.k, x, dim, eps
	b.dispatch(t, n, dim)
}

// GatedDeltaNet implements model.DeltaNet, split by value heads.
func (b *Backend) GatedDeltaNet(out, qkv, g, beta, state []float32, n, hk, hv, d int) {
	if n < 0 || hk < 1 || hv < 1 || d < 1 || len(qkv) < n*(2*hk+hv)*d || len(out) < n*hv*d ||
		len(g) < n*hv || len(beta) < n*hv || len(state) < hv*d*d {
		panic(fmt.Sprintf("cpu: GatedDeltaNet: %d rows, %d key heads, %d value heads of %d: %d qkv, %d outputs, %d g, %d beta, %d state",
			n, hk, hv, d, len(qkv), len(out), len(g), len(beta), len(state)))
	}
	t := &b.dn
	if len(t.delta) < b.workers.count() {
		t.delta = make([][]float32, b.workers.count())
	}
	for i := range t.delta {
		t.delta[i] = grow(t.delta[i], d)
	}
	t.kind, t.k, t.out, t.x, t.y, t.z, t.st, t.n, t.hk, t.hv, t.d = dnDelta, b.k, out, qkv, g, beta, state, n, hk, hv, d
	b.dispatch(t, hv, 4*n*d*d)
}

// GatedRMSNorm implements model.DeltaNet, split by rows.
func (b *Backend) GatedRMSNorm(out, x, z []float32, w model.Vector, n, dim int, eps float32) {
	t := &b.dn
	t.kind, t.k, t.out, t.x, t.z, t.w, t.d, t.eps = dnGatedNorm, b.k, out, x, z, w, dim, eps
	b.dispatch(t, n, dim*expCost)
}

// SigmoidMul implements model.DeltaNet.
func (b *Backend) SigmoidMul(x, g []float32) {
	for i, gi := range g {
		x[i] *= 1 / (1 + expf32(-gi))
	}
}
