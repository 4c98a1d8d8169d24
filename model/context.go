package model

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/flowinfer/flowinfer/quant"
)

// f32Bytes views float32s as their bytes (little-endian machines).
func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// KVCache stores every layer's K and V rows for NSeq sequences of up to
// NCtx positions, in the types Types (-ctk/-ctv: f32, f16, bf16, q8_0,
// q4_0, tq4, tq3; f16 in Types.Protect layers at each end). A cell
// (seq, pos) of layer l maps to a row; a row holds NHeadKV heads
// (Layer(l).KHead/VHead bytes each: a whole number of blocks of a
// block type, one quant.Turbo row of a TurboQuant type), stored head-major
// within layout blocks of LB rows (a multiple of quant.TileRows): head kh
// of row r of V[l] is at byte ((r/LB·NHeadKV + kh)·LB + r%LB)·Layer(l).VHead,
// so one head's rows of a block are back to back and attention streams
// them. K heads are placed the same way by tiles of quant.TileRows rows,
// each stored transposed (quant.TileRows' layout, in units of
// Layer(l).KUnit bytes): decode scores read a tile's rows in the lanes of
// one vector, with no sums across lanes. Rows are addressed in one of two
// ways:
//
//   - contiguous (Tables nil): cell (seq, pos) is row seq*LB+pos, and a
//     layout block is a sequence (LB = NCtx rounded up to a whole tile):
//     one head's rows of a whole sequence are consecutive.
//   - paged (Tables set): rows are grouped in NBlocks blocks of BlockSize
//     rows (LB = 256 rows, or BlockSize if larger: a layout block is
//     several consecutive blocks), shared by all sequences;
//     Tables[seq][pos/BlockSize] is the block holding (seq, pos). Blocks
//     may appear in several tables (a shared prompt prefix); a sequence
//     only writes blocks that are its own. Backends must read it through
//     the head accessors (KHeadTiles, VHeadRows, Run) and declare it by
//     implementing PagedKV.
type KVCache struct {
	NLayer, NCtx, NSeq int
	KDim, VDim         int // values per row: NHeadKV × head dimension
	Types              KVTypes
	LB                 int // rows per layout block
	K, V               [][]byte
	// BlockSize is the rows per block, a power of two (0: a contiguous
	// cache made by NewKVCache, without block addressing).
	BlockSize, NBlocks int
	Tables             [][]int32
	shift              uint
	nHead              int
	headK, headV       int              // head dimensions
	layers             []KVLayer        // per layer: types and bytes per head
	tk, tv             [][]*quant.Turbo // [layer][head] codecs of TurboQuant types
	scratch            []float32        // SetK/SetV's TurboQuant scratch
	recent             *recentRows      // --kv-recent's f16 rows (nil: none)
}

// PagedKV is implemented by backends whose Attention reads the cache only
// through KRow/VRow or KRows/Run, so that it works on a paged cache.
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
	c.LB = roundUp(nCtx, quant.TileRows)
	c.alloc(nSeq * c.LB)
	c.newRecent()
	return c, nil
}

// newKV fills in a cache's shape and codecs, without storage.
func newKV(h *Hyper, t KVTypes, nCtx, nSeq int) (*KVCache, error) {
	ls, err := KVLayers(h, t)
	if err != nil {
		return nil, err
	}
	c := &KVCache{NLayer: h.NLayer, NCtx: nCtx, NSeq: nSeq, KDim: h.KDim(), VDim: h.VDim(), Types: t,
		nHead: h.NHeadKV, headK: h.HeadDimK, headV: h.HeadDimV, layers: ls}
	if c.tk, err = turboCodecs(h, ls, true, h.HeadDimK); err != nil {
		return nil, err
	}
	if c.tv, err = turboCodecs(h, ls, false, h.HeadDimV); err != nil {
		return nil, err
	}
	c.scratch = make([]float32, c.StoreScratch())
	return c, nil
}

// turboCodecs returns a TurboQuant codec per layer and head for the
// layers whose K (k) or V half has a TurboQuant type (nil for the others,
// nil for all if none has), each with its own rotation, seeded by (layer,
// head, half): caches made for the same model agree.
func turboCodecs(h *Hyper, ls []KVLayer, k bool, dim int) ([][]*quant.Turbo, error) {
	var cs [][]*quant.Turbo
	for l, lt := range ls {
		t, half := lt.V, byte('V')
		if k {
			t, half = lt.K, 'K'
		}
		b := t.Turbo()
		if b == 0 {
			continue
		}
		if cs == nil {
			cs = make([][]*quant.Turbo, h.NLayer)
		}
		cs[l] = make([]*quant.Turbo, h.NHeadKV)
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

func (c *KVCache) alloc(rows int) {
	c.K = make([][]byte, c.NLayer)
	c.V = make([][]byte, c.NLayer)
	for l := range c.K {
		c.K[l] = make([]byte, rows*c.nHead*c.layers[l].KHead)
		c.V[l] = make([]byte, rows*c.nHead*c.layers[l].VHead)
	}
}

// Bytes returns the cache's storage in bytes (--kv-recent's f16 rows
// included).
func (c *KVCache) Bytes() int64 {
	n := c.recentBytes()
	for l := range c.K {
		n += int64(len(c.K[l]) + len(c.V[l]))
	}
	return n
}

// NewBlockKVCache allocates a contiguous cache of types t whose rows are
// also addressed as blocks of blockSize (a power of two dividing nCtx):
// block b is rows [b*blockSize, (b+1)*blockSize), so sequence s owns
// blocks s*LB/blockSize and following (LB: nCtx rounded up to a whole
// tile). Its block copies (CopyRows) let
// a scheduler share prefixes between sequences by copying.
func NewBlockKVCache(h *Hyper, t KVTypes, blockSize, nCtx, nSeq int) (*KVCache, error) {
	if blockSize <= 0 || blockSize&(blockSize-1) != 0 || nCtx%blockSize != 0 {
		return nil, fmt.Errorf("model: KV block size %d must be a power of two dividing the context %d", blockSize, nCtx)
	}
	c, err := NewKVCacheOf(h, t, nCtx, nSeq)
	if err != nil {
		return nil, err
	}
	c.BlockSize, c.NBlocks = blockSize, nSeq*c.LB/blockSize
	c.shift = uint(bits.TrailingZeros(uint(blockSize)))
	c.recent = nil
	c.newRecent() // copies by block
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
	c.BlockSize, c.NBlocks, c.LB = blockSize, nBlocks, max(blockSize, pagedLayoutRows)
	c.shift = uint(bits.TrailingZeros(uint(blockSize)))
	c.alloc((nBlocks*blockSize + c.LB - 1) / c.LB * c.LB)
	c.Tables = make([][]int32, nSeq)
	c.newRecent()
	return c, nil
}

// Paged reports whether the cache is paged (has block tables).
func (c *KVCache) Paged() bool { return c.Tables != nil }

// row returns the row index of (seq, pos).
func (c *KVCache) row(seq, pos int) int {
	if c.Tables == nil {
		return seq*c.LB + pos
	}
	return int(c.Tables[seq][pos>>c.shift])<<c.shift | pos&(c.BlockSize-1)
}

// off returns the byte offset of head kh of row r, for heads of hb bytes.
func (c *KVCache) off(r, kh, hb int) int {
	b := r / c.LB
	return ((b*c.nHead+kh)*c.LB + r - b*c.LB) * hb
}

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

// ktile returns the transposed tile of K[l] holding head kh of row r,
// and r's row in it.
func (c *KVCache) ktile(l, r, kh int) ([]byte, int) {
	hb := c.layers[l].KHead
	i := c.off(r&^(quant.TileRows-1), kh, hb)
	return c.K[l][i : i+quant.TileRows*hb], r & (quant.TileRows - 1)
}

// KHeadRow copies the stored K head kh of (seq, pos) in layer l
// (Layer(l).KHead bytes, untransposed) to dst and returns it.
func (c *KVCache) KHeadRow(dst []byte, l, seq, pos, kh int) []byte {
	t, r := c.ktile(l, c.row(seq, pos), kh)
	dst = dst[:c.layers[l].KHead]
	quant.TileRow(dst, t, r, c.layers[l].KUnit)
	return dst
}

// putK stores the K head bytes b as head kh of row r of layer l.
func (c *KVCache) putK(l, r, kh int, b []byte) {
	t, i := c.ktile(l, r, kh)
	quant.PutTileRow(t, i, c.layers[l].KUnit, b)
}

// VHeadRow is KHeadRow for V.
func (c *KVCache) VHeadRow(l, seq, pos, kh int) []byte {
	hb := c.layers[l].VHead
	i := c.off(c.row(seq, pos), kh, hb)
	return c.V[l][i : i+hb]
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

// SetK stores x (KDim values) as the K row of (seq, pos) in layer l,
// converted to the cache's K type. SetK and SetV share scratch: calls on
// one cache must not run concurrently.
func (c *KVCache) SetK(l, seq, pos int, x []float32) {
	r := c.row(seq, pos)
	for kh := range c.nHead {
		c.storeK(l, r, kh, x[kh*c.headK:(kh+1)*c.headK], c.scratch)
	}
}

// storeK converts head kh of a K row (its headK values x) and stores it
// in row r of layer l; scratch is StoreScratch floats.
func (c *KVCache) storeK(l, r, kh int, x, scratch []float32) {
	lt := &c.layers[l]
	if lt.K == KVF32 {
		c.putK(l, r, kh, f32Bytes(x))
		return
	}
	// the head's bytes are made in the scratch's tail, past what a
	// TurboQuant encoding uses
	b := f32Bytes(scratch[len(scratch)-(lt.KHead+3)/4:])[:lt.KHead]
	c.storeWith(b, lt.K, c.TurboK(l, kh), x, scratch)
	c.putK(l, r, kh, b)
}

// SetV stores x (VDim values) as the V row of (seq, pos) in layer l.
func (c *KVCache) SetV(l, seq, pos int, x []float32) {
	r, lt := c.row(seq, pos), &c.layers[l]
	for kh := range c.nHead {
		i := c.off(r, kh, lt.VHead)
		c.store(c.V[l][i:i+lt.VHead], lt.V, c.TurboV(l, kh), x[kh*c.headV:(kh+1)*c.headV])
	}
}

// NHeadKV returns the KV heads of a row.
func (c *KVCache) NHeadKV() int { return c.nHead }

// StoreScratch is the float32s of scratch StoreHead needs: a TurboQuant
// rotation's, and one converted K head's bytes.
func (c *KVCache) StoreScratch() int {
	n := 0
	if c.tk != nil || c.tv != nil {
		n = 2*max(c.headK, c.headV) + 64
	}
	kb := 0
	for _, lt := range c.layers {
		kb = max(kb, lt.KHead)
	}
	return n + (kb+3)/4
}

// StoreHead stores head kh of x (a K row of KDim values, or, v, a V row
// of VDim) as that head of (seq, pos) in layer l: exactly what SetK or
// SetV stores for it. scratch (StoreScratch floats) is the caller's, so
// calls for different heads or rows may run concurrently.
func (c *KVCache) StoreHead(l, seq, pos, kh int, v bool, x, scratch []float32) {
	r, lt := c.row(seq, pos), &c.layers[l]
	if v {
		i := c.off(r, kh, lt.VHead)
		c.storeWith(c.V[l][i:i+lt.VHead], lt.V, c.TurboV(l, kh), x[kh*c.headV:(kh+1)*c.headV], scratch)
		return
	}
	c.storeK(l, r, kh, x[kh*c.headK:(kh+1)*c.headK], scratch)
}

// Rotator is implemented by Ops that multiply pieces of a vector by the
// orthonormal Walsh-Hadamard matrix themselves (in parallel, say): the
// results must equal quant.Hadamard's piece by piece.
type Rotator interface {
	Hadamard(x []float32, n int)
}

// KVDeferrer takes the conversion of new K and V rows to a cache's types
// off the forward pass's critical path (the kv-compress stage): with
// --kv-recent a query reads its most recent rows from their f16 copies, so
// a row's quantized form is first read by a later step. Context.attention
// stores at once only the rows some query of the batch reads quantized, in
// layers whose K and V both keep copies, and hands the others to Defer;
// Decode calls Flush before it returns, so the cache is whole between
// steps.
type KVDeferrer interface {
	// Defer stores rows (seq, pos) of layer (k and v: their K and V
	// values, row t at t·KDim and t·VDim) as SetK and SetV would, later;
	// it copies what it keeps.
	Defer(layer int, seq, pos []int32, k, v []float32) error
	// Flush returns once every deferred row is stored.
	Flush() error
}

// KVStorer is implemented by Ops that store a batch's new K and V rows in
// the cache themselves (in parallel, say): the bytes stored must be those
// SetK and SetV would store row by row.
type KVStorer interface {
	StoreKV(kv *KVCache, layer int, seq, pos []int32, k, v []float32)
}

// store converts one head.
func (c *KVCache) store(dst []byte, t KVType, tq *quant.Turbo, x []float32) {
	c.storeWith(dst, t, tq, x, c.scratch)
}

// storeWith converts one head with the given TurboQuant scratch.
func (c *KVCache) storeWith(dst []byte, t KVType, tq *quant.Turbo, x, scratch []float32) {
	if tq != nil {
		// cannot fail: the row and scratch are sized for the codec
		_ = tq.Encode(dst, x, scratch)
		return
	}
	qt, _ := t.Quant()
	if qt == quant.F32 {
		copy(dst, f32Bytes(x))
		return
	}
	quant.QuantizeFunc(qt)(x, dst)
}

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
	for kh := range c.nHead {
		decodeHead(c.KHeadRow(b, l, seq, pos, kh), c.layers[l].K, c.TurboK(l, kh), dst[kh*c.headK:(kh+1)*c.headK], scratch)
	}
}

// GetV is GetK for V.
func (c *KVCache) GetV(l, seq, pos int, dst, scratch []float32) {
	for kh := range c.nHead {
		decodeHead(c.VHeadRow(l, seq, pos, kh), c.layers[l].V, c.TurboV(l, kh), dst[kh*c.headV:(kh+1)*c.headV], scratch)
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
	for i+1 < len(t) && t[i+1] == t[i]+1 && int(t[i+1])<<c.shift%c.LB != 0 {
		n += c.BlockSize
		i++
	}
	return n
}

// pagedLayoutRows is the layout block of a paged cache: consecutive blocks
// within one (the block pool hands a growing sequence consecutive blocks)
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
	r := c.row(seq, pos)
	r0 := r & (quant.TileRows - 1)
	i := c.off(r-r0, kh, hb)
	return c.K[l][i : i+roundUp(r0+n, quant.TileRows)*hb], r0
}

// VHeadRows returns head kh of the stored V rows of positions [pos,
// pos+n) of seq in layer l, back to back (VHead bytes each); n must not
// exceed Run(seq, pos).
func (c *KVCache) VHeadRows(l, kh, seq, pos, n int) []byte {
	hb := c.layers[l].VHead
	i := c.off(c.row(seq, pos), kh, hb)
	return c.V[l][i : i+n*hb]
}

// CopyRows copies the first n rows of block src to block dst in every
// layer (a block-addressed cache: paged, or from NewBlockKVCache).
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
		kb, vb := c.layers[l].KHead, c.layers[l].VHead
		for kh := range c.nHead {
			copy(c.V[l][c.off(d, kh, vb):][:n*vb], c.V[l][c.off(s, kh, vb):][:n*vb])
			if c.BlockSize%quant.TileRows == 0 {
				// whole tiles: the rows past n in the last one are rows
				// of dst not written yet, which its owner writes before
				// reading
				m := roundUp(n, quant.TileRows) * kb
				copy(c.K[l][c.off(d, kh, kb):][:m], c.K[l][c.off(s, kh, kb):][:m])
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

// Batch is one forward step: tokens with their sequence and position. A
// token attends to the cells of its sequence at positions ≤ its own, so the
// batch must hold, for each sequence, consecutive positions after the
// cached ones.
type Batch struct {
	Tokens []int32
	Pos    []int32
	Seq    []int32
	// Logits marks the rows whose logits are wanted (nil: all rows).
	Logits []bool
	// Embd marks the rows whose final hidden state (after the output
	// norm, llama.cpp's "result_norm", what its embeddings pool) is
	// wanted (nil: none); Context.Embeddings returns them.
	Embd []bool
}

// Len returns the number of tokens.
func (b *Batch) Len() int { return len(b.Tokens) }

// ErrBatch reports a malformed batch.
var ErrBatch = errors.New("model: bad batch")

// EvalFunc, when set on a Context, is called with every named intermediate
// (e.g. "attn_norm", layer 3): n rows of dim. It is for debugging and
// diffing against llama.cpp's llama-eval-callback; nil costs nothing.
type EvalFunc func(name string, layer int, x []float32, n, dim int)

// Context runs forward steps of a model on a backend with its own KV cache
// and scratch buffers, allocated once for batches of up to MaxBatch tokens.
type Context struct {
	M        *Model
	Ops      Ops
	KV       *KVCache
	MaxBatch int
	Eval     EvalFunc
	// OnRoute, when set, is called with each token's selected experts and
	// their weights (MoE models), for tests and traces.
	OnRoute func(layer, row int, experts []int, weights []float32)
	// ExpertRuns counts the routed experts run (one per expert and step,
	// whatever its number of tokens), for the weight bytes a step used.
	ExpertRuns int64
	// PrefetchNext, with an Experts that is a Prefetcher, guesses the next
	// layer's experts while a MoE layer runs, by applying the next layer's
	// FFN norm and router to the current residual stream, and prefetches
	// them (speculative prefetch, one layer ahead).
	PrefetchNext bool
	// Experts, when set, supplies the routed experts of MoE layers (the
	// weight path's expert cache); nil: the views of the mapping.
	Experts Experts
	// Layers, when set, supplies each layer's weights for the time the
	// layer runs (the weight path's layer streaming); nil: m.Layers.
	Layers LayerSource
	// Span, when set, is called at the start (begin=true) and end of each
	// named part of the forward pass: "attn", "ffn", "moe", "output" and
	// the matrix products inside them ("attn_q", "ffn_down", ...; with a
	// MultiMatMul backend and SplitProducts off, "attn_qkv" and
	// "ffn_gate_up" for the fused ones), with
	// the layer (-1 outside layers). Names are constants: a tracer can
	// use them without allocating.
	Span func(name string, layer int, begin bool)
	// SplitProducts runs the products a MultiMatMul backend would fuse
	// (q/k/v, gate/up) as separate MatMul calls, so that Span sees each
	// one: for per-operation traces.
	SplitProducts bool
	// KVDefer, when set, stores the rows no query of the step reads
	// quantized off the critical path (see KVDeferrer); nil: every row is
	// stored in its layer.
	KVDefer KVDeferrer

	x, xn, q, k, v, att, tmp []float32 // MaxBatch × width
	gate, up                 []float32 // MaxBatch × max(NFF, NFFExp)
	probs                    []float32 // MaxBatch × NExpert
	moeS                     moeScratch
	stepErr                  error  // an error inside a layer (Experts)
	cur                      *Layer // the running layer's weights (Layers)
	curIL                    int
	moeRows                  int // tokens of the MoE step running
	rowIdx                   []int
	outRows                  []float32    // rows selected for logits
	embd                     []float32    // rows selected for embeddings (MaxBatch × NEmbd)
	nEmbd                    int          // rows in embd after the last Decode
	logits                   []float32    // MaxBatch × NVocab
	mmOuts                   [3][]float32 // matmuls' arguments
	mmWs                     [3]*Weight
}

// NewContext allocates a context with a contiguous f32 cache of nCtx
// positions for nSeq sequences and scratch for batches of up to maxBatch
// tokens.
func (m *Model) NewContext(ops Ops, nCtx, nSeq, maxBatch int) (*Context, error) {
	return m.NewContextOf(ops, KVTypes{}, nCtx, nSeq, maxBatch)
}

// NewContextOf is NewContext with a cache of types t.
func (m *Model) NewContextOf(ops Ops, t KVTypes, nCtx, nSeq, maxBatch int) (*Context, error) {
	if nCtx <= 0 || nSeq <= 0 || maxBatch <= 0 {
		return nil, fmt.Errorf("model: context size %d, sequences %d and batch %d must be positive", nCtx, nSeq, maxBatch)
	}
	kv, err := NewKVCacheOf(&m.Hyper, t, nCtx, nSeq)
	if err != nil {
		return nil, err
	}
	return m.NewContextKV(ops, kv, maxBatch)
}

// NewContextKV allocates a context on the cache kv (made for this model)
// with scratch for batches of up to maxBatch tokens. A paged cache needs a
// backend implementing PagedKV.
func (m *Model) NewContextKV(ops Ops, kv *KVCache, maxBatch int) (*Context, error) {
	h := &m.Hyper
	switch {
	case maxBatch <= 0:
		return nil, fmt.Errorf("model: batch %d must be positive", maxBatch)
	case kv.NLayer != h.NLayer || kv.KDim != h.KDim() || kv.VDim != h.VDim():
		return nil, fmt.Errorf("model: KV cache of %d layers × %d/%d does not fit the model (%d × %d/%d)", kv.NLayer, kv.KDim, kv.VDim, h.NLayer, h.KDim(), h.VDim())
	case kv.Paged() && !SupportsPagedKV(ops):
		return nil, fmt.Errorf("model: the backend does not support a paged KV cache")
	}
	c := &Context{M: m, Ops: ops, KV: kv, MaxBatch: maxBatch}
	kv.ReserveRecent(maxBatch)
	n := maxBatch
	c.x = make([]float32, n*h.NEmbd)
	c.xn = make([]float32, n*h.NEmbd)
	c.tmp = make([]float32, n*h.NEmbd)
	c.q = make([]float32, n*h.QDim())
	c.k = make([]float32, n*h.KDim())
	c.v = make([]float32, n*h.VDim())
	c.att = make([]float32, n*h.NHead*h.HeadDimV)
	ff := max(h.NFF, h.NFFExp)
	c.gate = make([]float32, n*ff)
	c.up = make([]float32, n*ff)
	if h.NExpert > 0 {
		c.probs = make([]float32, n*h.NExpert)
		c.moeS.alloc(n, h)
	}
	c.rowIdx = make([]int, n)
	c.outRows = make([]float32, n*h.NEmbd)
	c.embd = make([]float32, n*h.NEmbd)
	c.logits = make([]float32, n*h.NVocab)
	return c, nil
}

func (c *Context) span(name string, layer int, begin bool) {
	if c.Span != nil {
		c.Span(name, layer, begin)
	}
}

// matmul is Ops.MatMul inside a span.
func (c *Context) matmul(name string, layer int, out []float32, w *Weight, x []float32, n int) {
	c.span(name, layer, true)
	c.Ops.MatMul(out, w, x, n)
	c.span(name, layer, false)
}

// mm is one product of matmuls: a span name, the output and the weight.
type mm struct {
	name string
	out  []float32
	w    *Weight
}

// matmuls multiplies x by each weight: in one operation inside one span
// (name) when the Ops implement MultiMatMul, else as separate matmul calls.
func (c *Context) matmuls(name string, layer int, x []float32, n int, ps ...mm) {
	multi, ok := c.Ops.(MultiMatMul)
	if !ok || c.SplitProducts || len(ps) > len(c.mmOuts) {
		for _, p := range ps {
			c.matmul(p.name, layer, p.out, p.w, x, n)
		}
		return
	}
	outs, ws := c.mmOuts[:len(ps)], c.mmWs[:len(ps)]
	for i, p := range ps {
		outs[i], ws[i] = p.out, p.w
	}
	c.span(name, layer, true)
	multi.MatMuls(outs, ws, x, n)
	c.span(name, layer, false)
	clear(outs)
	clear(ws)
}

func (c *Context) eval(name string, layer int, x []float32, n, dim int) {
	if c.Eval != nil {
		c.Eval(name, layer, x[:n*dim], n, dim)
	}
}

// Decode runs one forward step and returns the logits of the rows marked in
// b.Logits (all rows when nil), packed in batch order: len = rows × NVocab.
// The slice is reused by the next call.
func (c *Context) Decode(b *Batch) ([]float32, error) {
	n := b.Len()
	if n == 0 || n > c.MaxBatch {
		return nil, fmt.Errorf("%w: %d tokens (max %d)", ErrBatch, n, c.MaxBatch)
	}
	if len(b.Pos) != n || len(b.Seq) != n || (b.Logits != nil && len(b.Logits) != n) || (b.Embd != nil && len(b.Embd) != n) {
		return nil, fmt.Errorf("%w: tokens, positions, sequences and logit or embedding flags differ in length", ErrBatch)
	}
	for i := range n {
		if t := b.Tokens[i]; t < 0 || int(t) >= c.M.NVocab {
			return nil, fmt.Errorf("%w: token %d out of range [0, %d)", ErrBatch, t, c.M.NVocab)
		}
		if p := b.Pos[i]; p < 0 || int(p) >= c.KV.NCtx {
			return nil, fmt.Errorf("%w: position %d outside the context of %d", ErrBatch, p, c.KV.NCtx)
		}
		if s := b.Seq[i]; s < 0 || int(s) >= c.KV.NSeq {
			return nil, fmt.Errorf("%w: sequence %d out of range [0, %d)", ErrBatch, s, c.KV.NSeq)
		}
		if kv := c.KV; kv.Paged() {
			t := kv.Tables[b.Seq[i]]
			if int(b.Pos[i])>>kv.shift >= len(t) {
				return nil, fmt.Errorf("%w: sequence %d has no KV block for position %d", ErrBatch, b.Seq[i], b.Pos[i])
			}
		}
	}
	if err := c.KV.PrepareRecent(b.Seq, b.Pos); err != nil {
		return nil, err
	}
	c.nEmbd = 0
	if err := c.M.forward(c, b); err != nil {
		if c.KVDefer != nil {
			c.KVDefer.Flush() // the step failed anyway: its error is the one to report
		}
		return nil, err
	}
	c.embeddings(b)
	out := c.output(b)
	if c.KVDefer != nil {
		if err := c.KVDefer.Flush(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Embeddings returns the final hidden states (after the output norm) of
// the rows marked in Batch.Embd by the last Decode, packed in batch order:
// len = rows × NEmbd. The slice is reused by the next call.
func (c *Context) Embeddings() []float32 { return c.embd[:c.nEmbd*c.M.NEmbd] }

// embeddings applies the final norm to the rows that want embeddings.
func (c *Context) embeddings(b *Batch) {
	if b.Embd == nil {
		return
	}
	h := &c.M.Hyper
	rows := 0
	for i, want := range b.Embd {
		if want {
			copy(c.embd[rows*h.NEmbd:(rows+1)*h.NEmbd], c.x[i*h.NEmbd:(i+1)*h.NEmbd])
			rows++
		}
	}
	if rows == 0 {
		return
	}
	c.span("output", -1, true)
	c.Ops.RMSNorm(c.embd, c.embd[:rows*h.NEmbd], c.M.OutputNorm, rows, h.NEmbd, h.RMSEps)
	c.span("output", -1, false)
	c.nEmbd = rows
}

// output applies the final norm and the output projection to the rows that
// want logits.
func (c *Context) output(b *Batch) []float32 {
	h := &c.M.Hyper
	n := b.Len()
	rows := 0
	for i := range n {
		if b.Logits == nil || b.Logits[i] {
			copy(c.outRows[rows*h.NEmbd:(rows+1)*h.NEmbd], c.x[i*h.NEmbd:(i+1)*h.NEmbd])
			rows++
		}
	}
	if rows == 0 {
		return c.logits[:0]
	}
	c.span("output", -1, true)
	c.Ops.RMSNorm(c.outRows, c.outRows[:rows*h.NEmbd], c.M.OutputNorm, rows, h.NEmbd, h.RMSEps)
	c.eval("result_norm", -1, c.outRows, rows, h.NEmbd)
	out := c.logits[:rows*h.NVocab]
	c.matmul("output_proj", -1, out, c.M.Output, c.outRows[:rows*h.NEmbd], rows)
	c.eval("result_output", -1, out, rows, h.NVocab)
	c.span("output", -1, false)
	return out
}

// layers runs block(il) for every layer between the weight hooks.
func (c *Context) layers(b *Batch, block func(il int, b *Batch)) error {
	for il := range c.M.Layers {
		if c.Layers != nil {
			L, err := c.Layers.Acquire(il)
			if err != nil {
				return err
			}
			c.cur, c.curIL = L, il
		}
		block(il, b)
		if c.Layers != nil {
			c.Layers.Release(il)
			c.cur = nil
		}
		if err := c.stepErr; err != nil {
			c.stepErr = nil
			return err
		}
	}
	return nil
}

// layer returns layer il's weights: the LayerSource's while the layer
// runs, else the model's.
func (c *Context) layer(il int) *Layer {
	if c.cur != nil && c.curIL == il {
		return c.cur
	}
	return &c.M.Layers[il]
}

// embed looks up the batch's token embeddings into c.x.
func (c *Context) embed(b *Batch) {
	c.Ops.Embed(c.x, c.M.TokEmbd, b.Tokens)
	c.eval("inp_embd", -1, c.x, b.Len(), c.M.NEmbd)
}

// attention runs one block's attention sub-layer and adds it to the residual
// stream c.x: x += Wo·attn(rope(norm(x)·Wq), rope(norm(x)·Wk), norm(x)·Wv).
func (c *Context) attention(il int, b *Batch) {
	m, L, ops := c.M, c.layer(il), c.Ops
	n := b.Len()
	h := &m.Hyper
	c.span("attn", il, true)
	defer c.span("attn", il, false)
	// attention rmsnorm
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.AttnNorm, n, h.NEmbd, h.RMSEps)
	c.eval("attn_norm", il, c.xn, n, h.NEmbd)
	// q, k, v projections (n × QDim, n × KDim, n × VDim)
	q, k, v := c.q[:n*h.QDim()], c.k[:n*h.KDim()], c.v[:n*h.VDim()]
	c.matmuls("attn_qkv", il, c.xn, n, mm{"attn_q", q, L.Wq}, mm{"attn_k", k, L.Wk}, mm{"attn_v", v, L.Wv})
	if L.Bq != nil { // qwen2 biases
		ops.AddRows(q, L.Bq)
		ops.AddRows(k, L.Bk)
		ops.AddRows(v, L.Bv)
	}
	if L.QNorm != nil { // qwen3: per-head RMSNorm of q and k before RoPE
		ops.RMSNorm(q, q, L.QNorm, n*h.NHead, h.HeadDimK, h.RMSEps)
		ops.RMSNorm(k, k, L.KNorm, n*h.NHeadKV, h.HeadDimK, h.RMSEps)
	}
	// rotary position embedding
	ops.Rope(q, b.Pos, n, h.NHead, h.HeadDimK, &m.Rope)
	ops.Rope(k, b.Pos, n, h.NHeadKV, h.HeadDimK, &m.Rope)
	c.eval("Qcur", il, q, n, h.QDim())
	c.eval("Kcur", il, k, n, h.KDim())
	c.eval("Vcur", il, v, n, h.VDim())
	// llama.cpp's rotation of block-quantized K and V (KVLayer.RotK/RotV)
	lt := c.KV.Layer(il)
	if lt.RotK > 0 {
		c.hadamard(q, lt.RotK)
		c.hadamard(k, lt.RotK)
	}
	if lt.RotV > 0 {
		c.hadamard(v, lt.RotV)
	}
	// store k, v in the cache, converted to its types (kv_store: the
	// conversion, TurboQuant's rotation and coding included)
	c.span("kv_store", il, true)
	c.KV.StoreRecent(il, b.Seq, b.Pos, k, v) // --kv-recent's f16 rows
	if c.KVDefer == nil || !lt.RecentK || !lt.RecentV {
		c.storeRows(il, b, 0, n, k, v)
	} else {
		// per sequence run: rows below the run's last query's RecentFrom are
		// read quantized by this step, the rest only by later ones
		for r0 := 0; r0 < n; {
			r1 := r0 + 1
			for r1 < n && b.Seq[r1] == b.Seq[r0] {
				r1++
			}
			m := r0 + min(max(c.KV.RecentFrom(int(b.Pos[r1-1]))-int(b.Pos[r0]), 0), r1-r0)
			c.storeRows(il, b, r0, m, k, v)
			if m < r1 && c.stepErr == nil {
				c.stepErr = c.KVDefer.Defer(il, b.Seq[m:r1], b.Pos[m:r1], k[m*h.KDim():r1*h.KDim()], v[m*h.VDim():r1*h.VDim()])
			}
			r0 = r1
		}
	}
	c.span("kv_store", il, false)
	// softmax(q·kᵀ/√d)·v over the cached positions
	att := c.att[:n*h.NHead*h.HeadDimV]
	scale := float32(1 / math.Sqrt(float64(h.HeadDimK)))
	c.span("attn_kqv", il, true)
	ops.Attention(att, q, c.KV, il, b.Seq, b.Pos, h, scale)
	c.span("attn_kqv", il, false)
	if lt.RotV > 0 { // the output of rotated values, rotated back
		c.hadamard(att, lt.RotV)
	}
	c.eval("kqv_out", il, att, n, h.NHead*h.HeadDimV)
	// output projection and residual
	c.matmul("attn_output", il, c.tmp[:n*h.NEmbd], L.Wo, att, n)
	c.eval("attn_out", il, c.tmp, n, h.NEmbd)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("ffn_inp", il, c.x, n, h.NEmbd)
}

// storeRows stores batch rows [t0, t1)'s K and V in the cache's types,
// through the Ops if they can.
func (c *Context) storeRows(il int, b *Batch, t0, t1 int, k, v []float32) {
	if t0 >= t1 {
		return
	}
	kd, vd := c.M.KDim(), c.M.VDim()
	if st, ok := c.Ops.(KVStorer); ok {
		st.StoreKV(c.KV, il, b.Seq[t0:t1], b.Pos[t0:t1], k[t0*kd:t1*kd], v[t0*vd:t1*vd])
		return
	}
	for t := t0; t < t1; t++ {
		c.KV.SetK(il, int(b.Seq[t]), int(b.Pos[t]), k[t*kd:(t+1)*kd])
		c.KV.SetV(il, int(b.Seq[t]), int(b.Pos[t]), v[t*vd:(t+1)*vd])
	}
}

// ffn runs a dense SwiGLU FFN sub-layer: x += Wdown·(silu(Wgate·norm(x)) ⊙ Wup·norm(x)).
func (c *Context) ffn(il int, b *Batch) {
	m, L, ops := c.M, c.layer(il), c.Ops
	n := b.Len()
	h := &m.Hyper
	c.span("ffn", il, true)
	defer c.span("ffn", il, false)
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.FFNNorm, n, h.NEmbd, h.RMSEps)
	c.eval("ffn_norm", il, c.xn, n, h.NEmbd)
	gate, up := c.gate[:n*h.NFF], c.up[:n*h.NFF]
	c.matmuls("ffn_gate_up", il, c.xn, n, mm{"ffn_gate", gate, L.Gate}, mm{"ffn_up", up, L.Up})
	ops.SwiGLU(gate, gate, up)
	c.matmul("ffn_down", il, c.tmp[:n*h.NEmbd], L.Down, gate, n)
	c.eval("ffn_out", il, c.tmp, n, h.NEmbd)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("l_out", il, c.x, n, h.NEmbd)
}

// hadamard applies the orthonormal Walsh-Hadamard transform to each piece
// of n values of x (len(x) a multiple of n), through the Ops if they can.
func (c *Context) hadamard(x []float32, n int) {
	if r, ok := c.Ops.(Rotator); ok {
		r.Hadamard(x, n)
		return
	}
	for i := 0; i+n <= len(x); i += n {
		quant.Hadamard(x[i : i+n])
	}
}
