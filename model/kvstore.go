package model

// kvstore.go: writing a batch's new K and V rows into the KV cache,
// converted to its types (f32, f16, bf16, the block types, TurboQuant):
// Store, what the forward pass calls once per layer, and the row and head
// writes under it. Which rows are converted now and which later (the
// kv-compress stage) is decided here, not in the forward pass.

import (
	"unsafe"

	"github.com/flowinfer/flowinfer/quant"
)

// Store stores a batch's new K and V rows of layer l (row t of k and v,
// at t·KDim and t·VDim, is cell (seq[t], pos[t])), after PrepareRecent:
// their f16 copies (--kv-recent), then the rows in the cache's types,
// through the backend's KVStorer if it has one. With a deferrer
// (Hooks.KVDefer of the Context on this cache), in a layer whose K and V
// both keep copies, only the rows some query of the batch reads quantized
// are stored now; the others go to the deferrer, which stores them before
// the step ends. It returns the deferrer's first error.
func (c *KVCache) Store(l int, seq, pos []int32, k, v []float32) error {
	c.StoreRecent(l, seq, pos, k, v)
	lt := c.layers[l]
	if c.deferrer == nil || !lt.RecentK || !lt.RecentV {
		c.storeRows(l, seq, pos, k, v)
		return nil
	}
	// per sequence run: rows below its last query's RecentFrom are read
	// quantized by this step, the rest only by later ones
	kd, vd, n := c.KDimOf(l), c.VDimOf(l), len(seq)
	var err error
	for r0 := 0; r0 < n; {
		r1 := r0 + 1
		for r1 < n && seq[r1] == seq[r0] {
			r1++
		}
		m := r0 + min(max(c.RecentFrom(int(pos[r1-1]))-int(pos[r0]), 0), r1-r0)
		c.storeRows(l, seq[r0:m], pos[r0:m], k[r0*kd:m*kd], v[r0*vd:m*vd])
		if m < r1 && err == nil {
			err = c.deferrer.Defer(l, seq[m:r1], pos[m:r1], k[m*kd:r1*kd], v[m*vd:r1*vd])
		}
		r0 = r1
	}
	return err
}

// flush returns once the rows handed to the deferrer are stored.
func (c *KVCache) flush() error {
	if c.deferrer == nil {
		return nil
	}
	return c.deferrer.Flush()
}

// storeRows stores rows (seq, pos) of layer l in the cache's types,
// through the backend's KVStorer if it has one.
func (c *KVCache) storeRows(l int, seq, pos []int32, k, v []float32) {
	if len(seq) == 0 {
		return
	}
	if c.storer != nil {
		c.storer.StoreKV(c, l, seq, pos, k, v)
		return
	}
	for t := range seq {
		kd, vd := c.KDimOf(l), c.VDimOf(l)
		c.SetK(l, int(seq[t]), int(pos[t]), k[t*kd:(t+1)*kd])
		c.SetV(l, int(seq[t]), int(pos[t]), v[t*vd:(t+1)*vd])
	}
}

// KVDeferrer takes the conversion of new K and V rows to a cache's types
// off the forward pass's critical path (the kv-compress stage): with
// --kv-recent a query reads its most recent rows from their f16 copies, so
// a row's quantized form is first read by a later step. KVCache.Store
// stores at once only the rows some query of the batch reads quantized, in
// layers whose K and V both keep copies, and hands the others to Defer;
// Context.Decode calls Flush before it returns, so the cache is whole
// between steps.
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

// SetK stores x (KDim values) as the K row of (seq, pos) in layer l,
// converted to the cache's K type. SetK and SetV share scratch: calls on
// one cache must not run concurrently.
func (c *KVCache) SetK(l, seq, pos int, x []float32) {
	r, d := c.row(l, seq, pos), c.layers[l].HeadK
	for kh := range c.layers[l].NHead {
		c.storeK(l, r, kh, x[kh*d:(kh+1)*d], c.scratch)
	}
}

// SetV stores x (VDim values) as the V row of (seq, pos) in layer l.
func (c *KVCache) SetV(l, seq, pos int, x []float32) {
	r, lt := c.row(l, seq, pos), &c.layers[l]
	for kh := range lt.NHead {
		i := c.off(l, r, kh, lt.VHead)
		c.store(c.V[l][i:i+lt.VHead], lt.V, c.TurboV(l, kh), x[kh*lt.HeadV:(kh+1)*lt.HeadV])
	}
}

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
	r, lt := c.row(l, seq, pos), &c.layers[l]
	if v {
		i := c.off(l, r, kh, lt.VHead)
		c.storeWith(c.V[l][i:i+lt.VHead], lt.V, c.TurboV(l, kh), x[kh*lt.HeadV:(kh+1)*lt.HeadV], scratch)
		return
	}
	c.storeK(l, r, kh, x[kh*lt.HeadK:(kh+1)*lt.HeadK], scratch)
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

// putK stores the K head bytes b as head kh of row r of layer l.
func (c *KVCache) putK(l, r, kh int, b []byte) {
	t, i := c.ktile(l, r, kh)
	quant.PutTileRow(t, i, c.layers[l].KUnit, b)
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

// f32Bytes views float32s as their bytes (little-endian machines).
func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}
