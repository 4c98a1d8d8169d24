//go:build cgo

package gpu

// backend_moe.go: Backend's model.DeviceMoE: a MoE layer's routing and
// routed experts on the device. The router's logits and softmax are the
// ordinary MatMul and Softmax; RouteTopK ranks each token's experts with
// the logits top-k shader (argmax.go: one round, since a row of at most
// 1024 experts is one segment) and reads back k (id, weight) pairs per
// token, the only data of the layer that leaves the device. The host
// groups the tokens by expert and renormalises the weights (model's
// routed); Expert then gathers an expert's tokens' rows, multiplies them
// by the expert's matrices in their device slots (expertstore.go),
// applies SwiGLU and scatters the weighted outputs into the tokens'
// (token, slot) rows, and SumRows adds each token's rows in the router's
// order, as the host does. gpt-oss's experts (ExpertBiased) add their
// biases to the three products and use the clamped SwiGLU.
//
// With every expert resident, a decode step's layer is routed without the
// host (RouteExperts, model.DeviceRouter): the top-k ids stay in a device
// buffer that the by-id mat-vec shaders read, so the layer needs no
// readback; a prompt's rows, a VRAM budget's cached experts and experts
// with biases route through the host as above.

import (
	"fmt"
	"math"
	"time"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

var (
	_ model.DeviceMoE       = (*Backend)(nil)
	_ model.DeviceMoEBiased = (*Backend)(nil)
)

// moeBufs is the device scratch of one expert's rows: its tokens' inputs,
// gate and up products and outputs, in one buffer grown as needed (an
// outgrown buffer goes to Backend.owned, since recorded commands may
// still read it).
type moeBufs struct {
	buf    *vk.Buffer
	floats int
	ids    []int32 // RouteTopK's ids
}

// moeScratch returns a device buffer of at least n floats.
func (b *Backend) moeScratch(n int) (*vk.Buffer, error) {
	if b.moe.floats >= n {
		return b.moe.buf, nil
	}
	n = max(n, 2*b.moe.floats)
	buf, err := b.dev.NewBuffer(uint64(4*n), vk.DeviceLocal)
	if err != nil {
		return nil, fmt.Errorf("gpu: expert scratch of %d floats: %w", n, err)
	}
	b.owned = append(b.owned, buf)
	b.moe.buf, b.moe.floats = buf, n
	return buf, nil
}

// RouteTopK implements model.DeviceMoE through TopK.
func (b *Backend) RouteTopK(x []float32, n, dim int, sel []int, w []float32) error {
	if n <= 0 || len(sel)%n != 0 || len(sel) == 0 || len(w) < len(sel) {
		return fmt.Errorf("gpu: RouteTopK: %d rows, %d selections, %d weights", n, len(sel), len(w))
	}
	k := len(sel) / n
	if cap(b.moe.ids) < n*k {
		b.moe.ids = make([]int32, n*k)
	}
	ids := b.moe.ids[:n*k]
	if err := b.TopK(x, n, dim, k, ids, w); err != nil {
		return err
	}
	for i, id := range ids {
		if id < 0 || int(id) >= dim {
			return fmt.Errorf("gpu: RouteTopK: row %d ranked id %d of %d (a row of NaN?)", i/k, id, dim)
		}
		sel[i] = int(id)
	}
	return nil
}

// Expert implements model.DeviceMoE.
func (b *Backend) Expert(il, e int, gate, up, down *model.Weight, out, xn []float32, entries []int32, k int, w []float32) {
	b.run(func() error {
		return b.expert(il, e, [3]*model.Weight{gate, up, down}, model.ExpertBiases{}, out, xn, entries, k, w)
	})
}

// ExpertBiased implements model.DeviceMoEBiased (gpt-oss's experts): the
// biases are the layer's whole per-expert matrices, resident on the
// device (newBackendOn uploads them), read at expert e's row.
func (b *Backend) ExpertBiased(il, e int, gate, up, down *model.Weight, eb model.ExpertBiases, out, xn []float32, entries []int32, k int, w []float32) {
	b.run(func() error { return b.expert(il, e, [3]*model.Weight{gate, up, down}, eb, out, xn, entries, k, w) })
}

// expertBias returns row e of the per-expert biases v (rows of width) on
// the device, or a nil Buf for no bias.
func (b *Backend) expertBias(v model.Vector, e, width int) (F32, error) {
	if v == nil {
		return F32{}, nil
	}
	if len(v) < (e+1)*width {
		return F32{}, fmt.Errorf("gpu: expert %d's bias: %d floats for rows of %d", e, len(v), width)
	}
	f, err := b.vector(v)
	f.Off += e * width
	return f, err
}

func (b *Backend) expert(il, e int, ws [3]*model.Weight, eb model.ExpertBiases, out, xn []float32, entries []int32, k int, w []float32) error {
	s := b.experts
	if s == nil {
		return fmt.Errorf("gpu: Expert: the backend holds no experts")
	}
	m := len(entries)
	if m == 0 {
		return nil
	}
	gate, up, down := ws[0], ws[1], ws[2]
	d, f := down.Rows, gate.Rows
	if d <= 0 || f <= 0 || k <= 0 || gate.Cols != d || up.Rows != f || up.Cols != d || down.Cols != f || len(xn)%d != 0 || len(out)%d != 0 {
		return fmt.Errorf("gpu: Expert %d of layer %d: gate %dx%d, up %dx%d, down %dx%d, %d inputs, %d outputs, k %d",
			e, il, gate.Rows, gate.Cols, up.Rows, up.Cols, down.Rows, down.Cols, len(xn), len(out), k)
	}
	srcRows, outRows := len(xn)/d, len(out)/d
	for _, v := range entries {
		if v < 0 || int(v) >= outRows || int(v)/k >= srcRows || int(v) >= len(w) {
			return fmt.Errorf("gpu: Expert %d of layer %d: entry %d of %d rows (%d tokens, %d weights)", e, il, v, outRows, srcRows, len(w))
		}
	}
	slot, hit := s.lookup(expertKey{int32(il), int32(e)})
	defer s.done(slot, hit)
	// the products read entries and w, the model's routing of the layer,
	// which stays until the layer's SumRows (drainExperts runs by then)
	products := func() error { return b.expertProducts(slot, e, d, f, eb, out, xn, entries, k, w) }
	switch {
	case hit && b.up != nil:
		if err := b.pin(slot); err != nil {
			return err
		}
		return products()
	case hit:
		return products()
	case b.up != nil: // the products wait for the upload (expertdma.go)
		return b.dmaFill(slot, il, ws, products)
	}
	if err := b.fillSlot(slot, ws); err != nil {
		return err
	}
	return products()
}

// expertProducts records the products of expert e, held in slot, on its
// entries' rows (Expert's checks passed), with the biases of eb.
func (b *Backend) expertProducts(slot int32, e, d, f int, eb model.ExpertBiases, out, xn []float32, entries []int32, k int, w []float32) error {
	m := len(entries)
	srcRows, outRows := len(xn)/d, len(out)/d
	dw := b.experts.slots[slot].w
	gb, err := b.expertBias(eb.Gate, e, f)
	if err != nil {
		return err
	}
	ub, err := b.expertBias(eb.Up, e, f)
	if err != nil {
		return err
	}
	db, err := b.expertBias(eb.Down, e, d)
	if err != nil {
		return err
	}
	xi, err := b.in(xn)
	if err != nil {
		return err
	}
	o, err := b.out(out)
	if err != nil {
		return err
	}
	sc, err := b.moeScratch(m * (2*d + 2*f))
	if err != nil {
		return err
	}
	off, err := b.stage(8 * m)
	if err != nil {
		return err
	}
	pairs := i32s(b.ring.Bytes()[off : off+8*m])
	for i, v := range entries {
		pairs[i], pairs[m+i] = v, int32(math.Float32bits(w[v]))
	}
	idx := F32{Buf: b.ring, Off: off / 4}
	xg, g, u, yg := F32{Buf: sc}, F32{Buf: sc, Off: m * d}, F32{Buf: sc, Off: m * (d + f)}, F32{Buf: sc, Off: m * (d + 2*f)}
	cb, kn := b.cb, b.k
	// the expert's tokens' rows (m × d)
	if err := kn.GatherRows(cb, xg, xi, idx, m, srcRows, k, d); err != nil {
		return err
	}
	cb.Barrier()
	// gate and up products (m × f), SwiGLU, down product (m × d)
	if err := kn.MatMul(cb, g, dw[0], xg, m); err != nil {
		return err
	}
	if err := kn.MatMul(cb, u, dw[1], xg, m); err != nil {
		return err
	}
	cb.Barrier()
	// gpt-oss: each product's bias (the host adds up's, then gate's: the
	// order does not matter, they touch different rows)
	if gb.Buf != nil || ub.Buf != nil {
		for _, a := range []struct{ x, bias F32 }{{u, ub}, {g, gb}} {
			if a.bias.Buf != nil {
				if err := kn.AddRows(cb, a.x, a.bias, m*f, f); err != nil {
					return err
				}
			}
		}
		cb.Barrier()
	}
	if eb.OAI {
		err = kn.SwiGLUOAI(cb, g, g, u, m*f, model.SwiGLUOAIAlpha, model.SwiGLUOAILimit)
	} else {
		err = kn.SwiGLU(cb, g, g, u, m*f)
	}
	if err != nil {
		return err
	}
	cb.Barrier()
	if err := kn.MatMul(cb, yg, dw[2], g, m); err != nil {
		return err
	}
	cb.Barrier()
	if db.Buf != nil {
		if err := kn.AddRows(cb, yg, db, m*d, d); err != nil {
			return err
		}
		cb.Barrier()
	}
	// each output row, weighted, into its (token, slot) row
	return kn.ScatterRows(cb, o, yg, idx, m, outRows, d)
}

// fillSlot uploads an expert's three matrices into slot i of the store.
func (b *Backend) fillSlot(i int32, ws [3]*model.Weight) error {
	s := b.experts
	st := &s.slots[i]
	off, _, err := slotWeights(ws, s.slotBytes)
	if err != nil {
		return err
	}
	buf, base := s.place(i)
	start := time.Now()
	for j, w := range ws {
		nb := w.Rows * w.RowBytes
		if err := b.upload(buf, uint64(base+off[j]), w.Data[:nb]); err != nil {
			return err
		}
		st.w[j] = Weight{Buf: buf, Off: base + off[j], Type: w.Type, Rows: w.Rows, Cols: w.Cols}
		s.upBytes.Add(int64(nb))
	}
	s.upNanos.Add(time.Since(start).Nanoseconds())
	st.valid = true
	return nil
}

// SumRows implements model.DeviceMoE.
func (b *Backend) SumRows(dst, src []float32, n, k, d int) {
	b.run(func() error {
		if err := b.drainExperts(); err != nil { // the misses' products, after the hits'
			return err
		}
		if n <= 0 || k <= 0 || d <= 0 || len(src) < n*k*d || len(dst) < n*d {
			return fmt.Errorf("gpu: SumRows: %d rows of %d from %d each (%d and %d floats)", n, d, k, len(dst), len(src))
		}
		si, err := b.in(src[:n*k*d])
		if err != nil {
			return err
		}
		do, err := b.out(dst[:n*d])
		if err != nil {
			return err
		}
		return b.k.SumRows(b.cb, do, si, n, k, d)
	})
}

// loadExperts makes the device's expert slots: slots of them (0: one per
// routed expert of m, each uploaded now), or fewer, a cache filled as the
// router picks experts, evicted by policy.
func (b *Backend) loadExperts(m *model.Model, slots int, policy configs.CachePolicy) error {
	n := 0
	for il := range m.Layers {
		n += len(m.Layers[il].GateExps)
	}
	if n == 0 {
		return nil
	}
	if slots < 0 || slots > n {
		return fmt.Errorf("gpu: %d expert slots for %d experts", slots, n)
	}
	for il := range m.Layers { // refused now, not at a cache miss
		L := &m.Layers[il]
		for e := range L.GateExps {
			for _, w := range []*model.Weight{&L.GateExps[e], &L.UpExps[e], &L.DownExps[e]} {
				if !SupportsMatVec(w.Type) {
					return fmt.Errorf("gpu: expert weight %q: %w: no shader for type %s", w.Name, vk.ErrUnsupported, w.Type)
				}
			}
		}
	}
	cache := slots > 0 && slots < n
	if !cache {
		slots = n
	}
	group := 0 // resident: a layer's experts in one slab (RouteExperts)
	if !cache {
		group = m.NExpert
	}
	s, err := newExpertStore(b.dev, slots, expertSlotBytes(m), group, policy)
	if err != nil {
		return err
	}
	b.experts = s
	if cache {
		_, err := b.newUploader(s.slotBytes)
		return err
	}
	for il := range m.Layers {
		L := &m.Layers[il]
		for e := range L.GateExps {
			slot, hit := s.lookup(expertKey{int32(il), int32(e)})
			err := error(nil)
			if !hit {
				err = b.fillSlot(slot, [3]*model.Weight{&L.GateExps[e], &L.UpExps[e], &L.DownExps[e]})
			}
			s.done(slot, hit)
			if err != nil {
				return err
			}
		}
	}
	s.hits.Store(0)
	s.misses.Store(0)
	b.routes = b.residentRoutes(m)
	return nil
}

// ExpertStats returns the device expert store's counters (zero when the
// model has no routed experts).
func (b *Backend) ExpertStats() ExpertStats {
	if b.experts == nil {
		return ExpertStats{}
	}
	return b.experts.stats()
}

var _ model.DeviceRouter = (*Backend)(nil)

// layerRoute is a layer's resident experts as MatVecByID reads them: the
// gate, up and down matrices of expert 0, expert e's stride·e bytes
// further in the same slab.
type layerRoute struct {
	w      [3]Weight
	stride int
	n      int // experts
}

// residentRoutes returns each layer's layerRoute when every expert of it
// is resident in consecutive slots of one slab, with the same types and
// shapes (nil for a layer that is not: its routing goes through the host).
func (b *Backend) residentRoutes(m *model.Model) []*layerRoute {
	s := b.experts
	rs := make([]*layerRoute, len(m.Layers))
	for il := range m.Layers {
		L := &m.Layers[il]
		if len(L.GateExps) == 0 {
			continue
		}
		i0, ok := s.index[expertKey{int32(il), 0}]
		if !ok {
			continue
		}
		r := &layerRoute{w: s.slots[i0].w, stride: s.slotBytes, n: len(L.GateExps)}
		for _, w := range r.w {
			if !hasMatVecByID(w.Type) {
				r = nil // a type without a by-id shader: routed through the host
				break
			}
		}
		if r == nil {
			continue
		}
		for e := range L.GateExps {
			i, ok := s.index[expertKey{int32(il), int32(e)}]
			if !ok || i != i0+int32(e) {
				r = nil
				break
			}
			for j, w := range s.slots[i].w {
				w0 := r.w[j]
				if w.Buf != w0.Buf || w.Type != w0.Type || w.Rows != w0.Rows || w.Cols != w0.Cols || w.Off != w0.Off+e*r.stride {
					r = nil
					break
				}
			}
			if r == nil {
				break
			}
		}
		rs[il] = r
	}
	return rs
}

// RouteExperts implements model.DeviceRouter for one token (decode) on a
// layer whose experts are all resident (residentRoutes): the top-k shader
// ranks the probabilities into device buffers, moe_route.comp turns the k
// values into weights, and MatVecByID runs the gate, up and down products
// of the k chosen experts (one workgroup z per expert) reading their ids
// from the top-k's output; scatter and sum as Expert and SumRows do. The
// products are the shaders Expert runs on one row, so the result is bit
// for bit the host-routed one. A prompt's rows (n > 1) and a VRAM budget
// (expert slots as a cache) route through the host.
func (b *Backend) RouteExperts(il int, probs, xn, out, dst []float32, n, nExpert, k, d int, norm bool) bool {
	if n != 1 || b.up != nil || il < 0 || il >= len(b.routes) || b.routes[il] == nil || b.routes[il].n != nExpert ||
		k < 1 || k > MaxTopK || nExpert > topKSeg || len(probs) < nExpert || len(xn) < d || len(out) < k*d || len(dst) < d {
		return false
	}
	r := b.routes[il]
	f := r.w[0].Rows
	if r.w[0].Cols != d || r.w[1].Rows != f || r.w[2].Rows != d || r.w[2].Cols != f {
		return false
	}
	b.run(func() error {
		if err := b.drainExperts(); err != nil {
			return err
		}
		src, err := b.in(probs[:nExpert])
		if err != nil {
			return err
		}
		if err := b.topKBuffers(k, k); err != nil {
			return err
		}
		if b.routeBuf == nil {
			if b.routeBuf, err = b.dev.NewBuffer(8*MaxTopK, vk.DeviceLocal); err != nil {
				return fmt.Errorf("gpu: routing buffer: %w", err)
			}
			b.owned = append(b.owned, b.routeBuf)
		}
		xi, err := b.in(xn[:d])
		if err != nil {
			return err
		}
		o, err := b.out(out[:k*d])
		if err != nil {
			return err
		}
		do, err := b.out(dst[:d])
		if err != nil {
			return err
		}
		sc, err := b.moeScratch(k * (2*f + d))
		if err != nil {
			return err
		}
		if err := b.record(); err != nil {
			return err
		}
		t, cb, kn := &b.topk, b.cb, b.k
		vals, ids, route := F32{Buf: t.outV}, F32{Buf: t.outI}, F32{Buf: b.routeBuf}
		if c, err := kn.TopKPass(cb, vals, ids, src, nil, 1, nExpert, nExpert, k); err != nil {
			return err
		} else if c != 1 {
			return fmt.Errorf("gpu: RouteExperts: %d experts took %d top-k segments", nExpert, c)
		}
		cb.Barrier()
		if err := kn.Route(cb, route, vals, k, norm); err != nil {
			return err
		}
		g, u, y := F32{Buf: sc}, F32{Buf: sc, Off: k * f}, F32{Buf: sc, Off: 2 * k * f}
		if err := kn.MatVecByID(cb, g, r.w[0], xi, ids, k, r.n, r.stride, 0); err != nil {
			return err
		}
		if err := kn.MatVecByID(cb, u, r.w[1], xi, ids, k, r.n, r.stride, 0); err != nil {
			return err
		}
		cb.Barrier()
		if err := kn.SwiGLU(cb, g, g, u, k*f); err != nil {
			return err
		}
		cb.Barrier()
		if err := kn.MatVecByID(cb, y, r.w[2], g, ids, k, r.n, r.stride, f); err != nil {
			return err
		}
		cb.Barrier()
		if err := kn.ScatterRows(cb, o, y, route, k, k, d); err != nil {
			return err
		}
		cb.Barrier()
		if err := kn.SumRows(cb, do, o, 1, k, d); err != nil {
			return err
		}
		b.experts.hits.Add(int64(k)) // each chosen expert is resident
		b.devRouted++
		return nil
	})
	return true
}

// hasMatVecByID reports whether MatVecByID has a shader for type t.
func hasMatVecByID(t quant.Type) bool {
	sh, ok := matVecShaders[t]
	if !ok {
		return false
	}
	_, err := shaders.SPIRV(sh.name + shaders.ByID)
	return err == nil
}
