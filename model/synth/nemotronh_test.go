package synth

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestNemotronNanoShape: the nemotron-3-nano-30b-a3b preset with the
// model's 131,072-token vocabulary has 31.58B parameters (the published
// total, e.g. the model's Hugging Face card and its ports: "31.58B total"),
// within 0.5%, and 23 Mamba-2, 23 MoE and 6 attention layers.
func TestNemotronNanoShape(t *testing.T) {
	s, ok := nemotronPreset("nemotron-3-nano-30b-a3b")
	if !ok {
		t.Fatal("no preset")
	}
	s, err := s.normalize()
	if err != nil {
		t.Fatal(err)
	}
	s.NVocab = 131072
	var total float64
	for _, ts := range tensorList(s) {
		n := 1.0
		for _, d := range ts.Dims {
			n *= float64(d)
		}
		total += n
	}
	if want := 31.58e9; math.Abs(total-want) > 0.005*want {
		t.Errorf("%.4gB parameters, published %.4gB", total/1e9, want/1e9)
	}
	t.Logf("%.4gB parameters", total/1e9)
	// the mixture resolves (rows of 2688 are not whole 256-blocks: Q5_0,
	// as llama-quantize's fallback) with the built-in vocabulary
	p0, _ := nemotronPreset("nemotron-3-nano-30b-a3b")
	ts, err := Plan(p0, Options{Mix: "Q4_K_M"})
	if err != nil {
		t.Fatal(err)
	}
	var bytes uint64
	for _, tn := range ts {
		bytes += tn.Bytes
	}
	t.Logf("Q4_K_M with the built-in vocabulary: %.2f GB", float64(bytes)/1e9)
	p := s.Nemotron.Pattern
	if m, e, a := strings.Count(p, "M"), strings.Count(p, "E"), strings.Count(p, "*"); m != 23 || e != 23 || a != 6 {
		t.Errorf("layers: %d Mamba-2, %d MoE, %d attention; want 23, 23, 6", m, e, a)
	}
}

// TestNemotronSpecRejects: a pattern of the wrong length or with a letter
// the architecture does not have, and a MoE without a shared expert, are
// errors naming the problem.
func TestNemotronSpecRejects(t *testing.T) {
	base, _ := nemotronPreset("nemotronh-small")
	moe, _ := nemotronPreset("nemotronh-moe-small")
	for _, tc := range []struct {
		edit func(s *Spec)
		from Spec
		want string
	}{
		{func(s *Spec) { s.Nemotron.Pattern = "M-M*M" }, base, "has 5 layers"},
		{func(s *Spec) { s.Nemotron.Pattern = "M-M*ME" }, base, "layer 5"},
		{func(s *Spec) { s.Nemotron.Pattern = "MEM*-MEM" }, moe, "layer 4"},
		{func(s *Spec) { s.Nemotron.NFFShExp = 0 }, moe, "shared expert"},
		{func(s *Spec) { s.Nemotron.Heads = 7 }, base, "multiple of the groups"},
		{func(s *Spec) { s.Nemotron.ExpScale = 2 }, base, "no experts"},
	} {
		s := tc.from
		tc.edit(&s)
		if _, err := s.normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", s.Nemotron, err, tc.want)
		}
	}
}

// TestNemotronMixture: nemotronh-small and nemotronh-moe-small in Q4_K_M
// have the tensors, order and types llama-quantize gave their F32 files
// (llama.cpp d32676d77, `llama-quantize small-f32.gguf out.gguf Q4_K_M 1`,
// read from its log): Q6_K for the output, for the one attn_v (its counter
// runs over attention layers only: use_more_bits(0, 1)) and for the MoE's
// ffn_down of layer 6 (use_more_bits by layer; the dense FFN's ffn_down
// counter runs over ffn_down tensors and picks none), F32 for ssm_a,
// ssm_d, ssm_conv1d, ssm_norm, the router and the 1-D tensors, Q4_K for
// the rest; 41 and 65 tensors.
func TestNemotronMixture(t *testing.T) {
	for _, tc := range []struct {
		preset string
		n      int
		q6     []string
	}{
		{"nemotronh-small", 41, []string{"output.weight", "blk.3.attn_v.weight"}},
		{"nemotronh-moe-small", 65, []string{"output.weight", "blk.3.attn_v.weight", "blk.6.ffn_down_exps.weight", "blk.6.ffn_down_shexp.weight"}},
	} {
		s, _ := nemotronPreset(tc.preset)
		ts, err := Plan(s, Options{Mix: "Q4_K_M"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != tc.n {
			t.Errorf("%s: %d tensors, llama-quantize's file has %d", tc.preset, len(ts), tc.n)
		}
		for i, tn := range ts {
			want := "q4_K"
			switch {
			case slices.Contains(tc.q6, tn.Name):
				want = "q6_K"
			case len(tn.Dims) == 1 || strings.Contains(tn.Name, "ssm_a") || strings.Contains(tn.Name, "ssm_d") && !strings.Contains(tn.Name, "ssm_dt") ||
				strings.Contains(tn.Name, "ssm_conv1d") || strings.Contains(tn.Name, "ssm_norm") || strings.Contains(tn.Name, "ffn_gate_inp"):
				want = "f32"
			}
			if got := tn.Type.String(); got != want {
				t.Errorf("%s: tensor %d %s: %s, llama-quantize %s", tc.preset, i, tn.Name, got, want)
			}
			if i > 0 && ts[i-1].layer == tn.layer && ts[i-1].Name > tn.Name {
				t.Errorf("%s: %s before %s: not llama-quantize's order", tc.preset, ts[i-1].Name, tn.Name)
			}
		}
	}
}
