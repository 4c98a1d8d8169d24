package synth_test

import (
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
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
