package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/flowinfer/flowinfer/quant"
)

// qwen35: Qwen 3.5 dense, a hybrid of linear and full attention, as
// llama.cpp's llama_model_qwen35 (src/models/qwen35.cpp,
// delta-net-base.cpp) reads it from GGUF. Every block is
//
//	x += mixer(rmsnorm(x)·attn_norm); x += ffn(rmsnorm(x)·post_attention_norm)
//
// with a SwiGLU FFN, and the mixer is either
//
//   - a gated delta net (the recurrent layers): qkv = Wqkv·x goes through
//     a causal convolution of SSM.Conv taps (with the sequence's last
//     inputs as state) and SiLU; q and k are L2-normalized per head; the
//     delta rule with decay g = softplus(Walpha·x + dt_bias)·ssm_a and
//     rate β = sigmoid(Wbeta·x) updates each value head's state and reads
//     it with q; the output is rmsnorm'd per head, times silu(Wgate·x),
//     and projected by ssm_out;
//   - gated full attention (every full_attention_interval-th layer): Wq
//     gives each head's query and an output gate side by side; q and k are
//     RMS-normalized per head, rotated by M-RoPE on the first
//     rope.dimension_count dimensions (text positions: every section
//     turns by the position, see imropeFactors), and the attention output
//     is multiplied by sigmoid(gate) before Wo.
//
// The recurrent state is kept per sequence in KVCache.State. A file's
// multi-token-prediction blocks (nextn_predict_layers > 0: the last blocks,
// a full-attention block plus nextn.* tensors) are skipped as llama.cpp
// skips them without --mtp (skipNextN). Not done: speculative decoding
// with them, and vision positions (text only).

func loadQwen35(l *loader, m *Model) {
	loadHybrid(l, m)
	for i := range m.Layers {
		L := &m.Layers[i]
		L.Gate = l.matrix(blk(i, "ffn_gate.weight"), m.NEmbd, m.NFF, true)
		L.Up = l.matrix(blk(i, "ffn_up.weight"), m.NEmbd, m.NFF, true)
		L.Down = l.matrix(blk(i, "ffn_down.weight"), m.NFF, m.NEmbd, true)
	}
	m.forward = forwardQwen35
}

// loadHybrid loads what qwen35, qwen35moe and qwen3next share: the
// embeddings and output, the RoPE (M-RoPE's text form but for qwen3next's
// plain NEOX), and each block's norms and mixer (gated delta net or gated
// attention). The FFN is the family's.
func loadHybrid(l *loader, m *Model) {
	m.RopeType = RopeNeox
	loadCommon(l, m)
	skipNextN(l, m)
	m.Rope.Type = RopeNeox
	if m.Arch != "qwen3next" {
		m.Rope.Factors = imropeFactors(m.RopeDim, m.RopeSections)
	}
	s := &m.SSM
	for i := range m.Layers {
		L := &m.Layers[i]
		L.AttnNorm = l.vector(blk(i, "attn_norm.weight"), m.NEmbd, true)
		L.FFNNorm = l.vector(blk(i, "post_attention_norm.weight"), m.NEmbd, true)
		if m.IsRecurrent(i) {
			vDim := s.DtRank * s.State
			if m.Arch == "qwen3next" {
				loadNextProjections(l, m, i) // qwen3next.go
			} else {
				L.Wqkv = l.matrix(blk(i, "attn_qkv.weight"), m.NEmbd, s.ConvDim(), true)
				L.WGate = l.matrix(blk(i, "attn_gate.weight"), m.NEmbd, vDim, true)
				L.SSMBeta = l.matrix(blk(i, "ssm_beta.weight"), m.NEmbd, s.DtRank, true)
				L.SSMAl = l.matrix(blk(i, "ssm_alpha.weight"), m.NEmbd, s.DtRank, true)
			}
			L.SSMConv = l.f32matrix(blk(i, "ssm_conv1d.weight"), s.Conv, s.ConvDim())
			L.SSMDt = l.vector(blk(i, "ssm_dt.bias"), s.DtRank, true)
			L.SSMA = l.vector(blk(i, "ssm_a"), s.DtRank, true)
			L.SSMNorm = l.vector(blk(i, "ssm_norm.weight"), s.State, true)
			L.SSMOut = l.matrix(blk(i, "ssm_out.weight"), vDim, m.NEmbd, true)
		} else {
			L.Wq = l.matrix(blk(i, "attn_q.weight"), m.NEmbd, 2*m.QDim(), true) // query and gate
			L.Wk = l.matrix(blk(i, "attn_k.weight"), m.NEmbd, m.KDim(), true)
			L.Wv = l.matrix(blk(i, "attn_v.weight"), m.NEmbd, m.VDim(), true)
			L.Wo = l.matrix(blk(i, "attn_output.weight"), m.QDim(), m.NEmbd, true)
			loadQKNorm(l, m, i)
		}
	}
}

// skipNextN checks and skips the multi-token-prediction blocks that follow
// the m.NLayer blocks, as llama.cpp's load_arch_tensors of qwen35,
// qwen35moe and qwen3next do without --mtp (load_block_mtp with
// TENSOR_SKIP): nextn.eh_proj, nextn.enorm and nextn.hnorm must be there
// with their shapes (TENSOR_SKIP does not make a tensor optional), and
// every tensor of those blocks goes to m.Skipped, unread, instead of
// m.Layers. The forward pass never runs them (llama.cpp's graph loops
// over n_layer) and the caches hold no layer for them (its hybrid
// memory's filters keep il < n_layer).
func skipNextN(l *loader, m *Model) {
	for il := m.NLayer; il < m.NLayer+m.NLayerNextN; il++ {
		l.tensor(blk(il, "nextn.eh_proj.weight"), true, 2*m.NEmbd, m.NEmbd)
		l.tensor(blk(il, "nextn.enorm.weight"), true, m.NEmbd)
		l.tensor(blk(il, "nextn.hnorm.weight"), true, m.NEmbd)
		prefix := blk(il, "")
		for _, t := range l.f.Tensors {
			if strings.HasPrefix(t.Name, prefix) {
				m.Skipped = append(m.Skipped, t)
			}
		}
	}
}

// readQwen35Hyper reads the hybrid's keys (llama_model_qwen35::
// load_arch_hparams, the same in qwen35moe's and qwen3next's): the ssm.*
// shapes, which layers are recurrent (attention.recurrent_layers, else
// every layer but each full_attention_interval-th, default 4) and, but
// for qwen3next (plain NEOX RoPE), rope.dimension_sections.
func readQwen35Hyper(k *keyReader, h *Hyper) error {
	s := &h.SSM
	s.Conv = k.uint("ssm.conv_kernel", 0, true)
	s.Inner = k.uint("ssm.inner_size", 0, true)
	s.State = k.uint("ssm.state_size", 0, true)
	s.DtRank = k.uint("ssm.time_step_rank", 0, true)
	s.Groups = k.uint("ssm.group_count", 0, true)
	h.NLayerNextN = k.uint("nextn_predict_layers", 0, false)
	if k.err != nil {
		return k.err
	}
	if h.NLayerNextN >= h.NLayer {
		return fmt.Errorf("model: %s: nextn_predict_layers %d must be below block_count %d", h.Arch, h.NLayerNextN, h.NLayer)
	}
	// llama_hparams::n_layer(): block_count less the MTP blocks
	all := h.NLayer
	h.NLayer -= h.NLayerNextN
	switch {
	case s.Conv < 2 || s.State == 0 || s.DtRank == 0 || s.Groups == 0 || s.DtRank%s.Groups != 0:
		return fmt.Errorf("model: %s: ssm conv_kernel %d (≥ 2), state_size %d, time_step_rank %d and group_count %d (dividing it) must be positive", h.Arch, s.Conv, s.State, s.DtRank, s.Groups)
	case s.Inner != s.DtRank*s.State:
		return fmt.Errorf("model: %s: ssm.inner_size %d is not time_step_rank %d × state_size %d", h.Arch, s.Inner, s.DtRank, s.State)
	case h.HeadDimK != h.HeadDimV:
		return fmt.Errorf("model: %s: key_length %d and value_length %d differ", h.Arch, h.HeadDimK, h.HeadDimV)
	}
	h.Recurrent = make([]bool, h.NLayer)
	key := h.Arch + ".attention.recurrent_layers"
	if v, ok := k.f.Get(key); ok {
		vals, ok := v.Array()
		if !ok || len(vals) != all {
			return fmt.Errorf("model: key %q: want an array of %d booleans (block_count), got %s", key, all, v)
		}
		for i, e := range vals[:h.NLayer] { // the MTP blocks' entries are unused
			b, ok := e.Bool()
			if !ok {
				return fmt.Errorf("model: key %q: element %d is %s, not a boolean", key, i, e)
			}
			h.Recurrent[i] = b
		}
	} else {
		every := k.uint("full_attention_interval", 4, false)
		if k.err != nil {
			return k.err
		}
		if every == 0 {
			return fmt.Errorf("model: key %q is 0", h.Arch+".full_attention_interval")
		}
		for i := range h.Recurrent {
			h.Recurrent[i] = (i+1)%every != 0
		}
	}
	if h.Arch == "qwen3next" {
		return nil
	}
	key = h.Arch + ".rope.dimension_sections"
	v, ok := k.f.Get(key)
	if !ok {
		return fmt.Errorf("model: missing required key %q", key)
	}
	secs, ok := v.Int32s()
	if !ok || len(secs) > 4 {
		return fmt.Errorf("model: key %q: want up to 4 integers, got %s", key, v)
	}
	for i, x := range secs {
		if x < 0 {
			return fmt.Errorf("model: key %q: negative section %d", key, x)
		}
		h.RopeSections[i] = int(x)
	}
	total := h.RopeSections[0] + h.RopeSections[1] + h.RopeSections[2] + h.RopeSections[3]
	if h.RopeSections[0]+h.RopeSections[1]+h.RopeSections[2] == 0 || 2*total > h.HeadDimK {
		return fmt.Errorf("model: key %q: sections %v must rotate something and fit the head (%d)", key, h.RopeSections, h.HeadDimK)
	}
	return nil
}

// imropeFactors returns the frequency divisors that make NEOX RoPE over
// nDims dimensions equal ggml's interleaved M-RoPE (GGML_ROPE_TYPE_IMROPE,
// ggml_mrope_cache_init) for text tokens: llama.cpp gives a text token
// the same position in the t, h and w sections and 0 in the fourth, and
// pair i takes section (i mod Σsections) interleaved t, h, w, t, h, w...
// while each of the three lasts, else the fourth. The angles grow with i as
// in NEOX for the pairs of the first three; the others turn by 0, which a
// divisor of +Inf gives (θ/∞ = 0, as ggml's 0·θ). nil when every pair
// turns.
func imropeFactors(nDims int, sec [4]int) []float32 {
	total := sec[0] + sec[1] + sec[2] + sec[3]
	var f []float32
	for i := range nDims / 2 {
		s := i % total
		turns := (s%3 == 1 && s < 3*sec[1]) || (s%3 == 2 && s < 3*sec[2]) || (s%3 == 0 && s < 3*sec[0])
		if turns {
			continue
		}
		if f == nil {
			f = make([]float32, nDims/2)
			for j := range f {
				f[j] = 1
			}
		}
		f[i] = float32(math.Inf(1))
	}
	return f
}

// f32matrix loads a [cols, rows] F32 tensor as floats (the convolution's
// taps, which llama-quantize never quantizes).
func (l *loader) f32matrix(name string, cols, rows int) Vector {
	t := l.tensor(name, true, cols, rows)
	if t == nil {
		return nil
	}
	v := make(Vector, cols*rows)
	rb, err := quant.RowBytes(t.Type, cols)
	if err != nil {
		l.fail(fmt.Errorf("model: tensor %q: %w", name, err))
		return nil
	}
	for r := range rows {
		if err := quant.DequantizeRow(t.Type, t.Data[r*rb:(r+1)*rb], v[r*cols:(r+1)*cols]); err != nil {
			l.fail(fmt.Errorf("model: tensor %q: %w", name, err))
			return nil
		}
	}
	return v
}

// qwen35Scratch holds the buffers of the hybrid's layers (MaxBatch rows).
type qwen35Scratch struct {
	qg         []float32 // n × 2·QDim: each head's query then its gate
	gate       []float32 // n × QDim: the gates, gathered
	qkv, conv  []float32 // n × ConvDim: projection, convolved (one sequence gathered)
	z, o       []float32 // n × value heads·d: output gate, delta-net output
	alpha, bet []float32 // n × value heads
	sIn, sOut  []float32 // one sequence's rows gathered: n × ConvDim, n × value heads·d
	sG, sB     []float32 // n × value heads
	rows       []int     // one sequence's rows
	done       []bool    // rows handled
}

func (s *qwen35Scratch) alloc(n int, h *Hyper) {
	cd, vd, hv := h.SSM.ConvDim(), h.SSM.DtRank*h.SSM.State, h.SSM.DtRank
	s.qg, s.gate = make([]float32, 2*n*h.QDim()), make([]float32, n*h.QDim())
	s.qkv, s.conv = make([]float32, n*cd), make([]float32, n*cd)
	s.z, s.o = make([]float32, n*vd), make([]float32, n*vd)
	s.alpha, s.bet = make([]float32, n*hv), make([]float32, n*hv)
	s.sIn, s.sOut = make([]float32, n*cd), make([]float32, n*vd)
	s.sG, s.sB = make([]float32, n*hv), make([]float32, n*hv)
	s.rows, s.done = make([]int, 0, n), make([]bool, n)
}

// forwardQwen35 is the forward pass of qwen35, qwen35moe and qwen3next:
// they differ in their FFN (dense, or routed experts plus a shared one)
// and, inside the mixers, in what their weights' layout needs.
func forwardQwen35(c *Context, b *Batch) error {
	if _, ok := c.Ops.(DeltaNet); !ok {
		return fmt.Errorf("model: %s needs a backend with the gated delta net ops (model.DeltaNet)", c.M.Arch)
	}
	if err := c.KV.State.check(b); err != nil {
		return err
	}
	c.embed(b)
	return c.layers(b, func(il int, b *Batch) error {
		if c.M.IsRecurrent(il) {
			c.deltaNet(il, b) // x += deltanet(norm(x))
		} else if err := c.gatedAttention(il, b); err != nil { // x += attn(norm(x))·σ(gate)
			return err
		}
		if c.M.NExpert > 0 { // qwen35moe, qwen3next (qwen35moe.go)
			return c.moe(il, b) // x += moe(norm(x)) + σ(g·norm(x))·shexp(norm(x))
		}
		c.ffn(il, b) // x += ffn(norm(x)), norm = post_attention_norm
		return nil
	})
}

// gatedAttention is qwen35's full-attention mixer: attention as in
// Context.attention (per-head q/k norms, RoPE, cache, softmax) with the
// query's gate multiplied in, as sigmoid, before the output projection.
func (c *Context) gatedAttention(il int, b *Batch) error {
	m, L, ops := c.M, c.layer(il), c.Ops
	dn := ops.(DeltaNet)
	n, h, s := b.Len(), &m.Hyper, &c.q35
	d := h.HeadDimK
	c.span("attn", il, true)
	defer c.span("attn", il, false)
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.AttnNorm, n, h.NEmbd, h.RMSEps)
	c.eval("attn_norm", il, c.xn, n, h.NEmbd)
	// q+gate (n × 2·QDim, per head [q d][gate d]), k, v
	qg, k, v := s.qg[:2*n*h.QDim()], c.k[:n*h.KDim()], c.v[:n*h.VDim()]
	c.matmuls("attn_qkv", il, c.xn, n, mm{"attn_q", qg, L.Wq}, mm{"attn_k", k, L.Wk}, mm{"attn_v", v, L.Wv})
	q, gate := c.q[:n*h.QDim()], s.gate[:n*h.QDim()]
	for r := range n * h.NHead {
		copy(q[r*d:(r+1)*d], qg[2*r*d:(2*r+1)*d])
		copy(gate[r*d:(r+1)*d], qg[(2*r+1)*d:(2*r+2)*d])
	}
	ops.RMSNorm(q, q, L.QNorm, n*h.NHead, d, h.RMSEps)
	ops.RMSNorm(k, k, L.KNorm, n*h.NHeadKV, d, h.RMSEps)
	ops.Rope(q, b.Pos, n, h.NHead, d, &m.Rope)
	ops.Rope(k, b.Pos, n, h.NHeadKV, d, &m.Rope)
	c.eval("Qcur", il, q, n, h.QDim())
	c.eval("Kcur", il, k, n, h.KDim())
	c.eval("Vcur", il, v, n, h.VDim())
	if lt := c.KV.Layer(il); lt.RotK > 0 || lt.RotV > 0 {
		return fmt.Errorf("model: %s: rotated K/V cache types are not supported", h.Arch)
	}
	c.span("kv_store", il, true)
	err := c.KV.Store(il, b.Seq, b.Pos, k, v)
	c.span("kv_store", il, false)
	if err != nil {
		return err
	}
	att := c.att[:n*h.NHead*h.HeadDimV]
	scale := float32(1 / math.Sqrt(float64(d)))
	c.span("attn_kqv", il, true)
	ops.Attention(att, q, c.KV, il, b.Seq, b.Pos, h, Attn{Scale: scale})
	c.span("attn_kqv", il, false)
	c.eval("attn_pregate", il, att, n, h.QDim())
	dn.SigmoidMul(att, gate)
	c.eval("attn_gated", il, att, n, h.QDim())
	c.matmul("attn_output", il, c.tmp[:n*h.NEmbd], L.Wo, att, n)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("attn_residual", il, c.x, n, h.NEmbd)
	return nil
}

// deltaNet is qwen35's linear-attention mixer (build_layer_attn_linear),
// run per sequence on the batch's rows of that sequence.
func (c *Context) deltaNet(il int, b *Batch) {
	m, L, ops := c.M, c.layer(il), c.Ops
	dn := ops.(DeltaNet)
	n, h, s := b.Len(), &m.Hyper, &c.q35
	ss := &h.SSM
	cd, hv, hk, d := ss.ConvDim(), ss.DtRank, ss.Groups, ss.State
	vd := hv * d
	c.span("deltanet", il, true)
	defer c.span("deltanet", il, false)
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.AttnNorm, n, h.NEmbd, h.RMSEps)
	c.eval("attn_norm", il, c.xn, n, h.NEmbd)
	// projections: qkv (n × ConvDim), z (n × vd), beta and alpha (n × hv)
	qkv, z, beta, alpha := s.qkv[:n*cd], s.z[:n*vd], s.bet[:n*hv], s.alpha[:n*hv]
	if L.SSMBA != nil { // qwen3next: fused projections, split (qwen3next.go)
		c.nextProjections(il, n, qkv, z, beta, alpha)
	} else {
		c.matmuls("linear_attn_qkvz", il, c.xn, n, mm{"linear_attn_qkv_mixed", qkv, L.Wqkv}, mm{"z", z, L.WGate})
		c.matmuls("linear_attn_ba", il, c.xn, n, mm{"beta", beta, L.SSMBeta}, mm{"alpha", alpha, L.SSMAl})
	}
	// beta = sigmoid(beta); gate g = softplus(alpha + dt_bias)·ssm_a
	for t := range n {
		br, ar := beta[t*hv:(t+1)*hv], alpha[t*hv:(t+1)*hv]
		for j := range hv {
			br[j] = 1 / (1 + expf32(-br[j]))
			ar[j] = softplus(ar[j]+L.SSMDt[j]) * L.SSMA[j]
		}
	}
	c.eval("beta_sigmoid", il, beta, n, hv)
	c.eval("gate", il, alpha, n, hv)
	// each sequence's rows in order: convolution, L2 norms, delta rule
	done := s.done[:n]
	clear(done)
	o := s.o[:n*vd]
	for i := range n {
		if done[i] {
			continue
		}
		seq := b.Seq[i]
		rows := s.rows[:0]
		for j := i; j < n; j++ {
			if b.Seq[j] == seq {
				rows = append(rows, j)
				done[j] = true
			}
		}
		nr := len(rows)
		in, out, g, bt := s.sIn[:nr*cd], s.sOut[:nr*vd], s.sG[:nr*hv], s.sB[:nr*hv]
		for r, j := range rows {
			copy(in[r*cd:(r+1)*cd], qkv[j*cd:(j+1)*cd])
			copy(g[r*hv:(r+1)*hv], alpha[j*hv:(j+1)*hv])
			copy(bt[r*hv:(r+1)*hv], beta[j*hv:(j+1)*hv])
		}
		convState, deltaState := c.KV.State.Layer(il, int(seq))
		conv := s.conv[:nr*cd]
		dn.ConvSiLU(conv, in, convState, L.SSMConv, nr, cd, ss.Conv)
		for r := range nr { // q and k heads L2-normalized
			dn.L2Norm(conv[r*cd:r*cd+2*hk*d], 2*hk, d, h.RMSEps)
		}
		qk, nk := conv, hk
		if h.SSMGroupedHeads && hk != hv { // qwen3next: q/k repeated per value head
			qk, nk = c.groupHeads(conv, nr), hv
		}
		dn.GatedDeltaNet(out, qk, g, bt, deltaState, nr, nk, hv, d)
		for r, j := range rows {
			copy(o[j*vd:(j+1)*vd], out[r*vd:(r+1)*vd])
		}
	}
	c.eval("attn_output", il, o, n, vd)
	// rmsnorm(o)·ssm_norm·silu(z) per head, then the output projection
	dn.GatedRMSNorm(o, o, z, L.SSMNorm, n*hv, d, h.RMSEps)
	c.eval("final_output", il, o, n, vd)
	c.matmul("linear_attn_out", il, c.tmp[:n*h.NEmbd], L.SSMOut, o, n)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("attn_residual", il, c.x, n, h.NEmbd)
}

// expf32 is C's expf on float32 (through float64, correctly rounded).
func expf32(x float32) float32 { return float32(math.Exp(float64(x))) }

// softplus is ggml's op_softplus: x above 20, else log(1+exp(x)) in float32.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + expf32(x))))
}
