// gptoss.go: gpt-oss files (general.architecture "gpt-oss"), as llama.cpp's
// convert_hf_to_gguf.py writes GptOssForCausalLM: the routed experts in
// MXFP4 (the checkpoint's own format, repacked), everything else in the
// output type; biases on q, k, v, the attention output, the router and
// every expert's gate, up and down; attn_sinks; post_attention_norm as the
// FFN's norm; the keys attention.sliding_window,
// expert_feed_forward_length, attention.key_length/value_length (head_dim)
// and YaRN's rope.scaling.{type,factor,original_context_length}. The
// harmony tokenizer is not reproduced: the vocabulary is the caller's
// (Options.Vocab) or the built-in one.

package synth

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/quant"
)

// gptOssPreset returns the gpt-oss presets.
//
// gpt-oss-20b and gpt-oss-120b follow the published config.json files
// (huggingface.co/openai/gpt-oss-20b and openai/gpt-oss-120b, config.json;
// transformers' GptOssConfig defaults are the 120b's): hidden_size 2880,
// num_hidden_layers 24 / 36, num_attention_heads 64, num_key_value_heads
// 8, head_dim 64, num_local_experts 32 / 128, num_experts_per_tok 4,
// intermediate_size 2880, sliding_window 128 with layer_types alternating
// sliding and full from layer 0, rope_theta 150000, rope_scaling {yarn,
// factor 32, original_max_position_embeddings 4096, beta_fast 32,
// beta_slow 1}, rms_norm_eps 1e-5, tie_word_embeddings false. As the other
// large presets they set NCtx 8192 (the real context_length is 131072) and
// leave the vocabulary (201,088 tokens in the real files) to the caller.
// Their routing follows qwen3-30b-a3b's realism settings.
//
// gpt-oss-small is for goldens: hidden 256, 4 layers (two sliding, two
// full), 8 heads / 2 KV heads of 64, 16 experts of width 256 with 4 used,
// the same window, RoPE and YaRN as the real models.
func gptOssPreset(name string) (Spec, bool) {
	s := Spec{Arch: "gpt-oss", NCtx: 8192, NEmbd: 2880, NHead: 64, NHeadKV: 8, HeadDim: 64, NFF: 2880, NExpertUsed: 4,
		NFFExp: 2880, RopeBase: 150000, RMSEps: 1e-5, SlidingWindow: 128, RopeScaling: "yarn", RopeFactor: 32,
		RopeOrigCtx: 4096, RouterSigma: 0.25, EmbdStd: 1, AttnOutStd: 0.006}
	switch name {
	case "gpt-oss-20b":
		s.Name, s.NLayer, s.NExpert = "synth-gpt-oss-20b", 24, 32
	case "gpt-oss-120b":
		s.Name, s.NLayer, s.NExpert = "synth-gpt-oss-120b", 36, 128
	case "gpt-oss-small":
		s.Name, s.NEmbd, s.NLayer, s.NHead, s.NHeadKV, s.NFF, s.NExpert, s.NFFExp =
			"synth-gpt-oss-small", 256, 4, 8, 2, 256, 16, 256
	default:
		return Spec{}, false
	}
	return s, true
}

// gptOssPresets are the names gptOssPreset knows.
var gptOssPresets = []string{"gpt-oss-small", "gpt-oss-20b", "gpt-oss-120b"}

// checkGptOss checks the gpt-oss-only fields of a normalized spec.
func (s Spec) checkGptOss() error {
	if s.Arch != "gpt-oss" {
		if s.Arch == "gemma3" || s.Arch == "gemma4" { // gemma3.go, gemma4.go: 0 (every layer global) or a window
			if s.SlidingWindow < 0 || s.SlidingWindow > maxDim {
				return fmt.Errorf("synth: %s's SlidingWindow %d is out of range [0, %d]", s.Arch, s.SlidingWindow, maxDim)
			}
			return nil
		}
		if s.SlidingWindow != 0 {
			return fmt.Errorf("synth: %s has no sliding window; SlidingWindow must be 0", s.Arch)
		}
		return nil
	}
	switch {
	case s.SlidingWindow <= 0 || s.SlidingWindow > maxDim:
		return fmt.Errorf("synth: gpt-oss needs SlidingWindow in [1, %d] (have %d)", maxDim, s.SlidingWindow)
	case s.Tied:
		return fmt.Errorf("synth: gpt-oss has an output.weight; Tied must be false")
	case s.KOutliers != 0:
		return fmt.Errorf("synth: gpt-oss has no K norm to plant outliers in")
	case s.NEmbd%quant.MXFP4.BlockSize() != 0 || s.NFFExp%quant.MXFP4.BlockSize() != 0:
		return fmt.Errorf("synth: gpt-oss's MXFP4 experts need NEmbd %d and NFFExp %d to be multiples of %d", s.NEmbd, s.NFFExp, quant.MXFP4.BlockSize())
	}
	return nil
}

// gpt-oss's bias scales. The experts' gate and up biases are wide (std 3)
// so that some activations pass SwiGLU-OAI's clamp at ±7, which a golden
// must exercise; the sinks are logits of the size of the attention scores.
const (
	gptOssBiasStd    = 0.1
	gptOssExpBiasStd = 3
	gptOssSinkStd    = 1
)

// gptOssTensors returns a gpt-oss model's tensors in llama-quantize's
// order (tensorList's).
func gptOssTensors(s Spec) []Tensor {
	var ts []Tensor
	add := func(layer int, name string, r role, std float64, dims ...int) {
		d := make([]uint64, len(dims))
		for i, x := range dims {
			d[i] = uint64(x)
		}
		if layer >= 0 {
			name = "blk." + strconv.Itoa(layer) + "." + name
		}
		ts = append(ts, Tensor{Name: name, Dims: d, role: r, std: std, layer: layer})
	}
	const std = 0.02
	e, v, f, n := s.NEmbd, s.NVocab, s.NFFExp, s.NExpert
	qDim, kvDim := s.NHead*s.HeadDim, s.NHeadKV*s.HeadDim
	embdStd, attnOutStd := std, std
	if s.EmbdStd > 0 {
		embdStd = s.EmbdStd
	}
	if s.AttnOutStd > 0 {
		attnOutStd = s.AttnOutStd
	}
	add(-1, "token_embd.weight", roleWeight, embdStd, e, v)
	add(-1, "output_norm.weight", roleNorm, 0.1, e)
	add(-1, "output.weight", roleWeight, std, e, v)
	for i := range s.NLayer {
		add(i, "attn_norm.weight", roleNorm, 0.1, e)
		add(i, "attn_q.weight", roleWeight, std, e, qDim)
		add(i, "attn_q.bias", roleBias, gptOssBiasStd, qDim)
		add(i, "attn_k.weight", roleWeight, std, e, kvDim)
		add(i, "attn_k.bias", roleBias, gptOssBiasStd, kvDim)
		add(i, "attn_v.weight", roleWeight, std, e, kvDim)
		add(i, "attn_v.bias", roleBias, gptOssBiasStd, kvDim)
		add(i, "attn_output.weight", roleWeight, attnOutStd, qDim, e)
		add(i, "attn_output.bias", roleBias, gptOssBiasStd, e)
		add(i, "attn_sinks.weight", roleBias, gptOssSinkStd, s.NHead)
		add(i, "post_attention_norm.weight", roleNorm, 0.1, e)
		add(i, "ffn_gate_inp.weight", roleRouter, std, e, n)
		ts[len(ts)-1].sigma = s.RouterSigma
		add(i, "ffn_gate_inp.bias", roleBias, gptOssBiasStd, n)
		add(i, "ffn_gate_exps.weight", roleWeight, std, e, f, n)
		add(i, "ffn_gate_exps.bias", roleBias, gptOssExpBiasStd, f, n)
		add(i, "ffn_up_exps.weight", roleWeight, std, e, f, n)
		add(i, "ffn_up_exps.bias", roleBias, gptOssExpBiasStd, f, n)
		add(i, "ffn_down_exps.weight", roleWeight, std, f, e, n)
		add(i, "ffn_down_exps.bias", roleBias, gptOssBiasStd, e, n)
	}
	slices.SortStableFunc(ts, func(a, b Tensor) int {
		if a.layer != b.layer {
			return a.layer - b.layer
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ts
}

// gptOssType is the type of a gpt-oss weight t, or false to use the
// general rules: the routed experts are MXFP4 whatever the output type.
func gptOssType(s Spec, t *Tensor) (quant.Type, bool) {
	if s.Arch == "gpt-oss" && t.role == roleWeight && len(t.Dims) == 3 {
		return quant.MXFP4, true
	}
	return 0, false
}

// gptOssFileType is a gpt-oss file's general.file_type: with Q8_0 for
// every other weight the file is what llama-quantize's MXFP4_MOE writes
// (LLAMA_FTYPE_MOSTLY_MXFP4_MOE, 38); otherwise the output type's.
func gptOssFileType(s Spec, o Options, ftype uint32) (uint32, error) {
	if s.Arch != "gpt-oss" {
		return ftype, nil
	}
	if o.Mix != "" {
		return 0, fmt.Errorf("synth: gpt-oss: llama-quantize's %s rules are not implemented; gpt-oss files have MXFP4 experts and one type (--pure --type) for the other weights", o.Mix)
	}
	if o.Type == quant.Q8_0 {
		return 38, nil
	}
	return ftype, nil
}
