package model

// kvrecent.go: the exact rows of --kv-recent.
//
// With KVTypes.Recent = N > 0, a layer whose K or V type is quantized (q8_0,
// q4_0, tq4, tq3) keeps that half's rows also as f16, for the positions
// queries read exactly: the query at position p reads rows [Exact(p), p]
// from the f16 copy and rows [0, Exact(p)) from the quantized cache, with
//
//	Exact(p) = max(0, p - p%RecentAlign + 1 - N)
//
// that is, at least its N most recent positions (its own included) and at
// most N+RecentAlign-1. The boundary moves in steps of RecentAlign
// positions, so that a prefill block of queries cut at those steps shares
// it (flash attention then reads two regions, not a per-query mask), and it
// depends on p alone: results do not depend on how a sequence is cut into
// batches.
//
// The f16 rows live in slots of RecentAlign rows, each holding the rows of
// one aligned block of one sequence's positions, taken from a pool when a
// batch writes into the block and given back when the pool runs short and
// no query can read the block any more (its positions are below the
// boundary of its sequence's newest query). A slot knows the first row
// written since it was taken (lo): a batch whose queries need rows that no
// slot holds (the sequence was rewound past evicted rows) is refused.
//
// Only contiguous caches keep exact rows for now: the paged cache's prefix
// sharing would need them for shared blocks too.

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// RecentAlign is the step of Exact's boundary and the rows of a slot.
const RecentAlign = 64

// exactRows is a cache's f16 copies of recent rows (KVTypes.Recent).
type exactRows struct {
	n      int     // KVTypes.Recent
	perSeq int     // blocks of RecentAlign positions per sequence
	slots  int     // slots in the pool
	of     []int32 // per (seq, block) (seq*perSeq + block): its slot, -1 if none
	blk    []int32 // per slot: its (seq, block), -1 if free
	lo     []int32 // per slot: the first row written since it was taken
	free   []int32
	newest []int32 // per seq: the last position written (-1: none)
	keep   []int32 // per seq: prepare's scratch, the first position still needed
	cursor int     // where the eviction scan resumes
	k, v   [][]byte
}

// Exact returns the first position a query at position p reads from the
// f16 copies of --kv-recent (p+1 when the cache keeps none).
func (c *KVCache) Exact(p int) int {
	if c.x == nil {
		return p + 1
	}
	return max(0, p-p%RecentAlign+1-c.x.n)
}

// newExact sets up the exact rows of a contiguous cache whose types ask
// for them (storage comes with ReserveExact).
func (c *KVCache) newExact() error {
	if c.Types.Recent == 0 {
		return nil
	}
	any := false
	for _, lt := range c.layers {
		any = any || lt.XK || lt.XV
	}
	if !any {
		return nil // no quantized half: every row is exact already
	}
	if c.Tables != nil || c.BlockSize != 0 {
		return fmt.Errorf("KV cache: --kv-recent %d: exact recent rows are kept in contiguous caches only (perplexity, bench), not yet in the prefix-sharing engine's block cache", c.Types.Recent)
	}
	x := &exactRows{n: c.Types.Recent, perSeq: (c.NCtx + RecentAlign - 1) / RecentAlign}
	x.of = make([]int32, c.NSeq*x.perSeq)
	for i := range x.of {
		x.of[i] = -1
	}
	x.newest = make([]int32, c.NSeq)
	x.keep = make([]int32, c.NSeq)
	for i := range x.newest {
		x.newest[i] = -1
	}
	c.x = x
	return nil
}

// ReserveExact sizes the slot pool for batches of up to maxBatch rows
// (NewContextKV calls it): every
// sequence's window (N+RecentAlign-1 positions, over at most
// (N+RecentAlign-2)/RecentAlign+2 blocks) plus the blocks a batch writes.
func (c *KVCache) ReserveExact(maxBatch int) {
	x := c.x
	if x == nil {
		return
	}
	n := c.NSeq*((x.n+RecentAlign-2)/RecentAlign+3) + (maxBatch+RecentAlign-1)/RecentAlign
	n = min(n, len(x.of))
	if n <= x.slots {
		return
	}
	grow := func(old []byte, head int) []byte {
		b := make([]byte, n*RecentAlign*c.nHead*head*2)
		// head-major: head kh's rows of every slot back to back
		for kh := range c.nHead {
			copy(b[kh*n*RecentAlign*head*2:], old[kh*x.slots*RecentAlign*head*2:][:x.slots*RecentAlign*head*2])
		}
		return b
	}
	if x.k == nil {
		x.k, x.v = make([][]byte, c.NLayer), make([][]byte, c.NLayer)
	}
	for l, lt := range c.layers {
		if lt.XK {
			x.k[l] = grow(x.k[l], c.headK)
		}
		if lt.XV {
			x.v[l] = grow(x.v[l], c.headV)
		}
	}
	for s := x.slots; s < n; s++ {
		x.blk = append(x.blk, -1)
		x.lo = append(x.lo, 0)
		x.free = append(x.free, int32(s))
	}
	x.slots = n
}

// ExactBytes returns the storage of the f16 copies of --kv-recent.
func (c *KVCache) ExactBytes() int64 {
	if c.x == nil {
		return 0
	}
	var n int64
	for l := range c.x.k {
		n += int64(len(c.x.k[l]) + len(c.x.v[l]))
	}
	return n
}

// PrepareExact readies the exact rows for a batch's rows (seq, pos) before
// its layers run (Context.Decode calls it): it refuses the batch if a
// query needs rows no slot holds, and takes slots for the blocks the batch
// writes (evicting blocks no query can read any more).
func (c *KVCache) PrepareExact(seq, pos []int32) error {
	x := c.x
	if x == nil {
		return nil
	}
	for s := range x.keep {
		x.keep[s] = int32(c.Exact(int(x.newest[s])))
	}
	// the first position of each sequence's run: what its queries need
	first := func(t int) bool { return t == 0 || seq[t-1] != seq[t] }
	for t := range seq {
		if !first(t) {
			continue
		}
		s, p := int(seq[t]), int(pos[t])
		e := c.Exact(p)
		x.keep[s] = int32(e)
		for j := e; j < p; {
			sl := x.of[s*x.perSeq+j/RecentAlign]
			if sl < 0 || int(x.lo[sl]) > j%RecentAlign {
				return fmt.Errorf("%w: --kv-recent: the f16 rows of positions [%d, %d) of sequence %d are no longer kept (the sequence was rewound past them)", ErrBatch, j, p, s)
			}
			j = j - j%RecentAlign + RecentAlign
		}
	}
	for t := range seq {
		s, p := int(seq[t]), int(pos[t])
		bi := s*x.perSeq + p/RecentAlign
		sl := x.of[bi]
		if sl < 0 {
			var err error
			if sl, err = c.takeSlot(); err != nil {
				return err
			}
			x.of[bi], x.blk[sl], x.lo[sl] = sl, int32(bi), int32(p%RecentAlign)
		} else {
			x.lo[sl] = min(x.lo[sl], int32(p%RecentAlign))
		}
		if t+1 == len(seq) || seq[t+1] != seq[t] {
			x.newest[s] = int32(p) // a run's last position (a rewound sequence's too)
		}
	}
	return nil
}

// takeSlot returns a free slot, evicting a block no query can read (below
// its sequence's keep position) if none is free.
func (c *KVCache) takeSlot() (int32, error) {
	x := c.x
	if n := len(x.free); n > 0 {
		sl := x.free[n-1]
		x.free = x.free[:n-1]
		return sl, nil
	}
	for i := range x.slots {
		sl := int32((x.cursor + i) % x.slots)
		bi := int(x.blk[sl])
		s, blk := bi/x.perSeq, bi%x.perSeq
		if (blk+1)*RecentAlign <= int(x.keep[s]) {
			x.of[bi] = -1
			x.cursor = int(sl) + 1
			return sl, nil
		}
	}
	return 0, fmt.Errorf("%w: --kv-recent: all %d slots of f16 rows are in use", ErrBatch, x.slots)
}

// StoreExact stores the f16 copies of a batch's new K and V rows of layer
// l (after PrepareExact; Context.Decode calls it after storing the rows).
func (c *KVCache) StoreExact(l int, seq, pos []int32, k, v []float32) {
	x := c.x
	if x == nil {
		return
	}
	lt := c.layers[l]
	f16 := quant.QuantizeFunc(quant.F16)
	for t := range seq {
		s, p := int(seq[t]), int(pos[t])
		for kh := range c.nHead {
			if lt.XK {
				f16(k[t*c.KDim+kh*c.headK:][:c.headK], c.XKHeadRows(l, kh, s, p, 1))
			}
			if lt.XV {
				f16(v[t*c.VDim+kh*c.headV:][:c.headV], c.XVHeadRows(l, kh, s, p, 1))
			}
		}
	}
}

// xoff returns the byte offset of head kh of (seq, pos)'s exact row, for
// heads of dim values.
func (c *KVCache) xoff(seq, pos, kh, dim int) int {
	x := c.x
	sl := int(x.of[seq*x.perSeq+pos/RecentAlign])
	return ((kh*x.slots+sl)*RecentAlign + pos%RecentAlign) * dim * 2
}

// XRun returns how many positions from pos on (at most n) have their
// exact rows back to back (consecutive slots), so that XKHeadRows and
// XVHeadRows can hand them out at once.
func (c *KVCache) XRun(seq, pos, n int) int {
	x := c.x
	bi := seq*x.perSeq + pos/RecentAlign
	r := RecentAlign - pos%RecentAlign
	for r < n && x.of[bi+1] == x.of[bi]+1 {
		r += RecentAlign
		bi++
	}
	return min(r, n)
}

// XKHeadRows returns head kh of the f16 K rows of positions [pos, pos+n)
// of seq in layer l (n ≤ XRun), 2·HeadDimK bytes each.
func (c *KVCache) XKHeadRows(l, kh, seq, pos, n int) []byte {
	return c.x.k[l][c.xoff(seq, pos, kh, c.headK):][:n*c.headK*2]
}

// XVHeadRows is XKHeadRows for V.
func (c *KVCache) XVHeadRows(l, kh, seq, pos, n int) []byte {
	return c.x.v[l][c.xoff(seq, pos, kh, c.headV):][:n*c.headV*2]
}

// GetXK writes the f16 K row of (seq, pos) in layer l (a layer with XK),
// as float32s, to dst (KDim values); GetXV is the same for V.
func (c *KVCache) GetXK(l, seq, pos int, dst []float32) {
	for kh := range c.nHead {
		quant.DequantizeFunc(quant.F16)(c.XKHeadRows(l, kh, seq, pos, 1), dst[kh*c.headK:(kh+1)*c.headK])
	}
}

// GetXV is GetXK for V.
func (c *KVCache) GetXV(l, seq, pos int, dst []float32) {
	for kh := range c.nHead {
		quant.DequantizeFunc(quant.F16)(c.XVHeadRows(l, kh, seq, pos, 1), dst[kh*c.headV:(kh+1)*c.headV])
	}
}
