package model

// kvswa.go: the KV rows of sliding-window layers (Hyper.Window > 0).
//
// A layer whose window is W is read, by the query at position p, only at
// positions p-W < j ≤ p (Attn.Window). A step writes up to B positions of
// a sequence (the batch) before its queries read, so the rows a sequence
// can still need are the W-1 positions before the step's first and the B
// it writes: such a layer keeps, per sequence, a ring of
//
//	Ring = W + B - 1 rounded up to a whole tile (quant.TileRows)
//
// rows, position p in row p mod Ring (the layer's layout block is a
// sequence's ring), instead of a row per cell of the cache. A ring that
// would hold the whole context is not made: such a layer stays full (it
// is cheaper to index the ordinary cells). This is llama.cpp's SWA cache
// (llama_kv_cache_iswa: a second cache of GGML_PAD(min(n_ctx, n_swa·(n_seq
// if unified) + n_ubatch), 256) cells for the SWA layers), per sequence and
// padded to a tile instead of 256 cells.
//
// The rings are not paged and not shared between sequences: a cached
// prefix reused by another sequence brings its full layers' blocks, and
// the window layers' rows only from a ring that still holds them
// (SWAHolds; CopySWA copies a ring, for a sequence forked from a running
// one) or from a window checkpoint taken at the prefix's end
// (kvswackpt.go). With KVTypes.SWAFull (--swa-full, llama-server's flag)
// no layer has a ring: window layers keep a row per cell like the others,
// and a cached prefix comes from blocks alone. Per sequence the cache knows which positions its rings hold
// (lo, hi), and Decode refuses a step whose queries need rows a ring no
// longer holds (a sequence rewound past them), or that writes more rows
// of one sequence than its rings have room for beside the window.

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// DefaultSWABatch is the rows of one sequence per step that a cache's
// rings are sized for until NewContextKV sizes them for its batch
// (ReserveSWA): llama.cpp's default n_ubatch.
const DefaultSWABatch = 512

// swaRings is a cache's sliding-window rings.
type swaRings struct {
	win   []int     // per layer: its window (0: full attention)
	rows  []int     // per layer: ring rows per sequence (0: no ring)
	batch int       // the step rows the rings hold beside the window
	hi    []int32   // per sequence: the rings hold positions below hi...
	lo    [][]int32 // ...from lo[l][seq] on, in ring layer l
}

// swaRingRows returns the ring of a layer of window w for steps of batch
// rows and a context of nCtx, 0 when a ring would hold the whole context.
func swaRingRows(w, batch, nCtx int) int {
	if w <= 0 {
		return 0
	}
	r := quant.WholeTiles(w + batch - 1)
	if r >= quant.WholeTiles(nCtx) {
		return 0
	}
	return r
}

// SWARingRows returns the rows per sequence a layer of window w keeps in a
// cache of types t, nCtx positions and steps of up to batch rows, or 0
// when it keeps a full layer's cells (no window, a ring as large as the
// context, or t.SWAFull).
func SWARingRows(t KVTypes, w, batch, nCtx int) int {
	if t.SWAFull {
		return 0
	}
	return swaRingRows(w, batch, nCtx)
}

// newSWA records h's windows and sizes the rings for steps of batch rows
// (before alloc).
func (c *KVCache) newSWA(h *Hyper, batch int) {
	c.win = make([]int, c.NLayer)
	for l := range c.win {
		if h.KVSource(l) == l { // a shared KV layer (gemma4) has no rows, no ring
			c.win[l] = h.LayerWindow(l)
		}
	}
	c.sizeSWA(batch)
}

// sizeSWA sets the rings for steps of batch rows (nil when no layer has
// one).
func (c *KVCache) sizeSWA(batch int) {
	c.swa = nil
	r := &swaRings{win: c.win, rows: make([]int, c.NLayer), batch: batch}
	any := false
	for l := range c.NLayer {
		r.rows[l] = SWARingRows(c.types, r.win[l], batch, c.NCtx)
		any = any || r.rows[l] > 0
	}
	if !any {
		return
	}
	r.hi = make([]int32, c.nSeq)
	r.lo = make([][]int32, c.NLayer)
	for l := range r.lo {
		if r.rows[l] > 0 {
			r.lo[l] = make([]int32, c.nSeq)
		}
	}
	c.swa = r
}

// ring returns layer l's ring rows per sequence (0: not a ring layer).
func (c *KVCache) ring(l int) int {
	if c.swa == nil {
		return 0
	}
	return c.swa.rows[l]
}

// Ring returns layer l's ring rows per sequence, 0 when the layer keeps a
// row per cell (full attention, or a window whose ring would hold the
// whole context).
func (c *KVCache) Ring(l int) int { return c.ring(l) }

// ReserveSWA sizes the rings for steps of up to maxBatch rows of one
// sequence (NewContextKV calls it), on a new cache: a layer whose ring
// changes is allocated anew, empty (a ring, or a full layer's cells when
// the ring would hold the whole context).
func (c *KVCache) ReserveSWA(maxBatch int) {
	if c.swa == nil && !c.windowed() || c.swa != nil && c.swa.batch == maxBatch {
		return
	}
	old := make([]int, c.NLayer)
	for l := range old {
		old[l] = c.ring(l)
	}
	c.sizeSWA(maxBatch)
	for l := range c.NLayer {
		n := c.ring(l)
		if n == old[l] {
			continue
		}
		rows := c.cells
		if n > 0 {
			rows = c.nSeq * n
		}
		c.K[l] = make([]byte, rows*c.layers[l].NHead*c.layers[l].KHead)
		c.V[l] = make([]byte, rows*c.layers[l].NHead*c.layers[l].VHead)
	}
}

// windowed reports whether some layer has a sliding window.
func (c *KVCache) windowed() bool {
	for _, w := range c.win {
		if w > 0 {
			return true
		}
	}
	return false
}

// LayerRun is Run for layer l: how many positions from pos on sit in
// consecutive rows of one layout block of that layer (a ring layer's run
// ends where its ring wraps).
func (c *KVCache) LayerRun(l, seq, pos int) int {
	if r := c.ring(l); r > 0 {
		return r - pos%r
	}
	return c.Run(seq, pos)
}

// SWAHolds reports whether the rings of seq hold every row a query at
// position n (the sequence's next) reads: those of positions [n-W+1, n) in
// each ring layer. Always true for n = 0 or a cache without rings.
func (c *KVCache) SWAHolds(seq, n int) bool {
	r := c.swa
	if r == nil || n == 0 {
		return true
	}
	if n > int(r.hi[seq]) {
		return false
	}
	for l, rows := range r.rows {
		if rows > 0 && max(0, n-r.win[l]+1) < int(r.lo[l][seq]) {
			return false
		}
	}
	return true
}

// SWAAttach records that seq's next position is n: its rings keep the rows
// below n they hold (n = 0: they hold nothing). The caller has checked
// SWAHolds(seq, n).
func (c *KVCache) SWAAttach(seq, n int) {
	r := c.swa
	if r == nil {
		return
	}
	if n == 0 {
		for l := range r.lo {
			if r.lo[l] != nil {
				r.lo[l][seq] = 0
			}
		}
	}
	r.hi[seq] = int32(n)
}

// CopySWA copies sequence src's rings (every ring layer, and what they
// hold) to sequence dst: a sequence forked from src's prefix.
func (c *KVCache) CopySWA(dst, src int) {
	r := c.swa
	if r == nil || dst == src {
		return
	}
	for l, rows := range r.rows {
		if rows == 0 {
			continue
		}
		// a ring is one layout block: each head's rows back to back
		kb, vb := rows*c.layers[l].NHead*c.layers[l].KHead, rows*c.layers[l].NHead*c.layers[l].VHead
		copy(c.K[l][dst*kb:(dst+1)*kb], c.K[l][src*kb:(src+1)*kb])
		copy(c.V[l][dst*vb:(dst+1)*vb], c.V[l][src*vb:(src+1)*vb])
		r.lo[l][dst] = r.lo[l][src]
	}
	r.hi[dst] = r.hi[src]
}

// PrepareSWA checks a step's rows (seq, pos) against the rings before its
// layers run (Context.Decode calls it), and records what the rings hold
// after it: it refuses a run of a sequence whose queries need rows a ring
// no longer holds, or that writes more rows than a ring holds beside its
// window.
func (c *KVCache) PrepareSWA(seq, pos []int32) error {
	r := c.swa
	if r == nil {
		return nil
	}
	for r0 := 0; r0 < len(seq); {
		r1 := r0 + 1
		p0, p1 := int(pos[r0]), int(pos[r0])
		for r1 < len(seq) && seq[r1] == seq[r0] {
			p0, p1 = min(p0, int(pos[r1])), max(p1, int(pos[r1]))
			r1++
		}
		s := int(seq[r0])
		if p0 > int(r.hi[s]) {
			return fmt.Errorf("%w: sliding window: sequence %d writes position %d but its window rows stop at %d", ErrBatch, s, p0, r.hi[s])
		}
		for l, rows := range r.rows {
			if rows == 0 {
				continue
			}
			if need := max(0, p0-r.win[l]+1); p0 > 0 && need < int(r.lo[l][s]) {
				return fmt.Errorf("%w: sliding window: the rows of positions [%d, %d) of sequence %d in layer %d are no longer kept (the sequence was rewound past them)", ErrBatch, need, r.lo[l][s], s, l)
			}
			if p1-p0+r.win[l] > rows {
				return fmt.Errorf("%w: sliding window: %d rows of sequence %d in one step, layer %d's ring holds %d beside its window of %d", ErrBatch, p1-p0+1, s, l, rows-r.win[l]+1, r.win[l])
			}
		}
		r0 = r1
	}
	for r0 := 0; r0 < len(seq); { // what the rings hold once the step has written
		r1 := r0 + 1
		p0, p1 := int(pos[r0]), int(pos[r0])
		for r1 < len(seq) && seq[r1] == seq[r0] {
			p0, p1 = min(p0, int(pos[r1])), max(p1, int(pos[r1]))
			r1++
		}
		s := int(seq[r0])
		for l, rows := range r.rows {
			if rows == 0 {
				continue
			}
			lo := int(r.lo[l][s])
			if p0 == 0 { // a sequence (re)started: nothing before it counts
				lo = 0
			}
			r.lo[l][s] = int32(max(lo, p1+1-rows))
		}
		r.hi[s] = int32(p1 + 1)
		r0 = r1
	}
	return nil
}

// KVCacheBytes returns the storage of a KV cache of types t holding cells
// cells (all sequences together) for nSeq sequences of nCtx positions and
// steps of up to maxBatch rows: cells × a cell's bytes in the layers
// without a ring (every layer with t.SWAFull), plus the rings of the
// sliding-window layers (nSeq × SWARingRows rows each) and a hybrid model's recurrent state for nSeq
// sequences, whatever cells is. It is KVCache.Bytes of such a
// cache, less --kv-recent's copies (KVRecentReserve), when cells is the
// rows the cache allocates (a contiguous cache: nSeq × nCtx rounded up to a
// whole tile; a paged one: its blocks' rows rounded up to a layout block of
// 256).
func KVCacheBytes(h *Hyper, t KVTypes, cells, nSeq, nCtx, maxBatch int) (int64, error) {
	ls, err := KVLayers(h, t)
	if err != nil {
		return 0, err
	}
	var n int64
	for l, lt := range ls {
		rows := int64(cells)
		if r := SWARingRows(t, h.LayerWindow(l), maxBatch, nCtx); r > 0 {
			rows = int64(nSeq) * int64(r)
		}
		n += rows * int64(lt.RowBytes())
	}
	return n + RecurrentStateBytes(h, nSeq), nil
}

// SWAFullBytesPerToken returns the bytes of one cell in the layers that
// keep a row per cell (no ring; every layer with t.SWAFull) for nCtx
// positions and steps of maxBatch rows: what each further cell of a cache
// costs.
func SWAFullBytesPerToken(h *Hyper, t KVTypes, nCtx, maxBatch int) (int, error) {
	ls, err := KVLayers(h, t)
	n := 0
	for l, lt := range ls {
		if SWARingRows(t, h.LayerWindow(l), maxBatch, nCtx) == 0 {
			n += lt.RowBytes()
		}
	}
	return n, err
}

// swaSaved is a copy of one sequence's rings (SaveSWA).
type swaSaved struct {
	seq  int
	k, v [][]byte // per layer: the sequence's ring, nil for a layer without one
	lo   []int32  // per layer: what the ring held from
	hi   int32
}

// SaveSWA keeps a copy of sequence seq's rings in the cache, as
// llama-bench keeps the state of its depth (llama_state_seq_get_data):
// after RestoreSWA the rings hold what they held now, so a test can run
// again from the same depth although its rows overwrote the window.
// It is an error with --kv-recent's f16 rows, which it does not copy.
// A cache without rings saves nothing.
func (c *KVCache) SaveSWA(seq int) error {
	r := c.swa
	if r == nil {
		return nil
	}
	if c.recent != nil {
		return fmt.Errorf("KV cache: saving a sliding-window sequence with --kv-recent rows is not supported")
	}
	s := c.swaSaved
	if s == nil {
		s = &swaSaved{k: make([][]byte, len(r.rows)), v: make([][]byte, len(r.rows)), lo: make([]int32, len(r.rows))}
		c.swaSaved = s
	}
	s.seq, s.hi = seq, r.hi[seq]
	for l, rows := range r.rows {
		if rows == 0 {
			continue
		}
		kb, vb := rows*c.layers[l].NHead*c.layers[l].KHead, rows*c.layers[l].NHead*c.layers[l].VHead
		s.k[l] = append(s.k[l][:0], c.K[l][seq*kb:(seq+1)*kb]...)
		s.v[l] = append(s.v[l][:0], c.V[l][seq*vb:(seq+1)*vb]...)
		s.lo[l] = r.lo[l][seq]
	}
	return nil
}

// RestoreSWA puts back the rings SaveSWA saved for seq; it reports false
// (and changes nothing) when the cache has rings but none saved for seq.
func (c *KVCache) RestoreSWA(seq int) bool {
	r, s := c.swa, c.swaSaved
	if r == nil {
		return true
	}
	if s == nil || s.seq != seq {
		return false
	}
	for l, rows := range r.rows {
		if rows == 0 {
			continue
		}
		kb, vb := rows*c.layers[l].NHead*c.layers[l].KHead, rows*c.layers[l].NHead*c.layers[l].VHead
		copy(c.K[l][seq*kb:(seq+1)*kb], s.k[l])
		copy(c.V[l][seq*vb:(seq+1)*vb], s.v[l])
		r.lo[l][seq] = s.lo[l]
	}
	r.hi[seq] = s.hi
	return true
}
