package model

import (
	"cmp"
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// nemotronh: NVIDIA's Nemotron-H, a hybrid of Mamba-2, attention and FFN
// layers, dense (nemotron_h) or with a mixture of experts in its FFN
// layers (nemotron_h_moe: Nemotron 3 Nano 30B-A3B), as llama.cpp's
// llama_model_nemotron_h (src/models/nemotron-h.cpp, mamba-base.cpp's
// build_mamba2_layer) reads it from GGUF. Every block is
//
//	x += mixer(rmsnorm(x)·attn_norm)
//
// with one mixer per layer, told apart by the per-layer
// attention.head_count_kv and feed_forward_length arrays: both 0 is a
// Mamba-2 layer, head_count_kv > 0 with feed_forward_length 0 an
// attention layer, feed_forward_length > 0 an FFN layer.
//
//   - Mamba-2: ssm_in·x gives z (SSM.Inner), xBC (x: SSM.Inner, B and C:
//     SSM.Groups × SSM.State each) and dt (one per head). xBC goes through
//     a causal convolution of SSM.Conv taps (the sequence's last inputs as
//     state), its bias and SiLU; the selective scan with decay
//     exp(softplus(dt + dt_bias)·ssm_a) per head updates each head's state
//     and reads it with C, plus the D skip x·ssm_d; the result times
//     silu(z) is RMS-normalised per group (ssm_norm) and projected by
//     ssm_out.
//   - attention: q, k, v projections (optional biases), no RoPE, softmax
//     scaled by 1/√head_dim (llama.cpp does not read attention.scale for
//     this family), attn_output.
//   - FFN: down(relu(up·x)²), optional biases; in nemotron_h_moe a sigmoid
//     router picks expert_used_count experts by sigmoid(logit) +
//     exp_probs_b, weighs each by its unbiased sigmoid (renormalised to
//     sum 1 if expert_weights_norm, times expert_weights_scale), each
//     expert an ungated squared-ReLU FFN, plus one shared expert
//     (ffn_up_shexp, ffn_down_shexp) on the same input.
//
// The Mamba state is kept per sequence in KVCache.State. Not done, each an
// error naming it: the MoE latent projections (moe_latent_size, Nemotron
// 3 Super), grouped expert selection (expert_group_count > 1), a fused
// attn_qkv, and attention or FFN layers of different widths or head
// counts.

// NemotronHyper is what nemotron_h adds to Hyper.
type NemotronHyper struct {
	Attn []bool // per layer: attention only
	FFN  []bool // per layer: FFN only (dense or MoE)
	// The MoE variant's shared expert width
	// (expert_shared_feed_forward_length) and expert_weights_scale (0
	// and 1: none).
	NFFShExp int
	ExpScale float32
}

// isNemotronH reports whether arch is a Nemotron-H family.
func isNemotronH(arch string) bool { return arch == "nemotron_h" || arch == "nemotron_h_moe" }

// readNemotronHHyper reads the family's keys
// (llama_model_nemotron_h::load_arch_hparams and llama_model_loader's
// per-layer arrays).
func readNemotronHHyper(k *keyReader, h *Hyper) error {
	s := &h.SSM
	s.Conv = k.uint("ssm.conv_kernel", 0, true)
	s.Inner = k.uint("ssm.inner_size", 0, true)
	s.State = k.uint("ssm.state_size", 0, true)
	s.DtRank = k.uint("ssm.time_step_rank", 0, true)
	s.Groups = k.uint("ssm.group_count", 0, true)
	if n := k.uint("moe_latent_size", 0, false); n != 0 && k.err == nil {
		return fmt.Errorf("model: %s: moe_latent_size %d: the MoE latent projections are not supported", h.Arch, n)
	}
	if n := k.uint("expert_group_count", 0, false); n > 1 && k.err == nil {
		return fmt.Errorf("model: %s: expert_group_count %d: grouped expert selection is not supported", h.Arch, n)
	}
	h.NH.NFFShExp = k.uint("expert_shared_feed_forward_length", 0, h.NExpert > 0)
	h.NH.ExpScale = k.float("expert_weights_scale", 0)
	if k.err != nil {
		return k.err
	}
	// llama.cpp's default for this family: no renormalisation
	h.NormTopK = false
	if b, ok := k.f.GetBool(h.Arch + ".expert_weights_norm"); ok {
		h.NormTopK = b
	}
	switch {
	case s.Conv < 2 || s.Conv > 16 || s.Inner == 0 || s.State == 0 || s.DtRank == 0 || s.Groups == 0:
		return fmt.Errorf("model: %s: ssm conv_kernel %d (2 to 16), inner_size %d, state_size %d, time_step_rank %d and group_count %d must be positive", h.Arch, s.Conv, s.Inner, s.State, s.DtRank, s.Groups)
	case s.Inner%s.DtRank != 0 || s.Inner%s.Groups != 0 || s.DtRank%s.Groups != 0:
		return fmt.Errorf("model: %s: ssm inner_size %d must be a multiple of time_step_rank %d and group_count %d, and time_step_rank of group_count", h.Arch, s.Inner, s.DtRank, s.Groups)
	case h.HeadDimK != h.HeadDimV:
		return fmt.Errorf("model: %s: key_length %d and value_length %d differ", h.Arch, h.HeadDimK, h.HeadDimV)
	case math.IsNaN(float64(h.NH.ExpScale)) || math.IsInf(float64(h.NH.ExpScale), 0):
		return fmt.Errorf("model: %s.expert_weights_scale %g: want a finite number", h.Arch, h.NH.ExpScale)
	}
	kv, err := perLayer(k, "attention.head_count_kv", h.NLayer, h.NHead)
	if err != nil {
		return err
	}
	ff, err := perLayer(k, "feed_forward_length", h.NLayer, 0)
	if err != nil {
		return err
	}
	h.Recurrent, h.NH.Attn, h.NH.FFN = make([]bool, h.NLayer), make([]bool, h.NLayer), make([]bool, h.NLayer)
	h.NHeadKV, h.NFF = 0, 0
	for il := range h.NLayer {
		switch {
		case kv[il] == 0 && ff[il] == 0:
			h.Recurrent[il] = true
		case ff[il] == 0:
			h.NH.Attn[il] = true
			if h.NHeadKV != 0 && kv[il] != h.NHeadKV {
				return fmt.Errorf("model: %s: attention.head_count_kv %d in layer %d differs from %d in an earlier layer: per-layer KV heads are not supported", h.Arch, kv[il], il, h.NHeadKV)
			}
			h.NHeadKV = kv[il]
		default:
			h.NH.FFN[il] = true
			if h.NFF != 0 && ff[il] != h.NFF {
				return fmt.Errorf("model: %s: feed_forward_length %d in layer %d differs from %d in an earlier layer: per-layer FFN widths are not supported", h.Arch, ff[il], il, h.NFF)
			}
			h.NFF = ff[il]
		}
	}
	if h.NHeadKV == 0 { // no attention layer: the cache's shape is unused
		h.NHeadKV = h.NHead
	}
	if h.NExpert > 0 && h.NFFExp == 0 {
		h.NFFExp = h.NFF / h.NExpertUsed // llama.cpp's fallback
	}
	if h.Arch == "nemotron_h_moe" && h.NExpert == 0 {
		return fmt.Errorf("model: nemotron_h_moe needs expert_count and expert_used_count")
	}
	return nil
}

// nemotronHHeads reads attention.head_count, one value or one per layer
// (llama.cpp's get_key_or_arr): the attention layers' common count, 0
// where a layer has no attention; different counts are an error.
func nemotronHHeads(k *keyReader, nLayer int) int {
	key := k.arch + ".attention.head_count"
	if v, ok := k.f.Get(key); ok && v.Type() == gguf.TypeArray {
		hs, err := perLayer(k, "attention.head_count", nLayer, 0)
		if err != nil {
			k.err = cmp.Or(k.err, err)
			return 0
		}
		n := 0
		for il, x := range hs {
			if x != 0 && n != 0 && x != n {
				k.err = cmp.Or(k.err, fmt.Errorf("model: key %q: %d heads in layer %d, %d in an earlier one: per-layer head counts are not supported", key, x, il, n))
				return 0
			}
			n = max(n, x)
		}
		return n
	}
	return k.uint("attention.head_count", 0, true)
}

// perLayer reads key as one value per layer: an array of nLayer
// integers or one integer for every layer (llama_model_loader's
// get_key_or_arr); def for every layer when the key is absent.
func perLayer(k *keyReader, name string, nLayer, def int) ([]int, error) {
	key := k.arch + "." + name
	out := make([]int, nLayer)
	v, ok := k.f.Get(key)
	if !ok {
		for i := range out {
			out[i] = def
		}
		return out, nil
	}
	vals, isArr := v.Array()
	if !isArr {
		n := k.uint(name, def, false)
		for i := range out {
			out[i] = n
		}
		return out, k.err
	}
	if len(vals) != nLayer {
		return nil, fmt.Errorf("model: key %q: %d values for %d layers", key, len(vals), nLayer)
	}
	for i, e := range vals {
		u, ok := e.Uint()
		if !ok || u > math.MaxInt32 {
			return nil, fmt.Errorf("model: key %q: element %d is %s, not a non-negative integer", key, i, e)
		}
		out[i] = int(u)
	}
	return out, nil
}

func loadNemotronH(l *loader, m *Model) {
	loadCommon(l, m)
	s := &m.SSM
	cd, h := s.ConvDim(), s.DtRank
	for i := range m.Layers {
		L := &m.Layers[i]
		L.AttnNorm = l.vector(blk(i, "attn_norm.weight"), m.NEmbd, true)
		switch {
		case m.IsRecurrent(i):
			L.SSMIn = l.matrix(blk(i, "ssm_in.weight"), m.NEmbd, 2*s.Inner+2*s.Groups*s.State+h, true)
			L.SSMConv = l.f32matrix(blk(i, "ssm_conv1d.weight"), s.Conv, cd)
			L.SSMConvB = l.vector(blk(i, "ssm_conv1d.bias"), cd, false)
			L.SSMDt = l.vector(blk(i, "ssm_dt.bias"), h, true)
			L.SSMA = l.f32matrix(blk(i, "ssm_a"), 1, h)
			L.SSMD = l.f32matrix(blk(i, "ssm_d"), 1, h)
			L.SSMNorm = l.f32matrix(blk(i, "ssm_norm.weight"), s.Inner/s.Groups, s.Groups)
			L.SSMOut = l.matrix(blk(i, "ssm_out.weight"), s.Inner, m.NEmbd, true)
		case m.NH.Attn[i]:
			if _, ok := l.f.Tensor(blk(i, "attn_qkv.weight")); ok {
				l.fail(fmt.Errorf("model: %s: tensor %q: a fused q/k/v projection is not supported", m.Arch, blk(i, "attn_qkv.weight")))
			}
			L.Wq = l.matrix(blk(i, "attn_q.weight"), m.NEmbd, m.QDim(), true)
			L.Wk = l.matrix(blk(i, "attn_k.weight"), m.NEmbd, m.KDim(), true)
			L.Wv = l.matrix(blk(i, "attn_v.weight"), m.NEmbd, m.VDim(), true)
			L.Bq = l.vector(blk(i, "attn_q.bias"), m.QDim(), false)
			L.Bk = l.vector(blk(i, "attn_k.bias"), m.KDim(), false)
			L.Bv = l.vector(blk(i, "attn_v.bias"), m.VDim(), false)
			L.Wo = l.matrix(blk(i, "attn_output.weight"), m.QDim(), m.NEmbd, true)
			L.Bo = l.vector(blk(i, "attn_output.bias"), m.NEmbd, false)
		case m.NExpert > 0:
			L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), m.NEmbd, m.NExpert, true)
			L.ExpProbsB = l.vector(blk(i, "exp_probs_b.bias"), m.NExpert, true)
			for _, name := range []string{"ffn_latent_down.weight", "ffn_latent_up.weight"} {
				if _, ok := l.f.Tensor(blk(i, name)); ok {
					l.fail(fmt.Errorf("model: %s: tensor %q: the MoE latent projections are not supported", m.Arch, blk(i, name)))
				}
			}
			L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
			L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), m.NFFExp, m.NEmbd, m.NExpert)
			L.UpShexp = l.matrix(blk(i, "ffn_up_shexp.weight"), m.NEmbd, m.NH.NFFShExp, true)
			L.DownShexp = l.matrix(blk(i, "ffn_down_shexp.weight"), m.NH.NFFShExp, m.NEmbd, true)
		default:
			L.Up = l.matrix(blk(i, "ffn_up.weight"), m.NEmbd, m.NFF, true)
			L.Down = l.matrix(blk(i, "ffn_down.weight"), m.NFF, m.NEmbd, true)
			L.BUp = l.vector(blk(i, "ffn_up.bias"), m.NFF, false)
			L.BDown = l.vector(blk(i, "ffn_down.bias"), m.NEmbd, false)
		}
	}
	m.forward = forwardNemotronH
}

// nemotronHScratch holds the buffers of the Mamba-2 and FFN layers
// (MaxBatch rows).
type nemotronHScratch struct {
	zxbcdt    []float32 // n × (2·Inner + 2·Groups·State + heads): ssm_in's output
	z, y      []float32 // n × Inner: the gate, gathered; the scan's output
	sIn, conv []float32 // one sequence's xBC rows gathered, convolved: n × ConvDim
	sDt       []float32 // one sequence's dt rows: n × heads
	sY        []float32 // one sequence's scan output: n × Inner
	shexp     []float32 // n × NFFShExp: the shared expert's hidden layer
	sel       []float32 // n × NExpert: the router's selection scores (biased)
	rows      []int     // one sequence's rows
	done      []bool    // rows handled
}

func (s *nemotronHScratch) alloc(n int, h *Hyper) {
	ss := &h.SSM
	s.zxbcdt = make([]float32, n*nemotronHInProj(ss))
	s.z, s.y, s.sY = make([]float32, n*ss.Inner), make([]float32, n*ss.Inner), make([]float32, n*ss.Inner)
	s.sIn, s.conv = make([]float32, n*ss.ConvDim()), make([]float32, n*ss.ConvDim())
	s.sDt = make([]float32, n*ss.DtRank)
	s.shexp, s.sel = make([]float32, n*h.NH.NFFShExp), make([]float32, n*h.NExpert)
	s.rows, s.done = make([]int, 0, n), make([]bool, n)
}

// nemotronHInProj is the width of ssm_in's output: z, xBC, dt.
func nemotronHInProj(s *SSMHyper) int { return s.Inner + s.ConvDim() + s.DtRank }

// nemotronHActFloats is the floats per batch row of nemotronHScratch.
func nemotronHActFloats(h *Hyper) int {
	s := &h.SSM
	return nemotronHInProj(s) + 3*s.Inner + 2*s.ConvDim() + s.DtRank + h.NH.NFFShExp + h.NExpert
}

func forwardNemotronH(c *Context, b *Batch) error {
	if _, ok := c.Ops.(Mamba); !ok {
		return fmt.Errorf("model: %s needs a backend with the Mamba-2 ops (model.Mamba)", c.M.Arch)
	}
	if err := c.KV.State.check(b); err != nil {
		return err
	}
	c.embed(b)
	m := c.M
	return c.layers(b, func(il int, b *Batch) error {
		n, d := b.Len(), m.NEmbd
		L := c.layer(il)
		c.Ops.RMSNorm(c.xn, c.x[:n*d], L.AttnNorm, n, d, m.RMSEps)
		c.eval("attn_norm", il, c.xn, n, d)
		switch {
		case m.IsRecurrent(il):
			c.mamba2(il, b) // x += mamba2(norm(x))
		case m.NH.Attn[il]:
			if err := c.nemotronAttention(il, b); err != nil { // x += attn(norm(x))
				return err
			}
		case m.NExpert > 0:
			if err := c.nemotronMoE(il, b); err != nil { // x += Σ w·expert(norm(x)) + shared(norm(x))
				return err
			}
		default:
			c.reluSqrFFN(il, n) // x += down(relu(up·norm(x))²)
		}
		c.eval("nemotron_h_block_out", il, c.x, n, d)
		return nil
	})
}

// mamba2 is the Mamba-2 mixer (build_mamba2_layer) on c.xn, run per
// sequence on the batch's rows of that sequence.
func (c *Context) mamba2(il int, b *Batch) {
	m, L, ops := c.M, c.layer(il), c.Ops
	mb := ops.(Mamba)
	n, s, ss := b.Len(), &c.nh, &m.SSM
	inner, cd, nh := ss.Inner, ss.ConvDim(), ss.DtRank
	hd, dIn := inner/nh, nemotronHInProj(ss)
	c.span("mamba2", il, true)
	defer c.span("mamba2", il, false)
	// z, xBC, dt (n × dIn)
	zx := s.zxbcdt[:n*dIn]
	c.matmul("ssm_in", il, zx, L.SSMIn, c.xn, n)
	z, y := s.z[:n*inner], s.y[:n*inner]
	for t := range n {
		row := zx[t*dIn : (t+1)*dIn]
		copy(z[t*inner:(t+1)*inner], row[:inner])
		dt := row[inner+cd:]
		for j := range nh { // dt + dt_bias
			dt[j] += L.SSMDt[j]
		}
	}
	// each sequence's rows in order: convolution + SiLU, scan + D skip
	done := s.done[:n]
	clear(done)
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
		in, dts := s.sIn[:nr*cd], s.sDt[:nr*nh]
		for r, j := range rows {
			row := zx[j*dIn : (j+1)*dIn]
			copy(in[r*cd:(r+1)*cd], row[inner:inner+cd])
			copy(dts[r*nh:(r+1)*nh], row[inner+cd:])
		}
		convState, ssmState := c.KV.State.Layer(il, int(seq))
		conv, ys := s.conv[:nr*cd], s.sY[:nr*inner]
		mb.SSMConv(conv, in, convState, L.SSMConv, L.SSMConvB, nr, cd, ss.Conv)
		mb.SSMScan(ys, conv, dts, L.SSMA, L.SSMD, ssmState, nr, nh, hd, ss.Groups, ss.State)
		for r, j := range rows {
			copy(y[j*inner:(j+1)*inner], ys[r*inner:(r+1)*inner])
		}
	}
	c.eval("mamba2_y_add_d", il, y, n, inner)
	// y·silu(z), RMS-normalised per group, projected
	ops.SwiGLU(y, z, y)
	mb.GroupRMSNorm(y, y, L.SSMNorm, n, inner, ss.Groups, m.RMSEps)
	c.matmul("ssm_out", il, c.tmp[:n*m.NEmbd], L.SSMOut, y, n)
	c.eval("mamba_out", il, c.tmp, n, m.NEmbd)
	ops.Add(c.x[:n*m.NEmbd], c.tmp[:n*m.NEmbd])
}

// nemotronAttention is the attention mixer on c.xn: no RoPE, the scale
// 1/√head_dim, optional biases.
func (c *Context) nemotronAttention(il int, b *Batch) error {
	m, L, ops := c.M, c.layer(il), c.Ops
	n, h := b.Len(), &m.Hyper
	c.span("attn", il, true)
	defer c.span("attn", il, false)
	q, k, v := c.q[:n*h.QDim()], c.k[:n*h.KDim()], c.v[:n*h.VDim()]
	c.matmuls("attn_qkv", il, c.xn, n, mm{"attn_q", q, L.Wq}, mm{"attn_k", k, L.Wk}, mm{"attn_v", v, L.Wv})
	for _, p := range [...]struct {
		x []float32
		b Vector
	}{{q, L.Bq}, {k, L.Bk}, {v, L.Bv}} {
		if p.b != nil {
			ops.AddRows(p.x, p.b)
		}
	}
	c.eval("Qcur", il, q, n, h.QDim())
	c.eval("Kcur", il, k, n, h.KDim())
	c.eval("Vcur", il, v, n, h.VDim())
	if err := c.storeKV(il, b, q, k, v); err != nil {
		return err
	}
	att := c.att[:n*h.NHead*h.HeadDimV]
	c.span("attn_kqv", il, true)
	ops.Attention(att, q, c.KV, il, b.Seq, b.Pos, h, Attn{Scale: float32(1 / math.Sqrt(float64(h.HeadDimK)))})
	c.span("attn_kqv", il, false)
	if rv := c.KV.Layer(il).RotV; rv > 0 { // the output of rotated values, rotated back
		c.hadamard(att, rv)
	}
	c.eval("kqv_out", il, att, n, h.NHead*h.HeadDimV)
	c.matmul("attn_output", il, c.tmp[:n*h.NEmbd], L.Wo, att, n)
	if L.Bo != nil {
		ops.AddRows(c.tmp[:n*h.NEmbd], L.Bo)
	}
	c.eval("attn_out", il, c.tmp, n, h.NEmbd)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	return nil
}

// reluSqrFFN is the dense FFN layer on c.xn: x += down(relu(up·xn + bu)²) + bd.
func (c *Context) reluSqrFFN(il, n int) {
	m, L, ops := c.M, c.layer(il), c.Ops
	d, f := m.NEmbd, m.NFF
	c.span("ffn", il, true)
	defer c.span("ffn", il, false)
	up := c.up[:n*f]
	c.matmul("ffn_up", il, up, L.Up, c.xn, n)
	if L.BUp != nil {
		ops.AddRows(up, L.BUp)
	}
	ops.(Mamba).ReluSqr(up)
	c.eval("ffn_sqr(relu)", il, up, n, f)
	c.matmul("ffn_down", il, c.tmp[:n*d], L.Down, up, n)
	if L.BDown != nil {
		ops.AddRows(c.tmp[:n*d], L.BDown)
	}
	c.eval("ffn_out", il, c.tmp, n, d)
	ops.Add(c.x[:n*d], c.tmp[:n*d])
}

// nemotronMoE is the MoE FFN layer on c.xn (build_moe_ffn with sigmoid
// gating and the selection bias, then the shared expert): each token's
// experts are the top K of sigmoid(logit) + exp_probs_b, weighted by
// their sigmoid (renormalised if NormTopK, times NH.ExpScale); the
// experts run grouped by expert as in Context.moe, resident or streamed.
func (c *Context) nemotronMoE(il int, b *Batch) error {
	m, L, ops := c.M, c.layer(il), c.Ops
	n, h, s, ns := b.Len(), &m.Hyper, &c.moeS, &c.nh
	K, d, E := h.NExpertUsed, h.NEmbd, h.NExpert
	c.moeRows = n
	c.span("moe", il, true)
	defer c.span("moe", il, false)
	probs, sel := c.probs[:n*E], ns.sel[:n*E]
	c.matmul("ffn_gate_inp", il, probs, L.Router, c.xn, n)
	c.eval("ffn_moe_logits", il, probs, n, E)
	for i, x := range probs { // sigmoid (ggml_sigmoid), then the selection bias
		p := 1 / (1 + expf32(-x))
		probs[i], sel[i] = p, p+L.ExpProbsB[i%E]
	}
	c.eval("ffn_moe_probs", il, probs, n, E)
	clear(s.start)
	for t := range n {
		st, w := s.sel[t*K:(t+1)*K], s.w[t*K:(t+1)*K]
		topK(sel[t*E:(t+1)*E], st, w)
		for j, e := range st { // the weights are the unbiased probabilities
			w[j] = probs[t*E+e]
		}
		if h.NormTopK {
			var sum float64 // ggml_sum_rows: the sum in double
			for _, x := range w {
				sum += float64(x)
			}
			tot := max(float32(sum), 6.103515625e-5) // as llama.cpp's clamp
			for j := range w {
				w[j] /= tot
			}
		}
		if sc := h.NH.ExpScale; sc != 0 && sc != 1 {
			for j := range w {
				w[j] *= sc
			}
		}
		if c.hooks.OnRoute != nil {
			c.hooks.OnRoute(il, t, st, w)
		}
		for _, e := range st {
			s.start[e+1]++
		}
	}
	s.union = s.union[:0]
	for e := range E {
		if s.start[e+1] > 0 {
			s.union = append(s.union, e)
		}
		s.start[e+1] += s.start[e]
	}
	next := c.moeNext(E)
	for i, e := range s.sel[:n*K] {
		s.idx[next[e]] = int32(i)
		next[e]++
	}
	if c.hooks.Experts == nil {
		for _, e := range s.union {
			c.expert(il, e, nil, &L.UpExps[e], &L.DownExps[e])
		}
	} else if err := c.streamedExperts(il, false); err != nil {
		return err
	}
	// moe_out = Σ_j w_j·expert_j in the router's order, plus the shared expert
	for t := range n {
		acc := c.tmp[t*d : (t+1)*d]
		copy(acc, s.out[t*K*d:(t*K+1)*d])
		for j := 1; j < K; j++ {
			ops.Add(acc, s.out[(t*K+j)*d:(t*K+j+1)*d])
		}
	}
	c.eval("ffn_moe_out", il, c.tmp, n, d)
	f := h.NH.NFFShExp
	sh := ns.shexp[:n*f]
	c.matmul("ffn_up_shexp", il, sh, L.UpShexp, c.xn, n)
	ops.(Mamba).ReluSqr(sh)
	y := s.yg[:n*d]
	c.matmul("ffn_down_shexp", il, y, L.DownShexp, sh, n)
	c.eval("ffn_shexp", il, y, n, d)
	ops.Add(c.tmp[:n*d], y)
	c.eval("ffn_out", il, c.tmp, n, d)
	ops.Add(c.x[:n*d], c.tmp[:n*d])
	return nil
}
