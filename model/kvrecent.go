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
// The f16 rows live in slots, each the copy of one block of rows: a block
// of the cache (BlockSize rows) in a block-addressed cache, so that
// sequences sharing a prompt's blocks share their copies too, else
// RecentAlign positions of one sequence. PrepareExact takes slots for the
// blocks a batch writes, evicting when none is free a block no live
// sequence's next query can read (below its boundary); slots of blocks no
// sequence holds stay until then, for a later request that reuses the
// prefix (ExactHit says how much of a cached prefix still has its copies).
// A slot knows the first row written since it was taken (lo): rows below
// it are missing, and a batch whose queries need missing rows is refused
// (a sequence rewound past evicted rows). CopyRows into a block forgets
// its copies.

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// DefaultKVRecent is --kv-recent's window when a half is TurboQuant and
// the flag is not given (KVRecentFor): the smallest of the windows
// measured (0, 32, 64, 128, 192, 256) with which tq4/tq3's mean KLD
// against F32 KV stays at or below llama.cpp's q4_0/q4_0 on qwen3moe-small
// with planted K outliers both at -c 512 and at -c 2048 (bench/README.md,
// "KV cache types"). -c 512, stories_eval: 0.1996 with no window, 0.1593
// with 64, 0.1138 with 192 (llama.cpp 0.1717); -c 2048, a 40 KB generated
// text, 4 chunks: 0.1931 with 64, 0.1874 with 128, 0.1800 with 192
// (llama.cpp 0.1850). The cost is at most 255 f16 rows per sequence
// whatever the context, and no measured decode cost.
const DefaultKVRecent = 192

// KVRecentFor resolves a --kv-recent setting: n itself if n ≥ 0, else
// (not given) DefaultKVRecent when K or V is a TurboQuant type and 0 for
// llama.cpp's types, which keep llama.cpp's meaning.
func KVRecentFor(k, v KVType, n int) int {
	switch {
	case n >= 0:
		return n
	case k.Turbo() > 0 || v.Turbo() > 0:
		return DefaultKVRecent
	}
	return 0
}

// RecentAlign is the step of Exact's boundary (and the rows of a slot in
// a cache without blocks).
const RecentAlign = 64

// exactRows is a cache's f16 copies of recent rows (KVTypes.Recent).
type exactRows struct {
	n       int  // KVTypes.Recent
	xb      int  // rows per slot: BlockSize, or RecentAlign
	blocked bool // slots copy cache blocks (else RecentAlign positions of a sequence)
	perSeq  int  // without blocks: slots' blocks per sequence
	slots   int
	of      []int32 // per block: its slot, -1 if none
	blk     []int32 // per slot: its block, -1 if free
	lo      []int32 // per slot: the first row written since it was taken
	pin     []bool  // per slot: PrepareExact's scratch, needed by a live sequence
	free    []int32 // free slots, the next to take last
	newest  []int32 // per sequence: the last position written (-1: none)
	cursor  int     // where the eviction scan resumes
	k, v    [][]byte
}

// Exact returns the first position a query at position p reads from the
// f16 copies of --kv-recent (p+1 when the cache keeps none).
func (c *KVCache) Exact(p int) int {
	if c.x == nil {
		return p + 1
	}
	return exactFrom(p, c.x.n)
}

// exactFrom is Exact(p) with n recent positions kept (n > 0).
func exactFrom(p, n int) int { return max(0, p-p%RecentAlign+1-n) }

// HasExact reports whether the cache keeps f16 copies of recent rows.
func (c *KVCache) HasExact() bool { return c.x != nil }

// newExact sets up the exact rows of a cache whose types ask for them
// (storage comes with ReserveExact), after its addressing is set.
func (c *KVCache) newExact() {
	if c.Types.Recent == 0 {
		return
	}
	any := false
	for _, lt := range c.layers {
		any = any || lt.XK || lt.XV
	}
	if !any {
		return // no quantized half: every row is exact already
	}
	x := &exactRows{n: c.Types.Recent, xb: RecentAlign}
	if c.BlockSize > 0 {
		x.xb, x.blocked = c.BlockSize, true
		x.of = make([]int32, c.NBlocks)
	} else {
		x.perSeq = (c.NCtx + RecentAlign - 1) / RecentAlign
		x.of = make([]int32, c.NSeq*x.perSeq)
	}
	for i := range x.of {
		x.of[i] = -1
	}
	x.newest = make([]int32, c.NSeq)
	for i := range x.newest {
		x.newest[i] = -1
	}
	c.x = x
}

// key returns the block whose slot holds (seq, pos)'s copy.
func (c *KVCache) key(seq, pos int) int {
	if c.x.blocked {
		return c.row(seq, pos) >> c.shift
	}
	return seq*c.x.perSeq + pos/RecentAlign
}

// exactSlots is the slot pool for nSeq sequences, batches of up to
// maxBatch rows and slots of xb rows: every sequence's window (the
// N+RecentAlign-1 positions a query reads, over at most
// (N+RecentAlign-2)/xb+2 slots) and the slots a batch writes, plus one
// window more, kept for a later request reusing a finished sequence's
// prefix (the windows of sequences not running serve that too).
func exactSlots(recent, xb, nSeq, maxBatch int) int {
	win := (recent+RecentAlign-2)/xb + 2
	return (nSeq+1)*(win+1) + (maxBatch+xb-1)/xb
}

// KVRecentReserve returns the bytes of the f16 copies a cache of types t
// and cells cells keeps for nSeq sequences and batches of up to maxBatch
// rows, in blocks of blockSize rows (0: a contiguous cache; at most one
// slot per block of the cache).
func KVRecentReserve(h *Hyper, t KVTypes, nSeq, maxBatch, blockSize, cells int) int64 {
	ls, err := KVLayers(h, t)
	if err != nil || t.Recent == 0 {
		return 0
	}
	xb := RecentAlign
	if blockSize > 0 {
		xb = blockSize
	}
	var row int64 // bytes of one position's copies
	for _, l := range ls {
		if l.XK {
			row += int64(2 * h.HeadDimK * h.NHeadKV)
		}
		if l.XV {
			row += int64(2 * h.HeadDimV * h.NHeadKV)
		}
	}
	return row * int64(min(exactSlots(t.Recent, xb, nSeq, maxBatch), (cells+xb-1)/xb)*xb)
}

// ReserveExact sizes the slot pool for batches of up to maxBatch rows
// (NewContextKV calls it; see exactSlots).
func (c *KVCache) ReserveExact(maxBatch int) {
	x := c.x
	if x == nil {
		return
	}
	n := min(exactSlots(x.n, x.xb, c.NSeq, maxBatch), len(x.of))
	if n <= x.slots {
		return
	}
	rows := x.xb
	grow := func(old []byte, head int) []byte {
		b := make([]byte, n*rows*c.nHead*head*2)
		// head-major: head kh's rows of every slot back to back
		for kh := range c.nHead {
			copy(b[kh*n*rows*head*2:], old[kh*x.slots*rows*head*2:][:x.slots*rows*head*2])
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
	free := make([]int32, 0, n)
	for s := n - 1; s >= x.slots; s-- { // taken in ascending order: runs of consecutive slots
		free = append(free, int32(s))
	}
	x.free = append(free, x.free...)
	for range n - x.slots {
		x.blk = append(x.blk, -1)
		x.lo = append(x.lo, 0)
		x.pin = append(x.pin, false)
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

// live reports whether sequence s holds cells (its next query may come).
func (c *KVCache) live(s int) bool {
	if c.Tables != nil {
		return len(c.Tables[s]) > 0 && c.x.newest[s] >= 0
	}
	return c.x.newest[s] >= 0
}

// covered reports whether the copies of positions [from, to) of seq are
// all kept.
func (c *KVCache) covered(seq, from, to int) bool {
	x := c.x
	for j := from; j < to; j = j - j%x.xb + x.xb {
		if !x.holds(c.key(seq, j), j) {
			return false
		}
	}
	return true
}

// holds reports whether block b's slot holds the copy of position j (one
// of b's positions): b has a slot, written from j's row on or before.
func (x *exactRows) holds(b, j int) bool {
	sl := x.of[b]
	return sl >= 0 && int(x.lo[sl]) <= j%x.xb
}

// pinRange marks the slots of seq's positions [from, to) as needed.
func (c *KVCache) pinRange(seq, from, to int) {
	x := c.x
	for j := from; j < to; j = j - j%x.xb + x.xb {
		if sl := x.of[c.key(seq, j)]; sl >= 0 {
			x.pin[sl] = true
		}
	}
}

// PrepareExact readies the exact rows for a batch's rows (seq, pos) before
// its layers run (Context.Decode calls it): it refuses the batch if a
// query needs rows no slot holds, and takes slots for the blocks the batch
// writes (evicting blocks no live sequence can read any more).
func (c *KVCache) PrepareExact(seq, pos []int32) error {
	x := c.x
	if x == nil {
		return nil
	}
	first := func(t int) bool { return t == 0 || seq[t-1] != seq[t] }
	last := func(t int) bool { return t+1 == len(seq) || seq[t+1] != seq[t] }
	inBatch := func(s int32) bool {
		for t := range seq {
			if seq[t] == s {
				return true
			}
		}
		return false
	}
	clear(x.pin)
	for s := range x.newest {
		if c.live(s) && !inBatch(int32(s)) {
			nq := int(x.newest[s]) + 1 // its next query
			c.pinRange(s, c.Exact(nq), nq)
		}
	}
	for t := range seq {
		if !first(t) {
			continue
		}
		s, p := int(seq[t]), int(pos[t])
		if e := c.Exact(p); !c.covered(s, e, p) {
			return fmt.Errorf("%w: --kv-recent: the f16 rows of positions [%d, %d) of sequence %d are no longer kept (the sequence was rewound past them)", ErrBatch, e, p, s)
		}
		t1 := t
		for !last(t1) {
			t1++
		}
		c.pinRange(s, c.Exact(p), int(pos[t1])+1)
	}
	for t := range seq {
		s, p := int(seq[t]), int(pos[t])
		bi := c.key(s, p)
		sl := x.of[bi]
		if sl < 0 {
			var err error
			if sl, err = c.takeSlot(); err != nil {
				return err
			}
			x.of[bi], x.blk[sl], x.lo[sl], x.pin[sl] = sl, int32(bi), int32(p%x.xb), true
		} else {
			x.lo[sl] = min(x.lo[sl], int32(p%x.xb))
		}
		if last(t) {
			x.newest[s] = int32(p) // a run's last position (a rewound sequence's too)
		}
	}
	return nil
}

// takeSlot returns a free slot, evicting an unpinned one if none is free.
func (c *KVCache) takeSlot() (int32, error) {
	x := c.x
	if n := len(x.free); n > 0 {
		sl := x.free[n-1]
		x.free = x.free[:n-1]
		return sl, nil
	}
	for i := range x.slots {
		sl := int32((x.cursor + i) % x.slots)
		if !x.pin[sl] {
			x.of[x.blk[sl]] = -1
			x.cursor = int(sl) + 1
			return sl, nil
		}
	}
	return 0, fmt.Errorf("%w: --kv-recent: all %d slots of f16 rows are in use", ErrBatch, x.slots)
}

// forget drops block b's copies (its rows are being replaced).
func (c *KVCache) forget(b int) {
	x := c.x
	if sl := x.of[b]; sl >= 0 {
		x.of[b], x.blk[sl] = -1, -1
		x.free = append(x.free, sl)
	}
}

// ExactHit returns how many positions of a cached prefix of n positions,
// held in blocks (the cache blocks a sequence would hold, BlockSize
// positions each; -1 for a block whose copies it would not share),
// can be reused with their copies: the largest m ≤ n such that every
// position in [Exact(m), m) has its copy.
func (c *KVCache) ExactHit(blocks []int32, n int) int {
	x := c.x
	if x == nil || !x.blocked {
		return n
	}
	ok := func(j int) bool { // position j's copy is kept
		b := blocks[j>>c.shift]
		return b >= 0 && x.holds(int(b), j)
	}
	m := min(n, len(blocks)*c.BlockSize)
	for m > 0 {
		bad := -1 // the last position below m whose copy is missing
		for j := m - 1; j >= c.Exact(m); j-- {
			if !ok(j) {
				bad = j
				break
			}
		}
		if bad < 0 {
			return m
		}
		m = bad // every longer prefix needs position bad
	}
	return 0
}

// ExactAttach records that sequence seq now holds positions [0, n) (a
// reused prefix): its next query is at n.
func (c *KVCache) ExactAttach(seq, n int) {
	if c.x != nil {
		c.x.newest[seq] = int32(n - 1)
	}
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
	sl := int(x.of[c.key(seq, pos)])
	return ((kh*x.slots+sl)*x.xb + pos%x.xb) * dim * 2
}

// XRun returns how many positions from pos on (at most n) have their
// exact rows back to back (in consecutive slots), so that XKHeadRows and
// XVHeadRows can hand them out at once.
func (c *KVCache) XRun(seq, pos, n int) int {
	x := c.x
	sl := x.of[c.key(seq, pos)]
	r := x.xb - pos%x.xb
	for r < n && x.of[c.key(seq, pos+r)] == sl+1 {
		r += x.xb
		sl++
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
