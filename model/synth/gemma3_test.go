package synth_test

import (
	"fmt"
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestGemma3Q4KM: the gemma-3-4b preset's Q4_K_M plan is the mixture
// llama-quantize (d32676d77) made of a gemma3 F32 file with its 34 layers
// (hidden 256 for speed; the rules see names and layer counts): Q6_K for
// the tied token_embd and for attn_v and ffn_down of layers 0-3, 6, 9,
// ..., 27 and 29-33 (35 tensors), Q4_K for the other matrices, F32 for
// every norm (attn_q_norm, attn_k_norm, post_attention_norm and
// post_ffw_norm included); 13 tensors per layer.
func TestGemma3Q4KM(t *testing.T) {
	q6 := map[int]bool{}
	for _, i := range []int{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 29, 30, 31, 32, 33} {
		q6[i] = true
	}
	s, err := synth.Preset("gemma-3-4b")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := synth.Plan(s, synth.Options{Mix: "Q4_K_M"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2+13*34 {
		t.Fatalf("%d tensors, want %d", len(plan), 2+13*34)
	}
	n6 := 0
	for _, p := range plan {
		want := quant.Q4_K
		var layer int
		var kind string
		if _, err := fmt.Sscanf(p.Name, "blk.%d.%s", &layer, &kind); err == nil {
			switch {
			case len(p.Dims) == 1:
				want = quant.F32
			case (kind == "attn_v.weight" || kind == "ffn_down.weight") && q6[layer]:
				want = quant.Q6_K
			}
		} else if p.Name == "token_embd.weight" {
			want = quant.Q6_K
		} else {
			want = quant.F32 // output_norm; no output.weight (tied)
		}
		if p.Type != want {
			t.Errorf("%s: %s, want %s", p.Name, p.Type, want)
		}
		if p.Type == quant.Q6_K {
			n6++
		}
	}
	if n6 != 35 {
		t.Errorf("%d Q6_K tensors, llama-quantize 35", n6)
	}
	for _, name := range []string{"blk.7.post_attention_norm.weight", "blk.7.post_ffw_norm.weight", "blk.7.attn_q_norm.weight"} {
		found := false
		for _, p := range plan {
			found = found || p.Name == name
		}
		if !found {
			t.Errorf("no %s", name)
		}
	}
}

// TestGemma3Metadata: a gemma3 file carries the converter's keys: the
// sliding window, key and value lengths, and the preset's linear rope
// scaling; no sliding_window_pattern (llama.cpp's default applies).
func TestGemma3Metadata(t *testing.T) {
	s, err := synth.Preset("gemma-3-4b")
	if err != nil {
		t.Fatal(err)
	}
	s.NEmbd, s.NLayer, s.NFF = 256, 2, 256 // the keys, not the size, are under test
	f, _ := write(t, s, synth.Options{Type: quant.F32})
	for key, want := range map[string]string{
		"gemma3.attention.sliding_window": "1024", "gemma3.attention.key_length": "256",
		"gemma3.attention.value_length": "256", "gemma3.attention.head_count_kv": "4",
		"gemma3.rope.freq_base": "1e+06", "gemma3.rope.scaling.type": `"linear"`, "gemma3.rope.scaling.factor": "8",
	} {
		if v, ok := f.Get(key); !ok || v.String() != want {
			t.Errorf("%s = %v (present %v), want %s", key, v, ok, want)
		}
	}
	if _, ok := f.Get("gemma3.attention.sliding_window_pattern"); ok {
		t.Error("sliding_window_pattern written; the converter does not write it")
	}
	if _, err := synth.Plan(synth.Spec{Arch: "llama", NEmbd: 64, NLayer: 1, NHead: 2, NFF: 64, SlidingWindow: 16}, synth.Options{}); err == nil {
		t.Error("a window on llama accepted")
	}
}
