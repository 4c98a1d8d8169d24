package synth_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestMistral3Preset: mistral3-small carries the keys llama.cpp's converter
// writes for a Ministral 3 text model (LlamaModel's plus the YaRN keys of
// rope_parameters, yarn_log_multiplier and attention.temperature_scale),
// and its Q4_K_M mixture has the types llama-quantize (commit d32676d77)
// chose for the same shapes: Q6_K output, attn_v and ffn_down in layers
// 2 and 3 (use_more_bits of 4 layers), Q4_K the rest, norms F32.
func TestMistral3Preset(t *testing.T) {
	s, err := synth.Preset("mistral3-small")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := write(t, s, synth.Options{Mix: "Q4_K_M", Seed: 1})
	for key, want := range map[string]string{
		"general.architecture":                          `"mistral3"`,
		"mistral3.context_length":                       "4096",
		"mistral3.rope.dimension_count":                 "64",
		"mistral3.attention.key_length":                 "64",
		"mistral3.attention.value_length":               "64",
		"mistral3.rope.freq_base":                       "1e+06",
		"mistral3.rope.scaling.type":                    `"yarn"`,
		"mistral3.rope.scaling.factor":                  "16",
		"mistral3.rope.scaling.original_context_length": "256",
		"mistral3.rope.scaling.yarn_beta_fast":          "16",
		"mistral3.rope.scaling.yarn_beta_slow":          "2",
		"mistral3.rope.scaling.yarn_log_multiplier":     "0.5",
		"mistral3.attention.temperature_scale":          "0.10000000149011612", // float32 0.1
		"general.file_type":                             "15",
	} {
		v, ok := f.Get(key)
		if !ok {
			t.Errorf("key %q missing", key)
			continue
		}
		if got := v.String(); got != want {
			t.Errorf("key %q = %s, want %s", key, got, want)
		}
	}
	var q6 []string
	for _, tn := range f.Tensors {
		switch {
		case tn.Type == quant.Q6_K:
			q6 = append(q6, tn.Name)
		case len(tn.Dims) == 1 && tn.Type != quant.F32, len(tn.Dims) > 1 && tn.Type != quant.Q4_K:
			t.Errorf("tensor %s is %s", tn.Name, tn.Type)
		}
	}
	want := "output.weight blk.2.attn_v.weight blk.2.ffn_down.weight blk.3.attn_v.weight blk.3.ffn_down.weight"
	if got := strings.Join(q6, " "); got != want {
		t.Errorf("Q6_K tensors %s, llama-quantize's %s", got, want)
	}
	if len(f.Tensors) != 39 {
		t.Errorf("%d tensors, llama.cpp's file has 39", len(f.Tensors))
	}
}

// TestMistral3SpecErrors: the mistral3 keys are refused elsewhere and
// checked.
func TestMistral3SpecErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*synth.Spec)
		want string
	}{
		{func(s *synth.Spec) { s.Arch = "llama" }, "are mistral3 keys; llama has none"},
		{func(s *synth.Spec) { s.RopeScaling, s.RopeOrigCtx = "linear", 0 }, "need RopeScaling yarn"},
		{func(s *synth.Spec) { s.YarnBetaSlow = -1 }, "must be finite and not negative"},
	} {
		s, err := synth.Preset("mistral3-small")
		if err != nil {
			t.Fatal(err)
		}
		c.edit(&s)
		_, err = synth.Plan(s, synth.Options{Type: quant.F32})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want it to contain %q", err, c.want)
		}
	}
	// the 14B preset's size: 13.5B text parameters (the published count)
	s, err := synth.Preset("ministral-3-14b")
	if err != nil {
		t.Fatal(err)
	}
	s.NVocab = 0
	ts, err := synth.Plan(s, synth.Options{Type: quant.F32})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, tn := range ts {
		e := uint64(1)
		for _, d := range tn.Dims {
			e *= d
		}
		n += e
	}
	// with the built-in 1024-token vocabulary instead of 131072
	if want := uint64(13_506_073_600 - 2*(131072-1024)*5120); n != want {
		t.Errorf("%d parameters, want %s", n, fmt.Sprint(want))
	}
}
