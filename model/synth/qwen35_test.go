package synth_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestQwen35Mixture: qwen35-small in Q4_K_M has the tensors, order and
// types llama-quantize gave its F32 file (llama.cpp d32676d77,
// `llama-quantize small-f32.gguf out.gguf Q4_K_M 1`, listed here from its
// log): attn_qkv takes attn_v's rule and counter, ssm_out falls back to
// Q5_0, ssm_conv1d stays F32.
func TestQwen35Mixture(t *testing.T) {
	want := []string{
		"output.weight q6_K", "output_norm.weight f32", "token_embd.weight q4_K",
	}
	for il := range 3 {
		qkv, down := "q4_K", "q4_K"
		if il == 2 {
			qkv, down = "q6_K", "q6_K"
		}
		p := "blk." + string(rune('0'+il)) + "."
		want = append(want, p+"attn_gate.weight q4_K", p+"attn_norm.weight f32", p+"attn_qkv.weight "+qkv,
			p+"ffn_down.weight "+down, p+"ffn_gate.weight q4_K", p+"ffn_up.weight q4_K", p+"post_attention_norm.weight f32",
			p+"ssm_a f32", p+"ssm_alpha.weight q4_K", p+"ssm_beta.weight q4_K", p+"ssm_conv1d.weight f32",
			p+"ssm_dt.bias f32", p+"ssm_norm.weight f32", p+"ssm_out.weight q5_0")
	}
	want = append(want, "blk.3.attn_k.weight q4_K", "blk.3.attn_k_norm.weight f32", "blk.3.attn_norm.weight f32",
		"blk.3.attn_output.weight q4_K", "blk.3.attn_q.weight q4_K", "blk.3.attn_q_norm.weight f32",
		"blk.3.attn_v.weight q6_K", "blk.3.ffn_down.weight q6_K", "blk.3.ffn_gate.weight q4_K",
		"blk.3.ffn_up.weight q4_K", "blk.3.post_attention_norm.weight f32")
	s, err := synth.Preset("qwen35-small")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := synth.Plan(s, synth.Options{Mix: "Q4_K_M"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(want) {
		t.Fatalf("%d tensors, llama-quantize's file has %d", len(ts), len(want))
	}
	for i, tn := range ts {
		if got := tn.Name + " " + tn.Type.String(); got != want[i] {
			t.Errorf("tensor %d: %s, llama-quantize %s", i, got, want[i])
		}
	}
}

// TestHybridNextNAndFused: HybridSpec.NextN appends the MTP block (block
// count and nextn_predict_layers written, its nextn.* tensors present) and
// leaves every other tensor's bytes as they were; FusedGateUpExps writes
// each expert's gate rows then its up rows, the bytes of the split
// tensors; both are refused where they do not apply.
func TestHybridNextNAndFused(t *testing.T) {
	s, err := synth.Preset("qwen35moe-small")
	if err != nil {
		t.Fatal(err)
	}
	o := synth.Options{Type: quant.Q8_0, Seed: 4}
	plain, plainData := write(t, s, o)
	s.Hybrid.NextN, s.Hybrid.FusedGateUpExps = 1, true
	f, data := write(t, s, o)
	if n, _ := f.GetUint("qwen35moe.block_count"); n != 5 {
		t.Errorf("block_count %d, want 5", n)
	}
	if n, _ := f.GetUint("qwen35moe.nextn_predict_layers"); n != 1 {
		t.Errorf("nextn_predict_layers %d, want 1", n)
	}
	for _, name := range []string{"blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight", "blk.4.nextn.hnorm.weight", "blk.4.attn_q.weight", "blk.4.ffn_gate_up_exps.weight"} {
		if _, ok := f.Tensor(name); !ok {
			t.Errorf("no %s", name)
		}
	}
	bytesOf := func(f *gguf.File, data []byte, name string) []byte {
		tn, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return data[f.DataOffset+tn.Offset:][:tn.Size]
	}
	for _, tn := range plain.Tensors {
		il := strings.TrimPrefix(tn.Name, "blk.")
		if strings.Contains(tn.Name, "ffn_gate_exps") || strings.Contains(tn.Name, "ffn_up_exps") {
			gate := bytesOf(plain, plainData, "blk."+il[:1]+".ffn_gate_exps.weight")
			up := bytesOf(plain, plainData, "blk."+il[:1]+".ffn_up_exps.weight")
			fused := bytesOf(f, data, "blk."+il[:1]+".ffn_gate_up_exps.weight")
			per := len(gate) / s.NExpert
			for e := range s.NExpert {
				if !bytes.Equal(fused[2*e*per:(2*e+1)*per], gate[e*per:(e+1)*per]) || !bytes.Equal(fused[(2*e+1)*per:(2*e+2)*per], up[e*per:(e+1)*per]) {
					t.Fatalf("layer %s expert %d: the fused rows are not the split tensors'", il[:1], e)
				}
			}
			continue
		}
		if !bytes.Equal(bytesOf(f, data, tn.Name), bytesOf(plain, plainData, tn.Name)) {
			t.Errorf("%s changed", tn.Name)
		}
	}
	for _, c := range []struct {
		preset string
		edit   func(*synth.Spec)
		want   string
	}{
		{"qwen35-small", func(s *synth.Spec) { s.Hybrid.FusedGateUpExps = true }, "needs routed experts"},
		{"qwen35-small", func(s *synth.Spec) { s.Hybrid.NextN = 5 }, "NextN 5"},
		{"llama-1b", func(s *synth.Spec) { s.Hybrid.NextN = 1 }, "not hybrid"},
	} {
		s, err := synth.Preset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		c.edit(&s)
		if _, err := synth.Plan(s, o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.preset, err, c.want)
		}
	}
}
