package model

// kvcache.go: the KV cache: its storage (per layer, K and V rows in the
// cache's types, head-major in layout blocks), its two addressings
// (contiguous, paged), and what backends read it through. Writing rows
// is in kvstore.go, the f16 recent rows of --kv-recent in kvrecent.go.
// It does not decide which blocks a sequence gets (stages' kvblocks.go).

import (
	"fmt"
	"math/bits"

	"github.com/flowinfer/flowinfer/quant"
)

// KVCache stores every layer's K and V rows for nSeq sequences of up to
// NCtx positions, in the types it was made with (KVTypes, -ctk/-ctv: f32,
// f16, bf16, q8_0, q4_0, tq4, tq3; f16 in KVTypes.Protect layers at each
// end). A cell
// (seq, pos) of layer l maps to a row; a row holds NHeadKV heads
// (Layer(l).KHead/VHead bytes each: a whole number of blocks of a
// block type, one quant.Turbo row of a TurboQuant type), stored head-major
// within layout blocks of lb rows (a multiple of quant.TileRows): head kh
// of row r of V[l] is at byte ((r/lb·NHeadKV + kh)·lb + r%lb)·Layer(l).VHead,
// so one head's rows of a block are back to back and attention streams
// them. K heads are placed the same way by tiles of quant.TileRows rows,
// each stored transposed (quant.TileRows' layout, in units of
// Layer(l).KUnit bytes): decode scores read a tile's rows in the lanes of
// one vector, with no sums across lanes. Rows are addressed in one of two
// ways:
//
//   - contiguous (Tables nil): cell (seq, pos) is row seq*lb+pos, and a
//     layout block is a sequence (lb = NCtx rounded up to a whole tile):
//     one head's rows of a whole sequence are consecutive.
//   - paged (Tables set): rows are grouped in NBlocks blocks of BlockSize
//     rows (lb = 256 rows, or BlockSize if larger: a layout block is
//     several consecutive blocks), shared by all sequences;
//     Tables[seq][pos/BlockSize] is the block holding (seq, pos). Blocks
//     may appear in several tables (a shared prompt prefix); a sequence
//     only writes blocks that are its own. Backends must read it through
//     the head accessors (KHeadTiles, VHeadRows, Run) and declare it by
//     implementing PagedKV.
type KVCache struct {
	NLayer, NCtx int
	nSeq         int
	KDim, VDim   int // values per row: NHeadKV × head dimension (a layer's own: KDimOf, VDimOf)
	types        KVTypes
	lb           int // rows per layout block
	K, V         [][]byte
	// BlockSize is the rows per block, a power of two (0: a contiguous
	// cache made by NewKVCache, without block addressing).
	BlockSize, NBlocks int
	Tables             [][]int32
	shift              uint
	headK, headV       int              // head dimensions
	layers             []KVLayer        // per layer: types and bytes per head
	tk, tv             [][]*quant.Turbo // [layer][head] codecs of TurboQuant types
	scratch            []float32        // SetK/SetV's TurboQuant scratch
	storer             KVStorer         // Store's backend (NewContextKV; nil: SetK and SetV)
	deferrer           KVDeferrer       // Store's deferrer (Context.SetHooks; nil: none)
	recent             *recentRows      // --kv-recent's f16 rows (nil: none)
	swa                *swaRings        // the sliding-window layers' rings (nil: none; kvswa.go)
	swaSaved           *swaSaved        // SaveSWA's copy of one sequence's rings
	swaCkpt            *windowCkpts     // window checkpoints (kvswackpt.go; nil: none)
	win                []int            // per layer: its sliding window (0: none)
	cells              int              // rows of a layer without a ring
	// State is the recurrent layers' per-sequence state of a hybrid
	// model (recurrent.go), nil for the others.
	State *RecurrentState
}

// PagedKV is implemented by backends whose Attention reads the cache only
// through its head accessors (KHeadTiles, VHeadRows, Run and their
// Recent... forms), so that it works on a paged cache.
// Context.Decode refuses a paged cache on any other backend.
type PagedKV interface {
	PagedKV() bool
}

// SupportsPagedKV reports whether ops can run on a paged cache.
func SupportsPagedKV(ops Ops) bool {
	p, ok := ops.(PagedKV)
	return ok && p.PagedKV()
}

// NewKVCache allocates a contiguous f32 cache.
func NewKVCache(h *Hyper, nCtx, nSeq int) *KVCache {
	c, err := NewKVCacheOf(h, KVTypes{}, nCtx, nSeq)
	if err != nil {
		panic(err) // f32 stores any head
	}
	return c
}

// NewKVCacheOf allocates a contiguous cache of types t.
func NewKVCacheOf(h *Hyper, t KVTypes, nCtx, nSeq int) (*KVCache, error) {
	c, err := newKV(h, t, nCtx, nSeq)
	if err != nil {
		return nil, err
	}
	c.lb = quant.WholeTiles(nCtx)
	c.alloc(nSeq*c.lb, nil)
	c.newRecent()
	return c, nil
}

// newKV fills in a cache's shape and codecs, without storage.
func newKV(h *Hyper, t KVTypes, nCtx, nSeq int) (*KVCache, error) {
	ls, err := KVLayers(h, t)
	if err != nil {
		return nil, err
	}
	c := &KVCache{NLayer: h.NLayer, NCtx: nCtx, nSeq: nSeq, KDim: h.KDim(), VDim: h.VDim(), types: t,
		headK: h.maxOver(h.HeadDimKAt), headV: h.maxOver(h.HeadDimVAt), layers: ls}
	if c.tk, err = turboCodecs(h, ls, true); err != nil {
		return nil, err
	}
	if c.tv, err = turboCodecs(h, ls, false); err != nil {
		return nil, err
	}
	c.scratch = make([]float32, c.StoreScratch())
	c.newSWA(h, DefaultSWABatch)
	c.State = newRecurrentState(h, nSeq)
	return c, nil
}

// turboCodecs returns a TurboQuant codec per layer and head for the
// layers whose K (k) or V half has a TurboQuant type (nil for the others,
// nil for all if none has), each with its own rotation, seeded by (layer,
// head, half): caches made for the same model agree.
func turboCodecs(h *Hyper, ls []KVLayer, k bool) ([][]*quant.Turbo, error) {
	var cs [][]*quant.Turbo
	for l, lt := range ls {
		t, half, dim := lt.V, byte('V'), lt.HeadV
		if k {
			t, half, dim = lt.K, 'K', lt.HeadK
		}
		b := t.Turbo()
		if b == 0 || lt.NoRows {
			continue
		}
		if cs == nil {
			cs = make([][]*quant.Turbo, h.NLayer)
		}
		cs[l] = make([]*quant.Turbo, lt.NHead)
		for kh := range cs[l] {
			seed := uint64(l)<<32 | uint64(kh)<<8 | uint64(half)
			tq, err := quant.NewTurbo(dim, b, seed)
			if err != nil {
				return nil, err
			}
			cs[l][kh] = tq
		}
	}
	return cs, nil
}

// Layer returns layer l's K and V types and bytes per head.
func (c *KVCache) Layer(l int) KVLayer { return c.layers[l] }

// alloc allocates rows rows per layer (a sliding-window layer's rings
// instead: kvswa.go; none for a layer with NoRows, whose K[l] and V[l] stay
// nil).
func (c *KVCache) alloc(rows int, device []bool) {
	c.cells = rows
	c.K = make([][]byte, c.NLayer)
	c.V = make([][]byte, c.NLayer)
	for l := range c.K {
		if c.layers[l].NoRows || device != nil && device[l] {
			continue // no rows; or rows on a device (deviceLayers)
		}
		n := rows
		if r := c.ring(l); r > 0 {
			n = c.nSeq * r
		}
		c.K[l] = make([]byte, n*c.layers[l].NHead*c.layers[l].KHead)
		c.V[l] = make([]byte, n*c.layers[l].NHead*c.layers[l].VHead)
	}
}

// Bytes returns the cache's storage in bytes (--kv-recent's f16 rows,
// the sliding-window layers' rings and their window checkpoints, and a
// hybrid model's recurrent state and its checkpoints included; a
// recurrent layer has no rows).
func (c *KVCache) Bytes() int64 {
	n := c.recentBytes() + c.State.Bytes() + c.swaCkpt.bytes()
	for l := range c.K {
		n += int64(len(c.K[l]) + len(c.V[l]))
	}
	return n
}

// NewBlockKVCache allocates a contiguous cache of types t whose rows are
// also addressed as blocks of blockSize (a power of two dividing nCtx):
// block b is rows [b*blockSize, (b+1)*blockSize), so sequence s owns
// blocks s*lb/blockSize and following (lb: nCtx rounded up to a whole
// tile). Its block copies (CopyRows) let a scheduler share prefixes
// between sequences by copying.
func NewBlockKVCache(h *Hyper, t KVTypes, blockSize, nCtx, nSeq int) (*KVCache, error) {
	return NewBlockKVCacheFor(nil, h, t, blockSize, nCtx, nSeq)
}

// NewBlockKVCacheFor is NewBlockKVCache for a Context computing on ops
// (nil: the host): the layers whose rows ops keeps on its device (a
// model.Split's device layers, or every layer of a device backend: see
// Split) get no host storage, rather than storage NewContextKV would
// drop, so the host never holds those layers' rows, even briefly.
func NewBlockKVCacheFor(ops Ops, h *Hyper, t KVTypes, blockSize, nCtx, nSeq int) (*KVCache, error) {
	if blockSize <= 0 || blockSize&(blockSize-1) != 0 || nCtx%blockSize != 0 {
		return nil, fmt.Errorf("model: KV block size %d must be a power of two dividing the context %d", blockSize, nCtx)
	}
	c, err := newKV(h, t, nCtx, nSeq)
	if err != nil {
		return nil, err
	}
	c.lb = quant.WholeTiles(nCtx)
	c.BlockSize, c.NBlocks = blockSize, nSeq*c.lb/blockSize
	c.shift = uint(bits.TrailingZeros(uint(blockSize)))
	c.newRecent() // copies by block
	dev, err := c.deviceLayers(ops)
	if err != nil {
		return nil, err
	}
	c.alloc(nSeq*c.lb, dev)
	return c, nil
}

// NewPagedKVCache allocates a paged cache of types t, nBlocks blocks of
// blockSize rows (a power of two) for nSeq sequences of up to nCtx
// positions, with empty block tables.
func NewPagedKVCache(h *Hyper, t KVTypes, blockSize, nBlocks, nSeq, nCtx int) (*KVCache, error) {
	if blockSize <= 0 || blockSize&(blockSize-1) != 0 || nBlocks <= 0 || nSeq <= 0 || nCtx <= 0 {
		return nil, fmt.Errorf("model: paged KV cache of %d blocks of %d (a power of two) for %d sequences of %d positions", nBlocks, blockSize, nSeq, nCtx)
	}
	c, err := newKV(h, t, nCtx, nSeq)
	if err != nil {
		return nil, err
	}
	c.BlockSize, c.NBlocks, c.lb = blockSize, nBlocks, max(blockSize, pagedLayoutRows)
	c.shift = uint(bits.TrailingZeros(uint(blockSize)))
	c.alloc((nBlocks*blockSize+c.lb-1)/c.lb*c.lb, nil)
	c.Tables = make([][]int32, nSeq)
	c.newRecent()
	return c, nil
}

// Paged reports whether the cache is paged (has block tables).
func (c *KVCache) Paged() bool { return c.Tables != nil }

// cell returns the row index of (seq, pos) in the cache's addressing
// (contiguous or paged): its row in every layer but a sliding-window
// layer's ring.
func (c *KVCache) cell(seq, pos int) int {
	if c.Tables == nil {
		return seq*c.lb + pos
	}
	return int(c.Tables[seq][pos>>c.shift])<<c.shift | pos&(c.BlockSize-1)
}

// row returns the row index of (seq, pos) in layer l: a sliding-window
// layer's ring row (kvswa.go), else cell.
func (c *KVCache) row(l, seq, pos int) int {
	if r := c.ring(l); r > 0 {
		return seq*r + pos%r
	}
	return c.cell(seq, pos)
}

// off returns the byte offset of head kh of row r of layer l, for heads of
// hb bytes (layout blocks of lb rows; a ring layer's are its rings).
func (c *KVCache) off(l, r, kh, hb int) int {
	lb := c.lb
	if rr := c.ring(l); rr > 0 {
		lb = rr
	}
	b := r / lb
	return ((b*c.layers[l].NHead+kh)*lb + r - b*lb) * hb
}

// ktile returns the transposed tile of K[l] holding head kh of row r,
// and r's row in it.
func (c *KVCache) ktile(l, r, kh int) ([]byte, int) {
	hb := c.layers[l].KHead
	i := c.off(l, r&^(quant.TileRows-1), kh, hb)
	return c.K[l][i : i+quant.TileRows*hb], r & (quant.TileRows - 1)
}

// KHeadRow copies the stored K head kh of (seq, pos) in layer l
// (Layer(l).KHead bytes, untransposed) to dst and returns it.
func (c *KVCache) KHeadRow(dst []byte, l, seq, pos, kh int) []byte {
	t, r := c.ktile(l, c.row(l, seq, pos), kh)
	dst = dst[:c.layers[l].KHead]
	quant.TileRow(dst, t, r, c.layers[l].KUnit)
	return dst
}

// TurboK returns the codec of K head kh in layer l (nil unless K is a
// TurboQuant type); TurboV is the same for V.
func (c *KVCache) TurboK(l, kh int) *quant.Turbo {
	if c.tk == nil || c.tk[l] == nil {
		return nil
	}
	return c.tk[l][kh]
}

// TurboV is TurboK for V.
func (c *KVCache) TurboV(l, kh int) *quant.Turbo {
	if c.tv == nil || c.tv[l] == nil {
		return nil
	}
	return c.tv[l][kh]
}

// NSeq returns the number of sequences the cache holds.
func (c *KVCache) NSeq() int { return c.nSeq }

// KDimOf is the values of one K row of layer l (its KV heads × its K head
// size; KDim for a model whose layers are alike); VDimOf is the same for V.
func (c *KVCache) KDimOf(l int) int { return c.layers[l].NHead * c.layers[l].HeadK }

// VDimOf: see KDimOf.
func (c *KVCache) VDimOf(l int) int { return c.layers[l].NHead * c.layers[l].HeadV }

// NHeadKV returns the KV heads of a row of layer l.
func (c *KVCache) NHeadKV(l int) int { return c.layers[l].NHead }

// GetK writes the K row of (seq, pos) in layer l, as float32s, to dst
// (KDim values): the values attention uses (a reference; backends read
// the stored bytes). scratch holds at least 2×the padded head dimension
// for TurboQuant types (nil otherwise).
func (c *KVCache) GetK(l, seq, pos int, dst, scratch []float32) {
	var buf [512]byte
	b := buf[:]
	if c.layers[l].KHead > len(buf) {
		b = make([]byte, c.layers[l].KHead)
	}
	hk := c.layers[l].HeadK
	for kh := range c.layers[l].NHead {
		decodeHead(c.KHeadRow(b, l, seq, pos, kh), c.layers[l].K, c.TurboK(l, kh), dst[kh*hk:(kh+1)*hk], scratch)
	}
}

// GetV is GetK for V.
func (c *KVCache) GetV(l, seq, pos int, dst, scratch []float32) {
	hv := c.layers[l].HeadV
	for kh := range c.layers[l].NHead {
		decodeHead(c.VHeadRows(l, kh, seq, pos, 1), c.layers[l].V, c.TurboV(l, kh), dst[kh*hv:(kh+1)*hv], scratch)
	}
}

// decodeHead converts one stored head to float32s.
func decodeHead(src []byte, t KVType, tq *quant.Turbo, dst, scratch []float32) {
	if tq != nil {
		tq.Decode(dst, src, scratch)
		return
	}
	qt, _ := t.Quant()
	quant.DequantizeFunc(qt)(src, dst)
}

// Run returns how many positions from pos on (up to the end of the
// sequence's context, or of its block in a paged cache) sit in
// consecutive rows of one layout block, so that KHeadTiles and VHeadRows
// can hand them out as one run per head.
func (c *KVCache) Run(seq, pos int) int {
	if c.Tables == nil {
		return c.NCtx - pos
	}
	t := c.Tables[seq]
	i := pos >> c.shift
	n := c.BlockSize - pos&(c.BlockSize-1)
	for i+1 < len(t) && t[i+1] == t[i]+1 && int(t[i+1])<<c.shift%c.lb != 0 {
		n += c.BlockSize
		i++
	}
	return n
}

// pagedLayoutRows is the layout block of a paged cache: consecutive blocks
// within one (the KV block allocator hands a growing sequence consecutive blocks)
// hold each head's rows back to back, so attention streams runs of several
// blocks.
const pagedLayoutRows = 256

// KHeadTiles returns head kh of the stored K rows of positions [pos,
// pos+n) of seq in layer l: the transposed tiles that hold them, back to
// back (quant.TileRows·KHead bytes each, in units of KUnit bytes), and
// the row of the first tile that holds pos (the rows before it, and those
// after pos+n-1 in the last tile, are other positions or unwritten); n
// must not exceed Run(seq, pos).
func (c *KVCache) KHeadTiles(l, kh, seq, pos, n int) ([]byte, int) {
	hb := c.layers[l].KHead
	r := c.row(l, seq, pos)
	r0 := r & (quant.TileRows - 1)
	i := c.off(l, r-r0, kh, hb)
	return c.K[l][i : i+quant.WholeTiles(r0+n)*hb], r0
}

// VHeadRows returns head kh of the stored V rows of positions [pos,
// pos+n) of seq in layer l, back to back (VHead bytes each); n must not
// exceed Run(seq, pos).
func (c *KVCache) VHeadRows(l, kh, seq, pos, n int) []byte {
	hb := c.layers[l].VHead
	i := c.off(l, c.row(l, seq, pos), kh, hb)
	return c.V[l][i : i+n*hb]
}

// CopyRows copies the first n rows of block src to block dst in every
// layer but the sliding-window layers' rings (a block-addressed cache:
// paged, or from NewBlockKVCache).
func (c *KVCache) CopyRows(dst, src, n int) {
	if dst == src || n <= 0 {
		return
	}
	if c.recent != nil {
		c.forget(dst) // its f16 copies (--kv-recent) are not copied
	}
	d, s := dst*c.BlockSize, src*c.BlockSize
	var buf [512]byte
	for l := range c.K {
		if c.ring(l) > 0 || c.layers[l].NoRows {
			continue // a sequence's ring, not blocks (CopySWA); or no rows
		}
		if !c.HostKV(l) {
			// a device backend's layer (split.go): its backend copies
			// the rows (deviceLayers made sure it is a KVCopier)
			cp, _ := c.storer.(KVCopier)
			cp.CopyKV(c, l, d/c.lb, d%c.lb, s/c.lb, s%c.lb, n)
			continue
		}
		kb, vb := c.layers[l].KHead, c.layers[l].VHead
		for kh := range c.layers[l].NHead {
			copy(c.V[l][c.off(l, d, kh, vb):][:n*vb], c.V[l][c.off(l, s, kh, vb):][:n*vb])
			if c.BlockSize%quant.TileRows == 0 {
				// whole tiles: the rows past n in the last one are rows
				// of dst not written yet, which its owner writes before
				// reading
				m := quant.WholeTiles(n) * kb
				copy(c.K[l][c.off(l, d, kh, kb):][:m], c.K[l][c.off(l, s, kh, kb):][:m])
				continue
			}
			b := buf[:]
			if kb > len(buf) {
				b = make([]byte, kb)
			}
			b = b[:kb]
			for i := range n { // blocks share tiles: row by row
				t, r := c.ktile(l, s+i, kh)
				quant.TileRow(b, t, r, c.layers[l].KUnit)
				c.putK(l, d+i, kh, b)
			}
		}
	}
}
