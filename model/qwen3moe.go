package model

import "fmt"

// qwen3moe: qwen3's attention with a mixture-of-experts FFN. A router
// (ffn_gate_inp) scores the NExpert experts; softmax; the NExpertUsed most
// probable are run (each a SwiGLU FFN of width NFFExp) and their outputs
// summed, weighted by their probabilities renormalised to sum to one
// (expert_weights_norm / norm_top_k_prob; llama.cpp always renormalises for
// qwen3moe, and so do we unless the file says expert_weights_norm=false).

func loadQwen3MoE(l *loader, m *Model) {
	m.RopeType = RopeNeox
	if m.NExpert == 0 || m.NExpertUsed == 0 {
		l.fail(fmt.Errorf("model: qwen3moe needs expert_count and expert_used_count"))
		return
	}
	if m.NFFExp == 0 {
		m.NFFExp = m.NFF / m.NExpertUsed
	}
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	for i := range m.Layers {
		loadAttention(l, m, i)
		loadQKNorm(l, m, i)
		L := &m.Layers[i]
		L.FFNNorm = l.vector(blk(i, "ffn_norm.weight"), m.NEmbd, true)
		L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), m.NEmbd, m.NExpert, true)
		L.GateExps = l.experts(blk(i, "ffn_gate_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), m.NFFExp, m.NEmbd, m.NExpert)
	}
	m.forward = forwardMoE
}

func forwardMoE(c *Context, b *Batch) error {
	c.embed(b)
	return c.layers(b, func(il int, b *Batch) {
		c.attention(il, b) // x += attn(norm(x))
		c.moe(il, b)       // x += Σ_k w_k · expert_k(norm(x))
	})
}

// moe runs the mixture-of-experts FFN sub-layer.
func (c *Context) moe(il int, b *Batch) {
	m, L, ops := c.M, &c.M.Layers[il], c.Ops
	n, h := b.Len(), &m.Hyper
	c.span("moe", il, true)
	defer c.span("moe", il, false)
	ops.RMSNorm(c.xn, c.x[:n*h.NEmbd], L.FFNNorm, n, h.NEmbd, h.RMSEps)
	c.eval("ffn_norm", il, c.xn, n, h.NEmbd)
	// router probabilities (n × NExpert)
	probs := c.probs[:n*h.NExpert]
	c.matmul("ffn_gate_inp", il, probs, L.Router, c.xn, n)
	ops.Softmax(probs, n, h.NExpert)
	c.eval("ffn_moe_probs", il, probs, n, h.NExpert)
	sel, w := c.moeSel, c.moeW
	gate, up := c.gate[:h.NFFExp], c.up[:h.NFFExp]
	for t := range n {
		xn := c.xn[t*h.NEmbd : (t+1)*h.NEmbd]
		acc := c.tmp[t*h.NEmbd : (t+1)*h.NEmbd]
		topK(probs[t*h.NExpert:(t+1)*h.NExpert], sel, w)
		if h.NormTopK {
			var sum float32
			for _, x := range w {
				sum += x
			}
			sum = max(sum, 6.103515625e-5) // as llama.cpp's clamp
			for j := range w {
				w[j] /= sum
			}
		}
		if c.OnRoute != nil {
			c.OnRoute(il, t, sel, w)
		}
		for j, e := range sel {
			c.matmul("ffn_gate_exps", il, gate, &L.GateExps[e], xn, 1)
			c.matmul("ffn_up_exps", il, up, &L.UpExps[e], xn, 1)
			ops.SwiGLU(gate, gate, up)
			out := c.outRows[:h.NEmbd] // scratch row
			c.matmul("ffn_down_exps", il, out, &L.DownExps[e], gate, 1)
			for i := range out {
				out[i] *= w[j]
			}
			if j == 0 {
				copy(acc, out)
			} else {
				ops.Add(acc, out)
			}
		}
	}
	c.eval("ffn_moe_out", il, c.tmp, n, h.NEmbd)
	ops.Add(c.x[:n*h.NEmbd], c.tmp[:n*h.NEmbd])
	c.eval("l_out", il, c.x, n, h.NEmbd)
}

// topK writes the indices of the len(sel) largest probabilities into sel, in
// descending order (the lower index first on ties), and their values into w.
func topK(p []float32, sel []int, w []float32) {
	for j := range sel {
		best := -1
		for i, x := range p {
			if best >= 0 && x <= p[best] {
				continue
			}
			taken := false
			for _, s := range sel[:j] {
				if s == i {
					taken = true
					break
				}
			}
			if !taken {
				best = i
			}
		}
		sel[j], w[j] = best, p[best]
	}
}
