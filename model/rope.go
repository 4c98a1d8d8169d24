package model

// rope.go: RoPE scaling read from GGUF metadata and resolved as llama.cpp
// resolves it (llama_model::load_hparams, the llama_context constructor,
// ggml_rope_yarn_corr_dims): rope.scaling.type none, linear or yarn, with
// rope.scaling.factor, rope.scaling.original_context_length and
// rope.scaling.attn_factor, and for the families whose llama.cpp loader
// reads them (mistral3) yarn_beta_fast, yarn_beta_slow and
// yarn_log_multiplier. It does not do longrope (per-context factor
// tensors), deepseek2's mscale special case, or hunyuan's NTK alpha; files
// that ask for them are refused by name.

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// YaRN's ramp bounds, llama.cpp's defaults (llama_hparams.yarn_beta_fast,
// yarn_beta_slow): rotations that turn more than yarnBetaFast times over the
// original context are extrapolated (left alone), those that turn less than
// yarnBetaSlow times are interpolated (divided by the factor).
const (
	yarnBetaFast = 32
	yarnBetaSlow = 1
)

// MScale is what ggml's rope_yarn multiplies cos and sin by: AttnFactor
// (0 means 1), times 1 + 0.1·ln(1/Scale) when YaRN is on (ExtFactor != 0).
func (r *Rope) MScale() float32 {
	m := r.AttnFactor
	if m == 0 {
		m = 1
	}
	if r.ExtFactor != 0 {
		m *= 1 + 0.1*logf(1/r.Scale)
	}
	return m
}

// YarnRamp is ggml's rope_yarn_ramp for pair i: 1 for pairs at or below
// low (extrapolated), 0 at or above high (interpolated), linear between.
func YarnRamp(low, high float32, i int) float32 {
	y := (float32(i) - low) / max(0.001, high-low)
	return 1 - min(1, max(0, y))
}

// YarnCorrDims is ggml_rope_yarn_corr_dims: the pair indices where YaRN's
// ramp starts and ends for nDims rotated dimensions, an original context of
// nCtxOrig and the given base, in float32 as ggml computes them.
func YarnCorrDims(nDims, nCtxOrig int, base, betaFast, betaSlow float32) [2]float32 {
	corr := func(nRot float32) float32 {
		return float32(nDims) * logf(float32(nCtxOrig)/(nRot*2*float32(math.Pi))) / (2 * logf(base))
	}
	start := float32(math.Floor(float64(corr(betaFast))))
	end := float32(math.Ceil(float64(corr(betaSlow))))
	return [2]float32{max(0, start), min(float32(nDims-1), end)}
}

// logf is C's logf: the float32 natural logarithm.
func logf(x float32) float32 { return float32(math.Log(float64(x))) }

// readRopeScaling sets h's RoPE scaling fields from the rope.scaling.* keys
// (after RopeDim and RopeBase are known), as llama.cpp does: no type key
// means linear, the factor falls back to the older rope.scale_linear,
// attn_factor applies to every type, and YaRN's attention factor is
// llama_context's get_mscale(factor, 1) / (1 + 0.1·ln factor) times it, which
// ggml's rope_yarn multiplies back by 1 + 0.1·ln factor.
func readRopeScaling(k *keyReader, h *Hyper) error {
	p := h.Arch + ".rope."
	typ := "linear"
	if v, ok := k.f.Get(p + "scaling.type"); ok {
		s, ok := v.Str()
		if !ok {
			return fmt.Errorf("model: key %q: want a string, got %s", p+"scaling.type", v)
		}
		typ = s
	}
	switch typ {
	case "none", "linear", "yarn":
	default:
		return fmt.Errorf("model: rope scaling type %q is not supported (supported: none, linear, yarn; llama3 via rope_freqs)", typ)
	}
	factor, err := positiveKey(k.f, p+"scaling.factor", 1)
	if err != nil {
		return err
	}
	if _, ok := k.f.Get(p + "scaling.factor"); !ok {
		if factor, err = positiveKey(k.f, p+"scale_linear", 1); err != nil {
			return err
		}
	}
	attn, err := positiveKey(k.f, p+"scaling.attn_factor", 1)
	if err != nil {
		return err
	}
	h.NCtxOrig = h.NCtxTrain
	if _, ok := k.f.Get(p + "scaling.original_context_length"); ok {
		if h.NCtxOrig = k.uint("rope.scaling.original_context_length", 0, false); k.err != nil {
			return k.err
		}
		if h.NCtxOrig == 0 {
			return fmt.Errorf("model: key %q is 0; want a positive context length", p+"scaling.original_context_length")
		}
	}
	// The YaRN keys the family's loader reads (llama_model_<arch>::
	// load_arch_hparams): mistral3 reads the ramp bounds and the log
	// multiplier.
	h.YarnBetaFast, h.YarnBetaSlow = yarnBetaFast, yarnBetaSlow
	reads := map[string]*float32{}
	if h.Arch == "mistral3" {
		reads = map[string]*float32{"scaling.yarn_beta_fast": &h.YarnBetaFast, "scaling.yarn_beta_slow": &h.YarnBetaSlow,
			"scaling.yarn_log_multiplier": &h.YarnLogMul}
	}
	// Keys llama.cpp's converter may write but its loader ignores for these
	// architectures: accepted at llama.cpp's defaults, refused otherwise
	// rather than silently computing something else.
	for _, d := range []struct {
		key string
		def float32
	}{
		{"scaling.yarn_ext_factor", -1}, {"scaling.yarn_attn_factor", 1}, {"scaling.yarn_beta_fast", yarnBetaFast},
		{"scaling.yarn_beta_slow", yarnBetaSlow}, {"scaling.yarn_log_multiplier", 0}, {"scaling.alpha", 0},
	} {
		v, ok := k.f.Get(p + d.key)
		if !ok {
			continue
		}
		if dst, read := reads[d.key]; read {
			x, err := finiteKey(k.f, p+d.key)
			if err != nil {
				return err
			}
			// ggml_rope_yarn_corr_dims takes the log of the context over
			// the bounds, and get_mscale's log multiplier is a weight:
			// bounds must be positive, the multiplier not negative.
			if x < 0 || x == 0 && d.key != "scaling.yarn_log_multiplier" {
				return fmt.Errorf("model: key %q = %g: want a positive number (a non-negative one for the log multiplier)", p+d.key, x)
			}
			*dst = x
			continue
		}
		if x, ok := v.Float(); !ok || float32(x) != d.def {
			got := v.String()
			if ok {
				got = fmt.Sprint(float32(x))
			}
			return fmt.Errorf("model: key %q = %s is not supported (llama.cpp ignores it for %s; only its default %g is accepted)", p+d.key, got, h.Arch, d.def)
		}
	}
	h.RopeScaling = typ
	h.RopeScale = 1 / factor
	if typ == "none" {
		h.RopeScale = 1
	}
	h.RopeAttnFactor = 1
	if typ == "yarn" {
		h.RopeExtFactor = 1
		f := 1 / h.RopeScale
		// get_mscale(factor, 1), divided by get_mscale(factor,
		// mscale_all_dims) when the file has a log multiplier
		a := getMScale(f, 1)
		if h.YarnLogMul != 0 {
			a = getMScale(f, 1) / getMScale(f, h.YarnLogMul)
		}
		a *= 1 / (1 + 0.1*logf(f))
		h.RopeAttnFactor = a
	}
	h.RopeAttnFactor *= attn
	return nil
}

// getMScale is the llama_context constructor's get_mscale, in float32 with
// its order of operations: 1 for scale ≤ 1, else (0.1·mscale)·ln(scale) + 1.
func getMScale(scale, mscale float32) float32 {
	if scale <= 1 {
		return 1
	}
	m := 0.1 * mscale
	return float32(m*logf(scale)) + 1 // the conversion forbids a fused multiply-add
}

// finiteKey reads a float key that is present and must be finite.
func finiteKey(f *gguf.File, key string) (float32, error) {
	v, _ := f.Get(key)
	x, ok := v.Float()
	if !ok {
		return 0, fmt.Errorf("model: key %q: want a number, got %s", key, v)
	}
	if fx := float32(x); !math.IsNaN(float64(fx)) && !math.IsInf(float64(fx), 0) {
		return fx, nil
	}
	return 0, fmt.Errorf("model: key %q = %s: want a finite number", key, v)
}

// positiveKey reads an optional float key that must be finite and
// positive when present.
func positiveKey(f *gguf.File, key string, def float32) (float32, error) {
	v, ok := f.Get(key)
	if !ok {
		return def, nil
	}
	x, ok := v.Float()
	if !ok {
		return def, fmt.Errorf("model: key %q: want a number, got %s", key, v)
	}
	if fx := float32(x); fx > 0 && !math.IsInf(float64(fx), 0) {
		return fx, nil
	}
	return def, fmt.Errorf("model: key %q = %s: want a positive finite number", key, v)
}

// Table writes the angle table of position p into cs (4·Dim/2 floats:
// cos then sin, each Dim/2 values for NEOX and Dim values, pairs
// repeated and sin negated in the first of each pair, for adjacent-pair
// RoPE) as ggml_rope_ext computes the angles: the float32 recurrence
// theta *= Base^(-2/Dim), the llama3 Factors, YaRN's mix of the
// extrapolated and interpolated angle when ExtFactor != 0, cos and sin in
// float64 rounded to float32, times MScale(). The CPU kernels and the GPU's
// rope shader both rotate by it, so both backends use the same values.
func (rp *Rope) Table(cs []float32, p int32) {
	thetaScale := float32(math.Pow(float64(rp.Base), float64(-2/float32(rp.Dim))))
	half := rp.Dim / 2
	c, s := cs[:2*half], cs[2*half:4*half]
	mscale := rp.MScale()
	theta := float32(p)
	for i := range half {
		extrap := theta
		if rp.Factors != nil {
			extrap /= rp.Factors[i]
		}
		th := rp.Scale * extrap
		if rp.ExtFactor != 0 {
			mix := YarnRamp(rp.Corr[0], rp.Corr[1], i) * rp.ExtFactor
			th = float32(th*(1-mix)) + float32(extrap*mix)
		}
		sin64, cos64 := math.Sincos(float64(th))
		cos, sin := float32(cos64)*mscale, float32(sin64)*mscale
		if rp.Type == RopeNeox {
			c[i], s[i] = cos, sin
		} else {
			c[2*i], c[2*i+1], s[2*i], s[2*i+1] = cos, cos, -sin, sin
		}
		theta *= thetaScale
	}
}
