// gemma3.go: what a gemma3 file adds to the generator: its presets, its
// extra tensors (per-head q/k norms, norms after attention and FFN) and its
// metadata, as llama.cpp's convert_hf_to_gguf.py writes them for
// Gemma3ForCausalLM (class Gemma3Model): no sliding_window_pattern key
// (llama.cpp then takes 6: five sliding layers, one global), no
// rope.freq_base_swa (10000), the linear rope scaling of the larger models
// (global layers only), tied embeddings. Norm weights are drawn around 1 as
// for the other families: the converter stores Gemma's 1 + w.

package synth

// gemma3Preset returns the gemma3 presets:
//
//   - "gemma3-small": the goldens' model: hidden 256, 6 layers (0-4 slide
//     over a window of 128, 5 is global), 4 heads / 2 KV heads of 128 (q
//     projection 2x hidden, as the real models), FFN 1024, rope bases 1e6
//     (global) and 1e4 (sliding), rms eps 1e-6, tied, context 4096, the
//     built-in 1024-token vocabulary.
//   - "gemma-3-4b": google/gemma-3-4b-it's text model. From its config.json
//     (text_config): hidden_size 2560, intermediate_size 10240,
//     num_hidden_layers 34, sliding_window 1024, rope_scaling linear with
//     factor 8. The rest is what transformers' Gemma3TextConfig defaults to
//     (the file leaves it out; derived configs of the model spell it out):
//     num_attention_heads 8, num_key_value_heads 4, head_dim 256,
//     rope_theta 1e6, rope_local_base_freq 1e4, sliding_window_pattern 6,
//     rms_norm_eps 1e-6, query_pre_attn_scalar 256 (= head_dim, llama.cpp's
//     scale for every size but 27B); the converter writes the same
//     defaults for heads, KV heads and head_dim. Its vocabulary is 262144
//     tokens (the converter cuts embed_tokens' 262208 rows to the
//     tokenizer's size); without --vocab the built-in one is used. NCtx
//     8192 as the other large presets (the real file says 131072).
func gemma3Preset(name string) (Spec, bool) {
	switch name {
	case "gemma3-small":
		return Spec{Arch: "gemma3", Name: "synth-gemma3-small", NCtx: 4096, NEmbd: 256, NLayer: 6, NHead: 4, NHeadKV: 2,
			HeadDim: 128, NFF: 1024, RopeBase: 1e6, RMSEps: 1e-6, Tied: true, SlidingWindow: 128}, true
	case "gemma-3-4b":
		return Spec{Arch: "gemma3", Name: "synth-gemma-3-4b", NCtx: 8192, NEmbd: 2560, NLayer: 34, NHead: 8, NHeadKV: 4,
			HeadDim: 256, NFF: 10240, RopeBase: 1e6, RMSEps: 1e-6, Tied: true, SlidingWindow: 1024,
			RopeScaling: "linear", RopeFactor: 8}, true
	}
	return Spec{}, false
}

// gemma3Presets are gemma3Preset's names.
func gemma3Presets() []string { return []string{"gemma3-small", "gemma-3-4b"} }

// gemma3Tensors adds layer i's tensors beyond the llama block: QK-norm
// over the head dimension and the post-attention and post-FFN norms.
func gemma3Tensors(s Spec, i int, add func(layer int, name string, r role, std float64, dims ...int)) {
	add(i, "attn_q_norm.weight", roleNorm, 0.1, s.HeadDim)
	add(i, "attn_k_norm.weight", roleNorm, 0.1, s.HeadDim)
	add(i, "post_attention_norm.weight", roleNorm, 0.1, s.NEmbd)
	add(i, "post_ffw_norm.weight", roleNorm, 0.1, s.NEmbd)
}

// gemma3Metadata returns the architecture keys in the order Gemma3Model's
// set_gguf_parameters writes them (general.file_type goes last, where
// llama-quantize puts it).
func gemma3Metadata(s Spec, u func(k string, v int), f func(k string, v float32), str func(k, v string)) {
	u("context_length", s.NCtx)
	u("embedding_length", s.NEmbd)
	u("block_count", s.NLayer)
	u("feed_forward_length", s.NFF)
	u("attention.head_count", s.NHead)
	f("attention.layer_norm_rms_epsilon", s.RMSEps)
	u("attention.key_length", s.HeadDim)
	u("attention.value_length", s.HeadDim)
	f("rope.freq_base", s.RopeBase)
	if s.SlidingWindow > 0 {
		u("attention.sliding_window", s.SlidingWindow)
	}
	u("attention.head_count_kv", s.NHeadKV)
	if s.RopeScaling != "" {
		str("rope.scaling.type", s.RopeScaling)
		if s.RopeFactor != 0 {
			f("rope.scaling.factor", s.RopeFactor)
		}
		if s.RopeOrigCtx > 0 {
			u("rope.scaling.original_context_length", s.RopeOrigCtx)
		}
		if s.RopeAttnFactor != 0 {
			f("rope.scaling.attn_factor", s.RopeAttnFactor)
		}
	}
}
