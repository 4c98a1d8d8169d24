package model

// kvrecent.go: the recent rows of --kv-recent.
//
// With KVTypes.Recent = N > 0, a layer whose K or V type is quantized (q8_0,
// q4_0, tq4, tq3) keeps that half's rows also as f16 (the recent rows), for
// the positions queries read unquantized: the query at position p reads
// rows [RecentFrom(p), p] from the f16 copy and rows [0, RecentFrom(p))
// from the quantized cache, with
//
//	RecentFrom(p) = max(0, p - p%RecentAlign + 1 - N)
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
// RecentAlign positions of one sequence. PrepareRecent takes slots for the
// blocks a batch writes, evicting when none is free a block no live
// sequence's next query can read (below its boundary); slots of blocks no
// sequence holds stay until then, for a later request that reuses the
// prefix (RecentHit says how much of a cached prefix still has its
// copies).
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

// RecentAlign is the step of RecentFrom's boundary (and the rows of a
// slot in a cache without blocks).
const RecentAlign = 64

// recentRows is a cache's f16 copies of recent rows (KVTypes.Recent).
type recentRows struct {
	n        int  // KVTypes.Recent
	slotRows int  // rows per slot: BlockSize, or RecentAlign
	blocked  bool // slots copy cache blocks (else RecentAlign positions of a sequence)
	perSeq   int  // without blocks: slots' blocks per sequence
	slots    int
	of       []int32 // per block: its slot, -1 if none
	blk      []int32 // per slot: its block, -1 if free
	lo       []int32 // per slot: the first row written since it was taken
	pin      []bool  // per slot: PrepareRecent's scratch, needed by a live sequence
	free     []int32 // free slots, the next to take last
	newest   []int32 // per sequence: the last position written (-1: none)
	cursor   int     // where the eviction scan resumes
	k, v     [][]byte
}

// RecentFrom returns the first position a query at position p reads from
// the f16 copies of --kv-recent (p+1 when the cache keeps none).
func (c *KVCache) RecentFrom(p int) int {
	if c.recent == nil {
		return p + 1
	}
	return recentFrom(p, c.recent.n)
}

// recentFrom is RecentFrom(p) with n recent positions kept (n > 0).
func recentFrom(p, n int) int { return max(0, p-p%RecentAlign+1-n) }

// HasRecent reports whether the cache keeps f16 copies of recent rows.
func (c *KVCache) HasRecent() bool { return c.recent != nil }

// newRecent sets up the recent rows of a cache whose types ask for them
// (storage comes with ReserveRecent), after its addressing is set.
func (c *KVCache) newRecent() {
	if c.types.Recent == 0 {
		return
	}
	any := false
	for _, lt := range c.layers {
		any = any || lt.RecentK || lt.RecentV
	}
	if !any {
		return // no quantized half: every row is f16 or f32 already
	}
	r := &recentRows{n: c.types.Recent, slotRows: RecentAlign}
	if c.BlockSize > 0 {
		r.slotRows, r.blocked = c.BlockSize, true
		r.of = make([]int32, c.NBlocks)
	} else {
		r.perSeq = (c.NCtx + RecentAlign - 1) / RecentAlign
		r.of = make([]int32, c.nSeq*r.perSeq)
	}
	for i := range r.of {
		r.of[i] = -1
	}
	r.newest = make([]int32, c.nSeq)
	for i := range r.newest {
		r.newest[i] = -1
	}
	c.recent = r
}

// key returns the block whose slot holds (seq, pos)'s copy.
func (c *KVCache) key(seq, pos int) int {
	if c.recent.blocked {
		return c.cell(seq, pos) >> c.shift
	}
	return seq*c.recent.perSeq + pos/RecentAlign
}

// recentSlots is the recent-row slots for nSeq sequences, batches of up to
// maxBatch rows and slots of slotRows rows: every sequence's window (the
// N+RecentAlign-1 positions a query reads, over at most
// (N+RecentAlign-2)/slotRows+2 slots) and the slots a batch writes, plus one
// window more, kept for a later request reusing a finished sequence's
// prefix (the windows of sequences not running serve that too).
func recentSlots(recent, slotRows, nSeq, maxBatch int) int {
	win := (recent+RecentAlign-2)/slotRows + 2
	return (nSeq+1)*(win+1) + (maxBatch+slotRows-1)/slotRows
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
	slotRows := RecentAlign
	if blockSize > 0 {
		slotRows = blockSize
	}
	var row int64 // bytes of one position's copies
	for _, l := range ls {
		if l.RecentK {
			row += int64(2 * l.HeadK * l.NHead)
		}
		if l.RecentV {
			row += int64(2 * l.HeadV * l.NHead)
		}
	}
	return row * int64(min(recentSlots(t.Recent, slotRows, nSeq, maxBatch), (cells+slotRows-1)/slotRows)*slotRows)
}

// ReserveRecent sizes the recent-row slots for batches of up to maxBatch rows
// (NewContextKV calls it; see recentSlots).
func (c *KVCache) ReserveRecent(maxBatch int) {
	r := c.recent
	if r == nil {
		return
	}
	n := min(recentSlots(r.n, r.slotRows, c.nSeq, maxBatch), len(r.of))
	if n <= r.slots {
		return
	}
	rows := r.slotRows
	grow := func(old []byte, nHead, head int) []byte {
		b := make([]byte, n*rows*nHead*head*2)
		// head-major: head kh's rows of every slot back to back
		for kh := range nHead {
			copy(b[kh*n*rows*head*2:], old[kh*r.slots*rows*head*2:][:r.slots*rows*head*2])
		}
		return b
	}
	if r.k == nil {
		r.k, r.v = make([][]byte, c.NLayer), make([][]byte, c.NLayer)
	}
	for l, lt := range c.layers {
		if lt.RecentK {
			r.k[l] = grow(r.k[l], lt.NHead, lt.HeadK)
		}
		if lt.RecentV {
			r.v[l] = grow(r.v[l], lt.NHead, lt.HeadV)
		}
	}
	free := make([]int32, 0, n)
	for s := n - 1; s >= r.slots; s-- { // taken in ascending order: runs of consecutive slots
		free = append(free, int32(s))
	}
	r.free = append(free, r.free...)
	for range n - r.slots {
		r.blk = append(r.blk, -1)
		r.lo = append(r.lo, 0)
		r.pin = append(r.pin, false)
	}
	r.slots = n
}

// recentBytes returns the storage of the f16 copies of --kv-recent.
func (c *KVCache) recentBytes() int64 {
	if c.recent == nil {
		return 0
	}
	var n int64
	for l := range c.recent.k {
		n += int64(len(c.recent.k[l]) + len(c.recent.v[l]))
	}
	return n
}

// live reports whether sequence s holds cells (its next query may come).
func (c *KVCache) live(s int) bool {
	if c.Tables != nil {
		return len(c.Tables[s]) > 0 && c.recent.newest[s] >= 0
	}
	return c.recent.newest[s] >= 0
}

// covered reports whether the copies of positions [from, to) of seq are
// all kept.
func (c *KVCache) covered(seq, from, to int) bool {
	r := c.recent
	for j := from; j < to; j = j - j%r.slotRows + r.slotRows {
		if !r.holds(c.key(seq, j), j) {
			return false
		}
	}
	return true
}

// holds reports whether block b's slot holds the copy of position j (one
// of b's positions): b has a slot, written from j's row on or before.
func (r *recentRows) holds(b, j int) bool {
	sl := r.of[b]
	return sl >= 0 && int(r.lo[sl]) <= j%r.slotRows
}

// pinRange marks the slots of seq's positions [from, to) as needed.
func (c *KVCache) pinRange(seq, from, to int) {
	r := c.recent
	for j := from; j < to; j = j - j%r.slotRows + r.slotRows {
		if sl := r.of[c.key(seq, j)]; sl >= 0 {
			r.pin[sl] = true
		}
	}
}

// PrepareRecent readies the recent rows for a batch's rows (seq, pos)
// before its layers run (Context.Decode calls it): it refuses the batch if
// a query needs rows no slot holds, and takes slots for the blocks the
// batch writes (evicting blocks no live sequence can read any more).
func (c *KVCache) PrepareRecent(seq, pos []int32) error {
	r := c.recent
	if r == nil {
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
	clear(r.pin)
	for s := range r.newest {
		if c.live(s) && !inBatch(int32(s)) {
			nq := int(r.newest[s]) + 1 // its next query
			c.pinRange(s, c.RecentFrom(nq), nq)
		}
	}
	for t := range seq {
		if !first(t) {
			continue
		}
		s, p := int(seq[t]), int(pos[t])
		if e := c.RecentFrom(p); !c.covered(s, e, p) {
			return fmt.Errorf("%w: --kv-recent: the f16 rows of positions [%d, %d) of sequence %d are no longer kept (the sequence was rewound past them)", ErrBatch, e, p, s)
		}
		t1 := t
		for !last(t1) {
			t1++
		}
		c.pinRange(s, c.RecentFrom(p), int(pos[t1])+1)
	}
	for t := range seq {
		s, p := int(seq[t]), int(pos[t])
		bi := c.key(s, p)
		sl := r.of[bi]
		if sl < 0 {
			var err error
			if sl, err = c.takeSlot(); err != nil {
				return err
			}
			r.of[bi], r.blk[sl], r.lo[sl], r.pin[sl] = sl, int32(bi), int32(p%r.slotRows), true
		} else {
			r.lo[sl] = min(r.lo[sl], int32(p%r.slotRows))
		}
		if last(t) {
			r.newest[s] = int32(p) // a run's last position (a rewound sequence's too)
		}
	}
	return nil
}

// takeSlot returns a free slot, evicting an unpinned one if none is free.
func (c *KVCache) takeSlot() (int32, error) {
	r := c.recent
	if n := len(r.free); n > 0 {
		sl := r.free[n-1]
		r.free = r.free[:n-1]
		return sl, nil
	}
	for i := range r.slots {
		sl := int32((r.cursor + i) % r.slots)
		if !r.pin[sl] {
			r.of[r.blk[sl]] = -1
			r.cursor = int(sl) + 1
			return sl, nil
		}
	}
	return 0, fmt.Errorf("%w: --kv-recent: all %d slots of f16 rows are in use", ErrBatch, r.slots)
}

// forget drops block b's copies (its rows are being replaced).
func (c *KVCache) forget(b int) {
	r := c.recent
	if sl := r.of[b]; sl >= 0 {
		r.of[b], r.blk[sl] = -1, -1
		r.free = append(r.free, sl)
	}
}

// RecentHit returns how many positions of a cached prefix of n positions,
// held in blocks (the cache blocks a sequence would hold, BlockSize
// positions each; -1 for a block whose copies it would not share),
// can be reused with their copies: the largest m ≤ n such that every
// position in [RecentFrom(m), m) has its copy.
func (c *KVCache) RecentHit(blocks []int32, n int) int {
	r := c.recent
	if r == nil || !r.blocked {
		return n
	}
	ok := func(j int) bool { // position j's copy is kept
		b := blocks[j>>c.shift]
		return b >= 0 && r.holds(int(b), j)
	}
	m := min(n, len(blocks)*c.BlockSize)
	for m > 0 {
		bad := -1 // the last position below m whose copy is missing
		for j := m - 1; j >= c.RecentFrom(m); j-- {
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

// RecentAttach records that sequence seq now holds positions [0, n) (a
// reused prefix): its next query is at n.
func (c *KVCache) RecentAttach(seq, n int) {
	if c.recent != nil {
		c.recent.newest[seq] = int32(n - 1)
	}
}

// StoreRecent stores the f16 copies of a batch's new K and V rows of
// layer l (after PrepareRecent).
func (c *KVCache) StoreRecent(l int, seq, pos []int32, k, v []float32) {
	r := c.recent
	if r == nil {
		return
	}
	lt := c.layers[l]
	f16 := quant.QuantizeFunc(quant.F16)
	for t := range seq {
		s, p := int(seq[t]), int(pos[t])
		for kh := range lt.NHead {
			if lt.RecentK {
				f16(k[t*lt.NHead*lt.HeadK+kh*lt.HeadK:][:lt.HeadK], c.RecentKHeadRows(l, kh, s, p, 1))
			}
			if lt.RecentV {
				f16(v[t*lt.NHead*lt.HeadV+kh*lt.HeadV:][:lt.HeadV], c.RecentVHeadRows(l, kh, s, p, 1))
			}
		}
	}
}

// recentOff returns the byte offset of head kh of (seq, pos)'s recent
// row, for heads of dim values.
func (c *KVCache) recentOff(seq, pos, kh, dim int) int {
	r := c.recent
	sl := int(r.of[c.key(seq, pos)])
	return ((kh*r.slots+sl)*r.slotRows + pos%r.slotRows) * dim * 2
}

// RecentRun returns how many positions from pos on (at most n) have their
// recent rows back to back (in consecutive slots), so that
// RecentKHeadRows and RecentVHeadRows can hand them out at once.
func (c *KVCache) RecentRun(seq, pos, n int) int {
	r := c.recent
	sl := r.of[c.key(seq, pos)]
	run := r.slotRows - pos%r.slotRows
	for run < n && r.of[c.key(seq, pos+run)] == sl+1 {
		run += r.slotRows
		sl++
	}
	return min(run, n)
}

// RecentKHeadRows returns head kh of the f16 K rows of positions [pos,
// pos+n) of seq in layer l (n ≤ RecentRun), 2·HeadDimK bytes each.
func (c *KVCache) RecentKHeadRows(l, kh, seq, pos, n int) []byte {
	d := c.layers[l].HeadK
	return c.recent.k[l][c.recentOff(seq, pos, kh, d):][:n*d*2]
}

// RecentVHeadRows is RecentKHeadRows for V.
func (c *KVCache) RecentVHeadRows(l, kh, seq, pos, n int) []byte {
	d := c.layers[l].HeadV
	return c.recent.v[l][c.recentOff(seq, pos, kh, d):][:n*d*2]
}

// GetRecentK writes the f16 K row of (seq, pos) in layer l (a layer with
// RecentK), as float32s, to dst (KDim values); GetRecentV is the same for
// V.
func (c *KVCache) GetRecentK(l, seq, pos int, dst []float32) {
	d := c.layers[l].HeadK
	for kh := range c.layers[l].NHead {
		quant.DequantizeFunc(quant.F16)(c.RecentKHeadRows(l, kh, seq, pos, 1), dst[kh*d:(kh+1)*d])
	}
}

// GetRecentV is GetRecentK for V.
func (c *KVCache) GetRecentV(l, seq, pos int, dst []float32) {
	d := c.layers[l].HeadV
	for kh := range c.layers[l].NHead {
		quant.DequantizeFunc(quant.F16)(c.RecentVHeadRows(l, kh, seq, pos, 1), dst[kh*d:(kh+1)*d])
	}
}
