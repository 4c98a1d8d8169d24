package model

import "fmt"

// qwen35moe: Qwen 3.5's hybrid (qwen35.go: gated delta net layers and,
// every full_attention_interval-th, gated full attention) with a
// mixture-of-experts FFN, as llama.cpp's llama_model_qwen35moe
// (src/models/qwen35moe.cpp) reads it. Each block is
//
//	x += mixer(rmsnorm(x)·attn_norm)
//	xn = rmsnorm(x)·post_attention_norm
//	x += Σ_k w_k·expert_k(xn) + σ(ffn_gate_inp_shexp·xn)·shexp(xn)
//
// where the router (ffn_gate_inp) takes the softmax over NExpert experts,
// keeps the NExpertUsed most probable and renormalizes their weights (as
// qwen3moe, Context.moe), and the shared expert is a SwiGLU FFN of width
// NFFShexp (expert_shared_feed_forward_length, default feed_forward_length)
// that every token runs, scaled by the sigmoid of its one-row gate.
// The routed experts stream through Hooks.Experts like qwen3moe's; the
// shared expert is a layer matrix (resident, or streamed with its layer).
// Routed gate and up experts come as ffn_gate_exps and ffn_up_exps or
// fused as ffn_gate_up_exps (gateUpExperts). The multi-token-prediction
// block is skipped as qwen35's (qwen35.go); vision positions are not done.

func loadQwen35MoE(l *loader, m *Model) {
	loadHybrid(l, m) // qwen35.go
	loadHybridMoE(l, m)
	m.forward = forwardQwen35
}

// loadHybridMoE loads each block's routed and shared experts (qwen35moe,
// qwen3next).
func loadHybridMoE(l *loader, m *Model) {
	for i := range m.Layers {
		L := &m.Layers[i]
		L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), m.NEmbd, m.NExpert, true)
		if _, fused := l.f.Tensor(blk(i, "ffn_gate_up_exps.weight")); fused {
			L.GateExps, L.UpExps = l.gateUpExperts(blk(i, "ffn_gate_up_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		} else {
			L.GateExps = l.experts(blk(i, "ffn_gate_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
			L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		}
		L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), m.NFFExp, m.NEmbd, m.NExpert)
		L.ShexpGate = l.row(blk(i, "ffn_gate_inp_shexp.weight"), m.NEmbd)
		L.GateShexp = l.matrix(blk(i, "ffn_gate_shexp.weight"), m.NEmbd, m.NFFShexp, true)
		L.UpShexp = l.matrix(blk(i, "ffn_up_shexp.weight"), m.NEmbd, m.NFFShexp, true)
		L.DownShexp = l.matrix(blk(i, "ffn_down_shexp.weight"), m.NFFShexp, m.NEmbd, true)
	}
}

// gateUpExperts loads the fused [cols, 2·rows, n] ffn_gate_up_exps some
// converters write in place of ffn_gate_exps and ffn_up_exps (llama.cpp's
// create_tensor_gate_up_exps, read by qwen35moe and qwen3next among ours):
// expert e's matrix holds its gate's rows then its up's, which
// build_moe_ffn splits after one matmul (views at 0 and n_ff). Rows are
// independent, so the gate and up views here are the two halves of each
// expert's rows and multiply bit-identically to separate tensors.
func (l *loader) gateUpExperts(name string, cols, rows, n int) (gate, up []Weight) {
	t := l.tensor(name, true, cols, 2*rows, n)
	if t == nil {
		return nil, nil
	}
	w := l.weight(t, cols, rows, t.Data)
	if w == nil {
		return nil, nil
	}
	half := w.RowBytes * rows
	gate, up = make([]Weight, n), make([]Weight, n)
	for e := range n {
		gate[e], up[e] = *w, *w
		gate[e].Name = fmt.Sprintf("%s[%d].gate", name, e)
		up[e].Name = fmt.Sprintf("%s[%d].up", name, e)
		gate[e].Data = t.Data[2*e*half : (2*e+1)*half]
		up[e].Data = t.Data[(2*e+1)*half : (2*e+2)*half]
	}
	return gate, up
}

// row loads a one-row weight of n columns: a 1-D tensor [n] (or [n, 1]),
// as llama.cpp's ffn_gate_inp_shexp, which build_lora_mm multiplies like a
// matrix of one row.
func (l *loader) row(name string, n int) *Weight {
	t, ok := l.f.Tensor(name)
	if !ok {
		l.fail(fmt.Errorf("model: missing required tensor %q (expected shape [%d])", name, n))
		return nil
	}
	if !(len(t.Dims) == 1 && t.Dims[0] == uint64(n)) && !(len(t.Dims) == 2 && t.Dims[0] == uint64(n) && t.Dims[1] == 1) {
		l.fail(fmt.Errorf("model: tensor %q has shape %s, expected [%d]", name, shapeString(t.Dims), n))
		return nil
	}
	return l.weight(t, n, 1, t.Data)
}

// readHybridMoEHyper reads the expert keys of qwen35moe and qwen3next
// (their load_arch_hparams): expert_feed_forward_length (default
// feed_forward_length / expert_used_count) and
// expert_shared_feed_forward_length (default feed_forward_length). Their
// routers always renormalize the chosen experts' weights, whatever
// expert_weights_norm says, so a file asking otherwise is refused.
func readHybridMoEHyper(k *keyReader, h *Hyper) error {
	h.NFFShexp = k.uint("expert_shared_feed_forward_length", 0, false)
	if k.err != nil {
		return k.err
	}
	if h.NFFShexp == 0 {
		h.NFFShexp = h.NFF
	}
	if h.NFFExp == 0 && h.NExpertUsed > 0 {
		h.NFFExp = h.NFF / h.NExpertUsed
	}
	switch {
	case h.NExpert == 0 || h.NExpertUsed == 0:
		return fmt.Errorf("model: %s needs expert_count and expert_used_count", h.Arch)
	case h.NFFExp == 0 || h.NFFShexp == 0:
		return fmt.Errorf("model: %s: expert width %d and shared expert width %d must be positive (expert_feed_forward_length, expert_shared_feed_forward_length or feed_forward_length)", h.Arch, h.NFFExp, h.NFFShexp)
	case !h.NormTopK:
		return fmt.Errorf("model: %s: %s.expert_weights_norm false is not supported (llama.cpp always renormalizes this family's expert weights)", h.Arch, h.Arch)
	}
	h.SSMGroupedHeads = h.Arch == "qwen3next"
	return nil
}

// sharedExpert computes the gated shared expert of n rows into
// c.moeS.shy: σ(ShexpGate·xn)·Down·(silu(Gate·xn) ⊙ Up·xn), which
// Context.moe adds to the routed experts' sum as llama.cpp's
// build_layer_ffn adds ffn_shexp_gated to ffn_moe_out. It uses the gate
// and up buffers, so it runs before or after a routed expert, not inside.
func (c *Context) sharedExpert(il, n int) {
	L, ops, h := c.layer(il), c.Ops, &c.M.Hyper
	d, f := h.NEmbd, h.NFFShexp
	c.span("shexp", il, true)
	defer c.span("shexp", il, false)
	gate, up := c.gate[:n*f], c.up[:n*f]
	c.matmuls("ffn_gate_up_shexp", il, c.xn, n, mm{"ffn_gate_shexp", gate, L.GateShexp}, mm{"ffn_up_shexp", up, L.UpShexp})
	ops.SwiGLU(gate, gate, up)
	y := c.moeS.shy[:n*d]
	c.matmul("ffn_down_shexp", il, y, L.DownShexp, gate, n)
	c.eval("ffn_shexp", il, y, n, d)
	g := c.moeS.shg[:n] // n × 1
	c.matmul("shared_expert_gate", il, g, L.ShexpGate, c.xn, n)
	for t := range n { // ggml_sigmoid, then ggml_mul broadcasting the row's gate
		ops.Scale(y[t*d:(t+1)*d], 1/(1+expf32(-g[t])))
	}
	c.eval("ffn_shexp_gated", il, y, n, d)
}

// hybridMoEActFloats is the floats per batch row of the scratch
// qwen35moe and qwen3next add to a hybrid Context's (the shared expert's
// gate and output; qwen3next's fused projections).
func hybridMoEActFloats(h *Hyper) int {
	n := 0
	if h.NFFShexp > 0 {
		n += 1 + h.NEmbd // gate, output
	}
	if h.Arch == "qwen3next" {
		n += nextActFloats(h)
	}
	return n
}
