package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// gemma4: the text model of Gemma 4 as llama.cpp runs it (src/models/
// gemma4.cpp, llama_model_gemma4). Against gemma3's block it changes:
//
//   - sliding or global by layer from attention.sliding_window_pattern,
//     read as llama.cpp's get_key_or_arr: an array of one flag per layer,
//     or one value for every layer (not gemma3's period);
//   - q·k is not scaled (f_attention_scale 1: the per-head q and k norms
//     set the scale); V is RMS-normalised per head without a weight;
//     a layer without attn_v uses its K projection as V;
//   - global layers rotate with the file's rope_freqs (proportional RoPE,
//     one divisor per pair), sliding ones with rope.freq_base_swa and no
//     divisors;
//   - the last attention.shared_kv_layers layers (llama.cpp's
//     n_layer_kv_from_start) compute no K and V: they read the cache of
//     the last sliding (if they slide) or global layer before them, and
//     keep no rows (Hyper.KVSource);
//   - per-layer token embeddings: per_layer_token_embd (NLayer rows of
//     NEmbdPerLayer per token, × √NEmbdPerLayer) plus the projection of
//     the scaled embeddings (per_layer_model_proj, × 1/√NEmbd, RMS-normed
//     by per_layer_proj_norm), × 1/√2, give each layer an input; after
//     its FFN, layer il adds post_norm(proj(gelu(inp_gate·x) ⊙ input_il));
//   - an optional layer_output_scale multiplies the layer's output;
//   - the logits are soft-capped: cap·tanh(logits/cap), cap =
//     final_logit_softcapping (llama.cpp's default 30 when the key is
//     absent; 0 turns it off);
//   - the MoE layers (26B-A4B, ffn_gate_inp present) run the dense FFN
//     beside the routed experts: x += post_ffw_norm(post_ffw_norm_1(
//     FFN(ffn_norm(x))) + post_ffw_norm_2(experts(pre_ffw_norm_2(x)))),
//     the router reading rms_norm(x)/√NEmbd ⊙ ffn_gate_inp.scale;
//     softmax over all experts, the top NExpertUsed renormalised, GeGLU
//     experts, each expert's output multiplied by its ffn_down_exps.scale
//     when the file has one (the router's per_expert_scale).
//
// Per-layer shapes as llama.cpp's hparams: the sliding layers' own head
// size and rotated dimensions (attention.key_length_swa, value_length_swa,
// rope.dimension_count_swa), attention.head_count_kv and
// feed_forward_length as arrays of one value per layer (Hyper.AtLayer
// gives a layer's; the KV cache keeps each layer's own row geometry).
//
// Not done, and refused by name: the merged ffn_gate_up_exps, and the per-tensor weight scales
// (<name>.scale tensors other than the router's and the experts' output
// scale). Backends that keep
// activations off the host (HostSync) are refused: the per-layer inputs
// are regrouped on the host.

func loadGemma4(l *loader, m *Model) {
	m.RopeType = RopeNeox
	swaBase, err := gemma4Hyper(l.f, m)
	if err != nil {
		l.fail(err)
		return
	}
	for _, t := range l.f.Tensors {
		if strings.HasSuffix(t.Name, ".scale") && !strings.HasSuffix(t.Name, "ffn_gate_inp.scale") && !strings.HasSuffix(t.Name, "ffn_down_exps.scale") {
			l.fail(fmt.Errorf("model: gemma4: tensor %q (a per-tensor weight scale) is not supported", t.Name))
			return
		}
		if strings.HasSuffix(t.Name, "ffn_gate_up_exps.weight") {
			l.fail(fmt.Errorf("model: gemma4: tensor %q (merged expert gate and up) is not supported", t.Name))
			return
		}
	}
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	swa := m.Rope
	swa.Base, swa.Scale, swa.Factors = swaBase, 1, nil
	swa.Dim = m.RopeDim
	if m.RopeDimSWA > 0 {
		swa.Dim = m.RopeDimSWA
	}
	swa.Corr = YarnCorrDims(swa.Dim, m.NCtxOrig, swa.Base, m.YarnBetaFast, m.YarnBetaSlow)
	m.SWARope = &swa
	d, npl := m.NEmbd, m.NEmbdPerLayer
	if npl > 0 {
		m.PerLayerTokEmbd = l.matrix("per_layer_token_embd.weight", npl*m.NLayer, m.NVocab, true)
		m.PerLayerModelProj = l.matrix("per_layer_model_proj.weight", d, npl*m.NLayer, true)
		m.PerLayerProjNorm = l.vector("per_layer_proj_norm.weight", npl, true)
	}
	global := false
	for i := range m.Layers {
		L := &m.Layers[i]
		own := m.KVSource(i) == i
		hd := m.HeadDimKAt(i)
		L.AttnNorm = l.vector(blk(i, "attn_norm.weight"), d, true)
		L.Wq = l.matrix(blk(i, "attn_q.weight"), d, m.QDimAt(i), true)
		L.QNorm = l.vector(blk(i, "attn_q_norm.weight"), hd, true)
		if own {
			L.Wk = l.matrix(blk(i, "attn_k.weight"), d, m.KDimAt(i), true)
			L.Wv = l.matrix(blk(i, "attn_v.weight"), d, m.VDimAt(i), false)
			L.KNorm = l.vector(blk(i, "attn_k_norm.weight"), hd, true)
		}
		L.Wo = l.matrix(blk(i, "attn_output.weight"), m.NHead*m.HeadDimVAt(i), d, true)
		L.AttnPostNorm = l.vector(blk(i, "post_attention_norm.weight"), d, true)
		if s := l.vector(blk(i, "layer_output_scale.weight"), 1, false); s != nil {
			L.OutScale = s
		}
		if m.LayerWindow(i) == 0 && !global {
			// one rope_freqs for every global layer (llama.cpp loads it
			// for the first and duplicates it), a divisor per pair of the
			// global head
			global = true
			m.Rope.Factors = l.vector("rope_freqs.weight", hd/2, true)
		}
		loadFFN(l, m, i)
		L.FFNPostNorm = l.vector(blk(i, "post_ffw_norm.weight"), d, true)
		if L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), d, m.NExpert, false); L.Router != nil {
			if m.NExpert == 0 || m.NFFExp == 0 {
				l.fail(fmt.Errorf("model: gemma4: layer %d has a router but expert_count %d, expert_feed_forward_length %d", i, m.NExpert, m.NFFExp))
				return
			}
			L.RouterScale = l.vector(blk(i, "ffn_gate_inp.scale"), d, true)
			L.FFNPreNorm2 = l.vector(blk(i, "pre_ffw_norm_2.weight"), d, true)
			L.FFNPostNorm1 = l.vector(blk(i, "post_ffw_norm_1.weight"), d, true)
			L.FFNPostNorm2 = l.vector(blk(i, "post_ffw_norm_2.weight"), d, true)
			L.GateExps = l.experts(blk(i, "ffn_gate_exps.weight"), d, m.NFFExp, m.NExpert)
			L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), d, m.NFFExp, m.NExpert)
			L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), m.NFFExp, d, m.NExpert)
			L.DownExpsS = l.vector(blk(i, "ffn_down_exps.scale"), m.NExpert, false)
		}
		if npl > 0 {
			L.PerLayerGate = l.matrix(blk(i, "inp_gate.weight"), d, npl, true)
			L.PerLayerProj = l.matrix(blk(i, "proj.weight"), npl, d, true)
			L.PerLayerPostNorm = l.vector(blk(i, "post_norm.weight"), d, true)
		}
	}
	if l.err == nil && m.Rope.Factors != nil {
		// the sliding layers' copy was made before rope_freqs was read
		m.SWARope.Factors = nil
	}
	m.FFNAct = ActGELU
	m.forward = forwardGemma4
	// each layer's view of the hyperparameters, made once: the forward
	// pass takes it per layer and step without copying
	m.layerHyper = make([]*Hyper, m.NLayer)
	for il := range m.NLayer {
		m.layerHyper[il] = m.Hyper.AtLayer(il)
	}
}

// gemma4Hyper reads gemma4's own keys into m (llama_model_gemma4::
// load_arch_hparams) and returns the sliding layers' RoPE base.
func gemma4Hyper(f *gguf.File, m *Model) (swaBase float32, err error) {
	a := m.Arch + "."
	k := &keyReader{f: f, arch: m.Arch}
	for _, key := range []string{"attention.layer_norm_rms_epsilon", "attention.sliding_window", "embedding_length_per_layer_input",
		"attention.key_length_swa", "attention.value_length_swa", "attention.sliding_window_pattern"} {
		if _, ok := f.Get(a + key); !ok {
			return 0, fmt.Errorf("model: gemma4: missing required key %q", a+key)
		}
	}
	// the sliding layers' head shape (llama_model::load_hparams: n_embd_head_k_swa,
	// n_embd_head_v_swa, n_rot_swa, defaulting to the global layers'); kept
	// only where it differs, so a model whose layers are alike has none
	hk := k.uint("attention.key_length_swa", m.HeadDimK, true)
	hv := k.uint("attention.value_length_swa", m.HeadDimV, true)
	rd := k.uint("rope.dimension_count_swa", m.RopeDim, false)
	if k.err != nil {
		return 0, k.err
	}
	if m.HeadDimK != m.HeadDimV {
		return 0, fmt.Errorf("model: gemma4: key_length %d and value_length %d differ (llama.cpp requires them equal)", m.HeadDimK, m.HeadDimV)
	}
	if hk != hv || hk == 0 {
		return 0, fmt.Errorf("model: gemma4: key_length_swa %d and value_length_swa %d must be equal and positive (llama.cpp requires them equal)", hk, hv)
	}
	if rd == 0 || rd%2 != 0 || rd > hk {
		return 0, fmt.Errorf("model: gemma4: rope.dimension_count_swa %d must be even, positive and at most key_length_swa %d", rd, hk)
	}
	if hk != m.HeadDimK || hv != m.HeadDimV {
		m.HeadDimKSWA, m.HeadDimVSWA = hk, hv
	}
	if rd != m.RopeDim {
		m.RopeDimSWA = rd
	}
	window := k.uint("attention.sliding_window", 0, true)
	m.NEmbdPerLayer = k.uint("embedding_length_per_layer_input", 0, true)
	shared := k.uint("attention.shared_kv_layers", 0, false)
	swaBase = k.float("rope.freq_base_swa", 10000)
	m.SoftCap = k.float("final_logit_softcapping", 30)
	if k.err != nil {
		return 0, k.err
	}
	swa := make([]bool, m.NLayer)
	v, _ := f.Get(a + "attention.sliding_window_pattern")
	if v.Type() == gguf.TypeArray {
		if v.Len() != m.NLayer {
			return 0, fmt.Errorf("model: gemma4: key %q has %d entries for %d layers", a+"attention.sliding_window_pattern", v.Len(), m.NLayer)
		}
		for il := range swa {
			e, _ := v.Index(il)
			if b, ok := e.Bool(); ok {
				swa[il] = b
			} else if u, ok := e.Uint(); ok {
				swa[il] = u != 0
			} else {
				return 0, fmt.Errorf("model: gemma4: key %q: entry %d is %s, want a flag", a+"attention.sliding_window_pattern", il, e)
			}
		}
	} else {
		u := k.uint("attention.sliding_window_pattern", 0, true)
		if k.err != nil {
			return 0, k.err
		}
		for il := range swa {
			swa[il] = u != 0
		}
	}
	m.Window = make([]int, m.NLayer)
	for il, s := range swa {
		if s {
			if window == 0 {
				return 0, fmt.Errorf("model: gemma4: layer %d slides but %q is 0", il, a+"attention.sliding_window")
			}
			m.Window[il] = window
		}
	}
	if shared > 0 {
		nkv := m.NLayer - shared
		if nkv < 2 {
			return 0, fmt.Errorf("model: gemma4: %q = %d leaves %d layers with a KV cache; llama.cpp needs at least 2", a+"attention.shared_kv_layers", shared, nkv)
		}
		m.NLayerKV = nkv
		for il := nkv; il < m.NLayer; il++ {
			if src := m.KVSource(il); (m.Window[src] > 0) != (m.Window[il] > 0) {
				return 0, fmt.Errorf("model: gemma4: layer %d (sliding %v) would read the KV cache of layer %d (sliding %v)", il, m.Window[il] > 0, src, m.Window[src] > 0)
			} else if m.NHeadKVAt(src) != m.NHeadKVAt(il) {
				return 0, fmt.Errorf("model: gemma4: layer %d (%d KV heads) would read the KV cache of layer %d (%d KV heads)", il, m.NHeadKVAt(il), src, m.NHeadKVAt(src))
			}
		}
	}
	if !(swaBase > 0) || math.IsInf(float64(swaBase), 0) {
		return 0, fmt.Errorf("model: gemma4: key %q = %g: want a positive finite number", a+"rope.freq_base_swa", swaBase)
	}
	if m.SoftCap < 0 || math.IsInf(float64(m.SoftCap), 0) || math.IsNaN(float64(m.SoftCap)) {
		return 0, fmt.Errorf("model: gemma4: key %q = %g: want a finite number ≥ 0", a+"final_logit_softcapping", m.SoftCap)
	}
	m.AttnScale = 1 // f_attention_scale: Gemma 4 does not scale q·k
	m.NormTopK = true
	return swaBase, nil
}

// gemma4Scratch holds a step's per-layer inputs.
type gemma4Scratch struct {
	pl   []float32 // n × NLayer × NEmbdPerLayer: every layer's inputs, token-major
	in   []float32 // n × NEmbdPerLayer: layer il's inputs
	gate []float32 // n × NEmbdPerLayer
	proj []float32 // n × NLayer × NEmbdPerLayer: the projection's part
	ffn  []float32 // n × NEmbd: the MoE layers' dense FFN output
}

// Gemma4ActBytes is the scratch a gemma4 Context adds for batches of
// maxBatch tokens beyond the buffers every model has (gemma4Scratch): the
// per-layer inputs and their projection (NLayer × NEmbdPerLayer each per
// token), one layer's input and gate, and a MoE layer's dense FFN output.
// 0 for the other families.
func Gemma4ActBytes(h *Hyper, maxBatch int) int64 {
	if h.Arch != "gemma4" {
		return 0
	}
	per := 2*h.NLayer*h.NEmbdPerLayer + 2*h.NEmbdPerLayer
	if h.NExpert > 0 {
		per += h.NEmbd
	}
	return int64(maxBatch) * 4 * int64(per)
}

// forwardGemma4 is gemma4's forward pass.
func forwardGemma4(c *Context, b *Batch) error {
	m, ops := c.M, c.Ops
	n, d := b.Len(), m.NEmbd
	if _, ok := ops.(HostSync); ok {
		return fmt.Errorf("model: gemma4 needs a backend that computes in host memory")
	}
	c.embed(b)
	// x *= √NEmbd (sqrtf of the float32 width, as llama.cpp)
	ops.Scale(c.x[:n*d], sqrtf(d))
	c.eval("inp_scaled", -1, c.x, n, d)
	s := &c.g4
	npl := m.NEmbdPerLayer
	if npl > 0 {
		c.perLayerInputs(b)
	}
	return c.layers(b, func(il int, b *Batch) error {
		if err := c.gemma4Attention(il, b); err != nil {
			return err
		}
		L := c.layer(il)
		if L.Router != nil {
			if err := c.gemma4MoE(il, b); err != nil {
				return err
			}
		} else {
			c.ffn(il, b) // x += post_norm(Wdown·(gelu(Wgate·norm(x)) ⊙ Wup·norm(x)))
		}
		if npl > 0 {
			// x += post_norm(proj(gelu(inp_gate·x) ⊙ input_il))
			in, g := s.in[:n*npl], s.gate[:n*npl]
			nl := m.NLayer
			for t := range n {
				copy(in[t*npl:(t+1)*npl], s.pl[(t*nl+il)*npl:(t*nl+il+1)*npl])
			}
			c.matmul("inp_gate", il, g, L.PerLayerGate, c.x[:n*d], n)
			ops.GeGLU(g, g, in)
			c.matmul("proj", il, c.tmp[:n*d], L.PerLayerProj, g, n)
			ops.RMSNorm(c.tmp, c.tmp[:n*d], L.PerLayerPostNorm, n, d, m.RMSEps)
			c.eval("per_layer_embd_out", il, c.tmp, n, d)
			ops.Add(c.x[:n*d], c.tmp[:n*d])
		}
		if L.OutScale != nil {
			ops.Scale(c.x[:n*d], L.OutScale[0])
			c.eval("out_scaled", il, c.x, n, d)
		}
		return nil
	})
}

// sqrtf is C's sqrtf of the float32 n.
func sqrtf(n int) float32 { return float32(math.Sqrt(float64(float32(n)))) }

// perLayerInputs computes every layer's per-layer input for the batch into
// c.g4.pl (project_per_layer_inputs in llama.cpp): (rms_norm(Wproj·x /
// √NEmbd) + embd_pl·√NEmbdPerLayer) / √2, x the scaled embeddings.
func (c *Context) perLayerInputs(b *Batch) {
	m, ops, s := c.M, c.Ops, &c.g4
	n, d, npl, nl := b.Len(), m.NEmbd, m.NEmbdPerLayer, m.NLayer
	if len(s.pl) < c.MaxBatch*nl*npl {
		s.pl = make([]float32, c.MaxBatch*nl*npl)
		s.proj = make([]float32, c.MaxBatch*nl*npl)
		s.in = make([]float32, c.MaxBatch*npl)
		s.gate = make([]float32, c.MaxBatch*npl)
	}
	emb, proj := s.pl[:n*nl*npl], s.proj[:n*nl*npl]
	ops.Embed(emb, m.PerLayerTokEmbd, b.Tokens)
	ops.Scale(emb, sqrtf(npl))
	c.matmul("per_layer_model_proj", -1, proj, m.PerLayerModelProj, c.x[:n*d], n)
	ops.Scale(proj, 1/sqrtf(d))
	ops.RMSNorm(proj, proj, m.PerLayerProjNorm, n*nl, npl, m.RMSEps)
	c.eval("per_layer_proj", -1, proj, n*nl, npl)
	ops.Add(emb, proj)
	ops.Scale(emb, 1/float32(math.Sqrt(2)))
	c.eval("inp_per_layer", -1, emb, n*nl, npl)
}

// gemma4Attention runs layer il's attention and adds it to c.x: q and k
// RMS-normed per head with their weights, v without, RoPE on q and k, no
// scale on q·k; a layer sharing an earlier layer's KV projects only q.
func (c *Context) gemma4Attention(il int, b *Batch) error {
	m, L, ops := c.M, c.layer(il), c.Ops
	n := b.Len()
	h := m.layerHyper[il] // the layer's head size and KV heads (its KV source's: the same kind)
	hd := h.HeadDimK
	c.span("attn", il, true)
	defer c.span("attn", il, false)
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.AttnNorm, n, h.NEmbd, h.RMSEps)
	c.eval("attn_norm", il, c.xn, n, h.NEmbd)
	q, k, v := c.q[:n*h.QDim()], c.k[:n*h.KDim()], c.v[:n*h.VDim()]
	src := h.KVSource(il)
	rope := m.LayerRope(il)
	if src == il {
		if L.Wv != nil {
			c.matmuls("attn_qkv", il, c.xn, n, mm{"attn_q", q, L.Wq}, mm{"attn_k", k, L.Wk}, mm{"attn_v", v, L.Wv})
		} else { // no attn_v: V is the K projection
			c.matmuls("attn_qk", il, c.xn, n, mm{"attn_q", q, L.Wq}, mm{"attn_k", k, L.Wk})
			copy(v, k)
		}
		ops.RMSNorm(k, k, L.KNorm, n*h.NHeadKV, hd, h.RMSEps)
		ops.RMSNorm(v, v, nil, n*h.NHeadKV, hd, h.RMSEps)
		ops.Rope(k, b.Pos, n, h.NHeadKV, hd, rope)
		c.eval("Kcur", il, k, n, h.KDim())
		c.eval("Vcur", il, v, n, h.VDim())
	} else {
		c.matmul("attn_q", il, q, L.Wq, c.xn, n)
	}
	ops.RMSNorm(q, q, L.QNorm, n*h.NHead, hd, h.RMSEps)
	ops.Rope(q, b.Pos, n, h.NHead, hd, rope)
	c.eval("Qcur", il, q, n, h.QDim())
	// llama.cpp's rotation of block-quantized K and V (KVLayer.RotK/RotV),
	// of the layer whose cache is read
	lt := c.KV.Layer(src)
	if lt.RotK > 0 {
		c.hadamard(q, lt.RotK)
	}
	if src == il {
		if lt.RotK > 0 {
			c.hadamard(k, lt.RotK)
		}
		if lt.RotV > 0 {
			c.hadamard(v, lt.RotV)
		}
		c.span("kv_store", il, true)
		err := c.KV.Store(il, b.Seq, b.Pos, k, v)
		c.span("kv_store", il, false)
		if err != nil {
			return err
		}
	}
	att := c.att[:n*h.NHead*h.HeadDimV]
	c.span("attn_kqv", il, true)
	ops.Attention(att, q, c.KV, src, b.Seq, b.Pos, h, Attn{Scale: 1, Window: h.LayerWindow(il)})
	c.span("attn_kqv", il, false)
	if lt.RotV > 0 {
		c.hadamard(att, lt.RotV)
	}
	c.eval("kqv_out", il, att, n, h.NHead*h.HeadDimV)
	c.matmul("attn_output", il, c.tmp[:n*h.NEmbd], L.Wo, att, n)
	ops.RMSNorm(c.tmp, c.tmp[:n*h.NEmbd], L.AttnPostNorm, n, h.NEmbd, h.RMSEps)
	c.eval("attn_post_norm", il, c.tmp, n, h.NEmbd)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("attn_out", il, c.x, n, h.NEmbd)
	return nil
}

// gemma4MoE runs a MoE layer's FFN and adds it to c.x: the dense FFN
// and the routed experts side by side, each normalised before and after,
// their sum normalised by post_ffw_norm (llama.cpp's is_moe_layer branch).
func (c *Context) gemma4MoE(il int, b *Batch) error {
	m, L, ops, s := c.M, c.layer(il), c.Ops, &c.g4
	n, d, h := b.Len(), m.NEmbd, &m.Hyper
	c.span("moe", il, true)
	defer c.span("moe", il, false)
	if len(s.ffn) < c.MaxBatch*d {
		s.ffn = make([]float32, c.MaxBatch*d)
	}
	x := c.x[:n*d]
	// dense: post_ffw_norm_1(Wdown·(gelu(Wgate·ffn_norm(x)) ⊙ Wup·ffn_norm(x)))
	mlp := s.ffn[:n*d]
	ops.RMSNorm(c.xn, x, L.FFNNorm, n, d, h.RMSEps)
	c.eval("ffn_norm_1", il, c.xn, n, d)
	gate, up := c.gate[:n*h.NFFAt(il)], c.up[:n*h.NFFAt(il)]
	c.matmuls("ffn_gate_up", il, c.xn, n, mm{"ffn_gate", gate, L.Gate}, mm{"ffn_up", up, L.Up})
	ops.GeGLU(gate, gate, up)
	c.matmul("ffn_down", il, mlp, L.Down, gate, n)
	ops.RMSNorm(mlp, mlp, L.FFNPostNorm1, n, d, h.RMSEps)
	c.eval("ffn_mlp", il, mlp, n, d)
	// router: softmax(Wr·(rms_norm(x)/√NEmbd ⊙ scale)) over all experts
	probs := c.probs[:n*h.NExpert]
	c.gemma4RouterInput(c.tmp[:n*d], x, L, n)
	c.matmul("ffn_gate_inp", il, probs, L.Router, c.tmp[:n*d], n)
	c.eval("ffn_moe_logits", il, probs, n, h.NExpert)
	ops.Softmax(probs, n, h.NExpert)
	// experts on pre_ffw_norm_2(x), their sum into c.tmp
	ops.RMSNorm(c.xn, x, L.FFNPreNorm2, n, d, h.RMSEps)
	c.eval("ffn_norm_2", il, c.xn, n, d)
	if err := c.routed(il, n, probs); err != nil {
		return err
	}
	moe := c.tmp[:n*d]
	ops.RMSNorm(moe, moe, L.FFNPostNorm2, n, d, h.RMSEps)
	c.eval("ffn_moe", il, moe, n, d)
	ops.Add(moe, mlp)
	ops.RMSNorm(moe, moe, L.FFNPostNorm, n, d, h.RMSEps)
	c.eval("ffn_post_norm", il, moe, n, d)
	ops.Add(x, moe)
	c.eval("l_out", il, c.x, n, d)
	return nil
}

// gemma4RouterInput sets dst (n rows) to rms_norm(x)·(1/√NEmbd)·
// ffn_gate_inp.scale, in ggml's order: the normalised row, scaled, then
// multiplied by the vector (float32 products rounded one by one).
func (c *Context) gemma4RouterInput(dst, x []float32, L *Layer, n int) {
	d := c.M.NEmbd
	c.Ops.RMSNorm(dst, x, nil, n, d, c.M.RMSEps)
	k := 1 / sqrtf(d)
	for t := range n {
		row := dst[t*d : (t+1)*d]
		for i, v := range row {
			row[i] = float32(v*k) * L.RouterScale[i]
		}
	}
}

// softCap applies the final logit soft-capping in place: cap·tanh(x/cap),
// as llama.cpp's ggml_scale, ggml_tanh (tanhf), ggml_scale.
func softCap(x []float32, cap float32) {
	inv := 1 / cap
	for i, v := range x {
		x[i] = float32(math.Tanh(float64(v*inv))) * cap
	}
}
