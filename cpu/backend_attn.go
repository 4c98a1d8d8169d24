package cpu

// backend_attn.go: the Backend's attention, in two forms.
//
//   - A lone row of a sequence (decode), or each row of a run shorter than
//     attnMinRun, is one unit per KV head: the group
//     of query heads sharing the head (grouped-query attention) is scored
//     against every cached position ≤ the row's own by one
//     Kernels.AttnScoresTiles call per run of rows (a head's K rows are
//     stored in transposed tiles of 16 rows, back to back:
//     KVCache.KHeadTiles), which meets a tile's rows in the lanes of one
//     vector; softmax per query head; then the weighted sum of V rows
//     (Kernels.AttnSum, rows back to back: KVCache.VHeadRows, widened a
//     tile at a time in L1), in Ref's order; or, for V rows of q4_0, q8_0
//     and 3- and 4-bit TurboQuant, in integers (Kernels.AttnSumQ).
//   - A run of at least attnMinRun consecutive rows of one sequence
//     (prefill) has the sequence's K and V packed once per call (per KV
//     head: K rows untransposed and back to back, V in column blocks, so
//     that tiles stream whatever the cache's row stride) and is cut into
//     blocks of about attnRows query rows (batch rows × the query heads of
//     a KV head: the group shares every K and V load); a unit is one block
//     and one KV head and walks the cached positions in tiles of up to
//     attnTile (flash attention: Kernels.FlashTile): S = Q·Kᵀ, an online
//     softmax (running max and sum per query row, the accumulated output
//     rescaled when the max grows), then acc += P·V, all on tiles that
//     stay in L1/L2. Tiles beyond the block's last position are never
//     visited; only tiles crossing the diagonal are masked. Scratch per
//     worker is bounded by the block and tile sizes, whatever the context
//     length.
//
// Workers claim units from a counter, most expensive (latest positions)
// first. Both forms compute Ref's result up to float rounding: the row form
// in Ref's order, the block form with float32 sums per tile (FlashTile).

import (
	"math"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

const (
	// attnRows is the query rows (batch rows × query heads of a KV head)
	// of a prefill unit: every K and V row a tile loads serves all of
	// them.
	attnRows = 128
	// attnTile is the cached positions per tile: its K and V rows (packed)
	// and scores stay in L1/L2.
	attnTile = 96
	// attnMinWork is the multiply-adds below which attention runs on the
	// caller alone.
	attnMinWork = 1 << 15
	// attnMinRun is the fewest rows of a sequence that take the block
	// form: packing its K and V costs as much as a pass of the row form
	// over them, so shorter runs (a few draft tokens to verify, say) go
	// row by row.
	attnMinRun = 8
)

// attnUnit is rows [t0, t1) of the batch (one sequence) and KV head kh;
// reg indexes the sequence's packed K and V (blocks of several rows).
type attnUnit struct {
	t0, t1, kh, reg int32
}

// kvRegion is the K and V of one sequence, positions [0, n), packed once
// per call for all its blocks in FlashTile's layouts (by all workers, in
// pieces of packPiece positions of one KV head): head kh's K rows at
// k + kh*n*dk (rows of dk), its V at v + kh*n*dv (FlashPackV's layout).
// With --kv-recent, the f16 copies of positions [xe, n) are packed too
// (halves that keep them), at xk + kh*(n-xe)*HeadDimK and xv +
// kh*(n-xe)*HeadDimV, position j as row j-xe.
type kvRegion struct {
	k, v, n int
	xk, xv  int
	xe      int
	s       int32 // the sequence
}

// attnScratch is one worker's scratch.
type attnScratch struct {
	scores []float32 // lone rows: G × nCtx; blocks: FlashTile's scratch
	q      []float32 // a block's query rows, packed for FlashTile
	pos    []int32   // a block's position per query row
	acc    []float32 // rows × dv
	m      []float32 // running max per row
	l      []float64 // running sum per row
	qrot   []float32 // the group's queries rotated (TurboQuant K)
	dec    []float32 // a chunk of cached rows converted to float32
	krows  []byte    // blocks: a chunk of K rows untransposed (packing)
	vacc   []float32 // lone rows: the rotated-domain V sums (TurboQuant V)
	qint   QInt      // lone rows: the group's queries rounded for integer K scores
	wint   WInt      // lone rows: the group's weights rounded for integer V sums
	// blocks reading --kv-recent's f16 rows of a TurboQuant half: the
	// queries unrotated, the sums of the f16 V rows, the maxima after the
	// quantized rows
	q2, acc2, m2 []float32
}

// kvChunk is the cached rows converted to float32 at a time (lone rows
// and packing): they stay in L1/L2 between the conversion and their use.
const kvChunk = 64

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
	block    int // batch rows per prefill unit
	units    []attnUnit
	regions  []kvRegion
	packed   []float32     // the regions' K and V
	packs    []packUnit    // the pieces to pack, when packing
	packing  bool          // run packs instead of computing units
	dkp, dvp int           // K and V head widths in the packed (rotated for TurboQuant) domain
	lt       model.KVLayer // the layer's KV types and bytes per head
	recent   bool          // the layer reads --kv-recent's f16 rows (lt.RecentK or lt.RecentV)
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
	a.lt = kv.Layer(layer)
	a.dkp, a.dvp = h.HeadDimK, h.HeadDimV
	if tq := kv.TurboK(layer, 0); tq != nil {
		a.dkp = tq.Padded()
	}
	if tq := kv.TurboV(layer, 0); tq != nil {
		a.dvp = tq.Padded()
	}
	dk, dv := a.dkp, a.dvp
	a.recent = a.lt.RecentK || a.lt.RecentV
	a.block = max(1, attnRows/G)
	// units: runs of rows of one sequence, cut into blocks, a KV head's
	// blocks together (they read the same packed K and V); a run of at
	// least attnMinRun rows gets its K and V packed once for all its
	// blocks, shorter ones go row by row
	a.units, a.regions = a.units[:0], a.regions[:0]
	work, packed := 0, 0
	for r0 := 0; r0 < len(seq); {
		r1, np := r0+1, int(pos[r0])+1
		for r1 < len(seq) && seq[r1] == seq[r0] {
			np = max(np, int(pos[r1])+1)
			r1++
		}
		reg, block := int32(-1), 1
		if r1-r0 >= attnMinRun {
			reg, block = int32(len(a.regions)), a.block
			r := kvRegion{k: packed, v: packed + h.NHeadKV*np*dk, n: np, s: seq[r0], xe: np}
			packed += h.NHeadKV * np * (dk + dv)
			if a.recent {
				r.xe = kv.RecentFrom(int(pos[r0])) // the run's first (lowest) position
				xn := np - r.xe
				if a.lt.RecentK {
					r.xk = packed
					packed += h.NHeadKV * xn * h.HeadDimK
				}
				if a.lt.RecentV {
					r.xv = packed
					packed += h.NHeadKV * xn * h.HeadDimV
				}
			}
			a.regions = append(a.regions, r)
		}
		for kh := range h.NHeadKV {
			for t0 := r0; t0 < r1; {
				t1 := min(t0+block, r1)
				if a.recent { // a block's rows share RecentFrom's boundary
					t1 = min(t1, t0+model.RecentAlign-int(pos[t0])%model.RecentAlign)
				}
				a.units = append(a.units, attnUnit{int32(t0), int32(t1), int32(kh), reg})
				t0 = t1
			}
		}
		for t := r0; t < r1; t++ {
			work += int(pos[t]+1) * h.NHead * (dk + dv)
		}
		r0 = r1
	}
	blocks := len(a.regions) > 0
	// scratch for the shapes of this call (grows, then is reused)
	R := min(a.block, len(seq)) * G
	rp := (R + FlashRowBlock - 1) / FlashRowBlock * FlashRowBlock
	for w := range a.scratch {
		s := &a.scratch[w]
		n := G * kv.NCtx
		if blocks {
			n = max(n, FlashScratch(rp, attnTile))
			s.q = grow(s.q, rp*dk)
			s.pos = grow(s.pos, rp)
			s.acc = grow(s.acc, R*dv)
			s.m = grow(s.m, rp)
			s.l = grow(s.l, rp)
		}
		s.scores = grow(s.scores, n)
		if blocks && a.recent {
			s.q2 = grow(s.q2, rp*h.HeadDimK)
			s.acc2 = grow(s.acc2, R*h.HeadDimV)
			s.m2 = grow(s.m2, rp)
		}
		if a.lt.K != model.KVF32 {
			s.qrot = grow(s.qrot, G*a.dkp)
		}
		if a.lt.K != model.KVF32 || a.lt.V != model.KVF32 {
			s.dec = grow(s.dec, kvChunk*max(a.dkp, a.dvp))
			s.vacc = grow(s.vacc, G*a.dvp)
		}
		if wintKind(quantOf(a.lt.V), kv.TurboV(layer, 0)) {
			s.wint.Reserve(G, a.dvp)
		}
		if blocks {
			s.krows = grow(s.krows, kvChunk*a.lt.KHead)
		}
	}
	serial := b.pool.workers() == 1 || work < attnMinWork
	if blocks {
		// pack the regions first, every worker taking pieces of
		// positions of one KV head
		a.packed = grow(a.packed, packed)
		a.packs = a.packs[:0]
		for ri, reg := range a.regions {
			for kh := range h.NHeadKV {
				for j0 := 0; j0 < reg.n; j0 += packPiece {
					a.packs = append(a.packs, packUnit{int32(ri), int32(kh), int32(j0), int32(min(j0+packPiece, reg.n))})
				}
			}
		}
		a.packing = true
		a.next.Store(0)
		if serial || len(a.packs) == 1 {
			a.run(0)
		} else {
			b.pool.run(a)
		}
		a.packing = false
	}
	a.next.Store(0)
	if len(a.units) == 1 || serial {
		a.run(0)
		return
	}
	b.pool.run(a)
}

// packPiece is the positions of one KV head a packing unit converts.
const packPiece = 1024

// packUnit is positions [j0, j1) of KV head kh of region reg, to pack.
type packUnit struct{ reg, kh, j0, j1 int32 }

// pack fills a piece of a region: the K and V rows of its sequence at
// positions [j0, j1) of one KV head, as float32 in FlashTile's layouts
// (TurboQuant rows stay in the rotated domain: flash rotates the queries
// and rotates the outputs back). Pieces write disjoint parts of the
// region.
func (a *attnTask) pack(sc *attnScratch, u packUnit) {
	h, kv := a.h, a.kv
	dk, dv := a.dkp, a.dvp
	reg, kh := &a.regions[u.reg], int(u.kh)
	s, n := int(reg.s), reg.n
	vp := a.packed[reg.v+kh*n*dv:][:n*dv]
	for j0, j1 := int(u.j0), int(u.j1); j0 < j1; {
		L := min(a.span(s, j0, j1-j0), kvChunk)
		kt, r0 := kv.KHeadTiles(a.layer, kh, s, j0, L)
		kr, vr := sc.krows[:L*a.lt.KHead], kv.VHeadRows(a.layer, kh, s, j0, L)
		a.k.Untile(kt, a.lt.KHead, a.lt.KUnit, r0, L, kr)
		kd := a.packed[reg.k+(kh*n+j0)*dk:][:L*dk]
		a.toF32(a.lt.K, kv.TurboK(a.layer, kh), kr, a.lt.KHead, L, h.HeadDimK, kd, dk)
		if a.lt.V == model.KVF32 {
			FlashPackV(vp, n, j0, bytesF32(vr), dv, dv, L)
		} else {
			a.toF32(a.lt.V, kv.TurboV(a.layer, kh), vr, a.lt.VHead, L, h.HeadDimV, sc.dec, dv)
			FlashPackV(vp, n, j0, sc.dec, dv, dv, L)
		}
		j0 += L
	}
	// --kv-recent's f16 rows of the piece's positions from xe on
	xn, dk0, dv0 := n-reg.xe, h.HeadDimK, h.HeadDimV
	for j0, j1 := max(int(u.j0), reg.xe), int(u.j1); j0 < j1; {
		L := min(kv.RecentRun(s, j0, j1-j0), kvChunk)
		if a.lt.RecentK {
			kd := a.packed[reg.xk+(kh*xn+j0-reg.xe)*dk0:][:L*dk0]
			a.k.DequantRows(quant.F16, kv.RecentKHeadRows(a.layer, kh, s, j0, L), 2*dk0, L, dk0, kd, dk0)
		}
		if a.lt.RecentV {
			a.k.DequantRows(quant.F16, kv.RecentVHeadRows(a.layer, kh, s, j0, L), 2*dv0, L, dv0, sc.dec, dv0)
			FlashPackV(a.packed[reg.xv+kh*xn*dv0:][:xn*dv0], xn, j0-reg.xe, sc.dec, dv0, dv0, L)
		}
		j0 += L
	}
}

// toF32 converts n cached heads of type t (row i at src[i*stride:], dim
// values; tq the codec of a TurboQuant type) to float32 rows at
// dst[i*dstride:]: TurboQuant rows into the rotated domain (Padded
// values).
func (a *attnTask) toF32(t model.KVType, tq *quant.Turbo, src []byte, stride, n, dim int, dst []float32, dstride int) {
	if tq != nil {
		a.k.TurboDecode(tq, src, stride, n, dst, dstride)
		return
	}
	a.k.DequantRows(quantOf(t), src, stride, n, dim, dst, dstride)
}

// quantOf returns the ggml type of a block or float KV type.
func quantOf(t model.KVType) quant.Type {
	qt, _ := t.Quant()
	return qt
}

func (a *attnTask) run(worker int) {
	s := &a.scratch[worker]
	if a.packing {
		for {
			i := int(a.next.Add(1) - 1)
			if i >= len(a.packs) {
				return
			}
			a.pack(s, a.packs[i])
		}
	}
	for {
		i := int(a.next.Add(1) - 1)
		if i >= len(a.units) {
			return
		}
		u := a.units[len(a.units)-1-i] // latest (costliest) blocks first
		if u.t1-u.t0 == 1 {
			a.row(s, int(u.t0), int(u.kh))
		} else {
			a.flash(s, int(u.t0), int(u.t1), int(u.kh), &a.regions[u.reg])
		}
	}
}

// IntegerKV reports whether decode attention scores (v false) or sums (v
// true) cached rows of type t in integers, with Kernels.MAddPeak's
// arithmetic (qintKind, wintKind): K rows of q4_0 and 4-bit TurboQuant, V
// rows of q4_0, q8_0 and 3- and 4-bit TurboQuant.
func IntegerKV(t model.KVType, v bool) bool {
	if v {
		return wintBits(quantOf(t), t.Turbo())
	}
	return qintBits(quantOf(t), t.Turbo())
}

// PagedKV implements model.PagedKV: Attention reads the cache through
// KVCache.Run, KHeadTiles and VHeadRows, so it works on a paged cache.
func (b *Backend) PagedKV() bool { return true }

// span returns how many positions from j on (at most n) sit in
// consecutive cache rows of sequence s.
func (a *attnTask) span(s, j, n int) int { return min(n, a.kv.Run(s, j)) }

// row computes the group of query heads of KV head kh for the lone batch
// row t, one AttnScoresTiles and one AttnSum call per run of consecutive
// cached rows. Both meet the stored values in float32 arithmetic
// (TurboQuant rows in the rotated domain, met by rotated queries), so a
// lone row sees what a prefill tile and Ref see up to float rounding: the
// scores of block and TurboQuant rows are summed on their integer values
// or codebook levels and scaled once per block and row. Except K rows of
// q4_0 and 4-bit TurboQuant, scored in integers against the query rounded
// to int16 steps of its largest |value|/32767 (kern_qint.go): that moves
// the scores by up to 2^-16 of that value per product, finer than
// llama.cpp's rounding of the query to the cache's type. And except V rows
// of q4_0, q8_0 and 3- and 4-bit TurboQuant, summed in integers (sumQ,
// kern_wint.go): the weights times the rows' scales rounded to int16 steps
// of their largest/32767, the sums exact. V sums of TurboQuant rows stay
// rotated until the end.
func (a *attnTask) row(sc *attnScratch, t, kh int) {
	h, kv := a.h, a.kv
	dk, dv, G := h.HeadDimK, h.HeadDimV, a.group
	s, np := int(a.seq[t]), int(a.pos[t])+1
	sco := sc.scores[:G*np]
	// scores: sco[g*np + j] = K_j · q_g, run by run of consecutive rows
	qBase := (t*h.NHead + kh*G) * dk
	qg := a.q[qBase : qBase+G*dk]
	tk := kv.TurboK(a.layer, kh)
	qf, kw := qg, dk // the queries, and the width of the rows they meet
	if tk != nil {
		kw = tk.Padded()
		for g := range G {
			a.k.TurboRotate(tk, sc.qrot[g*kw:(g+1)*kw], qg[g*dk:(g+1)*dk])
		}
		qf = sc.qrot[:G*kw]
	}
	e := kv.RecentFrom(np - 1) // --kv-recent: rows from e on read as f16 copies
	ek, ev := np, np
	if a.lt.RecentK {
		ek = e
	}
	if a.lt.RecentV {
		ev = e
	}
	kq := quantOf(a.lt.K)
	xq := qintKind(kq, tk) && ek > 0 && sc.qint.Round(kq, tk, qf, G, kw) // rounded once for every run
	for j := 0; j < ek; {
		n := a.span(s, j, ek-j)
		kt, r0 := kv.KHeadTiles(a.layer, kh, s, j, n)
		if xq {
			a.k.AttnScoresTilesQ(kq, tk, kt, a.lt.KUnit, r0, n, &sc.qint, sco[j:], np)
		} else {
			a.k.attnScoresTiles(kq, tk, kt, a.lt.KUnit, r0, n, kw, qf, G, sco[j:], np, false)
		}
		j += n
	}
	for j := ek; j < np; { // the f16 copies meet the unrotated queries
		n := kv.RecentRun(s, j, np-j)
		a.k.AttnScores(quant.F16, nil, kv.RecentKHeadRows(a.layer, kh, s, j, n), 2*dk, n, dk, qg, G, sco[j:], np)
		j += n
	}
	// softmax per query head (float64 sums)
	for g := range G {
		a.k.Softmax(sco[g*np:(g+1)*np], a.scale)
	}
	// out_g = Σ_j w_gj · V_j
	oBase := (t*h.NHead + kh*G) * dv
	out := a.out[oBase : oBase+G*dv]
	tv := kv.TurboV(a.layer, kh)
	acc, ad := out, dv
	if tv != nil {
		ad = tv.Padded()
		acc = sc.vacc[:G*ad]
	}
	vq := quantOf(a.lt.V)
	if !(wintKind(vq, tv) && ev > 0 && a.sumQ(sc, vq, tv, t, kh, ev, ad, sco, np, acc)) {
		clear(acc)
		for j0 := 0; j0 < ev; {
			n := a.span(s, j0, ev-j0)
			vr := kv.VHeadRows(a.layer, kh, s, j0, n)
			// each V row once for the whole group, positions in order (as Ref)
			a.k.AttnSum(vq, tv, vr, a.lt.VHead, n, ad, sco[j0:], np, G, acc)
			j0 += n
		}
	}
	if tv != nil {
		for g := range G {
			a.k.TurboUnrotate(tv, out[g*dv:(g+1)*dv], acc[g*ad:(g+1)*ad])
		}
	}
	for j0 := ev; j0 < np; { // the f16 copies, summed unrotated
		n := kv.RecentRun(s, j0, np-j0)
		a.k.AttnSum(quant.F16, nil, kv.RecentVHeadRows(a.layer, kh, s, j0, n), 2*dv, n, dv, sco[j0:], np, G, out)
		j0 += n
	}
}

// sumQ sets acc to the V sums of the lone batch row t's group of query
// heads (KV head kh) over the quantized rows [0, ev) of type vq (tv:
// TurboQuant), in integers (kern_wint.go), chunk by chunk of WIntChunk
// positions; false, acc untouched, when RoundWeights refuses a chunk's
// weights (the caller sums in float32).
func (a *attnTask) sumQ(sc *attnScratch, vq quant.Type, tv *quant.Turbo, t, kh, ev, dim int, w []float32, lw int, acc []float32) bool {
	kv, s, x := a.kv, int(a.seq[t]), &sc.wint
	x.Begin(vq, tv, a.group, dim)
	for c0 := 0; c0 < ev; c0 += WIntChunk {
		c1 := min(c0+WIntChunk, ev)
		wc := w[c0:]
		if a.span(s, c0, c1-c0) == c1-c0 { // one run: one call
			var next []byte // the next chunk's first run, prefetched
			if c1 < ev {
				next = kv.VHeadRows(a.layer, kh, s, c1, a.span(s, c1, min(WIntChunk, ev-c1)))
			}
			if !a.k.AttnSumChunk(x, kv.VHeadRows(a.layer, kh, s, c0, c1-c0), a.lt.VHead, c1-c0, wc, lw, next) {
				return false
			}
			continue
		}
		x.Chunk(c1 - c0)
		for j := c0; j < c1; {
			n := a.span(s, j, c1-j)
			a.k.AttnSumScales(x, kv.VHeadRows(a.layer, kh, s, j, n), a.lt.VHead, j-c0, n, wc, lw)
			j += n
		}
		if !a.k.RoundWeights(x, wc, lw) {
			return false
		}
		for j := c0; j < c1; {
			n := a.span(s, j, c1-j)
			a.k.AttnSumQ(x, kv.VHeadRows(a.layer, kh, s, j, n), a.lt.VHead, j-c0, n)
			j += n
		}
		x.Fold()
	}
	x.Finish(acc)
	return true
}

// flash computes KV head kh's query heads for batch rows [t0, t1) of one
// sequence, tile by tile over the cached positions up to the block's last
// (FlashTile), from the sequence's packed K and V (reg).
func (a *attnTask) flash(sc *attnScratch, t0, t1, kh int, reg *kvRegion) {
	h := a.h
	dk, dv, G := a.dkp, a.dvp, a.group
	tk, tv := a.kv.TurboK(a.layer, kh), a.kv.TurboV(a.layer, kh)
	R := (t1 - t0) * G // query rows: (row t, head g) at (t-t0)*G + g
	rp := (R + FlashRowBlock - 1) / FlashRowBlock * FlashRowBlock
	np, pmin := 0, int(a.pos[t0])
	for t := t0; t < t1; t++ {
		np, pmin = max(np, int(a.pos[t])+1), min(pmin, int(a.pos[t]))
	}
	// the block's query rows times the scale (so the scores come out
	// scaled), transposed into blocks of FlashRowBlock rows; padding rows
	// are zero and at position pmin
	qt, ps := sc.q[:rp*dk], sc.pos[:rp]
	// --kv-recent: positions [e, np) are read from their f16 copies (e is
	// the same for every row of the block: Attention cuts blocks at
	// RecentAlign); a TurboQuant K's copies meet the queries unrotated (q2)
	e, dk0, dv0 := np, h.HeadDimK, h.HeadDimV
	if a.recent {
		e = a.kv.RecentFrom(pmin)
	}
	var q2 []float32
	if e < np && a.lt.RecentK && tk != nil {
		q2 = sc.q2[:rp*dk0]
	}
	const B = FlashRowBlock
	for r := range rp {
		qb, i := qt[r/B*dk*B:], r%B
		if r >= R {
			for d := range dk {
				qb[d*B+i] = 0
			}
			if q2 != nil {
				for d := range dk0 {
					q2[r/B*dk0*B+d*B+i] = 0
				}
			}
			ps[r] = int32(pmin)
			continue
		}
		t, g := t0+r/G, r%G
		ps[r] = a.pos[t]
		src := a.q[(t*h.NHead+kh*G+g)*h.HeadDimK:][:h.HeadDimK]
		if q2 != nil {
			for d, v := range src {
				q2[r/B*dk0*B+d*B+i] = v * a.scale
			}
		}
		if tk != nil { // K is stored rotated: rotate the query alike
			a.k.TurboRotate(tk, sc.qrot[:dk], src)
			src = sc.qrot[:dk]
		}
		for d, v := range src {
			qb[d*B+i] = v * a.scale
		}
	}
	acc, m, l := sc.acc[:R*dv], sc.m[:rp], sc.l[:rp]
	clear(acc)
	clear(l)
	for i := range m {
		m[i] = float32(math.Inf(-1))
	}
	// tiles of up to attnTile positions, masked only where they cross the
	// diagonal of some row
	kp, vp := a.packed[reg.k+kh*reg.n*dk:][:np*dk], a.packed[reg.v+kh*reg.n*dv:][:reg.n*dv]
	for j0 := 0; j0 < e; j0 += attnTile {
		L := min(attnTile, e-j0)
		a.k.FlashTile(qt, rp, R, dk, dv, kp[j0*dk:], vp, reg.n, L, j0, ps, j0+L-1 > pmin, m, l, acc, sc.scores)
	}
	var acc2 []float32 // the f16 copies' V sums of a TurboQuant V
	if e < np {
		xn := reg.n - reg.xe
		xq, xdk := qt, dk
		if q2 != nil {
			xq, xdk = q2, dk0
		}
		xacc, xdv := acc, dv
		if a.lt.RecentV && tv != nil {
			// summed unrotated apart; acc (the quantized rows') is
			// rescaled from the maxima it was summed at (m2) at the end
			copy(sc.m2[:rp], m)
			acc2 = sc.acc2[:R*dv0]
			clear(acc2)
			xacc, xdv = acc2, dv0
		}
		xv, vn, off := vp, reg.n, 0
		if a.lt.RecentV { // FlashTile reads V by position: shift positions to the copies' rows
			xv, vn, off = a.packed[reg.xv+kh*xn*dv0:][:xn*dv0], xn, reg.xe
			for r := range ps {
				ps[r] -= int32(off)
			}
		}
		for j0 := e; j0 < np; j0 += attnTile {
			L := min(attnTile, np-j0)
			kt := kp[j0*dk:]
			if a.lt.RecentK {
				kt = a.packed[reg.xk+(kh*xn+j0-reg.xe)*dk0:][:L*dk0]
			}
			a.k.FlashTile(xq, rp, R, xdk, xdv, kt, xv, vn, L, j0-off, ps, j0+L-1 > pmin, m, l, xacc, sc.scores)
		}
	}
	// out = acc / l
	for r := range R {
		t, g := t0+r/G, r%G
		inv := float32(1 / l[r])
		o := a.out[(t*h.NHead+kh*G+g)*h.HeadDimV:][:h.HeadDimV]
		if tv != nil { // the sum is rotated: rotate it back
			y, c := sc.vacc[:dv], inv
			if acc2 != nil {
				c *= float32(math.Exp(float64(sc.m2[r] - m[r])))
			}
			for d, v := range acc[r*dv : (r+1)*dv] {
				y[d] = v * c
			}
			a.k.TurboUnrotate(tv, o, y)
			if acc2 != nil {
				for d, v := range acc2[r*dv0 : (r+1)*dv0] {
					o[d] += v * inv
				}
			}
			continue
		}
		for d, v := range acc[r*dv : (r+1)*dv] {
			o[d] = v * inv
		}
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
