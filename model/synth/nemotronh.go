package synth

// nemotronh.go: NVIDIA's Nemotron-H hybrids (llama.cpp's LLM_ARCH_NEMOTRON_H
// and LLM_ARCH_NEMOTRON_H_MOE): keys, tensors and presets. A layer is a
// Mamba-2 mixer (ssm_*), attention without RoPE (attn_q/k/v/output), a
// dense squared-ReLU FFN (ffn_up, ffn_down) or, in nemotron_h_moe, a
// sigmoid-routed MoE of ungated experts with a shared expert; each has
// only attn_norm. Which is which is written as llama.cpp's loader reads
// it: per-layer attention.head_count_kv and feed_forward_length arrays
// (both 0: Mamba-2; feed_forward_length 0: attention; else FFN).

import (
	"fmt"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// NemotronSpec is the shape of a Nemotron-H model beyond Spec's attention
// and FFN fields.
type NemotronSpec struct {
	// Pattern has one letter per layer, as the model's
	// hybrid_override_pattern: M Mamba-2, * attention, - dense FFN, E MoE.
	Pattern string
	Conv    int // ssm.conv_kernel
	State   int // ssm.state_size (B and C per group)
	Groups  int // ssm.group_count
	Heads   int // ssm.time_step_rank: Mamba heads
	HeadDim int // Mamba head dimension: ssm.inner_size = Heads·HeadDim
	// The MoE's shared expert width, expert_weights_scale and
	// expert_weights_norm.
	NFFShExp int
	ExpScale float32
	NormTopK bool
}

// before counts the layers of kind c (a pattern letter) before layer il:
// llama-quantize's running count of a tensor kind that only some layers
// have.
func (n *NemotronSpec) before(c byte, il int) int {
	return strings.Count(n.Pattern[:il], string(c))
}

func isNemotron(arch string) bool { return arch == "nemotron_h" || arch == "nemotron_h_moe" }

// nemotronPresets are the preset names of this file.
var nemotronPresets = []string{"nemotronh-small", "nemotronh-moe-small", "nemotron-3-nano-30b-a3b"}

// nemotronPreset returns the Nemotron-H presets:
//
//   - "nemotronh-small": nemotron_h, hidden 256, 6 layers "M-M*M-"
//     (three Mamba-2, one attention, two FFN), 4 heads / 2 KV heads of 64,
//     FFN 512, Mamba-2 of 8 heads of 32 (inner 256), state 16, 2 groups,
//     4-tap convolution, untied, the built-in vocabulary.
//   - "nemotronh-moe-small": nemotron_h_moe, hidden 256, 8 layers
//     "MEM*EMEM", attention as above, 16 experts of width 256 with 4 used,
//     a shared expert of 512, renormalised weights scaled by 2.5, Mamba-2
//     as above.
//   - "nemotron-3-nano-30b-a3b": Nemotron 3 Nano 30B-A3B's shape, every
//     figure from the model's published config.json
//     (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 on Hugging Face):
//     hidden_size 2688, 52 layers with hybrid_override_pattern
//     "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME" (23 Mamba-2,
//     23 MoE, 6 attention), num_attention_heads 32, num_key_value_heads
//     2, head_dim 128, mamba_num_heads 64 of mamba_head_dim 64,
//     ssm_state_size 128, n_groups 8, conv_kernel 4, n_routed_experts
//     128, num_experts_per_tok 6, moe_intermediate_size 1856,
//     moe_shared_expert_intermediate_size 3712, norm_topk_prob true,
//     routed_scaling_factor 2.5, n_group 1 (no grouped selection),
//     layer_norm_epsilon 1e-5, tie_word_embeddings false (vocab_size
//     131072: use gen --vocab for it). NCtx 8192 as the other large
//     presets (the model's max_position_embeddings is 262144). The
//     router is the qwen3-30b-a3b preset's skewed, correlated one
//     (RouterSigma 0.25, EmbdStd 1, AttnOutStd 0.006): those figures
//     were measured on the qwen3moe shape, not on this one (estimated).
func nemotronPreset(name string) (Spec, bool) {
	switch name {
	case "nemotronh-small":
		return Spec{Arch: "nemotron_h", Name: "synth-nemotronh-small", NCtx: 4096, NEmbd: 256, NLayer: 6, NHead: 4,
			NHeadKV: 2, HeadDim: 64, NFF: 512, RMSEps: 1e-5,
			Nemotron: NemotronSpec{Pattern: "M-M*M-", Conv: 4, State: 16, Groups: 2, Heads: 8, HeadDim: 32}}, true
	case "nemotronh-moe-small":
		return Spec{Arch: "nemotron_h_moe", Name: "synth-nemotronh-moe-small", NCtx: 4096, NEmbd: 256, NLayer: 8, NHead: 4,
			NHeadKV: 2, HeadDim: 64, NFF: 256, NExpert: 16, NExpertUsed: 4, NFFExp: 256, RMSEps: 1e-5,
			Nemotron: NemotronSpec{Pattern: "MEM*EMEM", Conv: 4, State: 16, Groups: 2, Heads: 8, HeadDim: 32,
				NFFShExp: 512, ExpScale: 2.5, NormTopK: true}}, true
	case "nemotron-3-nano-30b-a3b":
		return Spec{Arch: "nemotron_h_moe", Name: "synth-nemotron-3-nano-30b-a3b", NCtx: 8192, NEmbd: 2688, NLayer: 52,
			NHead: 32, NHeadKV: 2, HeadDim: 128, NFF: 1856, NExpert: 128, NExpertUsed: 6, NFFExp: 1856, RMSEps: 1e-5,
			RouterSigma: 0.25, EmbdStd: 1, AttnOutStd: 0.006,
			Nemotron: NemotronSpec{Pattern: "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", Conv: 4, State: 128,
				Groups: 8, Heads: 64, HeadDim: 64, NFFShExp: 3712, ExpScale: 2.5, NormTopK: true}}, true
	}
	return Spec{}, false
}

// checkNemotron checks s.Nemotron (empty unless the architecture is
// Nemotron-H).
func (s *Spec) checkNemotron() error {
	n := &s.Nemotron
	if !isNemotron(s.Arch) {
		if n.Pattern != "" || *n != (NemotronSpec{}) {
			return fmt.Errorf("synth: %s is not Nemotron-H; Nemotron must be empty", s.Arch)
		}
		return nil
	}
	if len(n.Pattern) != s.NLayer {
		return fmt.Errorf("synth: %s pattern %q has %d layers, NLayer is %d", s.Arch, n.Pattern, len(n.Pattern), s.NLayer)
	}
	moe := s.Arch == "nemotron_h_moe"
	for i, c := range n.Pattern {
		switch {
		case c == 'M' || c == '*':
		case c == '-' && !moe, c == 'E' && moe:
		default:
			return fmt.Errorf("synth: %s pattern %q: layer %d is %q (want M, *, and %s)", s.Arch, n.Pattern, i, c, map[bool]string{false: "-", true: "E"}[moe])
		}
	}
	switch {
	case n.Conv < 2 || n.Conv > 16:
		return fmt.Errorf("synth: %s conv kernel %d must be in [2, 16]", s.Arch, n.Conv)
	case n.State <= 0 || n.Groups <= 0 || n.Heads <= 0 || n.HeadDim <= 0 || n.Heads%n.Groups != 0:
		return fmt.Errorf("synth: %s state %d, groups %d, heads %d (a multiple of the groups) and head dim %d must be positive", s.Arch, n.State, n.Groups, n.Heads, n.HeadDim)
	case moe && n.NFFShExp <= 0:
		return fmt.Errorf("synth: nemotron_h_moe needs a shared expert width")
	case !moe && (n.NFFShExp != 0 || n.ExpScale != 0 || n.NormTopK):
		return fmt.Errorf("synth: nemotron_h has no experts; NFFShExp, ExpScale and NormTopK must be zero")
	case s.KOutliers != 0:
		return fmt.Errorf("synth: K outliers are not implemented for %s", s.Arch)
	}
	return nil
}

// setNemotronMetadata writes the family's keys, the per-layer arrays
// replacing the scalar head_count_kv and feed_forward_length.
func setNemotronMetadata(gw *gguf.Writer, s Spec) {
	a, n := s.Arch+".", s.Nemotron
	u := func(k string, v int) { gw.Set(a+k, gguf.Uint32(uint32(v))) }
	kv, ff := make([]int32, s.NLayer), make([]int32, s.NLayer)
	for i, c := range n.Pattern {
		switch c {
		case '*':
			kv[i] = int32(s.NHeadKV)
		case '-':
			ff[i] = int32(s.NFF)
		case 'E':
			ff[i] = int32(s.NFFExp)
		}
	}
	gw.Set(a+"attention.head_count_kv", gguf.Int32s(kv))
	gw.Set(a+"feed_forward_length", gguf.Int32s(ff))
	u("ssm.conv_kernel", n.Conv)
	u("ssm.state_size", n.State)
	u("ssm.group_count", n.Groups)
	u("ssm.time_step_rank", n.Heads)
	u("ssm.inner_size", n.Heads*n.HeadDim)
	if s.Arch == "nemotron_h_moe" {
		u("expert_shared_feed_forward_length", n.NFFShExp)
		u("expert_shared_count", 1)
		gw.Set(a+"expert_weights_scale", gguf.Float32(n.ExpScale))
		gw.Set(a+"expert_weights_norm", gguf.Bool(n.NormTopK))
	}
}

// nemotronBlock adds layer i's tensors (sorted later).
func nemotronBlock(s Spec, i int, add func(layer int, name string, r role, std float64, dims ...int), attnOutStd float64) {
	const std = 0.02
	e, n := s.NEmbd, s.Nemotron
	add(i, "attn_norm.weight", roleNorm, 0.1, e)
	switch n.Pattern[i] {
	case 'M':
		inner := n.Heads * n.HeadDim
		cd := inner + 2*n.Groups*n.State
		add(i, "ssm_in.weight", roleWeight, std, e, inner+cd+n.Heads)
		add(i, "ssm_conv1d.weight", roleBias, 0.3, n.Conv, cd) // F32: llama-quantize keeps it
		add(i, "ssm_conv1d.bias", roleBias, 0.1, cd)
		add(i, "ssm_dt.bias", roleBias, 0.5, n.Heads)
		add(i, "ssm_a", roleNegNorm, 0.1, 1, n.Heads)
		add(i, "ssm_d", roleNorm, 0.1, 1, n.Heads)
		add(i, "ssm_norm.weight", roleNorm, 0.1, inner/n.Groups, n.Groups)
		add(i, "ssm_out.weight", roleWeight, std, inner, e)
	case '*':
		qDim, kvDim := s.NHead*s.HeadDim, s.NHeadKV*s.HeadDim
		add(i, "attn_q.weight", roleWeight, 0.08, e, qDim) // as the golden models: attention not near-uniform
		add(i, "attn_k.weight", roleWeight, 0.08, e, kvDim)
		add(i, "attn_v.weight", roleWeight, std, e, kvDim)
		add(i, "attn_output.weight", roleWeight, attnOutStd, qDim, e)
	case '-':
		add(i, "ffn_up.weight", roleWeight, std, e, s.NFF)
		add(i, "ffn_down.weight", roleWeight, std, s.NFF, e)
	case 'E':
		add(i, "ffn_gate_inp.weight", roleRouter, std, e, s.NExpert)
		add(i, "exp_probs_b.bias", roleBias, 0.1, s.NExpert)
		add(i, "ffn_up_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
		add(i, "ffn_down_exps.weight", roleWeight, std, s.NFFExp, e, s.NExpert)
		add(i, "ffn_up_shexp.weight", roleWeight, std, e, n.NFFShExp)
		add(i, "ffn_down_shexp.weight", roleWeight, std, n.NFFShExp, e)
	}
}
