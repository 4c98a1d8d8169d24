package main

// gen.go: `flowinfer gen`, a random-weight GGUF of a preset shape
// (model/synth), for benchmarks against llama.cpp on identical files.

import (
	"fmt"
	"os"
	"time"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// GenCmd writes a random-weight model.
type GenCmd struct {
	Preset string `name:"preset" required:"" help:"Shape: demo, llama-1b, llama-8b, qwen3moe-small, qwen3-30b-a3b, gpt-oss-small, gpt-oss-20b, gpt-oss-120b (gpt-oss: MXFP4 experts, --pure --type for the rest), gemma3-small, gemma-3-4b, gemma4-small, gemma4-mixed-small, gemma4-moe-small, gemma-4-e4b, gemma-4-26b-a4b, mistral3-small, ministral-3-14b, qwen35-small, qwen35-small-mtp, qwen35-mid, qwen3.5-9b, qwen35moe-small, qwen35moe-small-mtp-fused, qwen3.5-35b-a3b, qwen3.5-122b-a10b, qwen3next-small, qwen3-next-80b-a3b, nemotronh-small, nemotronh-moe-small or nemotron-3-nano-30b-a3b."`
	Type   string `name:"type" default:"Q8_0" help:"Weight types, as llama-quantize names them: F32, F16, BF16, Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, Q3_K_L, Q3_K_M, Q3_K_S, Q2_K, Q2_K_S, Q5_0, Q5_1, Q4_0, Q4_1 (a mixture like llama-quantize's, tensor by tensor; Q2_K_S as llama-quantize would write it with an importance matrix, which it requires; with --pure one type, e.g. Q4_K, Q3_K, Q2_K, or IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, which have no mixture; IQ2_XXS, IQ2_XS, IQ1_S are quantized with an importance matrix of all ones)."`
	Pure   bool   `name:"pure" help:"Every 2-D weight of --type (as llama-quantize --pure)."`
	Vocab  string `name:"vocab" help:"GGUF whose tokenizer to copy (e.g. a llama.cpp vocab file); default: the built-in 1024-token vocabulary." type:"existingfile"`
	Out    string `short:"o" name:"output" required:"" help:"Output GGUF file." type:"path"`
	Seed   uint64 `name:"seed" default:"1" help:"Seed of the random weights."`
	// PlainRouter keeps the golden recipe's router for presets that make
	// routing realistic (qwen3-30b-a3b).
	PlainRouter bool `name:"plain-router" help:"MoE presets: the golden models' router (a few experts take almost every token) instead of the realistic one."`
	// Context and RoPE scaling overrides (long-context tests).
	Ctx            int     `name:"ctx" help:"<arch>.context_length instead of the preset's."`
	RopeScaling    string  `name:"rope-scaling" enum:",none,linear,yarn" default:"" help:"Write rope.scaling.type: none, linear or yarn (default: the preset's; gpt-oss presets have YaRN, gemma-3-4b linear 8)."`
	RopeFactor     float32 `name:"rope-factor" help:"rope.scaling.factor (with --rope-scaling)."`
	RopeOrigCtx    int     `name:"rope-orig-ctx" help:"rope.scaling.original_context_length (with --rope-scaling)."`
	RopeAttnFactor float32 `name:"rope-attn-factor" help:"rope.scaling.attn_factor (with --rope-scaling)."`
	KOutliers      float64 `name:"k-outliers" help:"Plant outlier channels in K, as real models' K caches have: 4 of every head's dimensions (per layer) scaled by this factor through attn_k_norm (qwen3 and qwen3moe presets)."`
}

func (c *GenCmd) Run(g *Globals) error {
	spec, err := synth.Preset(c.Preset)
	if err != nil {
		return err
	}
	if c.PlainRouter {
		spec.RouterSigma, spec.EmbdStd, spec.AttnOutStd = 0, 0, 0
	}
	if c.Ctx < 0 {
		return fmt.Errorf("gen: --ctx %d must be positive", c.Ctx)
	}
	if c.Ctx > 0 {
		spec.NCtx = c.Ctx
	}
	// the RoPE flags replace the preset's scaling (gpt-oss's YaRN, gemma-3-4b's
	// linear 8, the mistral3 presets' YaRN) only when given
	if c.RopeScaling != "" || c.RopeFactor != 0 || c.RopeOrigCtx != 0 || c.RopeAttnFactor != 0 {
		spec.RopeScaling, spec.RopeFactor, spec.RopeOrigCtx, spec.RopeAttnFactor = c.RopeScaling, c.RopeFactor, c.RopeOrigCtx, c.RopeAttnFactor
	}
	spec.KOutliers = c.KOutliers
	opts := synth.Options{Seed: c.Seed}
	if c.Pure {
		t, ok := quant.TypeByName(c.Type)
		if !ok {
			return fmt.Errorf("gen: unknown tensor type %q", c.Type)
		}
		opts.Type = t
	} else {
		opts.Mix = c.Type
	}
	if c.Vocab != "" {
		v, err := gguf.Open(c.Vocab)
		if err != nil {
			return err
		}
		defer v.Close()
		opts.Vocab = v
	}
	t0 := time.Now()
	if err := synth.WriteFile(c.Out, spec, opts); err != nil {
		return err
	}
	st, err := os.Stat(c.Out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gen: wrote %s (%s %s, %.2f MiB) in %.1f s\n", c.Out, c.Preset, c.Type,
		float64(st.Size())/(1<<20), time.Since(t0).Seconds())
	return nil
}
