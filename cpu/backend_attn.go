package cpu

// backend_attn.go: the Backend's attention, in two forms, and the plan of
// one call.
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
// A sliding window (model.Attn.Window) narrows both forms to the positions
// a row sees: the row form scores and sums only them, the block form packs
// only the positions some row of the run sees and masks the tiles that
// cross a row's window edge as it masks the diagonal's. Sinks
// (model.Attn.Sinks) join each query head's softmax: an extra score in the
// row form's, a rescaling of the final sum in the block form's.
//
// Workers claim units from a counter, most expensive (latest positions)
// first. Both forms compute Ref's result up to float rounding: the row form
// in Ref's order, the block form with float32 sums per tile (FlashTile).
//
// This file plans a call: it cuts the batch into units, lays out the packed
// K and V of each long run, sizes every worker's scratch, and runs the
// packing and then the units on the workers. It computes no score and no
// sum: the row form is backend_attn_row.go, the block form and the packing
// backend_attn_flash.go, and the arithmetic of both is the kernels'
// (kern_attn.go, kern_fa.go, kern_qint.go, kern_wint.go).

import (
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

// kvRegion is the K and V of one sequence, positions [base, base+n) (base
// 0 unless a sliding window hides the earlier ones from every row of the
// run), packed once per call for all its blocks in FlashTile's layouts (by
// all workers, in pieces of packPiece positions of one KV head): head kh's
// K rows at k + kh*n*dk (rows of dk, position j as row j-base), its V at v
// + kh*n*dv (FlashPackV's layout). With --kv-recent, the f16 copies of
// positions [rFrom, base+n) are packed too (halves that keep them), at rk +
// kh*(base+n-rFrom)*HeadDimK and rv + kh*(base+n-rFrom)*HeadDimV, position
// j as row j-rFrom.
type kvRegion struct {
	k, v, n int
	base    int
	rk, rv  int
	rFrom   int
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
	win      int       // sliding window (0: none)
	sinks    []float32 // a sink logit per query head (nil: none)
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

// Attention implements model.Ops.
func (b *Backend) Attention(out, q []float32, kv *model.KVCache, layer int, seq, pos []int32, h *model.Hyper, at model.Attn) {
	a := &b.attn
	a.k, a.out, a.q, a.kv, a.layer, a.seq, a.pos, a.h, a.scale = b.k, out, q, kv, layer, seq, pos, h, at.Scale
	a.win, a.sinks = max(at.Window, 0), at.Sinks
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
			// a window leaves out the positions before the lowest row's
			base := 0
			if a.win > 0 {
				pmin := int(pos[r0])
				for t := r0; t < r1; t++ {
					pmin = min(pmin, int(pos[t]))
				}
				base = max(0, pmin-a.win+1)
			}
			n := np - base
			r := kvRegion{k: packed, v: packed + h.NHeadKV*n*dk, n: n, base: base, s: seq[r0], rFrom: np}
			packed += h.NHeadKV * n * (dk + dv)
			if a.recent {
				r.rFrom = max(kv.RecentFrom(int(pos[r0])), base) // the run's first (lowest) position
				rn := np - r.rFrom
				if a.lt.RecentK {
					r.rk = packed
					packed += h.NHeadKV * rn * h.HeadDimK
				}
				if a.lt.RecentV {
					r.rv = packed
					packed += h.NHeadKV * rn * h.HeadDimV
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
			work += a.visible(int(pos[t])) * h.NHead * (dk + dv)
		}
		r0 = r1
	}
	blocks := len(a.regions) > 0
	// scratch for the shapes of this call (grows, then is reused)
	R := min(a.block, len(seq)) * G
	rp := (R + FlashRowBlock - 1) / FlashRowBlock * FlashRowBlock
	for w := range a.scratch {
		s := &a.scratch[w]
		n := G * (kv.NCtx + 1) // lone rows: a sink's slot after each head's scores
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
	serial := b.workers.count() == 1 || work < attnMinWork
	if blocks {
		// pack the regions first, every worker taking pieces of
		// positions of one KV head
		a.packed = grow(a.packed, packed)
		a.packs = a.packs[:0]
		for ri, reg := range a.regions {
			for kh := range h.NHeadKV {
				for j0 := reg.base; j0 < reg.base+reg.n; j0 += packPiece {
					a.packs = append(a.packs, packUnit{int32(ri), int32(kh), int32(j0), int32(min(j0+packPiece, reg.base+reg.n))})
				}
			}
		}
		a.packing = true
		a.next.Store(0)
		if serial || len(a.packs) == 1 {
			a.run(0)
		} else {
			b.workers.run(a)
		}
		a.packing = false
	}
	a.next.Store(0)
	if len(a.units) == 1 || serial {
		a.run(0)
		return
	}
	b.workers.run(a)
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

// visible returns how many cached positions the row at position p sees.
func (a *attnTask) visible(p int) int {
	if a.win > 0 {
		return min(p+1, a.win)
	}
	return p + 1
}

// lowest returns the first cached position the row at position p sees.
func (a *attnTask) lowest(p int) int { return p + 1 - a.visible(p) }

// span returns how many positions from j on (at most n) sit in
// consecutive cache rows of sequence s in the layer (a sliding-window
// layer's ring wraps: KVCache.LayerRun).
func (a *attnTask) span(s, j, n int) int { return min(n, a.kv.LayerRun(a.layer, s, j)) }
