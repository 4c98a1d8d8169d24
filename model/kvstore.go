package model

// kvstore.go: writing K and V rows into the KV cache, converted to its
// types (f32, f16, bf16, the block types, TurboQuant).

import (
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

// putK stores the K head bytes b as head kh of row r of layer l.
func (c *KVCache) putK(l, r, kh int, b []byte) {
	t, i := c.ktile(l, r, kh)
	quant.PutTileRow(t, i, c.layers[l].KUnit, b)
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
