package model

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// gpt-oss: OpenAI's mixture-of-experts model as llama.cpp runs it
// (LLM_ARCH_OPENAI_MOE, src/models/openai-moe.cpp). The block is qwen3moe's
// with these differences:
//
//   - attention: biases on q, k, v and the output projection; one sink
//     logit per query head joins the softmax (Attn.Sinks); the layers
//     alternate a sliding window (attention.sliding_window, 128) and full
//     attention: with llama.cpp's swa pattern of period p
//     (attention.sliding_window_pattern, default 2), layer il slides when
//     il % p < p-1, so the even layers slide and the odd ones see all;
//   - RoPE: NeoX halves, YaRN (rope.scaling.*; rope.go), scale 1/√headDim;
//   - the FFN's norm is post_attention_norm (our FFNNorm);
//   - router: logits plus a bias, the top-k logits chosen, their softmax
//     as the weights (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT; no
//     renormalisation, no weight scale: llama.cpp reads neither key for
//     gpt-oss);
//   - experts: gate, up and down biases, and the clamped SwiGLU
//     ggml_swiglu_oai (alpha 1.702, limit 7) instead of silu(gate)·up.
//
// The experts are usually MXFP4. Their biases (NFFExp or NEmbd floats per
// expert, about 0.3% of an MXFP4 expert's bytes) are loaded as float32 at
// load time and stay resident: the streamed path moves exactly what it
// moves for qwen3moe (the three matrices), and a cached or streamed
// expert's bias is always at hand by its id. The harmony chat format is
// not this file's business.

// OAI SwiGLU's constants (build_moe_ffn's LLM_FFN_SWIGLU_OAI_MOE).
const (
	SwiGLUOAIAlpha = 1.702
	SwiGLUOAILimit = 7.0
)

// ClampedSwiGLU is implemented by Ops that run gpt-oss's expert activation.
type ClampedSwiGLU interface {
	// SwiGLUOAI sets out[i] = x·σ(alpha·x)·(y+1) with x = min(gate[i],
	// limit) and y = up[i] clamped to [-limit, limit], as ggml's CPU
	// swiglu_oai (expf in float32); cpu.Ref's is the plain reference.
	SwiGLUOAI(out, gate, up []float32, alpha, limit float32)
}

func loadGptOss(l *loader, m *Model) {
	if m.NExpert == 0 || m.NExpertUsed == 0 || m.NFFExp == 0 {
		l.fail(fmt.Errorf("model: gpt-oss needs expert_count, expert_used_count and expert_feed_forward_length"))
		return
	}
	if m.RopeDim != m.HeadDimK || m.HeadDimV != m.HeadDimK {
		// llama.cpp sizes q, k, v and the attention scale by n_rot
		l.fail(fmt.Errorf("model: gpt-oss: rope.dimension_count %d, key_length %d and value_length %d must be equal", m.RopeDim, m.HeadDimK, m.HeadDimV))
		return
	}
	k := &keyReader{f: l.f, arch: m.Arch}
	window := k.uint("attention.sliding_window", 0, true)
	period := k.uint("attention.sliding_window_pattern", 2, false)
	if k.err != nil {
		l.fail(k.err)
		return
	}
	if window == 0 {
		l.fail(fmt.Errorf("model: gpt-oss: %s.attention.sliding_window is 0", m.Arch))
		return
	}
	if b := k.float("rope.freq_base_swa", m.RopeBase); b != m.RopeBase || k.err != nil {
		l.fail(fmt.Errorf("model: gpt-oss: rope.freq_base_swa %g differs from rope.freq_base %g: a second RoPE base for the sliding layers is not supported", b, m.RopeBase))
		return
	}
	// llama_hparams::set_swa_pattern(period, dense_first=false)
	m.Window = make([]int, m.NLayer)
	for il := range m.Window {
		if period == 0 || il%period < period-1 {
			m.Window[il] = window
		}
	}
	m.RopeType = RopeNeox
	m.NormTopK = false // build_moe_ffn(..., norm_w=false, w_scale from an unread key)
	m.GatingSoftmaxWeight = true
	m.SwiGLUOAI = true
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	if m.Output == m.TokEmbd {
		l.fail(fmt.Errorf("model: gpt-oss: missing required tensor %q (the embeddings are not tied)", "output.weight"))
		return
	}
	nf, d, ne := m.NFFExp, m.NEmbd, m.NExpert
	for i := range m.Layers {
		loadAttention(l, m, i)
		L := &m.Layers[i]
		// q, k, v biases are optional in llama.cpp (create_tensor_qkv);
		// the converter writes them
		L.Bq = l.vector(blk(i, "attn_q.bias"), m.QDim(), false)
		L.Bk = l.vector(blk(i, "attn_k.bias"), m.KDim(), false)
		L.Bv = l.vector(blk(i, "attn_v.bias"), m.VDim(), false)
		L.Bo = l.vector(blk(i, "attn_output.bias"), d, true)
		L.Sinks = l.vector(blk(i, "attn_sinks.weight"), m.NHead, true)
		L.FFNNorm = l.vector(blk(i, "post_attention_norm.weight"), d, true)
		L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), d, ne, true)
		L.RouterB = l.vector(blk(i, "ffn_gate_inp.bias"), ne, true)
		L.GateExps = l.experts(blk(i, "ffn_gate_exps.weight"), d, nf, ne)
		L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), d, nf, ne)
		L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), nf, d, ne)
		L.GateExpsB = l.rows(blk(i, "ffn_gate_exps.bias"), nf, ne)
		L.UpExpsB = l.rows(blk(i, "ffn_up_exps.bias"), nf, ne)
		L.DownExpsB = l.rows(blk(i, "ffn_down_exps.bias"), d, ne)
	}
	m.forward = forwardMoE
}

// rows loads a required 2-D parameter of rows × cols as float32, row-major.
func (l *loader) rows(name string, cols, rows int) Vector {
	t := l.tensor(name, true, cols, rows)
	if t == nil {
		return nil
	}
	v := make(Vector, cols*rows)
	rb, err := quant.RowBytes(t.Type, cols)
	for r := 0; err == nil && r < rows; r++ {
		err = quant.DequantizeRow(t.Type, t.Data[r*rb:(r+1)*rb], v[r*cols:(r+1)*cols])
	}
	if err != nil {
		l.fail(fmt.Errorf("model: tensor %q: %w", name, err))
		return nil
	}
	return v
}

// checkOps reports a backend that cannot run m's operations.
func checkOps(m *Model, ops Ops) error {
	if _, ok := ops.(ClampedSwiGLU); m.SwiGLUOAI && !ok {
		return fmt.Errorf("model: %s needs the clamped SwiGLU (swiglu_oai), which this backend does not implement", m.Arch)
	}
	return nil
}

// expertGLU applies the experts' activation in place of gate.
func (c *Context) expertGLU(gate, up []float32) {
	if c.M.SwiGLUOAI {
		c.Ops.(ClampedSwiGLU).SwiGLUOAI(gate, gate, up, SwiGLUOAIAlpha, SwiGLUOAILimit)
		return
	}
	if c.M.FFNAct == ActGELU { // gemma4's experts: GeGLU, as its dense FFN
		c.Ops.GeGLU(gate, gate, up)
		return
	}
	c.Ops.SwiGLU(gate, gate, up)
}

// addExpertBias adds row e of b (nil: no bias) to each of the m rows of x.
func (c *Context) addExpertBias(x []float32, b Vector, e, width int) {
	if b != nil {
		c.Ops.AddRows(x, b[e*width:(e+1)*width])
	}
}
