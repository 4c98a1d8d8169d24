package cpu

// backend_attn.go: the Backend's attention, in two forms.
//
//   - A lone row of a sequence (decode) is one unit per KV head: the group
//     of query heads sharing the head (grouped-query attention) is scored
//     against every cached position ≤ the row's own by one strided matrix
//     product over the cache rows (a head's K rows are rows of stride KDim),
//     softmax per query head, then the weighted sum of V rows, in Ref's
//     order.
//   - Consecutive rows of one sequence (prefill) are cut into blocks of up
//     to attnBlock rows; a unit is one block and one KV head, and walks the
//     cached positions in tiles of attnTile (flash-attention style): the
//     block's query rows times the tile's K rows (a matrix product), an
//     online softmax (running max and sum per row, earlier partial sums
//     rescaled when the max grows), and the probabilities times the tile's
//     V rows, transposed into scratch so that this too is a matrix product.
//     Scratch per worker is bounded by the block and tile sizes, whatever
//     the context length.
//
// Workers claim units from a counter, most expensive (latest positions)
// first. Both forms compute Ref's result up to float rounding order.

import (
	"math"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

const (
	attnBlock = 32  // batch rows per prefill unit
	attnTile  = 256 // cached positions per tile
	// attnMinWork is the multiply-adds below which attention runs on the
	// caller alone.
	attnMinWork = 1 << 15
)

// attnUnit is rows [t0, t1) of the batch (one sequence) and KV head kh;
// vt indexes the sequence's transposed V (blocks of several rows).
type attnUnit struct {
	t0, t1, kh, vt int32
}

// vtRegion is the V cache of one sequence, positions [0, np), transposed
// once per call for all its blocks: element (c, j) (c < VDim) at
// off + c*stride + j.
type vtRegion struct {
	off, stride int
}

// attnScratch is one worker's scratch.
type attnScratch struct {
	scores []float32 // lone rows: G × nCtx; blocks: rows × attnTile
	q      []float32 // rows × dk, the block's query rows packed
	acc    []float32 // rows × dv
	tmp    []float32 // rows × dv
	m      []float32 // running max per row
	l      []float64 // running sum per row
}

// attnTask is one Attention call.
type attnTask struct {
	k        *Kernels
	out, q   []float32
	kv       *model.KVCache
	layer    int
	seq, pos []int32
	h        *model.Hyper
	scale    float32
	group    int
	units    []attnUnit
	vt       []float32 // transposed V of the sequences with blocks
	regions  []vtRegion
	next     atomic.Int64
	scratch  []attnScratch
}

func (a *attnTask) init(workers int) { a.scratch = make([]attnScratch, workers) }

// grow returns s with length n, reallocating only when it is too short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Attention implements model.Ops.
func (b *Backend) Attention(out, q []float32, kv *model.KVCache, layer int, seq, pos []int32, h *model.Hyper, scale float32) {
	a := &b.attn
	a.k, a.out, a.q, a.kv, a.layer, a.seq, a.pos, a.h, a.scale = b.k, out, q, kv, layer, seq, pos, h, scale
	a.group = h.NHead / h.NHeadKV
	G := a.group
	dk, dv := h.HeadDimK, h.HeadDimV
	// units: runs of rows of one sequence, cut into blocks; a run of
	// several rows gets its V transposed once for all its blocks
	a.units, a.regions = a.units[:0], a.regions[:0]
	work, vtLen := 0, 0
	for r0 := 0; r0 < len(seq); {
		r1, np := r0+1, int(pos[r0])+1
		for r1 < len(seq) && seq[r1] == seq[r0] {
			np = max(np, int(pos[r1])+1)
			r1++
		}
		vt := int32(-1)
		if r1-r0 > 1 {
			stride := (np+15)&^15 + 16 // not a power of two: rows would share cache sets
			vt = int32(len(a.regions))
			a.regions = append(a.regions, vtRegion{off: vtLen, stride: stride})
			vtLen += kv.VDim * stride
		}
		for t0 := r0; t0 < r1; t0 += attnBlock {
			t1 := min(t0+attnBlock, r1)
			for kh := range h.NHeadKV {
				a.units = append(a.units, attnUnit{int32(t0), int32(t1), int32(kh), vt})
			}
		}
		for t := r0; t < r1; t++ {
			work += int(pos[t]+1) * h.NHead * (dk + dv)
		}
		r0 = r1
	}
	if len(a.regions) > 0 {
		a.vt = grow(a.vt, vtLen)
		a.transposeV()
	}
	// scratch for the shapes of this call (grows, then is reused)
	rows := min(attnBlock, len(seq)) * G
	for w := range a.scratch {
		s := &a.scratch[w]
		s.scores = grow(s.scores, max(G*kv.NCtx, rows*attnTile))
		if rows > G {
			s.q = grow(s.q, rows*dk)
			s.acc = grow(s.acc, rows*dv)
			s.tmp = grow(s.tmp, rows*dv)
			s.m = grow(s.m, rows)
			s.l = grow(s.l, rows)
		}
	}
	a.next.Store(0)
	if len(a.units) == 1 || b.pool.workers() == 1 || work < attnMinWork {
		a.run(0)
		return
	}
	b.pool.run(a)
}

func (a *attnTask) run(worker int) {
	s := &a.scratch[worker]
	for {
		i := int(a.next.Add(1) - 1)
		if i >= len(a.units) {
			return
		}
		u := a.units[len(a.units)-1-i] // latest (costliest) blocks first
		if u.t1-u.t0 == 1 {
			a.row(s, int(u.t0), int(u.kh))
		} else {
			a.block(s, int(u.t0), int(u.t1), int(u.kh), &a.regions[u.vt])
		}
	}
}

// PagedKV implements model.PagedKV: Attention reads the cache through
// KVCache.Run, KRows and VRows, so it works on a paged cache.
func (b *Backend) PagedKV() bool { return true }

// span returns how many positions from j on (at most n) sit in
// consecutive cache rows of sequence s.
func (a *attnTask) span(s, j, n int) int { return min(n, a.kv.Run(s, j)) }

// kRows returns the K rows of positions [j, j+n) of sequence s at head kh,
// as bytes: row i is at i*4*KDim. n must not exceed span.
func (a *attnTask) kRows(s, kh, j, n int) []byte {
	return f32bytes(a.kv.KRows(a.layer, s, j, n)[kh*a.h.HeadDimK:])
}

// vRows is kRows for V, as float32s: row i is at i*VDim.
func (a *attnTask) vRows(s, kh, j, n int) []float32 {
	return a.kv.VRows(a.layer, s, j, n)[kh*a.h.HeadDimV:]
}

// row computes the group of query heads of KV head kh for the lone batch
// row t.
func (a *attnTask) row(sc *attnScratch, t, kh int) {
	h, kv := a.h, a.kv
	dk, dv, G := h.HeadDimK, h.HeadDimV, a.group
	s, np := int(a.seq[t]), int(a.pos[t])+1
	sco := sc.scores[:G*np]
	// scores: sco[g*np + j] = K_j · q_g, run by run of consecutive rows
	qBase := (t*h.NHead + kh*G) * dk
	qb := f32bytes(a.q[qBase : qBase+G*dk])
	for j := 0; j < np; {
		n := a.span(s, j, np-j)
		a.k.GemmRows(quant.F32, a.kRows(s, kh, j, n), 4*kv.KDim, dk, 0, n, qb, G, sco[j:], np)
		j += n
	}
	// softmax per query head (float64 sum, as Ref)
	for g := range G {
		row := sco[g*np : (g+1)*np]
		mx := float32(math.Inf(-1))
		for j, v := range row {
			v *= a.scale
			row[j] = v
			mx = max(mx, v)
		}
		inv := float32(1 / a.k.ExpSub(row, mx))
		for j := range row {
			row[j] *= inv
		}
	}
	// out_g = Σ_j w_gj · V_j
	oBase := (t*h.NHead + kh*G) * dv
	out := a.out[oBase : oBase+G*dv]
	clear(out)
	for j0 := 0; j0 < np; {
		n := a.span(s, j0, np-j0)
		// each V row once for the whole group (positions in order, as Ref)
		a.k.AddWeighted(out, G, dv, sco[j0:], np, a.vRows(s, kh, j0, n), kv.VDim, n)
		j0 += n
	}
}

// block computes KV head kh's query heads for batch rows [t0, t1) of one
// sequence, tile by tile over the cached positions.
func (a *attnTask) block(sc *attnScratch, t0, t1, kh int, vt *vtRegion) {
	h, kv := a.h, a.kv
	dk, dv, G := h.HeadDimK, h.HeadDimV, a.group
	s := int(a.seq[t0])
	R := (t1 - t0) * G // query rows: (row t, head g) at (t-t0)*G + g
	np := 0
	for t := t0; t < t1; t++ {
		np = max(np, int(a.pos[t])+1)
	}
	// pack the block's query rows, times the scale (so the scores come out
	// scaled)
	qb := sc.q[:R*dk]
	for t := t0; t < t1; t++ {
		src := a.q[(t*h.NHead+kh*G)*dk:][:G*dk]
		dst := qb[(t-t0)*G*dk:][:G*dk]
		for i, v := range src {
			dst[i] = v * a.scale
		}
	}
	acc, tmp, m, l := sc.acc[:R*dv], sc.tmp[:R*dv], sc.m[:R], sc.l[:R]
	clear(acc)
	clear(l)
	for i := range m {
		m[i] = float32(math.Inf(-1))
	}
	for j0, j1 := 0, 0; j0 < np; j0 = j1 {
		// a tile: up to attnTile positions in consecutive cache rows
		L := a.span(s, j0, min(attnTile, np-j0))
		j1 = j0 + L
		S := sc.scores[:R*L]
		// S[r*L + j] = K_{j0+j} · q_r
		a.k.GemmRows(quant.F32, a.kRows(s, kh, j0, L), 4*kv.KDim, dk, 0, L, f32bytes(qb), R, S, L)
		// online softmax: rescale what came before when the max grows
		for r := range R {
			p := int(a.pos[t0+r/G])
			row := S[r*L : (r+1)*L]
			valid := min(j1, p+1) - j0
			if valid <= 0 {
				clear(row)
				continue
			}
			mx := m[r]
			for _, v := range row[:valid] {
				if v > mx {
					mx = v
				}
			}
			if mx > m[r] {
				if c := expf(m[r] - mx); c != 1 {
					l[r] *= float64(c)
					scaleVec(acc[r*dv:(r+1)*dv], c)
				}
				m[r] = mx
			}
			l[r] += a.k.ExpSub(row[:valid], mx)
			clear(row[valid:])
		}
		// acc += S·V_tile: the tile's columns of head kh's rows of the
		// transposed V
		w := a.vt[vt.off+kh*dv*vt.stride+j0:]
		a.k.GemmRows(quant.F32, f32bytes(w), 4*vt.stride, L, 0, dv, f32bytes(S), R, tmp, dv)
		add(acc, tmp)
	}
	// out = acc / l
	for t := t0; t < t1; t++ {
		for g := range G {
			r := (t-t0)*G + g
			inv := float32(1 / l[r])
			o := a.out[(t*h.NHead+kh*G+g)*dv : (t*h.NHead+kh*G+g+1)*dv]
			for d, v := range acc[r*dv : (r+1)*dv] {
				o[d] = v * inv
			}
		}
	}
}

// transposeV fills the regions: for the first row of each region's run,
// the V rows of its sequence at positions [0, np) (np from the stride's
// run), transposed, 16 positions at a time so that reads and writes both
// stay within a few cache lines.
func (a *attnTask) transposeV() {
	kv := a.kv
	ri := 0
	for r0 := 0; r0 < len(a.seq); {
		r1, np := r0+1, int(a.pos[r0])+1
		for r1 < len(a.seq) && a.seq[r1] == a.seq[r0] {
			np = max(np, int(a.pos[r1])+1)
			r1++
		}
		if r1-r0 > 1 {
			reg := &a.regions[ri]
			ri++
			s := int(a.seq[r0])
			dst := a.vt[reg.off : reg.off+kv.VDim*reg.stride]
			for j0 := 0; j0 < np; {
				n := a.span(s, j0, np-j0)
				src := a.kv.VRows(a.layer, s, j0, n)
				for jb := 0; jb < n; jb += 16 {
					je := min(jb+16, n)
					for c := range kv.VDim {
						d := dst[c*reg.stride+j0+jb : c*reg.stride+j0+je]
						for j := range d {
							d[j] = src[(jb+j)*kv.VDim+c]
						}
					}
				}
				j0 += n
			}
		}
		r0 = r1
	}
}

// scaleVec sets x *= c.
func scaleVec(x []float32, c float32) {
	for i := range x {
		x[i] *= c
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
