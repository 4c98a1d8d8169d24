package model

// split.go: a step split between backends by layer (the vulkan backend's
// --n-gpu-layers and --vram plans): Split is the Ops a Context is made
// with; the Context runs each layer on that layer's Ops, moving the hidden
// state between backends where consecutive layers differ.

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// Split places a model's layers on backends: Input looks up the token
// embeddings, Layers[il] computes layer il, Output computes the output
// norm and projection and anything else outside the layers. A Context made
// with a *Split runs layer il with Layers[il] as its Ops (so the layer's
// code is the same on every backend); where two consecutive parts run on
// different Ops, the hidden state x goes through the host once: ToHost on
// the Ops that wrote it (a HostSync), after which the next Ops read the
// host copy (a HostSync uploads what the host owns). The KV rows of layer
// il are stored by Layers[il] (its KVStorer, else SetK and SetV); a layer
// whose Ops is a KVStorer and a HostSync keeps its cache on its device,
// and the Context drops the host storage of that layer (placeKV; HostKV
// reports which layers keep it).
//
// Split's own methods, which the Context calls outside the layers, are
// Output's; ToHost syncs every HostSync among the parts.
type Split struct {
	Input  Ops
	Layers []Ops
	Output Ops
}

var (
	_ Ops        = (*Split)(nil)
	_ HostSync   = (*Split)(nil)
	_ KVStorer   = (*Split)(nil)
	_ KVCopier   = (*Split)(nil)
	_ KVPreparer = (*Split)(nil)
)

// parts returns the distinct Ops of s, Output first.
func (s *Split) parts() []Ops {
	ps := []Ops{s.Output}
	add := func(o Ops) {
		for _, p := range ps {
			if p == o {
				return
			}
		}
		ps = append(ps, o)
	}
	add(s.Input)
	for _, o := range s.Layers {
		add(o)
	}
	return ps
}

// check reports a split that does not fit m.
func (s *Split) check(m *Model) error {
	if s.Input == nil || s.Output == nil || len(s.Layers) != m.NLayer {
		return fmt.Errorf("model: a split needs input and output backends and one per layer (%d layers, %d given)", m.NLayer, len(s.Layers))
	}
	for il, o := range s.Layers {
		if o == nil {
			return fmt.Errorf("model: the split has no backend for layer %d", il)
		}
		if _, ok := o.(*Split); ok {
			return fmt.Errorf("model: layer %d of a split is itself a split", il)
		}
	}
	for _, p := range s.parts() {
		if err := checkOps(m, p); err != nil {
			return err
		}
	}
	return nil
}

// KVCopier is a backend that keeps KV rows on its device (a KVStorer and
// a HostSync) and copies them there: CopyKV copies n rows of layer from
// positions [srcPos, srcPos+n) of sequence srcSeq to [dstPos, dstPos+n)
// of dstSeq, as KVCache.CopyRows copies host rows (a prefix block shared
// by copying). A failure is reported as the backend's other ops report
// theirs (HostSync: by the next ToHost).
type KVCopier interface {
	CopyKV(kv *KVCache, layer, dstSeq, dstPos, srcSeq, srcPos, n int)
}

// KVPreparer is a backend that keeps KV rows on its device and makes
// them up front: PrepareKV allocates kv's device rows and reports a cache
// it cannot hold (a type without a shader, a budget too small) as an
// error naming what, so that the engine refuses it when it is made (a
// server at startup) instead of failing its first request; without the
// call, the rows are made by the first op that needs them.
type KVPreparer interface {
	PrepareKV(kv *KVCache) error
}

// PrepareKV implements KVPreparer for the parts of s that are.
func (s *Split) PrepareKV(kv *KVCache) error {
	for _, p := range s.parts() {
		if kp, ok := p.(KVPreparer); ok {
			if err := kp.PrepareKV(kv); err != nil {
				return err
			}
		}
	}
	return nil
}

// onDevice reports whether o keeps its KV rows on its device (a KVStorer
// that keeps activations elsewhere: no host storage), and an error when
// it cannot copy them there (not a KVCopier): a prefix copy would
// otherwise leave the device rows behind.
func onDevice(o Ops) (bool, error) {
	_, st := o.(KVStorer)
	_, hs := o.(HostSync)
	if !st || !hs {
		return false, nil
	}
	if _, cp := o.(KVCopier); !cp {
		return false, fmt.Errorf("model: backend %T keeps KV rows on its device but cannot copy them (KVCopier), which prefix blocks need", o)
	}
	return true, nil
}

func (s *Split) MatMul(out []float32, w *Weight, x []float32, n int) {
	s.Output.MatMul(out, w, x, n)
}
func (s *Split) Embed(out []float32, w *Weight, ids []int32) { s.Input.Embed(out, w, ids) }
func (s *Split) RMSNorm(out, x []float32, weight Vector, n, dim int, eps float32) {
	s.Output.RMSNorm(out, x, weight, n, dim, eps)
}
func (s *Split) Rope(x []float32, pos []int32, n, nHead, headDim int, r *Rope) {
	s.Output.Rope(x, pos, n, nHead, headDim, r)
}
func (s *Split) Attention(out, q []float32, kv *KVCache, layer int, seq, pos []int32, h *Hyper, a Attn) {
	s.Layers[layer].Attention(out, q, kv, layer, seq, pos, h, a)
}
func (s *Split) SwiGLU(out, gate, up []float32) { s.Output.SwiGLU(out, gate, up) }
func (s *Split) GeGLU(out, gate, up []float32)  { s.Output.GeGLU(out, gate, up) }
func (s *Split) Scale(x []float32, f float32)   { s.Output.Scale(x, f) }
func (s *Split) Add(dst, src []float32)         { s.Output.Add(dst, src) }
func (s *Split) AddRows(x []float32, b Vector)  { s.Output.AddRows(x, b) }
func (s *Split) Softmax(x []float32, n, dim int) {
	s.Output.Softmax(x, n, dim)
}

// Supports reports whether every part multiplies weights of type t.
func (s *Split) Supports(t quant.Type) bool {
	for _, p := range s.parts() {
		if !p.Supports(t) {
			return false
		}
	}
	return true
}

// ToHost implements HostSync: every part that keeps activations elsewhere
// makes x's buffer current on the host; the first error is returned.
func (s *Split) ToHost(x []float32) error {
	var first error
	for _, p := range s.parts() {
		if h, ok := p.(HostSync); ok {
			if err := h.ToHost(x); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// StoreKV implements KVStorer: layer's rows go to its backend.
func (s *Split) StoreKV(kv *KVCache, layer int, seq, pos []int32, k, v []float32) {
	if st, ok := s.Layers[layer].(KVStorer); ok {
		st.StoreKV(kv, layer, seq, pos, k, v)
		return
	}
	for t := range seq {
		kd, vd := kv.KDimOf(layer), kv.VDimOf(layer)
		kv.SetK(layer, int(seq[t]), int(pos[t]), k[t*kd:(t+1)*kd])
		kv.SetV(layer, int(seq[t]), int(pos[t]), v[t*vd:(t+1)*vd])
	}
}

// CopyKV implements KVCopier: layer's rows are copied by its backend.
func (s *Split) CopyKV(kv *KVCache, layer, dstSeq, dstPos, srcSeq, srcPos, n int) {
	if cp, ok := s.Layers[layer].(KVCopier); ok {
		cp.CopyKV(kv, layer, dstSeq, dstPos, srcSeq, srcPos, n)
	}
}

// HostKV reports whether layer l of the cache has host storage (a layer
// of a Split whose backend keeps it on a device has none).
func (c *KVCache) HostKV(l int) bool { return len(c.K[l]) > 0 || len(c.V[l]) > 0 }

// deviceLayers returns which layers of c keep their rows on ops' device
// (nil: none), so have no host storage: with a Split, the layers whose
// backend does (onDevice); with one such backend for every layer, all
// of them when c is a plain cache (contiguous or block rows, no
// --kv-recent rows, sliding-window rings or recurrent state, which the
// device backend refuses at first use anyway). A split whose shape does
// not fit c gives nil (placeKV checks it against the model).
func (c *KVCache) deviceLayers(ops Ops) ([]bool, error) {
	plain := !c.Paged() && !c.HasRecent() && c.State == nil
	for l := range c.NLayer {
		plain = plain && c.ring(l) == 0
	}
	var dev []bool
	s, split := ops.(*Split)
	if !split {
		on, err := onDevice(ops)
		if err != nil || !on || !plain {
			return nil, err
		}
		dev = make([]bool, c.NLayer)
		for l := range dev {
			dev[l] = true
		}
		return dev, nil
	}
	if !plain {
		return nil, fmt.Errorf("model: a split across backends supports contiguous or block KV caches without --kv-recent rows, sliding-window rings or recurrent state")
	}
	if len(s.Layers) != c.NLayer {
		return nil, nil
	}
	for l, o := range s.Layers {
		on, err := onDevice(o)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		if on && dev == nil {
			dev = make([]bool, c.NLayer)
		}
		if on {
			dev[l] = true
		}
	}
	return dev, nil
}

// placeKV readies c's cache for its Ops (deviceLayers; a Split is checked
// against the model here): the host storage of the layers whose rows the
// backend keeps on its device is dropped (none when the cache was made
// for ops: NewBlockKVCacheFor).
func (c *Context) placeKV(ops Ops) error {
	if s, split := ops.(*Split); split {
		if err := s.check(c.M); err != nil {
			return err
		}
	}
	dev, err := c.KV.deviceLayers(ops)
	if err != nil {
		return err
	}
	for l := range c.KV.NLayer {
		switch {
		case dev != nil && dev[l]:
			c.KV.K[l], c.KV.V[l] = nil, nil
		case !c.KV.HostKV(l) && !c.KV.layers[l].NoRows:
			return fmt.Errorf("model: KV cache layer %d has no host storage (made for another backend) and this backend keeps its rows on the host", l)
		}
	}
	return nil
}

// switchOps makes to compute from now on, bringing the hidden state x
// to the host from the Ops that last wrote it when to is another one.
func (c *Context) switchOps(to Ops) error {
	if to == c.Ops {
		return nil
	}
	if h, ok := c.Ops.(HostSync); ok {
		if err := h.ToHost(c.x); err != nil {
			return err
		}
	}
	c.Ops = to
	return nil
}
