package cpu

// backend_attn.go: the Backend's attention. The work unit is one token and
// one KV head with the group of query heads that share it (grouped-query
// attention), so each cached K and V row is read once per group; workers
// claim units from a counter. A unit computes the group's scores against
// every cached position ≤ the token's own with one strided matrix product
// over the cache rows (the K rows of one head are rows of stride KDim), a
// softmax per query head, and the weighted sum of the V rows, in the order
// Ref sums them.

import (
	"math"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// attnTask is one Attention call.
type attnTask struct {
	k          *Kernels
	out, q     []float32
	kv         *model.KVCache
	layer      int
	seq, pos   []int32
	h          *model.Hyper
	scale      float32
	group      int
	units      int
	next       atomic.Int64
	scores     [][]float32 // per worker: group × stride
	stride     int
	nCtx, maxG int
}

func (a *attnTask) init(workers int) { a.scores = make([][]float32, workers) }

// Attention implements model.Ops.
func (b *Backend) Attention(out, q []float32, kv *model.KVCache, layer int, seq, pos []int32, h *model.Hyper, scale float32) {
	a := &b.attn
	group := h.NHead / h.NHeadKV
	if kv.NCtx > a.nCtx || group > a.maxG {
		// Scratch for the longest row the cache can hold, allocated once.
		a.nCtx, a.maxG = max(kv.NCtx, a.nCtx), max(group, a.maxG)
		a.stride = (a.nCtx + 15) &^ 15
		for w := range a.scores {
			a.scores[w] = make([]float32, a.maxG*a.stride)
		}
	}
	a.k, a.out, a.q, a.kv, a.layer, a.seq, a.pos, a.h, a.scale, a.group = b.k, out, q, kv, layer, seq, pos, h, scale, group
	a.units = len(seq) * h.NHeadKV
	a.next.Store(0)
	if a.units == 1 || b.pool.workers() == 1 {
		a.run(0)
		return
	}
	b.pool.run(a)
}

func (a *attnTask) run(worker int) {
	for {
		u := int(a.next.Add(1) - 1)
		if u >= a.units {
			return
		}
		a.unit(worker, u/a.h.NHeadKV, u%a.h.NHeadKV)
	}
}

// unit computes the group of query heads of KV head kh for batch row t.
func (a *attnTask) unit(worker, t, kh int) {
	h, kv := a.h, a.kv
	dk, dv, G := h.HeadDimK, h.HeadDimV, a.group
	s, p := int(a.seq[t]), int(a.pos[t])
	np := p + 1
	sc := a.scores[worker][:G*a.stride]
	// scores: sc[g*stride + j] = K_j · q_g (rows of the cache, strided)
	kBase := (s*kv.NCtx)*kv.KDim + kh*dk
	kb := f32bytes(kv.K[a.layer][kBase:])
	qBase := (t*h.NHead + kh*G) * dk
	a.k.GemmRows(quant.F32, kb, 4*kv.KDim, dk, 0, np, f32bytes(a.q[qBase:qBase+G*dk]), G, sc, a.stride)
	// softmax per query head (float64 sum, as Ref)
	for g := range G {
		row := sc[g*a.stride : g*a.stride+np]
		mx := float32(math.Inf(-1))
		for j, v := range row {
			v *= a.scale
			row[j] = v
			mx = max(mx, v)
		}
		var sum float64
		for j, v := range row {
			e := expf(v - mx)
			row[j] = e
			sum += float64(e)
		}
		inv := float32(1 / sum)
		for j := range row {
			row[j] *= inv
		}
	}
	// out_g = Σ_j w_gj · V_j
	vBase := (s*kv.NCtx)*kv.VDim + kh*dv
	vc := kv.V[a.layer]
	oBase := (t*h.NHead + kh*G) * dv
	for g := range G {
		o := a.out[oBase+g*dv : oBase+(g+1)*dv]
		clear(o)
		row := sc[g*a.stride : g*a.stride+np]
		for j, w := range row {
			vr := vc[vBase+j*kv.VDim : vBase+j*kv.VDim+dv]
			axpy(o, w, vr)
		}
	}
}

// axpy sets y += a·x.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}
