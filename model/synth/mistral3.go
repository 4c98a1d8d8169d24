package synth

// mistral3.go: the mistral3 architecture (Ministral 3, Mistral Small 3.x
// text models). Its tensors are llama's; its metadata is what llama.cpp's
// convert_hf_to_gguf.py writes for a Ministral3ForCausalLM /
// Mistral3ForConditionalGeneration text model: LlamaModel's keys
// (rope.dimension_count, and key_length/value_length when head_dim is not
// hidden/heads), the YaRN keys of rope_parameters (type, factor,
// original_context_length, yarn_beta_fast, yarn_beta_slow), and
// Ministral3Model's rope.scaling.yarn_log_multiplier (mscale_all_dim) and
// attention.temperature_scale (llama_4_scaling_beta).

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// mistral3Preset returns the mistral3 presets:
//
//   - "mistral3-small": a small mistral3 for goldens: hidden 256, 4 layers,
//     8 heads / 2 KV heads of 64 (the q projection 2x hidden, as Ministral
//     3's 4096 against 5120), FFN 768, untied, rope base 1e6, rms eps 1e-5,
//     the built-in 1024-token vocabulary; YaRN factor 16 over an original
//     context of 256 (context_length 4096) with ramp bounds 16 and 2 and a
//     log multiplier of 0.5 (not the real models' 32, 1 and 1, so that a
//     file reading them wrong is caught), and attention temperature 0.1,
//     which steps every 256 positions: a 1,500-token prompt reaches
//     factors up to 1 + 0.1·ln 6.
//   - "ministral-3-14b": Ministral 3 14B's text model (see below).
func mistral3Preset(name string) (Spec, bool) {
	switch name {
	case "mistral3-small":
		return Spec{Arch: "mistral3", Name: "synth-mistral3-small", NCtx: 4096, NEmbd: 256, NLayer: 4, NHead: 8, NHeadKV: 2,
			HeadDim: 64, NFF: 768, RopeBase: 1e6, RMSEps: 1e-5,
			RopeScaling: "yarn", RopeFactor: 16, RopeOrigCtx: 256, YarnBetaFast: 16, YarnBetaSlow: 2, YarnLogMul: 0.5,
			AttnTempScale: 0.1}, true
	case "ministral-3-14b":
		// Ministral 3 14B (mistralai/Ministral-3-14B-Instruct-2512, whose
		// text_config has model_type ministral3). The shape: hidden 5120,
		// 40 layers, 32 heads / 8 KV heads, head_dim 128, intermediate
		// 16384, vocabulary 131072, untied (13,506,073,600 text
		// parameters), as listed from the model's config.json in public
		// model tables (found with the search tool; e.g. the kleos_models
		// KNOWN_SHAPES entry for "mistralai/Ministral-3-14B-Instruct-2512-BF16",
		// config.json @ 3cea74c1) and the model card (13.5B language
		// model, 256K context); rope_theta 1e9 from apxml.com's
		// specification page. The YaRN and temperature figures (factor 16
		// over 16384, beta_fast 32, beta_slow 1, mscale_all_dim 1,
		// llama_4_scaling_beta 0.1) are those of the published Ministral 3
		// 8B config.json and of transformers' Ministral3Config defaults:
		// the 14B's own rope_parameters could not be found and are
		// assumed equal. rms eps 1e-5 as every Ministral 3 config.
		// context_length is 8192 as the other large presets (the real
		// files say 262144); the temperature therefore stays 1 within it.
		return Spec{Arch: "mistral3", Name: "synth-ministral-3-14b", NCtx: 8192, NEmbd: 5120, NLayer: 40, NHead: 32,
			NHeadKV: 8, HeadDim: 128, NFF: 16384, RopeBase: 1e9, RMSEps: 1e-5,
			RopeScaling: "yarn", RopeFactor: 16, RopeOrigCtx: 16384, YarnBetaFast: 32, YarnBetaSlow: 1, YarnLogMul: 1,
			AttnTempScale: 0.1}, true
	}
	return Spec{}, false
}

// mistral3Presets are the names mistral3Preset knows.
var mistral3Presets = []string{"mistral3-small", "ministral-3-14b"}

// checkMistral3 checks the fields only mistral3 writes: the YaRN ramp
// bounds and log multiplier (with RopeScaling yarn) and the attention
// temperature (which llama.cpp steps at the original context).
func (s Spec) checkMistral3() error {
	set := s.YarnBetaFast != 0 || s.YarnBetaSlow != 0 || s.YarnLogMul != 0 || s.AttnTempScale != 0
	if s.Arch != "mistral3" {
		if set {
			return fmt.Errorf("synth: YarnBetaFast, YarnBetaSlow, YarnLogMul and AttnTempScale are mistral3 keys; %s has none", s.Arch)
		}
		return nil
	}
	finite := func(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
	switch {
	case (s.YarnBetaFast != 0 || s.YarnBetaSlow != 0 || s.YarnLogMul != 0) && s.RopeScaling != "yarn":
		return fmt.Errorf("synth: the YaRN ramp bounds and log multiplier need RopeScaling yarn")
	case s.YarnBetaFast < 0 || s.YarnBetaSlow < 0 || s.YarnLogMul < 0 || !finite(s.YarnBetaFast) || !finite(s.YarnBetaSlow) || !finite(s.YarnLogMul):
		return fmt.Errorf("synth: YaRN beta_fast %g, beta_slow %g and log multiplier %g must be finite and not negative", s.YarnBetaFast, s.YarnBetaSlow, s.YarnLogMul)
	case !finite(s.AttnTempScale):
		return fmt.Errorf("synth: attention temperature scale %g must be finite", s.AttnTempScale)
	}
	return nil
}

// mistral3Metadata sets the keys Ministral3Model adds to llama's: the
// YaRN ramp bounds, the log multiplier and the attention temperature
// (only those that are set).
func mistral3Metadata(gw *gguf.Writer, s Spec) {
	a := s.Arch + "."
	f := func(k string, v float32) {
		if v != 0 {
			gw.Set(a+k, gguf.Float32(v))
		}
	}
	f("rope.scaling.yarn_beta_fast", s.YarnBetaFast)
	f("rope.scaling.yarn_beta_slow", s.YarnBetaSlow)
	f("rope.scaling.yarn_log_multiplier", s.YarnLogMul)
	f("attention.temperature_scale", s.AttnTempScale)
}
