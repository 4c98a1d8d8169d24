package model_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// hyperOf reads the hyperparameters of a llama file with only the keys
// ReadHyper needs (context 1024, 32-wide heads, rope base 10000) plus
// extra.
func hyperOf(t *testing.T, extra map[string]gguf.Value) (model.Hyper, error) {
	t.Helper()
	w := gguf.NewWriter()
	for k, v := range map[string]gguf.Value{
		"general.architecture": gguf.String("llama"), "llama.context_length": gguf.Uint32(1024),
		"llama.embedding_length": gguf.Uint32(64), "llama.block_count": gguf.Uint32(1),
		"llama.feed_forward_length": gguf.Uint32(128), "llama.attention.head_count": gguf.Uint32(2),
		"llama.vocab_size": gguf.Uint32(10),
	} {
		w.Set(k, v)
	}
	for k, v := range extra {
		w.Set("llama."+k, v)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return model.ReadHyper(f, "llama")
}

// TestRopeScalingKeys: rope.scaling.* resolve as llama.cpp resolves them
// (llama_model::load_hparams and the llama_context constructor).
func TestRopeScalingKeys(t *testing.T) {
	f32 := gguf.Float32
	ln4 := float32(math.Log(4))
	// llama_context: get_mscale(4, 1) · 1/(1 + 0.1·ln 4), in float32.
	yarnAttn := (0.1*ln4 + 1) * (1 / (1 + 0.1*ln4))
	for _, c := range []struct {
		name        string
		keys        map[string]gguf.Value
		typ         string
		scale, ext  float32
		attn        float32
		mscale      float32
		nCtxOrig    int
		mscaleUlps  float64
		description string
	}{
		{name: "no keys", typ: "linear", scale: 1, attn: 1, mscale: 1, nCtxOrig: 1024},
		{name: "linear 4", keys: map[string]gguf.Value{"rope.scaling.type": gguf.String("linear"), "rope.scaling.factor": f32(4)},
			typ: "linear", scale: 0.25, attn: 1, mscale: 1, nCtxOrig: 1024},
		{name: "factor without type is linear", keys: map[string]gguf.Value{"rope.scaling.factor": f32(2)},
			typ: "linear", scale: 0.5, attn: 1, mscale: 1, nCtxOrig: 1024},
		{name: "old scale_linear key", keys: map[string]gguf.Value{"rope.scale_linear": f32(2)},
			typ: "linear", scale: 0.5, attn: 1, mscale: 1, nCtxOrig: 1024},
		{name: "none ignores the factor", keys: map[string]gguf.Value{"rope.scaling.type": gguf.String("none"), "rope.scaling.factor": f32(4)},
			typ: "none", scale: 1, attn: 1, mscale: 1, nCtxOrig: 1024},
		{name: "linear with attn_factor", keys: map[string]gguf.Value{"rope.scaling.type": gguf.String("linear"), "rope.scaling.factor": f32(2),
			"rope.scaling.attn_factor": f32(1.5)}, typ: "linear", scale: 0.5, attn: 1.5, mscale: 1.5, nCtxOrig: 1024},
		{name: "yarn 4", keys: map[string]gguf.Value{"rope.scaling.type": gguf.String("yarn"), "rope.scaling.factor": f32(4),
			"rope.scaling.original_context_length": gguf.Uint32(256)},
			typ: "yarn", scale: 0.25, ext: 1, attn: yarnAttn, mscale: 1 + 0.1*ln4, nCtxOrig: 256, mscaleUlps: 1},
		{name: "yarn 4 with attn_factor and llama.cpp's default yarn_* keys", keys: map[string]gguf.Value{
			"rope.scaling.type": gguf.String("yarn"), "rope.scaling.factor": f32(4), "rope.scaling.attn_factor": f32(0.5),
			"rope.scaling.yarn_beta_fast": f32(32), "rope.scaling.yarn_beta_slow": f32(1), "rope.scaling.yarn_ext_factor": f32(-1)},
			typ: "yarn", scale: 0.25, ext: 1, attn: yarnAttn * 0.5, mscale: 0.5 * (1 + 0.1*ln4), nCtxOrig: 1024, mscaleUlps: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := hyperOf(t, c.keys)
			if err != nil {
				t.Fatal(err)
			}
			if h.RopeScaling != c.typ || h.RopeScale != c.scale || h.RopeExtFactor != c.ext || h.RopeAttnFactor != c.attn || h.NCtxOrig != c.nCtxOrig {
				t.Fatalf("type %q scale %g ext %g attn %g orig %d; want %q %g %g %g %d", h.RopeScaling, h.RopeScale, h.RopeExtFactor,
					h.RopeAttnFactor, h.NCtxOrig, c.typ, c.scale, c.ext, c.attn, c.nCtxOrig)
			}
			rp := model.Rope{Scale: h.RopeScale, ExtFactor: h.RopeExtFactor, AttnFactor: h.RopeAttnFactor}
			got := rp.MScale()
			if ulps := math.Abs(float64(int32(math.Float32bits(got)) - int32(math.Float32bits(c.mscale)))); ulps > c.mscaleUlps {
				t.Errorf("MScale %g, want %g (%g ulps apart)", got, c.mscale, ulps)
			}
		})
	}
}

// TestRopeScalingErrors: unknown types are refused by name, nonsensical
// numbers and keys flowinfer would have to ignore are clear errors.
func TestRopeScalingErrors(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	yarn := gguf.String("yarn")
	for _, c := range []struct {
		name string
		keys map[string]gguf.Value
		want string
	}{
		{"longrope", map[string]gguf.Value{"rope.scaling.type": gguf.String("longrope")}, `rope scaling type "longrope" is not supported (supported: none, linear, yarn`},
		{"unknown type", map[string]gguf.Value{"rope.scaling.type": gguf.String("ntk")}, `rope scaling type "ntk" is not supported`},
		{"type not a string", map[string]gguf.Value{"rope.scaling.type": gguf.Uint32(2)}, `key "llama.rope.scaling.type": want a string`},
		{"factor 0", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.factor": gguf.Float32(0)}, `key "llama.rope.scaling.factor" = 0: want a positive finite number`},
		{"factor -2", map[string]gguf.Value{"rope.scaling.type": gguf.String("linear"), "rope.scaling.factor": gguf.Float32(-2)}, `"llama.rope.scaling.factor" = -2: want a positive finite number`},
		{"factor NaN", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.factor": gguf.Float32(nan)}, `"llama.rope.scaling.factor" = NaN: want a positive finite number`},
		{"factor Inf", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.factor": gguf.Float32(inf)}, `"llama.rope.scaling.factor" = +Inf: want a positive finite number`},
		{"factor a string", map[string]gguf.Value{"rope.scaling.factor": gguf.String("4")}, `key "llama.rope.scaling.factor": want a number`},
		{"scale_linear 0", map[string]gguf.Value{"rope.scale_linear": gguf.Float32(0)}, `"llama.rope.scale_linear" = 0: want a positive finite number`},
		{"attn_factor 0", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.attn_factor": gguf.Float32(0)}, `"llama.rope.scaling.attn_factor" = 0: want a positive finite number`},
		{"attn_factor NaN", map[string]gguf.Value{"rope.scaling.attn_factor": gguf.Float32(nan)}, `"llama.rope.scaling.attn_factor" = NaN`},
		{"original context 0", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.factor": gguf.Float32(4),
			"rope.scaling.original_context_length": gguf.Uint32(0)}, `"llama.rope.scaling.original_context_length" is 0`},
		{"beta_fast 16", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.yarn_beta_fast": gguf.Float32(16)},
			`key "llama.rope.scaling.yarn_beta_fast" = 16 is not supported (llama.cpp ignores it for llama; only its default 32 is accepted)`},
		{"yarn_log_multiplier", map[string]gguf.Value{"rope.scaling.type": yarn, "rope.scaling.yarn_log_multiplier": gguf.Float32(0.1)},
			`"llama.rope.scaling.yarn_log_multiplier" = 0.1 is not supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := hyperOf(t, c.keys)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestYarnCorrDims pins ggml_rope_yarn_corr_dims (beta_fast 32, beta_slow
// 1) on Llama-2's shape at 4096, Qwen3's YaRN setup (original context
// 32768, base 1e6) and the golden's small model; the unrounded values are
// 20.94/45.03, 23.60/39.65 and 0.42/6.44.
func TestYarnCorrDims(t *testing.T) {
	for _, c := range []struct {
		nDims, nCtxOrig int
		base            float32
		want            [2]float32
	}{
		{128, 4096, 10000, [2]float32{20, 46}},
		{128, 32768, 1e6, [2]float32{23, 40}},
		{32, 256, 10000, [2]float32{0, 7}},
		{8, 1 << 27, 10000, [2]float32{5, 7}}, // clamped to nDims-1
	} {
		if got := model.YarnCorrDims(c.nDims, c.nCtxOrig, c.base, 32, 1); got != c.want {
			t.Errorf("YarnCorrDims(%d, %d, %g) = %v, want %v", c.nDims, c.nCtxOrig, c.base, got, c.want)
		}
	}
	for _, c := range []struct {
		i    int
		want float32
	}{{0, 1}, {2, 1}, {3, 0.75}, {5, 0.25}, {7, 0}, {9, 0}} {
		if got := model.YarnRamp(2, 6, c.i); got != c.want {
			t.Errorf("YarnRamp(2, 6, %d) = %g, want %g", c.i, got, c.want)
		}
	}
}
