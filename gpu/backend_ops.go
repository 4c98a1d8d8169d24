//go:build cgo

package gpu

// backend_ops.go: Backend's model.Ops methods. Each looks up its operands'
// device copies (backend.go), records one kernel and a barrier, and keeps
// its first failure for ToHost to return (Ops methods have no error).

import (
	"fmt"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

var (
	_ model.Ops      = (*Backend)(nil)
	_ model.KVStorer = (*Backend)(nil)
	_ model.Rotator  = (*Backend)(nil)
	_ model.HostSync = (*Backend)(nil)
	_ model.KVCopier = (*Backend)(nil)

	_ model.ClampedSwiGLU = (*Backend)(nil)
)

// Supports implements model.Ops: the types with a mat-vec shader.
func (b *Backend) Supports(t quant.Type) bool { return SupportsMatVec(t) }

// run records one op unless an earlier one failed, then a barrier.
func (b *Backend) run(op func() error) {
	if b.err != nil {
		return
	}
	if err := b.record(); err != nil {
		b.fail(err)
		return
	}
	if err := op(); err != nil {
		b.fail(err)
		return
	}
	if err := b.record(); err != nil { // op may have submitted (a full ring)
		b.fail(err)
		return
	}
	b.cb.Barrier()
}

// MatMul implements model.Ops.
func (b *Backend) MatMul(out []float32, w *model.Weight, x []float32, n int) {
	b.run(func() error {
		dw, ok := b.weights[w]
		if !ok {
			return fmt.Errorf("gpu: MatMul: weight %q is not on the device", w.Name)
		}
		xi, err := b.in(x[:n*w.Cols])
		if err != nil {
			return err
		}
		y, err := b.out(out[:n*w.Rows])
		if err != nil {
			return err
		}
		return b.k.MatMul(b.cb, y, dw, xi, n)
	})
}

// Embed implements model.Ops: the rows are dequantized on the host from
// the file's bytes (any type quant reads) into the staging ring and copied
// into out's device copy: the table is read by row, never uploaded whole.
func (b *Backend) Embed(out []float32, w *model.Weight, ids []int32) {
	b.run(func() error {
		y, err := b.out(out[:len(ids)*w.Cols])
		if err != nil {
			return err
		}
		for t, id := range ids {
			if id < 0 || int(id) >= w.Rows {
				return fmt.Errorf("gpu: Embed: row %d of %q (%d rows)", id, w.Name, w.Rows)
			}
			off, err := b.stage(4 * w.Cols)
			if err != nil {
				return err
			}
			row := w.Data[int(id)*w.RowBytes : (int(id)+1)*w.RowBytes]
			dst := f32s(b.ring.Bytes()[off : off+4*w.Cols])
			if err := quant.DequantizeRow(w.Type, row, dst); err != nil {
				return fmt.Errorf("gpu: Embed %q: %w", w.Name, err)
			}
			b.cb.Copy(y.Buf, uint64(4*(y.Off+t*w.Cols)), b.ring, uint64(off), uint64(4*w.Cols))
		}
		return nil
	})
}

// RMSNorm implements model.Ops.
func (b *Backend) RMSNorm(out, x []float32, weight model.Vector, n, dim int, eps float32) {
	b.run(func() error {
		xi, err := b.in(x[:n*dim])
		if err != nil {
			return err
		}
		var g F32
		if weight != nil {
			if g, err = b.vector(weight); err != nil {
				return err
			}
		}
		y, err := b.out(out[:n*dim])
		if err != nil {
			return err
		}
		return b.k.RMSNorm(b.cb, y, xi, g, n, dim, eps)
	})
}

// Rope implements model.Ops: the angle table of each row is computed on
// the host (model.Rope.Table) and rotates x on the device.
func (b *Backend) Rope(x []float32, pos []int32, n, nHead, headDim int, rp *model.Rope) {
	b.run(func() error {
		half := rp.Dim / 2
		if rp.Type != model.RopeNorm && rp.Type != model.RopeNeox {
			return fmt.Errorf("gpu: Rope: %w: rope type %v", vk.ErrUnsupported, rp.Type)
		}
		xi, err := b.in(x[:n*nHead*headDim])
		if err != nil {
			return err
		}
		if _, err := b.out(x[:n*nHead*headDim]); err != nil {
			return err
		}
		off, err := b.stage(4 * n * 4 * half)
		if err != nil {
			return err
		}
		cs := f32s(b.ring.Bytes()[off : off+4*n*4*half])
		for t := range n {
			rp.Table(cs[t*4*half:(t+1)*4*half], pos[t])
		}
		return b.k.Rope(b.cb, xi, F32{Buf: b.ring, Off: off / 4}, n, nHead, headDim, half, rp.Type == model.RopeNeox)
	})
}

// Hadamard implements model.Rotator: llama.cpp's rotation of
// block-quantized K and V (model.KVLayer.RotK/RotV) on the device, each
// piece of n values of x multiplied by the orthonormal Walsh-Hadamard
// matrix bit for bit as quant.Hadamard does.
func (b *Backend) Hadamard(x []float32, n int) {
	b.run(func() error {
		if n <= 0 || len(x)%n != 0 {
			return fmt.Errorf("gpu: Hadamard: %d values in pieces of %d", len(x), n)
		}
		xi, err := b.in(x)
		if err != nil {
			return err
		}
		if _, err := b.out(x); err != nil {
			return err
		}
		return b.k.Hadamard(b.cb, xi, len(x)/n, n)
	})
}

// SwiGLU implements model.Ops.
func (b *Backend) SwiGLU(out, gate, up []float32) {
	b.glu(out, gate, up, func(y, g, u F32, n int) error { return b.k.SwiGLU(b.cb, y, g, u, n) })
}

// glu records op on the device copies of gate and up (n = len(gate)
// elements each) into out: the gated activations' shared shape.
func (b *Backend) glu(out, gate, up []float32, op func(y, g, u F32, n int) error) {
	b.run(func() error {
		n := len(gate)
		g, err := b.in(gate)
		if err != nil {
			return err
		}
		u, err := b.in(up[:n])
		if err != nil {
			return err
		}
		y, err := b.out(out[:n])
		if err != nil {
			return err
		}
		return op(y, g, u, n)
	})
}

// GeGLU implements model.Ops: gelu by ggml's float16 table (quant.GELUTable,
// uploaded on first use), as package cpu.
func (b *Backend) GeGLU(out, gate, up []float32) {
	b.glu(out, gate, up, func(y, g, u F32, n int) error {
		t, err := b.geluTable()
		if err != nil {
			return err
		}
		return b.k.GeGLU(b.cb, y, g, u, t, n)
	})
}

// geluTable returns the device copy of quant.GELUTable, uploaded on first use.
func (b *Backend) geluTable() (F32, error) {
	if b.gelu.Buf != nil {
		return b.gelu, nil
	}
	t := quant.GELUTable()
	buf, err := b.dev.NewBuffer(uint64(4*len(t)), vk.DeviceLocal)
	if err != nil {
		return F32{}, fmt.Errorf("gpu: GELU table: %w", err)
	}
	b.owned = append(b.owned, buf)
	b.gelu = F32{Buf: buf}
	return b.gelu, b.upload(buf, 0, f32b(t[:]))
}

// SwiGLUOAI implements model.ClampedSwiGLU (gpt-oss's experts).
func (b *Backend) SwiGLUOAI(out, gate, up []float32, alpha, limit float32) {
	b.glu(out, gate, up, func(y, g, u F32, n int) error { return b.k.SwiGLUOAI(b.cb, y, g, u, n, alpha, limit) })
}

// Scale implements model.Ops.
func (b *Backend) Scale(x []float32, s float32) {
	b.run(func() error {
		if _, err := b.in(x); err != nil {
			return err
		}
		d, err := b.out(x)
		if err != nil {
			return err
		}
		return b.k.Scale(b.cb, d, len(x), s)
	})
}

// Add implements model.Ops.
func (b *Backend) Add(dst, src []float32) {
	b.run(func() error {
		s, err := b.in(src[:len(dst)])
		if err != nil {
			return err
		}
		if _, err := b.in(dst); err != nil {
			return err
		}
		d, err := b.out(dst)
		if err != nil {
			return err
		}
		return b.k.Add(b.cb, d, s, len(dst))
	})
}

// AddRows implements model.Ops.
func (b *Backend) AddRows(x []float32, bias model.Vector) {
	b.run(func() error {
		n := len(x) / len(bias) * len(bias)
		bv, err := b.vector(bias)
		if err != nil {
			return err
		}
		if _, err := b.in(x[:n]); err != nil {
			return err
		}
		d, err := b.out(x[:n])
		if err != nil {
			return err
		}
		return b.k.AddRows(b.cb, d, bv, n, len(bias))
	})
}

// Softmax implements model.Ops.
func (b *Backend) Softmax(x []float32, n, dim int) {
	b.run(func() error {
		if _, err := b.in(x[:n*dim]); err != nil {
			return err
		}
		d, err := b.out(x[:n*dim])
		if err != nil {
			return err
		}
		return b.k.Softmax(b.cb, d, n, dim)
	})
}

// devKV returns kv's device cache, made on first use; a cache the shaders
// cannot read is an error naming what.
func (b *Backend) devKV(kv *model.KVCache, layer int) (*devKV, error) {
	d, err := b.devKVAll(kv)
	if err == nil && (layer < 0 || layer >= len(d.k) || d.k[layer] == nil) {
		return nil, fmt.Errorf("gpu: KV cache layer %d is not on the device (the placement computes it on the CPU)", layer)
	}
	return d, err
}

// PrepareKV implements model.KVPreparer: kv's device cache is made now
// (devKVAll), so an unsupported cache or a budget too small for it fails
// when the engine is made (stages.NewEngine) rather than in a step.
func (b *Backend) PrepareKV(kv *model.KVCache) error {
	_, err := b.devKVAll(kv)
	return err
}

// devKVAll returns kv's device cache, made on first use (no buffers for
// the CPU's layers).
func (b *Backend) devKVAll(kv *model.KVCache) (*devKV, error) {
	if d := b.kvs[kv]; d != nil {
		return d, nil
	}
	if kv.Paged() {
		return nil, fmt.Errorf("gpu: %w: a paged KV cache", vk.ErrUnsupported)
	}
	if kv.HasRecent() {
		return nil, fmt.Errorf("gpu: %w: --kv-recent rows", vk.ErrUnsupported)
	}
	for l := range kv.NLayer {
		if r := kv.Ring(l); r > 0 {
			// the host keeps, copies and checkpoints the rings (model's
			// kvswa.go, kvswackpt.go); the device has a row per position
			return nil, fmt.Errorf("gpu: %w: layer %d's sliding window keeps a ring of %d rows per sequence; the device backend needs a row per position (--swa-full)", vk.ErrUnsupported, l, r)
		}
	}
	lt0 := kv.Layer(0)
	for l := range kv.NLayer {
		lt := kv.Layer(l)
		ok := func(t model.KVType) bool { return t == model.KVF32 || t == model.KVF16 || t == model.KVQ8_0 }
		if !ok(lt.K) || !ok(lt.V) {
			return nil, fmt.Errorf("gpu: %w: KV cache of types %s/%s in layer %d (supported: f32, f16, q8_0)", vk.ErrUnsupported, lt.K, lt.V, l)
		}
		if max(lt.RotK, lt.RotV) > maxHadamard {
			return nil, fmt.Errorf("gpu: %w: llama.cpp's rotation of %s K/V in pieces of %d/%d in layer %d (at most %d)", vk.ErrUnsupported, lt.K, lt.RotK, lt.RotV, l, maxHadamard)
		}
		if lt.K != lt.V || lt.K != lt0.K {
			return nil, fmt.Errorf("gpu: %w: KV cache of types %s/%s in layer %d and %s/%s in layer 0 (one type for K, V and every layer)", vk.ErrUnsupported, lt.K, lt.V, l, lt0.K, lt0.V)
		}
		if lt.K == model.KVQ8_0 && (kv.KDim%64 != 0 || kv.VDim%64 != 0) {
			return nil, fmt.Errorf("gpu: %w: q8_0 KV rows of %d/%d values (the device stores multiples of 64)", vk.ErrUnsupported, kv.KDim, kv.VDim)
		}
	}
	d := &devKV{f16: lt0.K == model.KVF16, q8: lt0.K == model.KVQ8_0}
	cells := uint64(kv.NSeq()) * uint64(kv.NCtx)
	for l := range kv.NLayer {
		if b.place != nil && !b.place.GPU[l] { // the CPU's layer: no device cache
			d.k, d.v = append(d.k, nil), append(d.v, nil)
			continue
		}
		k, err := b.dev.NewBuffer(cells*d.rowBytes(kv.KDim), vk.DeviceLocal)
		if err == nil {
			d.k = append(d.k, k)
			var v *vk.Buffer
			if v, err = b.dev.NewBuffer(cells*d.rowBytes(kv.VDim), vk.DeviceLocal); err == nil {
				d.v = append(d.v, v)
			}
		}
		if err != nil {
			for _, buf := range append(d.k, d.v...) {
				if buf != nil {
					buf.Free() // never bound: no descriptor set names them
				}
			}
			return nil, fmt.Errorf("gpu: KV cache layer %d: %w", l, err)
		}
	}
	b.kvs[kv] = d
	return d, nil
}

// rowBytes is the bytes of one cache row of dim values.
func (d *devKV) rowBytes(dim int) uint64 {
	switch {
	case d.f16:
		return 2 * uint64(dim)
	case d.q8:
		return uint64(dim) / 32 * 34
	}
	return 4 * uint64(dim)
}

// CopyKV implements model.KVCopier: n rows of layer's K and V from
// positions [srcPos, srcPos+n) of srcSeq to [dstPos, dstPos+n) of dstSeq
// (a prefix block the scheduler shares by copying), as copies between
// the device cells the shaders read (seq·NCtx + pos), in the order of the
// ops recorded around it.
func (b *Backend) CopyKV(kv *model.KVCache, layer, dstSeq, dstPos, srcSeq, srcPos, n int) {
	b.run(func() error {
		d, err := b.devKV(kv, layer)
		if err != nil {
			return err
		}
		in := func(seq, pos int) bool { return seq >= 0 && seq < kv.NSeq() && pos >= 0 && pos+n <= kv.NCtx }
		if n <= 0 || !in(dstSeq, dstPos) || !in(srcSeq, srcPos) {
			return fmt.Errorf("gpu: CopyKV: %d rows from (%d, %d) to (%d, %d) outside %d sequences of %d cells", n, srcSeq, srcPos, dstSeq, dstPos, kv.NSeq(), kv.NCtx)
		}
		dst := uint64(dstSeq)*uint64(kv.NCtx) + uint64(dstPos)
		src := uint64(srcSeq)*uint64(kv.NCtx) + uint64(srcPos)
		if dst < src+uint64(n) && src < dst+uint64(n) {
			return fmt.Errorf("gpu: CopyKV: %d rows from (%d, %d) to (%d, %d) overlap", n, srcSeq, srcPos, dstSeq, dstPos)
		}
		for _, c := range []struct {
			buf *vk.Buffer
			dim int
		}{{d.k[layer], kv.KDim}, {d.v[layer], kv.VDim}} {
			row := d.rowBytes(c.dim)
			b.cb.Copy(c.buf, dst*row, c.buf, src*row, uint64(n)*row)
		}
		return nil
	})
}

// StoreKV implements model.KVStorer: rows are copied into an F32 device
// cache (consecutive cells in one copy) or converted into an F16 or a
// Q8_0 one; the host cache is left as it was.
func (b *Backend) StoreKV(kv *model.KVCache, layer int, seq, pos []int32, k, v []float32) {
	b.run(func() error {
		d, err := b.devKV(kv, layer)
		if err != nil {
			return err
		}
		n := len(seq)
		if d.f16 || d.q8 {
			ki, err := b.in(k[:n*kv.KDim])
			if err != nil {
				return err
			}
			vi, err := b.in(v[:n*kv.VDim])
			if err != nil {
				return err
			}
			idx, err := b.positions(seq, pos)
			if err != nil {
				return err
			}
			store := b.k.KVStoreF16
			if d.q8 {
				store = b.k.KVStoreQ8_0
			}
			if err := store(b.cb, F32{Buf: d.k[layer]}, ki, idx, n, kv.KDim, kv.NCtx); err != nil {
				return err
			}
			return store(b.cb, F32{Buf: d.v[layer]}, vi, idx, n, kv.VDim, kv.NCtx)
		}
		for _, c := range []struct {
			dst *vk.Buffer
			src []float32
			dim int
		}{{d.k[layer], k[:n*kv.KDim], kv.KDim}, {d.v[layer], v[:n*kv.VDim], kv.VDim}} {
			s, err := b.in(c.src)
			if err != nil {
				return err
			}
			for t0 := 0; t0 < n; {
				t1 := t0 + 1
				for t1 < n && seq[t1] == seq[t0] && pos[t1] == pos[t1-1]+1 {
					t1++
				}
				cell := uint64(seq[t0])*uint64(kv.NCtx) + uint64(pos[t0])
				b.cb.Copy(c.dst, 4*cell*uint64(c.dim), s.Buf, uint64(4*(s.Off+t0*c.dim)), uint64(4*(t1-t0)*c.dim))
				t0 = t1
			}
		}
		return nil
	})
}

// Attention implements model.Ops against the device cache StoreKV fills.
func (b *Backend) Attention(out, q []float32, kv *model.KVCache, layer int, seq, pos []int32, h *model.Hyper, a model.Attn) {
	b.run(func() error {
		d, err := b.devKV(kv, layer)
		if err != nil {
			return err
		}
		n := len(seq)
		qi, err := b.in(q[:n*h.NHead*h.HeadDimK])
		if err != nil {
			return err
		}
		var sinks F32
		if a.Sinks != nil {
			if sinks, err = b.vector(a.Sinks); err != nil {
				return err
			}
		}
		o, err := b.out(out[:n*h.NHead*h.HeadDimV])
		if err != nil {
			return err
		}
		idx, err := b.positions(seq, pos)
		if err != nil {
			return err
		}
		s := AttnShape{NHead: h.NHead, NHeadKV: h.NHeadKV, DK: h.HeadDimK, DV: h.HeadDimV, NCtx: kv.NCtx, Scale: a.Scale, Window: max(a.Window, 0), F16: d.f16, Q8_0: d.q8}
		return b.k.Attention(b.cb, o, qi, F32{Buf: d.k[layer]}, F32{Buf: d.v[layer]}, idx, sinks, n, s)
	})
}

// positions stages the rows' (seq, pos) pairs, two int32 per row.
func (b *Backend) positions(seq, pos []int32) (F32, error) {
	n := len(seq)
	off, err := b.stage(8 * n)
	if err != nil {
		return F32{}, err
	}
	idx := i32s(b.ring.Bytes()[off : off+8*n])
	for t := range n {
		idx[2*t], idx[2*t+1] = seq[t], pos[t]
	}
	return F32{Buf: b.ring, Off: off / 4}, nil
}
