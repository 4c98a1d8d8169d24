package synth

// qwen35moe.go: the hybrid MoE architectures, Qwen 3.5's (llama.cpp's
// LLM_ARCH_QWEN35MOE) and Qwen3-Next's (LLM_ARCH_QWEN3NEXT): qwen35's
// blocks (qwen35.go) with routed experts and a gated shared expert in
// place of the dense FFN, and for qwen3next plain NEOX RoPE, a fused
// ssm_ba and optionally a fused ssm_in (HybridSpec.FusedQKVZ).

import "fmt"

// hybridMoE reports whether arch is one of the hybrid MoE architectures.
func hybridMoE(arch string) bool { return arch == "qwen35moe" || arch == "qwen3next" }

// hybridMoEPreset returns the presets of the hybrid MoE architectures:
//
//   - "qwen35moe-small": hidden 256, 4 layers (three gated delta net
//     layers, then full attention), 4 heads / 2 KV heads of 64 (16 rotated
//     dimensions, sections [3, 3, 2, 0], base 1e7), delta net of 2 key
//     heads and 4 value heads of 32 with a 4-tap convolution, 16 experts
//     of width 256 with 4 used plus a shared expert of width 256, untied,
//     the built-in vocabulary.
//   - "qwen3next-small": the same shape as qwen3next (NEOX RoPE over 16
//     dimensions, no sections; feed_forward_length 768 written; ssm_in
//     fused as Qwen3-Next's first converter wrote it).
//   - "qwen3.5-35b-a3b": Qwen3.5-35B-A3B's text model, from its
//     config.json (huggingface.co/Qwen/Qwen3.5-35B-A3B, config.json, as
//     quoted in public test fixtures): hidden 2048, 40 layers (full
//     attention every 4th), 16 heads / 2 KV heads of 256, partial rotary
//     0.25 (64 dimensions) with mrope sections [11, 11, 10], rope theta
//     1e7, rms eps 1e-6; linear attention 16 key heads / 32 value heads of
//     128, conv kernel 4; 256 experts of width 512, 8 used, a shared
//     expert of 512; vocabulary 248,320, untied. No feed_forward_length
//     (its config has no intermediate_size).
//   - "qwen3.5-122b-a10b": Qwen3.5-122B-A10B's (its config.json as
//     summarized by public notes citing it: hidden 3072, 48 layers (36
//     delta net + 12 full attention), 32 heads / 2 KV heads of 256, linear
//     attention 16 key heads / 64 value heads of 128, 256 experts of 1024,
//     8 used, shared expert 1024). Estimated, not read from the config:
//     conv kernel 4, rope theta 1e7, partial rotary 0.25, sections [11,
//     11, 10] and rms eps 1e-6, all as the 35B and the rest of the family.
//   - "qwen3-next-80b-a3b": Qwen3-Next-80B-A3B's (huggingface.co/Qwen/
//     Qwen3-Next-80B-A3B-Instruct config.json, as Megatron launch scripts
//     and the Qwen3-Coder-Next config quote it): hidden 2048, 48 layers
//     (full attention every 4th), 16 heads / 2 KV heads of 256, partial
//     rotary 0.25 (64 dimensions), rope theta 1e7, rms eps 1e-6;
//     intermediate_size 5120; linear attention 16 key heads / 32 value
//     heads of 128, conv kernel 4; 512 experts of 512, 10 used, a shared
//     expert of 512; vocabulary 151,936, untied. Written with attn_qkv
//     and attn_gate (llama.cpp's current layout; ssm_in is its "legacy").
//   - "qwen35moe-small-mtp-fused": qwen35moe-small with one
//     multi-token-prediction block (HybridSpec.NextN 1) and its routed
//     gate and up experts fused (FusedGateUpExps), the same bytes.
//
// The large presets take qwen3-30b-a3b's router realism (RouterSigma 0.25,
// EmbdStd 1, AttnOutStd 0.006 on the mixers' output projections): skewed
// expert popularity, choices that vary from token to token but correlate.
// Their NCtx is 8192 as the other large presets', and NVocab follows the
// vocabulary given to the generator.
func hybridMoEPreset(name string) Spec {
	small := Spec{NCtx: 4096, NEmbd: 256, NLayer: 4, NHead: 4, NHeadKV: 2, HeadDim: 64, NExpert: 16, NExpertUsed: 4,
		NFFExp: 256, NFFShexp: 256, RopeBase: 1e7, RMSEps: 1e-6,
		Hybrid: HybridSpec{Conv: 4, State: 32, KHeads: 2, VHeads: 4, FullAttnInterval: 4, RopeDim: 16, RopeSections: [4]int{3, 3, 2, 0}}}
	real := func(s Spec) Spec {
		s.NCtx, s.HeadDim, s.RopeBase, s.RMSEps = 8192, 256, 1e7, 1e-6
		s.RouterSigma, s.EmbdStd, s.AttnOutStd = 0.25, 1, 0.006
		return s
	}
	switch name {
	case "qwen35moe-small":
		small.Arch, small.Name = "qwen35moe", "synth-qwen35moe-small"
		return small
	case "qwen35moe-small-mtp-fused":
		small.Arch, small.Name = "qwen35moe", "synth-qwen35moe-small-mtp-fused"
		small.Hybrid.NextN, small.Hybrid.FusedGateUpExps = 1, true
		return small
	case "qwen3next-small":
		small.Arch, small.Name, small.NFF = "qwen3next", "synth-qwen3next-small", 768
		small.Hybrid.RopeSections, small.Hybrid.FusedQKVZ = [4]int{}, true
		return small
	case "qwen3.5-35b-a3b":
		return real(Spec{Arch: "qwen35moe", Name: "synth-qwen3.5-35b-a3b", NEmbd: 2048, NLayer: 40, NHead: 16, NHeadKV: 2,
			NExpert: 256, NExpertUsed: 8, NFFExp: 512, NFFShexp: 512,
			Hybrid: HybridSpec{Conv: 4, State: 128, KHeads: 16, VHeads: 32, FullAttnInterval: 4, RopeDim: 64, RopeSections: [4]int{11, 11, 10, 0}}})
	case "qwen3.5-122b-a10b":
		return real(Spec{Arch: "qwen35moe", Name: "synth-qwen3.5-122b-a10b", NEmbd: 3072, NLayer: 48, NHead: 32, NHeadKV: 2,
			NExpert: 256, NExpertUsed: 8, NFFExp: 1024, NFFShexp: 1024,
			Hybrid: HybridSpec{Conv: 4, State: 128, KHeads: 16, VHeads: 64, FullAttnInterval: 4, RopeDim: 64, RopeSections: [4]int{11, 11, 10, 0}}})
	default: // "qwen3-next-80b-a3b"
		return real(Spec{Arch: "qwen3next", Name: "synth-qwen3-next-80b-a3b", NEmbd: 2048, NLayer: 48, NHead: 16, NHeadKV: 2,
			NFF: 5120, NExpert: 512, NExpertUsed: 10, NFFExp: 512, NFFShexp: 512,
			Hybrid: HybridSpec{Conv: 4, State: 128, KHeads: 16, VHeads: 32, FullAttnInterval: 4, RopeDim: 64}})
	}
}

// checkSharedExpert checks NFFShexp: only the hybrid MoE architectures
// have a shared expert, and theirs needs a width (NFFShexp, else NFF as
// llama.cpp's default).
func (s *Spec) checkSharedExpert() error {
	if !hybridMoE(s.Arch) {
		if s.NFFShexp != 0 {
			return fmt.Errorf("synth: %s has no shared expert; NFFShexp must be 0", s.Arch)
		}
		return nil
	}
	if s.NFFShexp == 0 && s.NFF == 0 {
		return fmt.Errorf("synth: %s needs the shared expert's width (NFFShexp, or NFF)", s.Arch)
	}
	return nil
}

// hybridMoEFFN adds layer i's routed experts, shared expert and its gate.
func hybridMoEFFN(s Spec, i int, add func(layer int, name string, r role, std float64, dims ...int)) {
	const std = 0.02
	e, fs := s.NEmbd, s.NFFShexp
	if fs == 0 {
		fs = s.NFF
	}
	add(i, "ffn_gate_inp.weight", roleRouter, std, e, s.NExpert)
	if s.Hybrid.FusedGateUpExps { // the bytes of the two below, expert by expert (stream.go)
		add(i, fusedGateUp, roleWeight, std, e, 2*s.NFFExp, s.NExpert)
	} else {
		add(i, "ffn_gate_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
		add(i, "ffn_up_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
	}
	add(i, "ffn_down_exps.weight", roleWeight, std, s.NFFExp, e, s.NExpert)
	add(i, "ffn_gate_inp_shexp.weight", roleBias, 0.5, e) // 1-D: F32 in every mixture
	add(i, "ffn_gate_shexp.weight", roleWeight, std, e, fs)
	add(i, "ffn_up_shexp.weight", roleWeight, std, e, fs)
	add(i, "ffn_down_shexp.weight", roleWeight, std, fs, e)
}
