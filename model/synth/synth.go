// Package synth writes deterministic random-weight GGUF models: the demo
// model `flowinfer run` builds when it is given no model, and the models of
// `flowinfer gen` (real shapes such as Llama-3.2-1B's, random weights) for
// benchmarks and tests.
//
// The same Spec, Options and seed give a byte-identical file. Files carry
// the metadata llama.cpp's converter and llama-quantize write for the
// architecture (llama, qwen2, qwen3, qwen3moe, mistral3), a general.description
// saying the weights are random, and tensors in llama-quantize's order with
// the types llama-quantize would choose for the mixture (Options.Mix) or one
// type for every weight (Options.Type, like llama-quantize --pure). Weights
// follow the golden synthetic models' recipe: N(0, 0.02²), attn_q/attn_k of
// llama and qwen2 N(0, 0.08²), norms 1 + N(0, 0.1²), qwen2 biases
// N(0, 0.1²), MoE router rows N(0, 0.02²) times a per-expert scale so
// routing is skewed.
//
// Quantized weights are written as random blocks (blocks.go), streamed
// through gguf.Writer.AddTensorFunc in chunks generated in parallel, so a
// model is never held in memory and a 1B model takes seconds. The package
// does not produce what llama-quantize would make of a float model; the IQ
// types are the exception to random blocks (quantized, see blocks.go).
package synth

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/quant"
)

// Spec is the shape of a model. Zero fields take defaults: NHeadKV = NHead,
// HeadDim = NEmbd/NHead, NCtx 2048, RopeBase 10000 (llama) or 1e6 (qwen),
// RMSEps 1e-5 (llama) or 1e-6 (qwen), Name "synth-<arch>", NVocab the
// vocabulary's token count.
type Spec struct {
	Arch        string // llama, qwen2, qwen3, qwen3moe, gpt-oss (gptoss.go), gemma3 (gemma3.go), mistral3 (mistral3.go), qwen35 (qwen35.go), qwen35moe or qwen3next (qwen35moe.go)
	NVocab      int    // 0: from the vocabulary; otherwise must match it
	NCtx        int    // <arch>.context_length
	NEmbd       int
	NLayer      int
	NHead       int
	NHeadKV     int
	HeadDim     int
	NFF         int // dense FFN width (qwen3moe: written, unused)
	NExpert     int // qwen3moe, gpt-oss, qwen35moe, qwen3next
	NExpertUsed int
	NFFExp      int // expert FFN width
	NFFShexp    int // shared expert width (qwen35moe, qwen3next)
	RopeBase    float32
	RMSEps      float32
	Tied        bool // no output.weight: the output reuses token_embd
	Name        string
	// RoPE scaling keys (written only when RopeScaling is set): type none,
	// linear or yarn, and when non-zero rope.scaling.factor,
	// rope.scaling.original_context_length and rope.scaling.attn_factor.
	RopeScaling    string
	RopeFactor     float32
	RopeOrigCtx    int
	RopeAttnFactor float32
	// mistral3 only (mistral3.go): rope.scaling.yarn_beta_fast,
	// yarn_beta_slow and yarn_log_multiplier (with RopeScaling yarn) and
	// attention.temperature_scale, each written when non-zero.
	YarnBetaFast, YarnBetaSlow, YarnLogMul, AttnTempScale float32
	// Routing realism (qwen3moe; zero values keep the golden recipe). A
	// random model's residual stream is dominated by the attention's
	// average over the context, the same for every token, so its router
	// picks nearly the same few experts every time. RouterSigma > 0 draws
	// each expert's router-row scale from exp(N(0, σ²)) instead of the
	// golden {6 ... 0.25} table (a milder popularity skew); EmbdStd and
	// AttnOutStd replace 0.02 for token_embd and attn_output, so the
	// token's own embedding carries weight against the context average
	// (choices that vary from token to token but still correlate).
	RouterSigma, EmbdStd, AttnOutStd float64
	// KOutliers > 0 plants outlier channels in K, as real Qwen and Llama
	// K caches have (a few channels orders of magnitude larger than the
	// rest): kOutlierChannels of every head's dimensions, chosen per
	// layer, get their attn_k_norm weight multiplied by KOutliers (qwen3
	// and qwen3moe, whose K is normalized per head before RoPE).
	KOutliers float64
	// SlidingWindow is gpt-oss's and gemma3's attention.sliding_window
	// (gptoss.go, gemma3.go).
	SlidingWindow int
	// Hybrid (qwen35, qwen35moe, qwen3next) shape: the linear-attention
	// layers (qwen35.go).
	Hybrid HybridSpec
	// Gemma4 is gemma4's shape beyond the fields above (gemma4.go).
	Gemma4 Gemma4Spec
	// Nemotron (nemotron_h, nemotron_h_moe) shape: the layer pattern,
	// Mamba-2 and shared expert (nemotronh.go).
	Nemotron NemotronSpec
}

// kOutlierChannels is how many of a head's K dimensions KOutliers scales.
const kOutlierChannels = 4

// Preset returns a named shape:
//
//   - "demo": tiny llama (hidden 256, 4 layers, 8 heads / 4 KV heads of 32,
//     FFN 768, untied, context 2048) with the built-in 1024-token vocabulary:
//     3.7M parameters, 3.9 MB in Q8_0; generates instantly.
//   - "llama-1b": Llama-3.2-1B's shape: hidden 2048, 16 layers, 32 heads /
//     8 KV heads of 64, FFN 8192, tied embeddings, rope base 500000.
//   - "llama-8b": Llama-3.1-8B's shape: hidden 4096, 32 layers, 32 heads /
//     8 KV heads of 128, FFN 14336, untied, rope base 500000.
//   - "qwen3moe-small": Qwen3-30B-A3B scaled down: hidden 1024, 12 layers,
//     16 heads / 2 KV heads of 128 (q projection 2x hidden, as the original),
//     32 experts of width 512 with 4 used, dense FFN 3072 (unused), rope base
//     1e6, rms eps 1e-6, untied: 0.66B parameters, 0.13B active per token,
//     plus the embeddings.
//   - "qwen3-30b-a3b": Qwen3-30B-A3B's shape: hidden 2048, 48 layers, 32
//     heads / 4 KV heads of 128, 128 experts of width 768 with 8 used, dense
//     FFN 6144 (unused), rope base 1e6, rms eps 1e-6, untied: 30.5B
//     parameters, 3.3B active per token (with a 151,936-token vocabulary);
//     about 17.9 GB in Q4_K_M with the built-in vocabulary. Its routing is
//     made to resemble the real model's (RouterSigma 0.25, EmbdStd 1, AttnOutStd 0.006;
//     bench/README.md "Routing of the synthetic MoE" has the measurements
//     and the published figures they follow): over 192 tokens of a story
//     each layer uses ~107 of its 128 experts, the top expert takes ~6% of
//     the choices, about half the experts cover 90% of them, and a token
//     shares about a fifth of its experts with the previous one. The
//     golden recipe's router (gen --plain-router) instead sends almost
//     every token to the same few experts, which flatters any cache.
//
// The large presets set NCtx 8192 (the real models train longer; a tool that
// sizes its cache by the training context should not allocate for 128K) and
// leave NVocab to the vocabulary (flowinfer gen --vocab).
func Preset(name string) (Spec, error) {
	if s, ok := gemma3Preset(name); ok { // gemma3.go
		return s, nil
	}
	if s, ok := gemma4Preset(name); ok { // gemma4.go
		return s, nil
	}
	switch name {
	case "demo":
		return Spec{Arch: "llama", Name: "flowinfer-demo", NCtx: 2048, NEmbd: 256, NLayer: 4, NHead: 8, NHeadKV: 4,
			HeadDim: 32, NFF: 768, RopeBase: 10000, RMSEps: 1e-5}, nil
	case "llama-1b":
		return Spec{Arch: "llama", Name: "synth-llama-1b", NCtx: 8192, NEmbd: 2048, NLayer: 16, NHead: 32, NHeadKV: 8,
			HeadDim: 64, NFF: 8192, RopeBase: 500000, RMSEps: 1e-5, Tied: true}, nil
	case "llama-8b":
		return Spec{Arch: "llama", Name: "synth-llama-8b", NCtx: 8192, NEmbd: 4096, NLayer: 32, NHead: 32, NHeadKV: 8,
			HeadDim: 128, NFF: 14336, RopeBase: 500000, RMSEps: 1e-5}, nil
	case "qwen3-30b-a3b":
		return Spec{Arch: "qwen3moe", Name: "synth-qwen3-30b-a3b", NCtx: 8192, NEmbd: 2048, NLayer: 48, NHead: 32,
			NHeadKV: 4, HeadDim: 128, NFF: 6144, NExpert: 128, NExpertUsed: 8, NFFExp: 768, RopeBase: 1e6, RMSEps: 1e-6,
			RouterSigma: 0.25, EmbdStd: 1, AttnOutStd: 0.006}, nil
	case "qwen35-small", "qwen35-small-mtp", "qwen35-mid", "qwen3.5-9b":
		return qwen35Preset(name), nil
	case "qwen35moe-small", "qwen35moe-small-mtp-fused", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3next-small", "qwen3-next-80b-a3b":
		return hybridMoEPreset(name), nil // qwen35moe.go
	case "qwen3moe-small":
		return Spec{Arch: "qwen3moe", Name: "synth-qwen3moe-small", NCtx: 8192, NEmbd: 1024, NLayer: 12, NHead: 16,
			NHeadKV: 2, HeadDim: 128, NFF: 3072, NExpert: 32, NExpertUsed: 4, NFFExp: 512, RopeBase: 1e6, RMSEps: 1e-6}, nil
	}
	if s, ok := mistral3Preset(name); ok {
		return s, nil
	}
	if s, ok := gptOssPreset(name); ok {
		return s, nil
	}
	if s, ok := nemotronPreset(name); ok {
		return s, nil
	}
	return Spec{}, fmt.Errorf("synth: unknown preset %q (known: %s)", name, strings.Join(Presets(), ", "))
}

// Presets returns the preset names.
func Presets() []string {
	return append(append(append(append(append(append([]string{"demo", "llama-1b", "llama-8b", "qwen3moe-small", "qwen3-30b-a3b"}, gptOssPresets...), gemma3Presets()...), gemma4Presets()...), mistral3Presets...), "qwen35-small", "qwen35-small-mtp", "qwen35-mid", "qwen3.5-9b",
		"qwen35moe-small", "qwen35moe-small-mtp-fused", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3next-small", "qwen3-next-80b-a3b"), nemotronPresets...)
}

// Options select the weight types, the seed and the vocabulary.
type Options struct {
	// Type is the type of every 2-D weight when Mix is empty, as
	// llama-quantize --pure: F32 (the zero value), F16, BF16, Q8_0, Q4_0,
	// Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or an IQ type (see
	// supportedTypes). Norms, biases and the MoE
	// router are always F32.
	Type quant.Type
	// Mix, when set, is a llama-quantize file type (see Mixes: "Q4_K_M",
	// "Q8_0", "F16", ...): each tensor gets the type llama-quantize gives it
	// without --pure, e.g. for Q4_K_M Q6_K on the output (or tied
	// embeddings) and on attn_v and ffn_down of some layers.
	Mix string
	// Seed selects the weights.
	Seed uint64
	// Vocab, if not nil, supplies the tokenizer: every tokenizer.* key is
	// copied from it and the vocabulary size follows its token count. nil
	// means the built-in vocabulary (BuiltinVocab).
	Vocab *gguf.File
}

// maxDim bounds every dimension of a Spec (a typo, not a model).
const maxDim = 1 << 24

// normalize fills defaults and checks s.
func (s Spec) normalize() (Spec, error) {
	qwen := false
	switch s.Arch {
	case "llama", "gpt-oss", "mistral3", "nemotron_h", "nemotron_h_moe":
	case "qwen2", "qwen3", "qwen3moe", "gemma3", "gemma4", "qwen35", "qwen35moe", "qwen3next":
		qwen = true // gemma3 shares qwen's defaults: rope base 1e6, rms eps 1e-6
	default:
		return s, fmt.Errorf("synth: architecture %q is not supported (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss, gemma3, gemma4, mistral3, qwen35, qwen35moe, qwen3next, nemotron_h, nemotron_h_moe)", s.Arch)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"NVocab", s.NVocab}, {"NCtx", s.NCtx}, {"NEmbd", s.NEmbd}, {"NLayer", s.NLayer}, {"NHead", s.NHead},
		{"NHeadKV", s.NHeadKV}, {"HeadDim", s.HeadDim}, {"NFF", s.NFF}, {"NExpert", s.NExpert},
		{"NExpertUsed", s.NExpertUsed}, {"NFFExp", s.NFFExp}, {"NFFShexp", s.NFFShexp}} {
		if f.v < 0 || f.v > maxDim {
			return s, fmt.Errorf("synth: %s = %d is out of range [0, %d]", f.name, f.v, maxDim)
		}
	}
	if s.NEmbd == 0 || s.NLayer == 0 || s.NHead == 0 {
		return s, fmt.Errorf("synth: NEmbd %d, NLayer %d and NHead %d must be positive", s.NEmbd, s.NLayer, s.NHead)
	}
	if s.NLayer > 4096 {
		return s, fmt.Errorf("synth: %d layers is too many", s.NLayer)
	}
	if s.NHeadKV == 0 {
		s.NHeadKV = s.NHead
	}
	if s.NHead%s.NHeadKV != 0 {
		return s, fmt.Errorf("synth: NHead %d is not a multiple of NHeadKV %d", s.NHead, s.NHeadKV)
	}
	if s.HeadDim == 0 {
		if s.NEmbd%s.NHead != 0 {
			return s, fmt.Errorf("synth: NEmbd %d is not a multiple of NHead %d; set HeadDim", s.NEmbd, s.NHead)
		}
		s.HeadDim = s.NEmbd / s.NHead
	}
	if s.HeadDim%2 != 0 {
		return s, fmt.Errorf("synth: HeadDim %d must be even (RoPE rotates pairs)", s.HeadDim)
	}
	if s.NCtx == 0 {
		s.NCtx = 2048
	}
	if s.RopeBase == 0 {
		s.RopeBase = 10000
		if qwen {
			s.RopeBase = 1e6
		}
	}
	if s.RMSEps == 0 {
		s.RMSEps = 1e-5
		if qwen {
			s.RMSEps = 1e-6
		}
	}
	if s.KOutliers != 0 && (!(s.KOutliers > 0) || math.IsInf(s.KOutliers, 0) || !qwen || s.Arch == "qwen2" || s.Arch == "gemma3") {
		return s, fmt.Errorf("synth: K outliers %g: need a finite factor > 0 and a qwen3 or qwen3moe model (K normalized per head); %s has none", s.KOutliers, s.Arch)
	}
	if !(s.RopeBase > 0) || !(s.RMSEps > 0) {
		return s, fmt.Errorf("synth: RopeBase %g and RMSEps %g must be positive", s.RopeBase, s.RMSEps)
	}
	if err := s.checkRopeScaling(); err != nil {
		return s, err
	}
	if err := s.checkGptOss(); err != nil {
		return s, err
	}
	if err := s.checkMistral3(); err != nil {
		return s, err
	}
	if err := s.checkSharedExpert(); err != nil { // qwen35moe.go
		return s, err
	}
	if err := s.checkGemma4(); err != nil {
		return s, err
	}
	if s.Arch == "qwen3moe" || s.Arch == "gpt-oss" || hybridMoE(s.Arch) || s.Arch == "gemma4" && s.NExpert > 0 || s.Arch == "nemotron_h_moe" {
		if s.NExpert == 0 || s.NExpertUsed == 0 || s.NExpertUsed > s.NExpert || s.NFFExp == 0 {
			return s, fmt.Errorf("synth: %s needs NExpert > 0, NExpertUsed in [1, NExpert] and NFFExp > 0 (have %d, %d, %d)",
				s.Arch, s.NExpert, s.NExpertUsed, s.NFFExp)
		}
	} else {
		if s.NExpert != 0 || s.NExpertUsed != 0 || s.NFFExp != 0 {
			return s, fmt.Errorf("synth: %s has no experts; NExpert, NExpertUsed and NFFExp must be 0", s.Arch)
		}
		if s.NFF == 0 {
			return s, fmt.Errorf("synth: NFF must be positive")
		}
	}
	if err := s.checkHybrid(); err != nil {
		return s, err
	}
	if err := s.checkNemotron(); err != nil {
		return s, err
	}
	if s.Name == "" {
		s.Name = "synth-" + s.Arch
	}
	return s, nil
}

// checkRopeScaling checks the RoPE scaling fields.
func (s Spec) checkRopeScaling() error {
	finite := func(x float32) bool { return x > 0 && !math.IsInf(float64(x), 0) }
	switch s.RopeScaling {
	case "":
		if s.RopeFactor != 0 || s.RopeOrigCtx != 0 || s.RopeAttnFactor != 0 {
			return fmt.Errorf("synth: RopeFactor, RopeOrigCtx and RopeAttnFactor need RopeScaling (none, linear or yarn)")
		}
		return nil
	case "none", "linear", "yarn":
	default:
		return fmt.Errorf("synth: rope scaling type %q is not supported (supported: none, linear, yarn)", s.RopeScaling)
	}
	switch {
	case s.RopeFactor != 0 && !finite(s.RopeFactor):
		return fmt.Errorf("synth: rope scaling factor %g must be positive and finite", s.RopeFactor)
	case s.RopeAttnFactor != 0 && !finite(s.RopeAttnFactor):
		return fmt.Errorf("synth: rope attn_factor %g must be positive and finite", s.RopeAttnFactor)
	case s.RopeOrigCtx < 0 || s.RopeOrigCtx > maxDim:
		return fmt.Errorf("synth: rope original context %d is out of range [0, %d]", s.RopeOrigCtx, maxDim)
	}
	return nil
}

// prepare normalizes s and resolves the vocabulary: its tokenizer.* pairs
// and NVocab.
func prepare(s Spec, o Options) (Spec, []gguf.KV, error) {
	s, err := s.normalize()
	if err != nil {
		return s, nil, err
	}
	var kvs []gguf.KV
	if o.Vocab != nil {
		for _, kv := range o.Vocab.KVs {
			if strings.HasPrefix(kv.Key, "tokenizer.") {
				kvs = append(kvs, kv)
			}
		}
	} else {
		kvs = BuiltinVocab()
	}
	n := -1
	for _, kv := range kvs {
		if kv.Key == "tokenizer.ggml.tokens" {
			if _, ok := kv.Value.Strings(); ok {
				n = kv.Value.Len()
			}
		}
	}
	switch {
	case n <= 0:
		return s, nil, fmt.Errorf("synth: vocabulary has no tokenizer.ggml.tokens array of strings")
	case n > maxDim:
		return s, nil, fmt.Errorf("synth: vocabulary of %d tokens is too large", n)
	case s.NVocab != 0 && s.NVocab != n:
		return s, nil, fmt.Errorf("synth: NVocab %d does not match the vocabulary's %d tokens", s.NVocab, n)
	}
	s.NVocab = n
	return s, kvs, nil
}

// Write writes the model described by s and o to w. It checks everything
// before writing the first byte.
func Write(w io.Writer, s Spec, o Options) error {
	s, vocab, err := prepare(s, o)
	if err != nil {
		return err
	}
	ts, ftype, err := plan(s, o)
	if err != nil {
		return err
	}
	gw := gguf.NewWriter()
	setMetadata(gw, s, o, vocab, ftype)
	c := newGens()
	for i := range ts {
		t := &ts[i]
		fill, err := tensorWriter(c, t, o.Seed)
		if err != nil {
			return err
		}
		if err := gw.AddTensorFunc(t.Name, t.Type, t.Dims, fill); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	if _, err := gw.WriteTo(w); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// Description is the general.description of every file, which the CLI
// shows.
func Description(seed uint64) string {
	return fmt.Sprintf("random weights, not a trained model (flowinfer synth, seed %d)", seed)
}

// setMetadata sets the keys llama.cpp's converter writes for s.Arch (as in
// the golden synthetic models), the vocabulary, and llama-quantize's
// general.quantization_version and general.file_type last.
func setMetadata(gw *gguf.Writer, s Spec, o Options, vocab []gguf.KV, ftype uint32) {
	a := s.Arch + "."
	u := func(k string, v int) { gw.Set(a+k, gguf.Uint32(uint32(v))) }
	gw.Set("general.architecture", gguf.String(s.Arch))
	gw.Set("general.name", gguf.String(s.Name))
	gw.Set("general.description", gguf.String(Description(o.Seed)))
	if s.Arch == "gemma3" { // gemma3.go: the converter's keys and order
		gemma3Metadata(s, u, func(k string, v float32) { gw.Set(a+k, gguf.Float32(v)) },
			func(k, v string) { gw.Set(a+k, gguf.String(v)) })
		setVocab(gw, vocab, ftype)
		return
	}
	if s.Arch == "gemma4" { // gemma4.go
		gemma4Metadata(gw, s)
		setVocab(gw, vocab, ftype)
		return
	}
	u("context_length", s.NCtx)
	u("embedding_length", s.NEmbd)
	u("block_count", s.blockCount())
	if s.NFF > 0 {
		u("feed_forward_length", s.NFF)
	}
	u("attention.head_count", s.NHead)
	u("attention.head_count_kv", s.NHeadKV)
	gw.Set(a+"rope.freq_base", gguf.Float32(s.RopeBase))
	gw.Set(a+"attention.layer_norm_rms_epsilon", gguf.Float32(s.RMSEps))
	u("vocab_size", s.NVocab)
	if s.RopeScaling != "" {
		gw.Set(a+"rope.scaling.type", gguf.String(s.RopeScaling))
		if s.RopeFactor != 0 {
			gw.Set(a+"rope.scaling.factor", gguf.Float32(s.RopeFactor))
		}
		if s.RopeOrigCtx > 0 {
			u("rope.scaling.original_context_length", s.RopeOrigCtx)
		}
		if s.RopeAttnFactor != 0 {
			gw.Set(a+"rope.scaling.attn_factor", gguf.Float32(s.RopeAttnFactor))
		}
	}
	if s.Arch == "llama" || s.Arch == "mistral3" {
		u("rope.dimension_count", s.HeadDim)
	}
	if s.Arch == "mistral3" {
		mistral3Metadata(gw, s)
	}
	if s.Arch == "qwen35" || hybridMoE(s.Arch) {
		setQwen35Metadata(gw, s)
	}
	if isNemotron(s.Arch) {
		setNemotronMetadata(gw, s)
	}
	if s.Arch == "qwen3" || s.Arch == "qwen3moe" || s.Arch == "gpt-oss" || s.Arch == "qwen35" || hybridMoE(s.Arch) || isNemotron(s.Arch) || s.HeadDim != s.NEmbd/s.NHead {
		u("attention.key_length", s.HeadDim)
		u("attention.value_length", s.HeadDim)
	}
	if s.SlidingWindow > 0 {
		u("attention.sliding_window", s.SlidingWindow)
	}
	if s.NExpert > 0 {
		u("expert_count", s.NExpert)
		u("expert_used_count", s.NExpertUsed)
		u("expert_feed_forward_length", s.NFFExp)
	}
	if s.NFFShexp > 0 {
		u("expert_shared_feed_forward_length", s.NFFShexp)
	}
	setVocab(gw, vocab, ftype)
}

// setVocab sets the vocabulary's keys, then llama-quantize's
// general.quantization_version and general.file_type.
func setVocab(gw *gguf.Writer, vocab []gguf.KV, ftype uint32) {
	for _, kv := range vocab {
		gw.Set(kv.Key, kv.Value)
	}
	gw.Set("general.quantization_version", gguf.Uint32(2))
	gw.Set("general.file_type", gguf.Uint32(ftype))
}

// WriteFile writes the model to path atomically: into a temporary file in
// the same directory, synced, then renamed over path.
func WriteFile(path string, s Spec, o Options) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = Write(f, s, o); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}
