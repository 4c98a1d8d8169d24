// gemma4.go: what a gemma4 file adds to the generator: its presets, its
// tensors (gemma3's block plus the per-layer token embeddings and their
// projection, rope_freqs for the global layers, a per-layer output scale,
// and for the MoE variant the router's input scale, the experts and the
// norms around them) and its metadata, the keys llama.cpp's
// llama_model_gemma4::load_arch_hparams reads.

package synth

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// Gemma4Spec is the shape of a gemma4 model beyond Spec's fields.
type Gemma4Spec struct {
	// NEmbdPerLayer is the width of each layer's token embedding
	// (embedding_length_per_layer_input; 0: none, as the 26B-A4B).
	NEmbdPerLayer int
	// SharedKVLayers is how many last layers read an earlier layer's KV
	// (attention.shared_kv_layers).
	SharedKVLayers int
	// Sliding marks the sliding-window layers
	// (attention.sliding_window_pattern, one flag per layer).
	Sliding []bool
	// RopeBaseSWA is the sliding layers' RoPE base (rope.freq_base_swa).
	RopeBaseSWA float32
	// SoftCap is final_logit_softcapping.
	SoftCap float32
	// RotPairs is how many of a global head's HeadDim/2 pairs rotate: the
	// others get a rope_freqs divisor of 1e30 (partial rotation, as
	// Gemma 4's proportional RoPE on global layers). 0: all rotate.
	RotPairs int
	// OutScale writes a layer_output_scale per layer.
	OutScale bool
	// HeadDimSWA is the sliding layers' head size
	// (attention.key_length_swa; 0: HeadDim, which is the global layers').
	HeadDimSWA int
	// NHeadKVGlobal is the global layers' KV heads (0: NHeadKV); when it
	// differs, attention.head_count_kv is written per layer.
	NHeadKVGlobal int
	// KEqV leaves attn_v out of the global layers (attention_k_eq_v: V
	// is the K projection).
	KEqV bool
	// ExpertScale writes ffn_down_exps.scale (one factor per expert: the
	// router's per_expert_scale).
	ExpertScale bool
	// NFFLayers is each layer's dense FFN width (feed_forward_length
	// written as an array, as Gemma 4 E2B's double-wide MLP in its shared
	// KV layers); nil: NFF for every layer.
	NFFLayers []int
}

// gemma4FF returns layer i's dense FFN width.
func (s Spec) gemma4FF(i int) int {
	if i < len(s.Gemma4.NFFLayers) {
		return s.Gemma4.NFFLayers[i]
	}
	return s.NFF
}

// headDim returns layer i's head size and KV heads.
func (s Spec) gemma4Head(i int) (hd, nkv int) {
	g := s.Gemma4
	hd, nkv = s.HeadDim, s.NHeadKV
	if g.Sliding[i] {
		if g.HeadDimSWA > 0 {
			hd = g.HeadDimSWA
		}
	} else if g.NHeadKVGlobal > 0 {
		nkv = g.NHeadKVGlobal
	}
	return hd, nkv
}

// gemma4Preset returns the gemma4 presets:
//
//   - "gemma4-small": the dense golden model: hidden 256, 6 layers
//     sliding, sliding, sliding, global, sliding, global over a window of
//     128, the last 2 sharing the KV of layers 2 (sliding) and 3 (global),
//     4 heads / 2 KV heads of 128, FFN 1024, per-layer embeddings of 64,
//     rope bases 1e6 (global, a quarter of the pairs rotating) and 1e4
//     (sliding), a layer output scale, soft-capping at 30, rms eps 1e-6,
//     tied, context 4096, the built-in 1024-token vocabulary.
//   - "gemma4-mixed-small": gemma4-small with per-layer shapes, the
//     golden model of testdata/gemma4mixed: sliding layers with heads of
//     64 and 2 KV heads, global ones with heads of 128 and 1 KV head,
//     FFN widths 1024 but 2048 in the two shared KV layers
//     (feed_forward_length per layer, as E2B's double-wide MLP).
//   - "gemma4-moe-small": the MoE golden model, shaped as the 26B-A4B
//     (no per-layer embeddings, no shared KV): hidden 256, 6 layers
//     (sliding, sliding, global, twice), 4 heads / 2 KV heads of 128,
//     in every layer a dense GeGLU FFN of 512 beside 16 routed experts of
//     256 with 4 used (16, not 8: llama-quantize treats 8 experts as
//     Mixtral's), an output scale per expert (ffn_down_exps.scale), no
//     attn_v in the global layers (attention_k_eq_v: V is the K
//     projection), the rest as gemma4-small.
//   - "gemma-4-e4b": google/gemma-4-E4B's text model. Its config.json
//     (text_config) is not available here; these figures are the ones
//     third-party code transcribes from it (checked against two
//     independent transcriptions where both give the field):
//     hidden_size 2560, intermediate_size 10240, num_hidden_layers 42,
//     layer_types sliding except every 6th layer (i % 6 == 5: 7 global),
//     sliding_window 512, num_attention_heads 8, num_key_value_heads 2,
//     head_dim 256 (sliding) and global_head_dim 512,
//     num_kv_shared_layers 18, hidden_size_per_layer_input 256,
//     vocab_size 262144 (also per layer), use_double_wide_mlp false
//     (E2B's is true), rms_norm_eps 1e-6, final_logit_softcapping 30,
//     rope_theta 1e6 on global layers with partial_rotary_factor 0.25
//     (rope_freqs: 64 of 256 pairs rotate) and 1e4 on sliding ones, tied
//     embeddings, a layer_scalar per layer (layer_output_scale). NCtx
//     8192 as the other large presets (the real file says 131072);
//     without --vocab the built-in vocabulary is used.
//   - "gemma-4-26b-a4b": google/gemma-4-26B-A4B's text model, from the
//     same kind of transcription: hidden_size 2816, num_hidden_layers 30
//     (five sliding, one global, five times), sliding_window 1024,
//     num_attention_heads 16, num_key_value_heads 8 (sliding) and
//     num_global_key_value_heads 2, head_dim 256 and global_head_dim 512,
//     attention_k_eq_v (no attn_v in global layers), a dense FFN of
//     intermediate_size 2112 beside num_experts 128 of
//     moe_intermediate_size 704 with top_k_experts 8 in every layer
//     (enable_moe_block), the router's scale and per_expert_scale
//     (ffn_gate_inp.scale, ffn_down_exps.scale), no per-layer
//     embeddings, no shared KV, vocab_size 262144, tied. Estimates, not
//     in the transcriptions: rms_norm_eps 1e-6, rope as the E4B's,
//     final_logit_softcapping 30 and a layer_scalar per layer (as the
//     other Gemma 4 models).
func gemma4Preset(name string) (Spec, bool) {
	switch name {
	case "gemma4-small":
		return Spec{Arch: "gemma4", Name: "synth-gemma4-small", NCtx: 4096, NEmbd: 256, NLayer: 6, NHead: 4, NHeadKV: 2,
			HeadDim: 128, NFF: 1024, RopeBase: 1e6, RMSEps: 1e-6, Tied: true, SlidingWindow: 128,
			Gemma4: Gemma4Spec{NEmbdPerLayer: 64, SharedKVLayers: 2, Sliding: []bool{true, true, true, false, true, false},
				RopeBaseSWA: 1e4, SoftCap: 30, RotPairs: 16, OutScale: true}}, true
	case "gemma4-mixed-small":
		return Spec{Arch: "gemma4", Name: "synth-gemma4-mixed-small", NCtx: 4096, NEmbd: 256, NLayer: 6, NHead: 4, NHeadKV: 2,
			HeadDim: 128, NFF: 1024, RopeBase: 1e6, RMSEps: 1e-6, Tied: true, SlidingWindow: 128,
			Gemma4: Gemma4Spec{NEmbdPerLayer: 64, SharedKVLayers: 2, Sliding: []bool{true, true, true, false, true, false},
				RopeBaseSWA: 1e4, SoftCap: 30, RotPairs: 16, OutScale: true, HeadDimSWA: 64, NHeadKVGlobal: 1,
				NFFLayers: []int{1024, 1024, 1024, 1024, 2048, 2048}}}, true
	case "gemma4-moe-small":
		return Spec{Arch: "gemma4", Name: "synth-gemma4-moe-small", NCtx: 4096, NEmbd: 256, NLayer: 6, NHead: 4, NHeadKV: 2,
			HeadDim: 128, NFF: 512, NExpert: 16, NExpertUsed: 4, NFFExp: 256, RopeBase: 1e6, RMSEps: 1e-6, Tied: true, SlidingWindow: 128,
			Gemma4: Gemma4Spec{Sliding: []bool{true, true, false, true, true, false},
				RopeBaseSWA: 1e4, SoftCap: 30, RotPairs: 16, OutScale: true, ExpertScale: true, KEqV: true}}, true
	case "gemma-4-e4b":
		sl := make([]bool, 42)
		for i := range sl {
			sl[i] = i%6 != 5
		}
		return Spec{Arch: "gemma4", Name: "synth-gemma-4-e4b", NCtx: 8192, NEmbd: 2560, NLayer: 42, NHead: 8, NHeadKV: 2,
			HeadDim: 512, NFF: 10240, RopeBase: 1e6, RMSEps: 1e-6, Tied: true, SlidingWindow: 512,
			Gemma4: Gemma4Spec{NEmbdPerLayer: 256, SharedKVLayers: 18, Sliding: sl, RopeBaseSWA: 1e4, SoftCap: 30,
				RotPairs: 64, OutScale: true, HeadDimSWA: 256}}, true
	case "gemma-4-26b-a4b":
		sl := make([]bool, 30)
		for i := range sl {
			sl[i] = i%6 != 5
		}
		return Spec{Arch: "gemma4", Name: "synth-gemma-4-26b-a4b", NCtx: 8192, NEmbd: 2816, NLayer: 30, NHead: 16, NHeadKV: 8,
			HeadDim: 512, NFF: 2112, NExpert: 128, NExpertUsed: 8, NFFExp: 704, RopeBase: 1e6, RMSEps: 1e-6, Tied: true,
			SlidingWindow: 1024,
			Gemma4: Gemma4Spec{Sliding: sl, RopeBaseSWA: 1e4, SoftCap: 30, RotPairs: 64, OutScale: true,
				HeadDimSWA: 256, NHeadKVGlobal: 2, KEqV: true, ExpertScale: true}}, true
	}
	return Spec{}, false
}

// gemma4Presets are gemma4Preset's names.
func gemma4Presets() []string {
	return []string{"gemma4-small", "gemma4-mixed-small", "gemma4-moe-small", "gemma-4-e4b", "gemma-4-26b-a4b"}
}

// checkGemma4 checks the gemma4 fields.
func (s Spec) checkGemma4() error {
	g := s.Gemma4
	if s.Arch != "gemma4" {
		if g.NEmbdPerLayer != 0 || g.SharedKVLayers != 0 || g.Sliding != nil || g.RopeBaseSWA != 0 || g.SoftCap != 0 || g.RotPairs != 0 || g.OutScale ||
			g.HeadDimSWA != 0 || g.NHeadKVGlobal != 0 || g.KEqV || g.ExpertScale || g.NFFLayers != nil {
			return fmt.Errorf("synth: the Gemma4 fields are for gemma4, not %s", s.Arch)
		}
		return nil
	}
	switch {
	case len(g.Sliding) != s.NLayer:
		return fmt.Errorf("synth: gemma4: %d sliding flags for %d layers", len(g.Sliding), s.NLayer)
	case slices.Contains(g.Sliding, true) && s.SlidingWindow <= 0:
		return fmt.Errorf("synth: gemma4: sliding layers need SlidingWindow > 0")
	case g.NEmbdPerLayer < 0 || g.NEmbdPerLayer > maxDim || g.RotPairs < 0 || g.RotPairs > s.HeadDim/2:
		return fmt.Errorf("synth: gemma4: NEmbdPerLayer %d, RotPairs %d (at most %d) out of range", g.NEmbdPerLayer, g.RotPairs, s.HeadDim/2)
	case g.HeadDimSWA < 0 || g.HeadDimSWA%2 != 0 || g.HeadDimSWA > maxDim || g.NHeadKVGlobal < 0 || g.NHeadKVGlobal > 0 && s.NHead%g.NHeadKVGlobal != 0:
		return fmt.Errorf("synth: gemma4: HeadDimSWA %d (even) or NHeadKVGlobal %d (dividing NHead %d) out of range", g.HeadDimSWA, g.NHeadKVGlobal, s.NHead)
	case g.ExpertScale && s.NExpert == 0:
		return fmt.Errorf("synth: gemma4: ExpertScale needs experts")
	case s.NFF <= 0:
		return fmt.Errorf("synth: gemma4: NFF must be positive (MoE layers keep their dense FFN)")
	case g.NFFLayers != nil && (len(g.NFFLayers) != s.NLayer || slices.Min(g.NFFLayers) <= 0 || slices.Max(g.NFFLayers) > s.NFF*4):
		return fmt.Errorf("synth: gemma4: NFFLayers %v: want %d positive widths of at most 4·NFF", g.NFFLayers, s.NLayer)
	case !(g.RopeBaseSWA > 0) || g.SoftCap < 0:
		return fmt.Errorf("synth: gemma4: RopeBaseSWA %g must be positive, SoftCap %g not negative", g.RopeBaseSWA, g.SoftCap)
	case g.SharedKVLayers < 0 || g.SharedKVLayers > 0 && s.NLayer-g.SharedKVLayers < 2:
		return fmt.Errorf("synth: gemma4: %d shared KV layers of %d: at least 2 must keep their KV", g.SharedKVLayers, s.NLayer)
	}
	if n := s.NLayer - g.SharedKVLayers; g.SharedKVLayers > 0 && (!g.Sliding[n-2] || g.Sliding[n-1]) {
		return fmt.Errorf("synth: gemma4: layers %d and %d, whose KV the shared layers read, must be sliding and global", n-2, n-1)
	}
	return nil
}

// gemma4Tensors returns a gemma4 model's tensors in llama-quantize's order
// (tensorList's). The shared KV layers keep their attn_k, attn_v and
// attn_k_norm (llama.cpp loads them if present, and uses none of them), so
// that llama-quantize counts one attn_v per layer.
func gemma4Tensors(s Spec) []Tensor {
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
	g := s.Gemma4
	e, v, npl := s.NEmbd, s.NVocab, g.NEmbdPerLayer
	add(-1, "token_embd.weight", roleWeight, std, e, v)
	add(-1, "output_norm.weight", roleNorm, 0.1, e)
	if !s.Tied {
		add(-1, "output.weight", roleWeight, std, e, v)
	}
	if npl > 0 {
		add(-1, "per_layer_token_embd.weight", roleWeight, std, npl*s.NLayer, v)
		add(-1, "per_layer_model_proj.weight", roleWeight, std, e, npl*s.NLayer)
		add(-1, "per_layer_proj_norm.weight", roleNorm, 0.1, npl)
	}
	if slices.Contains(g.Sliding, false) {
		add(-1, "rope_freqs.weight", roleRopeFreqs, 0, s.HeadDim/2)
		ts[len(ts)-1].rot = g.RotPairs
	}
	for i := range s.NLayer {
		hd, nkv := s.gemma4Head(i)
		qDim, kvDim := s.NHead*hd, nkv*hd
		qkNorm := math.Pow(float64(hd), -0.25)
		add(i, "attn_norm.weight", roleNorm, 0.1, e)
		add(i, "attn_q.weight", roleWeight, std, e, qDim)
		add(i, "attn_k.weight", roleWeight, std, e, kvDim)
		if !g.KEqV || g.Sliding[i] {
			add(i, "attn_v.weight", roleWeight, std, e, kvDim)
		}
		add(i, "attn_output.weight", roleWeight, std, qDim, e)
		// q and k norms around HeadDim^(-1/4): Gemma 4 does not scale
		// q·k, and with weights around 1 the scores of a random model
		// (std √HeadDim) make a softmax so peaked that float rounding
		// decides the output; these give gemma3's 1/√HeadDim instead
		add(i, "attn_q_norm.weight", roleNorm, 0.1*qkNorm, hd)
		ts[len(ts)-1].base = qkNorm
		add(i, "attn_k_norm.weight", roleNorm, 0.1*qkNorm, hd)
		ts[len(ts)-1].base = qkNorm
		add(i, "post_attention_norm.weight", roleNorm, 0.1, e)
		if g.OutScale {
			add(i, "layer_output_scale.weight", roleNorm, 0.1, 1)
		}
		add(i, "ffn_norm.weight", roleNorm, 0.1, e)
		nff := s.gemma4FF(i)
		add(i, "ffn_gate.weight", roleWeight, std, e, nff)
		add(i, "ffn_up.weight", roleWeight, std, e, nff)
		add(i, "ffn_down.weight", roleWeight, std, nff, e)
		add(i, "post_ffw_norm.weight", roleNorm, 0.1, e)
		if s.NExpert > 0 {
			add(i, "ffn_gate_inp.weight", roleRouter, 0.3, e, s.NExpert)
			ts[len(ts)-1].sigma = s.RouterSigma
			add(i, "ffn_gate_inp.scale", roleNorm, 0.1, e)
			add(i, "pre_ffw_norm_2.weight", roleNorm, 0.1, e)
			add(i, "post_ffw_norm_1.weight", roleNorm, 0.1, e)
			add(i, "post_ffw_norm_2.weight", roleNorm, 0.1, e)
			add(i, "ffn_gate_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
			add(i, "ffn_up_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
			add(i, "ffn_down_exps.weight", roleWeight, std, s.NFFExp, e, s.NExpert)
			if g.ExpertScale {
				add(i, "ffn_down_exps.scale", roleNorm, 0.1, s.NExpert)
			}
		}
		if npl > 0 {
			add(i, "inp_gate.weight", roleWeight, std, e, npl)
			add(i, "proj.weight", roleWeight, std, npl, e)
			add(i, "post_norm.weight", roleNorm, 0.1, e)
		}
	}
	slices.SortStableFunc(ts, func(a, b Tensor) int {
		if a.layer != b.layer {
			return a.layer - b.layer
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ts
}

// gemma4Metadata sets gemma4's architecture keys.
func gemma4Metadata(gw *gguf.Writer, s Spec) {
	a := s.Arch + "."
	g := s.Gemma4
	u := func(k string, v int) { gw.Set(a+k, gguf.Uint32(uint32(v))) }
	f := func(k string, v float32) { gw.Set(a+k, gguf.Float32(v)) }
	u("context_length", s.NCtx)
	u("embedding_length", s.NEmbd)
	u("block_count", s.NLayer)
	if g.NFFLayers != nil {
		ff := make([]gguf.Value, s.NLayer)
		for i := range ff {
			ff[i] = gguf.Uint32(uint32(s.gemma4FF(i)))
		}
		arr, err := gguf.Array(gguf.TypeUint32, ff)
		if err != nil {
			panic(err) // a list of uint32 is a valid array
		}
		gw.Set(a+"feed_forward_length", arr)
	} else {
		u("feed_forward_length", s.NFF)
	}
	u("attention.head_count", s.NHead)
	if g.NHeadKVGlobal > 0 && g.NHeadKVGlobal != s.NHeadKV {
		kv := make([]gguf.Value, s.NLayer)
		for i := range kv {
			_, nkv := s.gemma4Head(i)
			kv[i] = gguf.Uint32(uint32(nkv))
		}
		arr, err := gguf.Array(gguf.TypeUint32, kv)
		if err != nil {
			panic(err) // a list of uint32 is a valid array
		}
		gw.Set(a+"attention.head_count_kv", arr)
	} else {
		u("attention.head_count_kv", s.NHeadKV)
	}
	f("rope.freq_base", s.RopeBase)
	f("rope.freq_base_swa", g.RopeBaseSWA)
	f("attention.layer_norm_rms_epsilon", s.RMSEps)
	u("attention.key_length", s.HeadDim)
	u("attention.value_length", s.HeadDim)
	swa := s.HeadDim
	if g.HeadDimSWA > 0 {
		swa = g.HeadDimSWA
	}
	u("attention.key_length_swa", swa)
	u("attention.value_length_swa", swa)
	if swa != s.HeadDim {
		// llama.cpp rotates key_length dimensions unless told: the
		// sliding layers' smaller heads need their own count
		u("rope.dimension_count", s.HeadDim)
		u("rope.dimension_count_swa", swa)
	}
	f("final_logit_softcapping", g.SoftCap)
	u("attention.sliding_window", s.SlidingWindow)
	flags := make([]gguf.Value, len(g.Sliding))
	for i, b := range g.Sliding {
		flags[i] = gguf.Bool(b)
	}
	arr, err := gguf.Array(gguf.TypeBool, flags)
	if err != nil {
		panic(err) // a list of bools is a valid array
	}
	gw.Set(a+"attention.sliding_window_pattern", arr)
	u("attention.shared_kv_layers", g.SharedKVLayers)
	u("embedding_length_per_layer_input", g.NEmbdPerLayer)
	if s.NExpert > 0 {
		u("expert_count", s.NExpert)
		u("expert_used_count", s.NExpertUsed)
		u("expert_feed_forward_length", s.NFFExp)
	}
}
