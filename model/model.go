// Package model holds the transformer architectures flowinfer runs (one file
// per family: llama.go, qwen2.go, qwen3.go, qwen3moe.go, gptoss.go, gemma3.go, gemma4.go,
// mistral3.go, qwen35.go, qwen35moe.go, qwen3next.go, nemotronh.go), their
// hyperparameters and weight tables read from GGUF, the KV cache, and the
// small Ops interface a compute backend (package cpu, later gpu) implements.
//
// An architecture's forward pass reads like the math: a loop over layers of
// norm, attention, residual, norm, FFN, residual. It never touches a weight's
// bytes itself; every numeric op goes through Ops, so backends can be tested
// against each other. Tokenizers and chat templates live in the
// subpackages model/tokenizer and model/chat.
package model

import (
	"fmt"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/quant"
)

// Rope describes a rotary position embedding as ggml_rope_ext applies it.
// Pair i at position p turns by θ = p·Base^(-2i/Dim)/Factors[i]; with
// ExtFactor 0 the angle is Scale·θ, with YaRN (ExtFactor 1) it mixes Scale·θ
// and θ by YarnRamp(Corr[0], Corr[1], i)·ExtFactor. cos and sin are
// multiplied by MScale().
type Rope struct {
	Type       RopeType
	Dim        int        // rotated dimensions per head
	Base       float32    // freq_base
	Scale      float32    // freq_scale
	Factors    []float32  // per-pair frequency divisors (llama3 rope_freqs), or nil
	ExtFactor  float32    // YaRN's ext_factor: 0 off, 1 for rope.scaling.type yarn
	AttnFactor float32    // attn_factor (0 means 1), see MScale
	Corr       [2]float32 // YaRN's ramp: YarnCorrDims of the original context
}

// Attn is what one layer's attention adds to the shapes in Hyper.
type Attn struct {
	// Scale multiplies q·k before the softmax (1/√HeadDimK for most
	// families).
	Scale float32
	// Window, if positive, is a sliding window as llama.cpp's
	// LLAMA_SWA_TYPE_STANDARD masks it: the row at position p sees the
	// positions j with p-Window < j ≤ p.
	Window int
	// Sinks, if not nil, holds one logit per query head (gpt-oss's
	// attn_sinks): it joins the softmax's maximum and sum as a score with
	// no value, as ggml_soft_max_ext's sinks do.
	Sinks []float32
}

// Visible reports whether the row at position p sees the cached position j.
func (a *Attn) Visible(p, j int) bool {
	return j <= p && (a.Window <= 0 || p-j < a.Window)
}

// Ops is what an architecture needs from a compute backend. Activations are
// row-major float32: n rows (tokens) of a given width.
type Ops interface {
	// MatMul sets out[t*w.Rows+r] = Σ_c w[r][c]·x[t*w.Cols+c] for t < n,
	// converting x to the weight's dot-product type as ggml does.
	MatMul(out []float32, w *Weight, x []float32, n int)
	// Embed sets row t of out to row ids[t] of w, dequantized.
	Embed(out []float32, w *Weight, ids []int32)
	// RMSNorm normalises each of the n rows of width dim of x into out and
	// multiplies by weight (if not nil). out may be x.
	RMSNorm(out, x []float32, weight Vector, n, dim int, eps float32)
	// Rope rotates n rows of nHead heads of headDim in place; pos[t] is
	// row t's position.
	Rope(x []float32, pos []int32, n, nHead, headDim int, r *Rope)
	// Attention computes causal softmax(q·kᵀ·a.Scale)·v for each row of q
	// against the cache cells of the row's sequence at positions ≤ its own
	// (and, with a.Window, > its own minus the window), with grouped-query
	// heads and a.Sinks' extra logits. out has n rows of nHead*HeadDimV.
	Attention(out, q []float32, kv *KVCache, layer int, seq, pos []int32, h *Hyper, a Attn)
	// SwiGLU sets out = silu(gate)·up elementwise.
	SwiGLU(out, gate, up []float32)
	// GeGLU sets out = gelu(gate)·up elementwise, gelu by its tanh
	// approximation read from a table of float16 values as ggml's CPU
	// backend (GGML_GELU_FP16) computes it.
	GeGLU(out, gate, up []float32)
	// Scale sets x *= s elementwise.
	Scale(x []float32, s float32)
	// Add sets dst += src elementwise.
	Add(dst, src []float32)
	// AddRows adds the vector b to each row of x (a bias).
	AddRows(x []float32, b Vector)
	// Softmax normalises each of the n rows of width dim in place.
	Softmax(x []float32, n, dim int)
	// Supports reports whether MatMul handles weights of type t.
	Supports(t quant.Type) bool
}

// MultiMatMul is implemented by Ops that can multiply several weights by
// the same activations in one operation (one activation conversion, one
// parallel dispatch). The results must equal those of separate MatMul
// calls. Context uses it for the q/k/v and gate/up projections.
type MultiMatMul interface {
	// MatMuls sets outs[i] as MatMul(outs[i], ws[i], x, n) would.
	MatMuls(outs [][]float32, ws []*Weight, x []float32, n int)
}

// Layer holds one transformer block's weights. Fields a family does not use
// are nil.
type Layer struct {
	AttnNorm   Vector
	Wq, Wk, Wv *Weight
	Bq, Bk, Bv Vector // qwen2 biases
	QNorm      Vector // qwen3 per-head RMSNorm weights (HeadDimK)
	KNorm      Vector
	Wo         *Weight
	Bo         Vector // attn_output bias (gpt-oss)
	Sinks      Vector // attention sinks, one logit per query head (gpt-oss)
	FFNNorm    Vector
	Gate, Up   *Weight // dense SwiGLU FFN
	Down       *Weight
	Router     *Weight  // MoE gate (ffn_gate_inp): NEmbd -> NExpert
	GateExps   []Weight // per-expert views
	UpExps     []Weight
	DownExps   []Weight
	// gpt-oss's router and expert biases: RouterB has NExpert logits;
	// expert e's gate, up and down biases are rows e of GateExpsB,
	// UpExpsB (NFFExp wide) and DownExpsB (NEmbd wide). They stay
	// resident when the experts stream (gptoss.go says why).
	RouterB                       Vector
	GateExpsB, UpExpsB, DownExpsB Vector
	// DownExpsS (gemma4's ffn_down_exps.scale) multiplies expert e's
	// output by DownExpsS[e] before its routing weight; resident, like
	// the biases.
	DownExpsS Vector

	// AttnPostNorm and FFNPostNorm (gemma3) normalise a sub-layer's output
	// before it joins the residual stream.
	AttnPostNorm, FFNPostNorm Vector

	// gemma4 (gemma4.go): the per-layer input's gate (inp_gate: NEmbd ->
	// NEmbdPerLayer), projection (proj: back to NEmbd) and norm
	// (post_norm); the layer's output scale (layer_output_scale, one
	// value, nil: none); a MoE layer's router input scale
	// (ffn_gate_inp.scale) and the norms around its dense FFN and experts
	// (post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2).
	PerLayerGate, PerLayerProj              *Weight
	PerLayerPostNorm, OutScale              Vector
	RouterScale                             Vector
	FFNPostNorm1, FFNPreNorm2, FFNPostNorm2 Vector

	// qwen35's recurrent layers (gated delta net): the joint q/k/v
	// projection (attn_qkv) and its output gate (attn_gate), the short
	// convolution's taps (ssm_conv1d, F32: ConvDim rows of SSM.Conv), the
	// decay's bias and scale (ssm_dt.bias, ssm_a = -exp(A_log)), the
	// beta and alpha projections, the gated norm's weight (ssm_norm, one
	// head) and the output projection (ssm_out).
	Wqkv, WGate    *Weight
	SSMConv        Vector
	SSMDt, SSMA    Vector
	SSMBeta, SSMAl *Weight
	SSMNorm        Vector
	SSMOut         *Weight
	// qwen3next's fused projections: ssm_ba (beta and alpha of each key
	// head's value heads side by side) and, in files from its first
	// converter, ssm_in (q, k, v and z of each key head side by side) in
	// place of attn_qkv and attn_gate (qwen3next.go). nemotron_h's
	// Mamba-2 layers read ssm_in as the joint z/xBC/dt projection.
	SSMBA, SSMIn *Weight

	// The shared expert of qwen35moe and qwen3next (a SwiGLU FFN of width
	// NFFShexp every token runs) and its gate (ffn_gate_inp_shexp: one
	// row, sigmoid(gate·x) scales the expert's output); nemotron_h_moe's
	// is ungated (up and down only).
	GateShexp, UpShexp, DownShexp *Weight
	ShexpGate                     *Weight

	// nemotron_h's Mamba-2 layers (nemotronh.go): the convolution's bias
	// (ssm_conv1d.bias), the D skip (ssm_d, one per head); SSMConv,
	// SSMDt, SSMA, SSMNorm (one row per group) and SSMOut as above. Its
	// FFN layers: the dense squared-ReLU FFN's optional biases
	// (ffn_up.bias, ffn_down.bias) and the MoE's expert-selection bias
	// (exp_probs_b).
	SSMConvB, SSMD Vector
	BUp, BDown     Vector
	ExpProbsB      Vector
}

// Matrix names, in the order of Layer.Matrices: the GGUF tensor of layer
// il's matrix i is "blk.<il>." + MatrixNames[i] + ".weight".
var MatrixNames = [...]string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
	"attn_qkv", "attn_gate", "ssm_alpha", "ssm_beta", "ssm_out", "ssm_ba", "ssm_in",
	"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp", "ffn_gate_inp_shexp"}

// NMatrices is the number of matrix fields of a Layer (Layer.Matrices).
const NMatrices = len(MatrixNames)

// NStreamable is how many of Layer.Matrices, from the first, the weight
// path may stream when the budget cannot keep a layer resident. The
// others (the routers) are small and read every step by every token: they
// always stay resident.
const NStreamable = 17

// Matrices returns pointers to the layer's matrix fields in MatrixNames
// order, so that a caller can read them or (the weight path's layer slots)
// point them elsewhere. A field the family does not use holds nil. This is
// the one list of a layer's matrices: packing, planning, streaming and
// byte counts all range over it, so an architecture that adds a matrix adds
// it here.
func (L *Layer) Matrices() [NMatrices]**Weight {
	return [NMatrices]**Weight{&L.Wq, &L.Wk, &L.Wv, &L.Wo, &L.Gate, &L.Up, &L.Down,
		&L.Wqkv, &L.WGate, &L.SSMAl, &L.SSMBeta, &L.SSMOut, &L.SSMBA, &L.SSMIn,
		&L.GateShexp, &L.UpShexp, &L.DownShexp, &L.Router, &L.ShexpGate}
}

// ExpertNames are the GGUF names of the routed experts' 3-D tensors in the
// order of Layer.Experts and ExpertWeights.Matrices.
var ExpertNames = [3]string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}

// Experts returns the per-expert views of the routed experts' gate, up and
// down matrices (ExpertNames order); each is empty in a layer without
// routed experts.
func (L *Layer) Experts() [3][]Weight {
	return [3][]Weight{L.GateExps, L.UpExps, L.DownExps}
}

// Model is a loaded architecture: hyperparameters and weights that point
// into the GGUF mapping (the File must stay open while the model is used).
type Model struct {
	Hyper
	File       *gguf.File
	TokEmbd    *Weight
	OutputNorm Vector
	Output     *Weight // == TokEmbd when the embeddings are tied
	Rope       Rope
	Layers     []Layer
	forward    func(c *Context, b *Batch) error

	// Skipped are the file's tensors the model does not use (qwen35's
	// multi-token-prediction blocks, Hyper.NLayerNextN): no weight points
	// into them, and the weight path neither reads nor counts them.
	Skipped []*gguf.Tensor

	// layerHyper holds each layer's Hyper.AtLayer, made at load by the
	// families whose layers differ in shape (gemma4).
	layerHyper []*Hyper

	// SWARope, if not nil, is the RoPE of the sliding-window layers
	// (gemma3: its own base, no scaling); nil: Rope for every layer.
	SWARope *Rope
	// AttnScale multiplies q·k before the softmax; 0 means 1/√HeadDimK.
	AttnScale float32
	// FFNAct is the gate activation of the dense FFN.
	FFNAct Activation

	// gemma4 (gemma4.go): the per-layer token embeddings (NLayer ×
	// NEmbdPerLayer per token), the projection of the embeddings to the
	// same width and its norm; SoftCap, if not 0, caps the logits at
	// ±SoftCap (cap·tanh(logits/cap)).
	PerLayerTokEmbd, PerLayerModelProj *Weight
	PerLayerProjNorm                   Vector
	SoftCap                            float32
}

// SkippedBytes is the size in the file of m.Skipped.
func (m *Model) SkippedBytes() int64 {
	var n int64
	for _, t := range m.Skipped {
		n += int64(len(t.Data))
	}
	return n
}

// Activation is the gate activation of a gated FFN.
type Activation int

const (
	// ActSiLU is SwiGLU: silu(gate)·up (llama, qwen).
	ActSiLU Activation = iota
	// ActGELU is GeGLU: gelu(gate)·up, gelu's tanh approximation (gemma).
	ActGELU
)

// LayerRope returns the RoPE of layer il: SWARope for a sliding-window
// layer when the model has one, else Rope.
func (m *Model) LayerRope(il int) *Rope {
	if m.SWARope != nil && m.LayerWindow(il) > 0 {
		return m.SWARope
	}
	return &m.Rope
}

// Load builds the model described by f's general.architecture. supports
// tells which weight types the backend can multiply by; an unsupported type
// is an error naming the tensor.
func Load(f *gguf.File, supports func(quant.Type) bool) (*Model, error) {
	arch, ok := f.GetString("general.architecture")
	if !ok {
		return nil, fmt.Errorf("model: missing general.architecture")
	}
	families := map[string]func(*loader, *Model){
		"llama": loadLlama, "qwen2": loadQwen2, "qwen3": loadQwen3, "qwen3moe": loadQwen3MoE,
		"gpt-oss": loadGptOss, "gemma3": loadGemma3, "gemma4": loadGemma4, "mistral3": loadMistral3, "qwen35": loadQwen35,
		"qwen35moe": loadQwen35MoE, "qwen3next": loadQwen3Next, "nemotron_h": loadNemotronH, "nemotron_h_moe": loadNemotronH,
	}
	loadFamily, ok := families[arch]
	if !ok {
		return nil, fmt.Errorf("model: architecture %q is not supported (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss, gemma3, gemma4, mistral3, qwen35, qwen35moe, qwen3next, nemotron_h, nemotron_h_moe)", arch)
	}
	h, err := ReadHyper(f, arch)
	if err != nil {
		return nil, err
	}
	m := &Model{Hyper: h, File: f}
	l := &loader{f: f, supported: supports}
	loadFamily(l, m)
	if l.err != nil {
		return nil, l.err
	}
	return m, nil
}

// loadCommon loads the embeddings, output norm and (possibly tied) output.
func loadCommon(l *loader, m *Model) {
	m.TokEmbd = l.matrix("token_embd.weight", m.NEmbd, m.NVocab, true)
	m.OutputNorm = l.vector("output_norm.weight", m.NEmbd, true)
	m.Output = l.matrix("output.weight", m.NEmbd, m.NVocab, false)
	if m.Output == nil {
		m.Output = m.TokEmbd
	}
	m.Rope = Rope{Dim: m.RopeDim, Base: m.RopeBase, Scale: m.RopeScale, ExtFactor: m.RopeExtFactor,
		AttnFactor: m.RopeAttnFactor, Corr: YarnCorrDims(m.RopeDim, m.NCtxOrig, m.RopeBase, m.YarnBetaFast, m.YarnBetaSlow)}
	m.Layers = make([]Layer, m.NLayer)
}

// loadAttention loads a block's attention norm and projections.
func loadAttention(l *loader, m *Model, i int) {
	L := &m.Layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	L.AttnNorm = l.vector(p+"attn_norm.weight", m.NEmbd, true)
	L.Wq = l.matrix(p+"attn_q.weight", m.NEmbd, m.QDim(), true)
	L.Wk = l.matrix(p+"attn_k.weight", m.NEmbd, m.KDim(), true)
	L.Wv = l.matrix(p+"attn_v.weight", m.NEmbd, m.VDim(), true)
	L.Wo = l.matrix(p+"attn_output.weight", m.NHead*m.HeadDimV, m.NEmbd, true)
}

// loadFFN loads a block's FFN norm and dense SwiGLU weights.
func loadFFN(l *loader, m *Model, i int) {
	L := &m.Layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	L.FFNNorm = l.vector(p+"ffn_norm.weight", m.NEmbd, true)
	nff := m.NFFAt(i)
	L.Gate = l.matrix(p+"ffn_gate.weight", m.NEmbd, nff, true)
	L.Up = l.matrix(p+"ffn_up.weight", m.NEmbd, nff, true)
	L.Down = l.matrix(p+"ffn_down.weight", nff, m.NEmbd, true)
}
