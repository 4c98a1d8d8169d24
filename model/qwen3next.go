package model

import "fmt"

// qwen3next: Qwen3-Next, the hybrid qwen35 and qwen35moe grew from, as
// llama.cpp's llama_model_qwen3next (src/models/qwen3next.cpp) reads it.
// Blocks, mixers and FFN are qwen35moe's (qwen35.go, qwen35moe.go) but for
// what the GGUF layout and the RoPE change:
//
//   - the full-attention layers rotate by plain NEOX RoPE over
//     rope.dimension_count dimensions (ggml_rope_ext), with no M-RoPE
//     sections;
//   - a delta-net layer's beta and alpha come from one fused projection,
//     ssm_ba, whose rows hold, per key head, that key head's value heads'
//     betas then their alphas;
//   - its q/k/v and z come from attn_qkv and attn_gate as in qwen35 or, in
//     files of the first converter, from one fused ssm_in whose rows hold,
//     per key head, [q, k, its value heads' v, their z] (llama.cpp's
//     "legacy" path of build_qkvz);
//   - with more value heads than key heads, value head h reads key head
//     h/(value heads per key head) (llama.cpp repeats each key head's q
//     and k in place, ggml_repeat_4d on a [d, 1, hk] view), where qwen35
//     tiles them (head h%hk).
//
// As in qwen35moe, the routed gate and up experts may be fused
// (ffn_gate_up_exps) and the multi-token-prediction blocks are skipped.

func loadQwen3Next(l *loader, m *Model) {
	loadHybrid(l, m) // qwen35.go; the projections by loadNextProjections
	loadHybridMoE(l, m)
	m.forward = forwardQwen35
}

// loadNextProjections loads delta-net layer i's input projections: ssm_ba,
// and attn_qkv with attn_gate when the file has them, else ssm_in.
func loadNextProjections(l *loader, m *Model, i int) {
	L, s := &m.Layers[i], &m.SSM
	vd := s.DtRank * s.State
	L.SSMBA = l.matrix(blk(i, "ssm_ba.weight"), m.NEmbd, 2*s.DtRank, true)
	L.Wqkv = l.matrix(blk(i, "attn_qkv.weight"), m.NEmbd, s.ConvDim(), false)
	if L.Wqkv != nil {
		L.WGate = l.matrix(blk(i, "attn_gate.weight"), m.NEmbd, vd, true)
		return
	}
	L.SSMIn = l.matrix(blk(i, "ssm_in.weight"), m.NEmbd, s.ConvDim()+vd, false)
	if L.SSMIn == nil && l.err == nil {
		l.fail(fmt.Errorf("model: qwen3next: layer %d has neither %q (with %q) nor %q", i,
			blk(i, "attn_qkv.weight"), blk(i, "attn_gate.weight"), blk(i, "ssm_in.weight")))
	}
}

// nextScratch holds qwen3next's fused projections' outputs before they are
// split, and the q/k heads repeated per value head (MaxBatch rows).
type nextScratch struct {
	mixed []float32 // n × (2·hk·d + 2·hv·d): ssm_in's output
	ba    []float32 // n × 2·hv: ssm_ba's output
	qkx   []float32 // n × 3·hv·d: q and k per value head, then v
}

func (s *nextScratch) alloc(n int, h *Hyper) {
	ss := &h.SSM
	s.mixed = make([]float32, n*(ss.ConvDim()+ss.DtRank*ss.State))
	s.ba = make([]float32, n*2*ss.DtRank)
	s.qkx = make([]float32, n*3*ss.DtRank*ss.State)
}

// nextActFloats is the floats per batch row of nextScratch.
func nextActFloats(h *Hyper) int {
	ss := &h.SSM
	return ss.ConvDim() + ss.DtRank*ss.State + 2*ss.DtRank + 3*ss.DtRank*ss.State
}

// nextProjections computes a qwen3next delta-net layer's projections of
// c.xn (n rows) in qwen35's layout: qkv (n × ConvDim: every q head, every
// k head, every v head), z (n × hv·d), beta and alpha (n × hv).
func (c *Context) nextProjections(il, n int, qkv, z, beta, alpha []float32) {
	L, s, ss := c.layer(il), &c.q3n, &c.M.SSM
	hk, hv, d := ss.Groups, ss.DtRank, ss.State
	r, cd, vd := hv/hk, ss.ConvDim(), hv*ss.State
	ba := s.ba[:n*2*hv]
	if L.Wqkv != nil {
		c.matmuls("linear_attn_qkvz", il, c.xn, n, mm{"linear_attn_qkv_mixed", qkv, L.Wqkv}, mm{"z", z, L.WGate},
			mm{"linear_attn_mixed_ba", ba, L.SSMBA})
	} else {
		w := cd + vd
		mixed := s.mixed[:n*w]
		c.matmuls("linear_attn_qkvz", il, c.xn, n, mm{"linear_attn_mixed_qkvz", mixed, L.SSMIn}, mm{"linear_attn_mixed_ba", ba, L.SSMBA})
		// key head g's [q d][k d][v r·d][z r·d] to its places in qkv and z
		for t := range n {
			src, q, zt := mixed[t*w:(t+1)*w], qkv[t*cd:(t+1)*cd], z[t*vd:(t+1)*vd]
			for g := range hk {
				p := src[g*(2*d+2*r*d) : (g+1)*(2*d+2*r*d)]
				copy(q[g*d:(g+1)*d], p[:d])
				copy(q[(hk+g)*d:(hk+g+1)*d], p[d:2*d])
				copy(q[2*hk*d+g*r*d:2*hk*d+(g+1)*r*d], p[2*d:2*d+r*d])
				copy(zt[g*r*d:(g+1)*r*d], p[2*d+r*d:])
			}
		}
		c.eval("linear_attn_qkv_mixed", il, qkv, n, cd)
	}
	// key head g's [beta r][alpha r] to value heads g·r ... g·r+r-1
	for t := range n {
		src := ba[t*2*hv : (t+1)*2*hv]
		for g := range hk {
			copy(beta[t*hv+g*r:t*hv+(g+1)*r], src[2*g*r:(2*g+1)*r])
			copy(alpha[t*hv+g*r:t*hv+(g+1)*r], src[(2*g+1)*r:(2*g+2)*r])
		}
	}
}

// groupHeads returns nr rows of conv (q and k of hk heads, v of hv heads)
// with q and k repeated per value head as qwen3next pairs them: value head
// h gets key head h/(hv/hk). The rows can then run as hv key heads.
func (c *Context) groupHeads(conv []float32, nr int) []float32 {
	ss := &c.M.SSM
	hk, hv, d := ss.Groups, ss.DtRank, ss.State
	r, cd, w := hv/hk, ss.ConvDim(), 3*hv*ss.State
	out := c.q3n.qkx[:nr*w]
	for t := range nr {
		src, dst := conv[t*cd:(t+1)*cd], out[t*w:(t+1)*w]
		for h := range hv {
			g := h / r
			copy(dst[h*d:(h+1)*d], src[g*d:(g+1)*d])                 // q
			copy(dst[(hv+h)*d:(hv+h+1)*d], src[(hk+g)*d:(hk+g+1)*d]) // k
		}
		copy(dst[2*hv*d:], src[2*hk*d:]) // v
	}
	return out
}
