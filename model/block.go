package model

// block.go: the parts of a decoder block the architectures share: the
// loop over layers, the embedding lookup, attention and the dense SwiGLU
// FFN. Each reads like its formula; the shapes of the buffers are noted.

import (
	"math"

	"github.com/flowinfer/flowinfer/quant"
)

// layers runs block(il) for every layer between the weight hooks, and
// stops at the first block that fails.
func (c *Context) layers(b *Batch, block func(il int, b *Batch) error) error {
	if s, ok := c.Ops.(*Split); ok { // each layer on its backend (split.go)
		defer func() { c.Ops = s }()
		c.Ops = s.Input // which wrote x (embed)
		err := c.splitLayers(s, b, block)
		if err == nil {
			err = c.switchOps(s.Output)
		}
		return err
	}
	return c.splitLayers(nil, b, block)
}

// splitLayers runs the layers, each on s.Layers[il] when s is not nil.
func (c *Context) splitLayers(s *Split, b *Batch, block func(il int, b *Batch) error) error {
	for il := range c.M.Layers {
		if s != nil {
			if err := c.switchOps(s.Layers[il]); err != nil {
				return err
			}
		}
		if c.hooks.Layers != nil {
			L, err := c.hooks.Layers.Acquire(il)
			if err != nil {
				return err
			}
			c.cur, c.curIL = L, il
		}
		err := block(il, b)
		if c.hooks.Layers != nil {
			c.hooks.Layers.Release(il)
			c.cur = nil
		}
		if err != nil {
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

// inputOps returns the Ops that look up the embeddings (a Split's Input):
// an op on the embeddings before the layers runs there, where layers
// (switchOps) expects x to be.
func (c *Context) inputOps() Ops {
	if s, ok := c.Ops.(*Split); ok {
		return s.Input
	}
	return c.Ops
}

// embed looks up the batch's token embeddings into c.x.
func (c *Context) embed(b *Batch) {
	c.Ops.Embed(c.x, c.M.TokEmbd, b.Tokens)
	c.eval("inp_embd", -1, c.x, b.Len(), c.M.NEmbd)
}

// attention runs one block's attention sub-layer and adds it to the residual
// stream c.x: x += Wo·attn(rope(norm(x)·Wq), rope(norm(x)·Wk), norm(x)·Wv).
func (c *Context) attention(il int, b *Batch) error {
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
	if L.Bq != nil { // qwen2 and gpt-oss biases
		ops.AddRows(q, L.Bq)
	}
	if L.Bk != nil {
		ops.AddRows(k, L.Bk)
	}
	if L.Bv != nil {
		ops.AddRows(v, L.Bv)
	}
	if L.QNorm != nil { // qwen3: per-head RMSNorm of q and k before RoPE
		ops.RMSNorm(q, q, L.QNorm, n*h.NHead, h.HeadDimK, h.RMSEps)
		ops.RMSNorm(k, k, L.KNorm, n*h.NHeadKV, h.HeadDimK, h.RMSEps)
	}
	// rotary position embedding (gemma3: its own base in sliding-window layers)
	rope := m.LayerRope(il)
	ops.Rope(q, b.Pos, n, h.NHead, h.HeadDimK, rope)
	ops.Rope(k, b.Pos, n, h.NHeadKV, h.HeadDimK, rope)
	c.eval("Qcur", il, q, n, h.QDim())
	c.eval("Kcur", il, k, n, h.KDim())
	c.eval("Vcur", il, v, n, h.VDim())
	if h.AttnTempScale != 0 { // mistral3: attention temperature, q ·= factor(pos) per row
		for t := range n { // one float32 product per value, as ggml_mul
			ops.Scale(q[t*h.QDim():(t+1)*h.QDim()], h.AttnTempFactor(b.Pos[t]))
		}
		c.eval("Qcur_attn_temp_scaled", il, q, n, h.QDim())
	}
	if err := c.storeKV(il, b, q, k, v); err != nil {
		return err
	}
	// softmax(q·kᵀ/√d)·v over the cached positions
	att := c.att[:n*h.NHead*h.HeadDimV]
	scale := m.AttnScale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(h.HeadDimK)))
	}
	c.span("attn_kqv", il, true)
	ops.Attention(att, q, c.KV, il, b.Seq, b.Pos, h, Attn{Scale: scale, Window: h.LayerWindow(il), Sinks: L.Sinks})
	c.span("attn_kqv", il, false)
	if rv := c.KV.Layer(il).RotV; rv > 0 { // the output of rotated values, rotated back
		c.hadamard(att, rv)
	}
	c.eval("kqv_out", il, att, n, h.NHead*h.HeadDimV)
	// output projection and residual
	c.matmul("attn_output", il, c.tmp[:n*h.NEmbd], L.Wo, att, n)
	if L.Bo != nil { // gpt-oss
		ops.AddRows(c.tmp[:n*h.NEmbd], L.Bo)
	}
	c.eval("attn_out", il, c.tmp, n, h.NEmbd)
	if L.AttnPostNorm != nil { // gemma3: the output normalised before the residual
		ops.RMSNorm(c.tmp, c.tmp[:n*h.NEmbd], L.AttnPostNorm, n, h.NEmbd, h.RMSEps)
		c.eval("attn_post_norm", il, c.tmp, n, h.NEmbd)
	}
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("ffn_inp", il, c.x, n, h.NEmbd)
	return nil
}

// ffn runs a dense gated FFN sub-layer: x += Wdown·(act(Wgate·norm(x)) ⊙ Wup·norm(x)),
// act silu (SwiGLU) or gelu (GeGLU, gemma3, whose output is normalised
// again before the residual).
func (c *Context) ffn(il int, b *Batch) {
	m, L, ops := c.M, c.layer(il), c.Ops
	n := b.Len()
	h := &m.Hyper
	c.span("ffn", il, true)
	defer c.span("ffn", il, false)
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.FFNNorm, n, h.NEmbd, h.RMSEps)
	c.eval("ffn_norm", il, c.xn, n, h.NEmbd)
	gate, up := c.gate[:n*h.NFFAt(il)], c.up[:n*h.NFFAt(il)]
	c.matmuls("ffn_gate_up", il, c.xn, n, mm{"ffn_gate", gate, L.Gate}, mm{"ffn_up", up, L.Up})
	if m.FFNAct == ActGELU {
		ops.GeGLU(gate, gate, up)
	} else {
		ops.SwiGLU(gate, gate, up)
	}
	c.matmul("ffn_down", il, c.tmp[:n*h.NEmbd], L.Down, gate, n)
	c.eval("ffn_out", il, c.tmp, n, h.NEmbd)
	if L.FFNPostNorm != nil {
		ops.RMSNorm(c.tmp, c.tmp[:n*h.NEmbd], L.FFNPostNorm, n, h.NEmbd, h.RMSEps)
		c.eval("ffn_post_norm", il, c.tmp, n, h.NEmbd)
	}
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

// Rotator is implemented by Ops that multiply pieces of a vector by the
// orthonormal Walsh-Hadamard matrix themselves (in parallel, say): the
// results must equal quant.Hadamard's piece by piece.
type Rotator interface {
	Hadamard(x []float32, n int)
}

// storeKV applies llama.cpp's rotation of block-quantized K and V
// (KVLayer.RotK/RotV) to q, k and v and stores k and v in layer il's cache
// (kv_store: converted to its types, TurboQuant's rotation and coding
// included; see KVCache.Store).
func (c *Context) storeKV(il int, b *Batch, q, k, v []float32) error {
	lt := c.KV.Layer(il)
	if lt.RotK > 0 {
		c.hadamard(q, lt.RotK)
		c.hadamard(k, lt.RotK)
	}
	if lt.RotV > 0 {
		c.hadamard(v, lt.RotV)
	}
	c.span("kv_store", il, true)
	defer c.span("kv_store", il, false)
	return c.KV.Store(il, b.Seq, b.Pos, k, v)
}
