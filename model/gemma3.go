package model

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// gemma3: the text model of Gemma 3 as llama.cpp runs it (src/models/
// gemma3.cpp). Against qwen3's block it adds:
//
//   - token embeddings multiplied by √NEmbd (sqrtf in float32);
//   - RMS norms after the attention and the FFN (post_attention_norm,
//     post_ffw_norm), before each joins the residual stream;
//   - a GeGLU FFN (gelu's tanh approximation, ggml's float16 table);
//   - interleaved sliding-window and global layers: with
//     attention.sliding_window > 0, layer il slides unless
//     il % P == P-1 for P = attention.sliding_window_pattern (default 6,
//     llama_hparams::set_swa_pattern), and P = 0 makes every layer slide;
//   - two RoPE bases: rope.freq_base on global layers, rope.freq_base_swa
//     (default 10000, llama_hparams.rope_freq_base_train_swa) with no
//     scaling on sliding ones; the rope.scaling.* keys apply to global
//     layers only;
//   - q·k scaled by 1/√HeadDimK, or 1/√(NEmbd/NHead) for the 62-layer
//     model (llama.cpp's LLM_TYPE_27B: query_pre_attn_scalar); llama.cpp
//     scales q before the product, we scale the product (Attn.Scale), a
//     difference of float rounding.
//
// Every norm weight is used as stored: llama.cpp's converter already added
// the 1 of Gemma3RMSNorm's (1 + w). The output is tied to the embeddings
// unless the file has output.weight. Not done, and refused by name:
// final_logit_softcapping (Gemma 3 has none; llama.cpp would apply it), a
// per-layer sliding_window_pattern array (llama.cpp ignores it for gemma3
// and falls back to 6), and separate head or rope dimensions for the
// sliding layers (attention.key_length_swa and the like).

func loadGemma3(l *loader, m *Model) {
	m.RopeType = RopeNeox
	swaBase, err := gemma3Hyper(l.f, m)
	if err != nil {
		l.fail(err)
		return
	}
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	if m.Window != nil {
		// sliding layers: the SWA base, no scaling (freq_scale 1); YaRN's
		// ext and attention factors are the context's, for every layer
		swa := m.Rope
		swa.Base, swa.Scale = swaBase, 1
		swa.Corr = YarnCorrDims(m.RopeDim, m.NCtxOrig, swa.Base, yarnBetaFast, yarnBetaSlow)
		m.SWARope = &swa
	}
	for i := range m.Layers {
		loadAttention(l, m, i)
		loadQKNorm(l, m, i)
		loadFFN(l, m, i)
		L := &m.Layers[i]
		L.AttnPostNorm = l.vector(blk(i, "post_attention_norm.weight"), m.NEmbd, true)
		L.FFNPostNorm = l.vector(blk(i, "post_ffw_norm.weight"), m.NEmbd, true)
	}
	m.FFNAct = ActGELU
	m.forward = forwardGemma3
}

// gemma3Hyper reads gemma3's own keys into m (the sliding window and its
// pattern, the attention scale) and returns the sliding layers' RoPE base.
func gemma3Hyper(f *gguf.File, m *Model) (swaBase float32, err error) {
	k := &keyReader{f: f, arch: m.Arch}
	// llama.cpp reads the RMS epsilon as required for gemma3
	if _, ok := f.Get(m.Arch + ".attention.layer_norm_rms_epsilon"); !ok {
		return 0, fmt.Errorf("model: missing required key %q", m.Arch+".attention.layer_norm_rms_epsilon")
	}
	if v, ok := f.Get(m.Arch + ".final_logit_softcapping"); ok {
		if x, ok := v.Float(); !ok || x != 0 {
			return 0, fmt.Errorf("model: key %q = %s is not supported (final logit soft-capping)", m.Arch+".final_logit_softcapping", v)
		}
	}
	for _, d := range []struct{ key, full string }{
		{"attention.key_length_swa", "attention.key_length"},
		{"attention.value_length_swa", "attention.value_length"},
		{"rope.dimension_count_swa", "rope.dimension_count"},
	} {
		want := map[string]int{"attention.key_length": m.HeadDimK, "attention.value_length": m.HeadDimV, "rope.dimension_count": m.RopeDim}[d.full]
		if _, ok := f.Get(m.Arch + "." + d.key); ok {
			if v := k.uint(d.key, 0, false); k.err != nil || v != want {
				return 0, fmt.Errorf("model: key %q = %d differs from %s %d: separate sliding-layer head shapes are not supported", m.Arch+"."+d.key, v, d.full, want)
			}
		}
	}
	window := k.uint("attention.sliding_window", 0, false)
	if k.err != nil {
		return 0, k.err
	}
	if window > 0 {
		period := 6
		if v, ok := f.Get(m.Arch + ".attention.sliding_window_pattern"); ok {
			if v.Type() == gguf.TypeArray {
				return 0, fmt.Errorf("model: key %q is a per-layer array; gemma3 takes a period (llama.cpp ignores the array)", m.Arch+".attention.sliding_window_pattern")
			}
			if period = k.uint("attention.sliding_window_pattern", 6, false); k.err != nil {
				return 0, k.err
			}
		}
		m.Window = make([]int, m.NLayer)
		for il := range m.Window {
			if period == 0 || il%period < period-1 {
				m.Window[il] = window
			}
		}
		swaBase = k.float("rope.freq_base_swa", 10000)
		if k.err != nil {
			return 0, k.err
		}
		if !(swaBase > 0) || math.IsInf(float64(swaBase), 0) {
			return 0, fmt.Errorf("model: key %q = %g: want a positive finite number", m.Arch+".rope.freq_base_swa", swaBase)
		}
	}
	// f_attention_scale (llama_model_gemma3::load_arch_hparams): the 27B
	// model scales by its query_pre_attn_scalar, NEmbd/NHead
	d := m.HeadDimK
	if m.NLayer == 62 {
		d = m.NEmbd / m.NHead
	}
	m.AttnScale = 1 / float32(math.Sqrt(float64(float32(d))))
	return swaBase, nil
}

// forwardGemma3 is gemma3's forward pass.
func forwardGemma3(c *Context, b *Batch) error {
	n, d := b.Len(), c.M.NEmbd
	c.embed(b)
	// x *= √NEmbd (sqrtf of the float32 width, as llama.cpp), by the Ops
	// that looked the embeddings up: layer 0's reads x from there
	c.inputOps().Scale(c.x[:n*d], float32(math.Sqrt(float64(float32(d)))))
	c.eval("inp_scaled", -1, c.x, n, d)
	return c.layers(b, func(il int, b *Batch) error {
		// x += post_norm(attn(norm(x))), sliding or global by layer
		if err := c.attention(il, b); err != nil {
			return err
		}
		c.ffn(il, b) // x += post_norm(Wdown·(gelu(Wgate·norm(x)) ⊙ Wup·norm(x)))
		return nil
	})
}
