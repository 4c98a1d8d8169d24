package model

import "fmt"

// mistral3: the text model of Ministral 3 and Mistral Small 3.x as
// llama.cpp's src/models/mistral3.cpp runs it. It is llama's block (RMSNorm,
// grouped-query attention with RoPE on adjacent pairs, SwiGLU FFN, optional
// rope_freqs) with two additions:
//
//   - attention temperature: after RoPE, every query row at position p is
//     multiplied by log(⌊p/n⌋ + 1)·attention.temperature_scale + 1, n being
//     the original YaRN context (Hyper.AttnTempFactor; llama 4's scaling);
//   - YaRN reads yarn_beta_fast, yarn_beta_slow and yarn_log_multiplier
//     (HF's mscale_all_dim), which changes the rotation's attention factor
//     (rope.go).
//
// The attention scale is always 1/√head_dim (llama.cpp's mistral3 does not
// read attention.scale). When the file has experts, every block's FFN is a
// mixture of experts run by the shared expert path (qwen3moe.go): softmax
// router, top-k, weights renormalised, experts of width
// feed_forward_length. It does not do the optional projection biases
// (attn_output.bias, ffn_*.bias), expert groups or gate-less experts; files
// that have them are refused by name.

func loadMistral3(l *loader, m *Model) {
	m.RopeType = RopeNorm
	// build_arch_graph asserts one head size for K, V and the rotation
	if m.HeadDimK != m.HeadDimV || m.RopeDim != m.HeadDimK {
		l.fail(fmt.Errorf("model: mistral3 needs key_length %d, value_length %d and rope.dimension_count %d to be equal",
			m.HeadDimK, m.HeadDimV, m.RopeDim))
		return
	}
	if m.NExpert > 0 {
		checkMistral3Experts(l, m)
		if l.err != nil {
			return
		}
	}
	loadCommon(l, m)
	m.Rope.Type = RopeNorm
	if f := l.vector("rope_freqs.weight", m.RopeDim/2, false); f != nil {
		m.Rope.Factors = f
	}
	for i := range m.Layers {
		loadAttention(l, m, i)
		for _, name := range []string{"attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"} {
			if _, ok := l.f.Tensor(blk(i, name)); ok {
				l.fail(fmt.Errorf("model: mistral3: tensor %q (an optional bias llama.cpp adds) is not supported", blk(i, name)))
			}
		}
		if m.NExpert == 0 {
			loadFFN(l, m, i)
			continue
		}
		L := &m.Layers[i]
		L.FFNNorm = l.vector(blk(i, "ffn_norm.weight"), m.NEmbd, true)
		L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), m.NEmbd, m.NExpert, true)
		L.GateExps = l.experts(blk(i, "ffn_gate_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), m.NFFExp, m.NEmbd, m.NExpert)
	}
	m.forward = forwardDense
	if m.NExpert > 0 {
		m.forward = forwardMoE
	}
}

// checkMistral3Experts sets the expert width and refuses what llama.cpp's
// mistral3 MoE branch does differently from the shared expert path: its
// experts are feed_forward_length wide, it always renormalises the top-k
// weights (build_moe_ffn with norm_w true and no weight scale), and it
// routes without expert groups.
func checkMistral3Experts(l *loader, m *Model) {
	a := m.Arch + "."
	if m.NFFExp != 0 && m.NFFExp != m.NFF {
		l.fail(fmt.Errorf("model: mistral3: %sexpert_feed_forward_length %d differs from feed_forward_length %d, which llama.cpp uses for the experts",
			a, m.NFFExp, m.NFF))
		return
	}
	m.NFFExp = m.NFF
	if !m.NormTopK {
		l.fail(fmt.Errorf("model: mistral3: %sexpert_weights_norm false is not supported (llama.cpp always renormalises mistral3's expert weights)", a))
		return
	}
	if g, ok := l.f.GetUint(a + "expert_group_count"); ok && g > 1 {
		l.fail(fmt.Errorf("model: mistral3: %sexpert_group_count %d is not supported (expert groups)", a, g))
		return
	}
	for i := range m.NLayer {
		if _, ok := l.f.Tensor(blk(i, "ffn_gate_exps.weight")); !ok {
			l.fail(fmt.Errorf("model: mistral3: tensor %q is missing; experts without a gate are not supported", blk(i, "ffn_gate_exps.weight")))
			return
		}
	}
}
