package synth_test

import (
	"math"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestGptOssPlan: a gpt-oss file has llama.cpp's tensor names and shapes
// (openai-moe.cpp's load_arch_tensors), MXFP4 experts whatever the other
// weights' type, F32 biases, sinks, norms and router; the converter's keys
// (sliding window, key length, YaRN); it loads with the model's windows
// [128 0 128 0] and runs. The real presets' parameter counts, with the real
// vocabulary's embeddings added, are the published totals: 20.9B and
// 116.8B. Mixtures and gpt-oss-only fields elsewhere are refused.
func TestGptOssPlan(t *testing.T) {
	s, err := synth.Preset("gpt-oss-small")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := synth.Plan(s, synth.Options{Type: quant.Q8_0})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]quant.Type{}
	for _, p := range plan {
		types[p.Name] = p.Type
	}
	for name, want := range map[string]quant.Type{
		"token_embd.weight": quant.Q8_0, "output.weight": quant.Q8_0, "blk.1.attn_q.weight": quant.Q8_0,
		"blk.1.attn_q.bias": quant.F32, "blk.1.attn_output.bias": quant.F32, "blk.1.attn_sinks.weight": quant.F32,
		"blk.1.post_attention_norm.weight": quant.F32, "blk.1.ffn_gate_inp.weight": quant.F32, "blk.1.ffn_gate_inp.bias": quant.F32,
		"blk.1.ffn_gate_exps.weight": quant.MXFP4, "blk.1.ffn_up_exps.weight": quant.MXFP4, "blk.1.ffn_down_exps.weight": quant.MXFP4,
		"blk.1.ffn_gate_exps.bias": quant.F32, "blk.1.ffn_up_exps.bias": quant.F32, "blk.1.ffn_down_exps.bias": quant.F32,
	} {
		if got, ok := types[name]; !ok || got != want {
			t.Errorf("%s: %v (present %v), want %v", name, got, ok, want)
		}
	}
	if len(plan) != 3+s.NLayer*19 {
		t.Errorf("%d tensors, want %d", len(plan), 3+s.NLayer*19)
	}
	f, _ := write(t, s, synth.Options{Type: quant.F32, Seed: 5})
	for key, want := range map[string]uint64{"gpt-oss.attention.sliding_window": 128, "gpt-oss.attention.key_length": 64,
		"gpt-oss.expert_feed_forward_length": 256, "gpt-oss.rope.scaling.original_context_length": 4096, "general.file_type": 0} {
		if got, ok := f.GetUint(key); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", key, got, ok, want)
		}
	}
	if typ, _ := f.GetString("gpt-oss.rope.scaling.type"); typ != "yarn" {
		t.Errorf("rope.scaling.type %q, want yarn", typ)
	}
	m, err := model.Load(f, func(quant.Type) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Window; len(got) != 4 || got[0] != 128 || got[1] != 0 || got[2] != 128 || got[3] != 0 {
		t.Errorf("windows %v, want [128 0 128 0]", got)
	}
	if m.RopeScale != 1.0/32 || m.RopeExtFactor != 1 || m.NormTopK || !m.GatingSoftmaxWeight || !m.SwiGLUOAI {
		t.Errorf("rope scale %g ext %g, norm top-k %v, softmax-weight %v, swiglu-oai %v", m.RopeScale, m.RopeExtFactor, m.NormTopK, m.GatingSoftmaxWeight, m.SwiGLUOAI)
	}
	run(t, f)
	q8, _ := write(t, s, synth.Options{Type: quant.Q8_0, Seed: 5})
	if ft, _ := q8.GetUint("general.file_type"); ft != 38 {
		t.Errorf("Q8_0 file type %d, want 38 (MXFP4_MOE)", ft)
	}

	// published totals: 20.91B and 116.83B parameters with the 201,088-token
	// vocabulary (two 2880-wide embedding matrices)
	for _, c := range []struct {
		preset string
		want   float64
	}{{"gpt-oss-20b", 20.91e9}, {"gpt-oss-120b", 116.83e9}} {
		s, err := synth.Preset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := synth.Plan(s, synth.Options{Type: quant.Q8_0})
		if err != nil {
			t.Fatal(err)
		}
		var params float64
		for _, p := range plan {
			n := 1.0
			for _, d := range p.Dims {
				n *= float64(d)
			}
			if p.Name == "token_embd.weight" || p.Name == "output.weight" {
				n = 2880 * 201088
			}
			params += n
		}
		if math.Abs(params-c.want)/c.want > 0.001 {
			t.Errorf("%s: %.4gB parameters, published %.4gB", c.preset, params/1e9, c.want/1e9)
		}
	}

	for _, c := range []struct {
		name string
		s    synth.Spec
		o    synth.Options
		want string
	}{
		{"mixture", s, synth.Options{Mix: "Q4_K_M"}, "rules are not implemented"},
		{"no window", func() synth.Spec { x := s; x.SlidingWindow = 0; return x }(), synth.Options{}, "SlidingWindow"},
		{"tied", func() synth.Spec { x := s; x.Tied = true; return x }(), synth.Options{}, "Tied"},
		{"odd width", func() synth.Spec { x := s; x.NFFExp = 100; return x }(), synth.Options{}, "multiples of 32"},
		{"window on llama", synth.Spec{Arch: "llama", NEmbd: 64, NLayer: 1, NHead: 2, NFF: 64, SlidingWindow: 8}, synth.Options{}, "no sliding window"},
	} {
		if _, err := synth.Plan(c.s, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
