package synth

// qwen35.go: the hybrid Qwen 3.5 dense architecture (llama.cpp's
// LLM_ARCH_QWEN35, as its converter writes Qwen3_5ForCausalLM): keys,
// tensors and presets. Its blocks are either gated delta net layers
// (attn_qkv, attn_gate, ssm_*) or, every FullAttnInterval-th, gated full
// attention (attn_q holding each head's query and output gate); all have
// attn_norm, post_attention_norm and a SwiGLU FFN.

import (
	"fmt"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// HybridSpec is the shape of qwen35's linear-attention layers and of its
// partial, sectioned RoPE. Zero values take Qwen 3.5's: Conv 4,
// FullAttnInterval 4, RopeDim HeadDim/4, RopeSections [11, 11, 10, 0]
// scaled to RopeDim/2 pairs.
type HybridSpec struct {
	Conv             int    // ssm.conv_kernel
	State            int    // ssm.state_size: head dimension of q, k, v
	KHeads           int    // ssm.group_count
	VHeads           int    // ssm.time_step_rank
	FullAttnInterval int    // full_attention_interval
	RopeDim          int    // rope.dimension_count
	RopeSections     [4]int // rope.dimension_sections (none for qwen3next)
	// FusedQKVZ (qwen3next only) writes each delta-net layer's q, k, v
	// and z projections as one ssm_in, as Qwen3-Next's first converter
	// did, instead of attn_qkv and attn_gate.
	FusedQKVZ bool
	// NextN appends that many multi-token-prediction blocks after the
	// NLayer blocks, as the converters of Qwen 3.5 and Qwen3-Next write
	// them (nextn_predict_layers; block_count counts them): each a
	// full-attention block with the family's FFN plus nextn.eh_proj,
	// nextn.enorm, nextn.hnorm and nextn.shared_head_norm. The other
	// tensors are the same as without them (names seed the weights).
	NextN int
	// FusedGateUpExps (qwen35moe, qwen3next) writes each layer's routed
	// gate and up experts as one ffn_gate_up_exps [NEmbd, 2·NFFExp,
	// NExpert] (expert e: its gate's rows, then its up's), as some
	// converters do, holding the very bytes ffn_gate_exps and
	// ffn_up_exps would.
	FusedGateUpExps bool
}

// qwen35Preset returns the qwen35 presets:
//
//   - "qwen35-small": hidden 256, 4 layers (three gated delta net layers,
//     then full attention), 4 heads / 2 KV heads of 64 (16 rotated
//     dimensions), delta net of 2 key heads and 4 value heads of 32 with a
//     4-tap convolution, FFN 768, untied, the built-in vocabulary.
//   - "qwen35-mid": hidden 768, 8 layers (every 4th full attention), 6
//     heads / 2 KV heads of 128 (32 rotated dimensions), delta net of 4
//     key heads and 8 value heads of 64, FFN 2048, the built-in
//     vocabulary: about 56M parameters, whose 2,000-token prompt takes
//     seconds on a CPU (prefix-cache benchmarks).
//   - "qwen3.5-9b": Qwen3.5-9B's shape, as its GGUF metadata gives it
//     (qwen35.*: 32 layers, embedding 4096, FFN 12288, 16 heads / 4 KV
//     heads of 256, rope dimension 64 with sections [11, 11, 10, 0], base
//     1e7, rms eps 1e-6; ssm state 128, conv 4, time_step_rank 32, group
//     count 16, full attention every 4th layer; 8.95B parameters with its
//     248,320-token vocabulary and untied output). Figures: the model's
//     published metadata (e.g. lzwjava.github.io/qwen3-5-9b-hybrid-review-en,
//     "Layers: 32, Embed dim: 4096, FFN: 12288 ... d_state=128, d_conv=4,
//     dt_rank=32, 16 groups, full attention every 4 layers ... freq_base=10M,
//     64 rope dimensions") and paiml's aprender notes (head_dim 256, 16
//     heads, 4 KV heads). NCtx 8192 as the other large presets.
//   - "qwen35-small-mtp": qwen35-small with one multi-token-prediction
//     block after its 4 layers (HybridSpec.NextN 1): its other tensors are
//     qwen35-small's.
func qwen35Preset(name string) Spec {
	if name == "qwen35-small-mtp" {
		s := qwen35Preset("qwen35-small")
		s.Name, s.Hybrid.NextN = "synth-qwen35-small-mtp", 1
		return s
	}
	if name == "qwen35-mid" {
		return Spec{Arch: "qwen35", Name: "synth-qwen35-mid", NCtx: 8192, NEmbd: 768, NLayer: 8, NHead: 6, NHeadKV: 2,
			HeadDim: 128, NFF: 2048, RopeBase: 1e7, RMSEps: 1e-6,
			Hybrid: HybridSpec{Conv: 4, State: 64, KHeads: 4, VHeads: 8, FullAttnInterval: 4, RopeDim: 32, RopeSections: [4]int{6, 5, 5, 0}}}
	}
	if name == "qwen35-small" {
		return Spec{Arch: "qwen35", Name: "synth-qwen35-small", NCtx: 4096, NEmbd: 256, NLayer: 4, NHead: 4, NHeadKV: 2,
			HeadDim: 64, NFF: 768, RopeBase: 1e7, RMSEps: 1e-6,
			Hybrid: HybridSpec{Conv: 4, State: 32, KHeads: 2, VHeads: 4, FullAttnInterval: 4, RopeDim: 16, RopeSections: [4]int{3, 3, 2, 0}}}
	}
	return Spec{Arch: "qwen35", Name: "synth-qwen3.5-9b", NCtx: 8192, NEmbd: 4096, NLayer: 32, NHead: 16, NHeadKV: 4,
		HeadDim: 256, NFF: 12288, RopeBase: 1e7, RMSEps: 1e-6,
		Hybrid: HybridSpec{Conv: 4, State: 128, KHeads: 16, VHeads: 32, FullAttnInterval: 4, RopeDim: 64, RopeSections: [4]int{11, 11, 10, 0}}}
}

// checkHybrid checks and completes s.Hybrid (qwen35, qwen35moe,
// qwen3next).
func (s *Spec) checkHybrid() error {
	h := &s.Hybrid
	if s.Arch != "qwen35" && !hybridMoE(s.Arch) {
		if *h != (HybridSpec{}) {
			return fmt.Errorf("synth: %s is not hybrid; Hybrid must be empty", s.Arch)
		}
		return nil
	}
	if h.Conv == 0 {
		h.Conv = 4
	}
	if h.FullAttnInterval == 0 {
		h.FullAttnInterval = 4
	}
	if h.RopeDim == 0 {
		h.RopeDim = s.HeadDim / 4
	}
	next := s.Arch == "qwen3next" // plain NEOX RoPE: no sections
	if h.RopeSections == [4]int{} && !next {
		p := h.RopeDim / 2 // Qwen 3.5's 11:11:10 split of the pairs
		h.RopeSections = [4]int{p * 11 / 32, p * 11 / 32, p - 2*(p*11/32), 0}
	}
	sum := h.RopeSections[0] + h.RopeSections[1] + h.RopeSections[2] + h.RopeSections[3]
	switch {
	case h.Conv < 2 || h.Conv > 16:
		return fmt.Errorf("synth: qwen35 conv kernel %d must be in [2, 16]", h.Conv)
	case h.State <= 0 || h.KHeads <= 0 || h.VHeads <= 0 || h.VHeads%h.KHeads != 0:
		return fmt.Errorf("synth: qwen35 state %d, key heads %d and value heads %d (a multiple of the key heads) must be positive", h.State, h.KHeads, h.VHeads)
	case h.RopeDim <= 0 || h.RopeDim%2 != 0 || h.RopeDim > s.HeadDim || (next != (sum == 0)) || 2*sum > s.HeadDim:
		return fmt.Errorf("synth: %s rope dimension %d (even, at most the head %d) and sections %v (none for qwen3next)", s.Arch, h.RopeDim, s.HeadDim, h.RopeSections)
	case h.FusedQKVZ && !next:
		return fmt.Errorf("synth: FusedQKVZ (ssm_in) is qwen3next's layout, not %s's", s.Arch)
	case h.NextN < 0 || h.NextN > 4:
		return fmt.Errorf("synth: %s NextN %d must be in [0, 4]", s.Arch, h.NextN)
	case h.FusedGateUpExps && !hybridMoE(s.Arch):
		return fmt.Errorf("synth: FusedGateUpExps (ffn_gate_up_exps) needs routed experts; %s has none", s.Arch)
	case h.FullAttnInterval < 1:
		return fmt.Errorf("synth: qwen35 full attention interval %d", h.FullAttnInterval)
	case s.KOutliers != 0:
		return fmt.Errorf("synth: K outliers are not implemented for qwen35")
	}
	return nil
}

// recurrent reports whether layer il of a qwen35 spec is a delta net layer
// (never an MTP block: llama.cpp's set_recr_pattern marks those
// full attention).
func (s *Spec) recurrent(il int) bool {
	return il < s.NLayer && (il+1)%s.Hybrid.FullAttnInterval != 0
}

// blockCount is block_count: the blocks and the MTP blocks after them.
func (s *Spec) blockCount() int { return s.NLayer + s.Hybrid.NextN }

// setQwen35Metadata writes the hybrid's keys.
func setQwen35Metadata(gw *gguf.Writer, s Spec) {
	a, h := s.Arch+".", s.Hybrid
	u := func(k string, v int) { gw.Set(a+k, gguf.Uint32(uint32(v))) }
	u("ssm.conv_kernel", h.Conv)
	u("ssm.state_size", h.State)
	u("ssm.group_count", h.KHeads)
	u("ssm.time_step_rank", h.VHeads)
	u("ssm.inner_size", h.VHeads*h.State)
	u("full_attention_interval", h.FullAttnInterval)
	if h.NextN > 0 {
		u("nextn_predict_layers", h.NextN)
	}
	u("rope.dimension_count", h.RopeDim)
	if s.Arch == "qwen3next" {
		return
	}
	secs := make([]int32, 4)
	for i, x := range h.RopeSections {
		secs[i] = int32(x)
	}
	gw.Set(a+"rope.dimension_sections", gguf.Int32s(secs))
}

// qwen35Block adds layer i's tensors (sorted later): qwen35's, and
// qwen35moe's and qwen3next's (routed and shared experts; qwen3next's
// fused ssm_ba and, with FusedQKVZ, ssm_in).
func qwen35Block(s Spec, i int, add func(layer int, name string, r role, std float64, dims ...int)) {
	const std = 0.02
	e, h := s.NEmbd, s.Hybrid
	outStd := std // the mixers' output projections (AttnOutStd: routing realism)
	if s.AttnOutStd > 0 {
		outStd = s.AttnOutStd
	}
	add(i, "attn_norm.weight", roleNorm, 0.1, e)
	add(i, "post_attention_norm.weight", roleNorm, 0.1, e)
	if s.recurrent(i) {
		kd, vd := h.KHeads*h.State, h.VHeads*h.State
		switch {
		case h.FusedQKVZ:
			add(i, "ssm_in.weight", roleWeight, std, e, 2*kd+2*vd)
		default:
			add(i, "attn_qkv.weight", roleWeight, std, e, 2*kd+vd)
			add(i, "attn_gate.weight", roleWeight, std, e, vd)
		}
		add(i, "ssm_conv1d.weight", roleBias, 0.3, h.Conv, 2*kd+vd) // F32: llama-quantize keeps it
		add(i, "ssm_dt.bias", roleBias, 0.5, h.VHeads)
		add(i, "ssm_a", roleNegNorm, 0.1, h.VHeads)
		if s.Arch == "qwen3next" {
			add(i, "ssm_ba.weight", roleWeight, 0.08, e, 2*h.VHeads)
		} else {
			add(i, "ssm_beta.weight", roleWeight, 0.08, e, h.VHeads)
			add(i, "ssm_alpha.weight", roleWeight, 0.08, e, h.VHeads)
		}
		add(i, "ssm_norm.weight", roleNorm, 0.1, h.State)
		add(i, "ssm_out.weight", roleWeight, outStd, vd, e)
	} else {
		qDim, kvDim := s.NHead*s.HeadDim, s.NHeadKV*s.HeadDim
		add(i, "attn_q.weight", roleWeight, std, e, 2*qDim)
		add(i, "attn_k.weight", roleWeight, std, e, kvDim)
		add(i, "attn_v.weight", roleWeight, std, e, kvDim)
		add(i, "attn_output.weight", roleWeight, outStd, qDim, e)
		add(i, "attn_q_norm.weight", roleNorm, 0.1, s.HeadDim)
		add(i, "attn_k_norm.weight", roleNorm, 0.1, s.HeadDim)
	}
	if i >= s.NLayer { // an MTP block's own tensors (llama.cpp's load_block_mtp)
		add(i, "nextn.eh_proj.weight", roleWeight, std, 2*e, e)
		add(i, "nextn.enorm.weight", roleNorm, 0.1, e)
		add(i, "nextn.hnorm.weight", roleNorm, 0.1, e)
		add(i, "nextn.shared_head_norm.weight", roleNorm, 0.1, e)
	}
	if s.NExpert > 0 {
		hybridMoEFFN(s, i, add) // qwen35moe.go
		return
	}
	add(i, "ffn_gate.weight", roleWeight, std, e, s.NFF)
	add(i, "ffn_up.weight", roleWeight, std, e, s.NFF)
	add(i, "ffn_down.weight", roleWeight, std, s.NFF, e)
}
