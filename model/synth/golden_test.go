// Tests against llama.cpp's files in ../../shared/golden: for the shapes of
// the golden synthetic models, Write produces the same metadata (keys,
// order, values), the same tensors in the same order, and the tensor types
// llama-quantize chose (--pure for synth-llama-*, the standard mixtures for
// the qwen files). And the Q4_K_M rule on a 16-layer model.

package synth_test

import (
	"fmt"
	"github.com/flowinfer/flowinfer/internal/golden"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// goldenDir finds shared/golden by walking up from the working directory.
// It skips the test when the data is absent, unless CI=true.
func goldenDir(t testing.TB) string {
	t.Helper()
	return golden.Dir(t)
}

// goldenSpecs are the shapes of the golden synthetic models (README,
// "Synthetic random-weight models").
func goldenSpecs() map[string]synth.Spec {
	return map[string]synth.Spec{
		"synth-llama": {Arch: "llama", Name: "synth-llama", NCtx: 2048, NEmbd: 256, NLayer: 2, NHead: 8, NHeadKV: 4,
			HeadDim: 32, NFF: 768, RopeBase: 10000, RMSEps: 1e-5},
		"synth-qwen2": {Arch: "qwen2", Name: "synth-qwen2", NCtx: 2048, NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2,
			HeadDim: 64, NFF: 768, RopeBase: 1e6, RMSEps: 1e-6, Tied: true},
		"synth-qwen3": {Arch: "qwen3", Name: "synth-qwen3", NCtx: 2048, NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2,
			HeadDim: 128, NFF: 768, RopeBase: 1e6, RMSEps: 1e-6, Tied: true},
		"synth-qwen3moe": {Arch: "qwen3moe", Name: "synth-qwen3moe", NCtx: 2048, NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2,
			HeadDim: 64, NFF: 768, NExpert: 8, NExpertUsed: 2, NFFExp: 256, RopeBase: 1e6, RMSEps: 1e-6},
	}
}

func TestGoldenLayout(t *testing.T) {
	dir := filepath.Join(goldenDir(t), "models")
	cases := []struct {
		model, file string
		o           synth.Options
	}{
		{"synth-llama", "F16", synth.Options{Type: quant.F16}},
		{"synth-llama", "BF16", synth.Options{Type: quant.BF16}},
		{"synth-llama", "Q8_0", synth.Options{Type: quant.Q8_0}},
		{"synth-llama", "Q4_0", synth.Options{Type: quant.Q4_0}},
		{"synth-llama", "Q4_1", synth.Options{Type: quant.Q4_1}},
		{"synth-llama", "Q5_0", synth.Options{Type: quant.Q5_0}},
		{"synth-llama", "Q5_1", synth.Options{Type: quant.Q5_1}},
		{"synth-llama", "Q4_K_M", synth.Options{Type: quant.Q4_K}},
		{"synth-llama", "Q5_K_M", synth.Options{Type: quant.Q5_K}},
		{"synth-llama", "Q6_K", synth.Options{Type: quant.Q6_K}},
		{"synth-qwen2", "Q8_0", synth.Options{Mix: "Q8_0"}},
		{"synth-qwen2", "Q4_K_M", synth.Options{Mix: "Q4_K_M"}},
		{"synth-qwen3", "Q8_0", synth.Options{Mix: "Q8_0"}},
		{"synth-qwen3", "Q4_K_M", synth.Options{Mix: "Q4_K_M"}},
		{"synth-qwen3moe", "Q8_0", synth.Options{Mix: "Q8_0"}},
		{"synth-qwen3moe", "Q4_K_M", synth.Options{Mix: "Q4_K_M"}},
	}
	for _, c := range cases {
		t.Run(c.model+"-"+c.file, func(t *testing.T) {
			g, err := gguf.Open(filepath.Join(dir, c.model+"-"+c.file+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			c.o.Vocab = g
			f, _ := write(t, goldenSpecs()[c.model], c.o)
			// tensors: same names, order, types and shapes
			if len(f.Tensors) != len(g.Tensors) {
				t.Fatalf("%d tensors, llama.cpp's file has %d", len(f.Tensors), len(g.Tensors))
			}
			for i, gt := range g.Tensors {
				ft := f.Tensors[i]
				if ft.Name != gt.Name || ft.Type != gt.Type || fmt.Sprint(ft.Dims) != fmt.Sprint(gt.Dims) {
					t.Errorf("tensor %d: %s %s %v, llama.cpp: %s %s %v", i, ft.Name, ft.Type, ft.Dims, gt.Name, gt.Type, gt.Dims)
				}
			}
			// metadata: llama.cpp's keys in the same order with the same
			// values; only general.description added, and qwen3moe's
			// expert_weights_norm (which llama.cpp ignores) left out
			j := 0
			for _, kv := range f.KVs {
				if kv.Key == "general.description" {
					continue
				}
				for j < len(g.KVs) && g.KVs[j].Key == "qwen3moe.expert_weights_norm" {
					j++
				}
				if j >= len(g.KVs) {
					t.Errorf("extra key %s", kv.Key)
					continue
				}
				if gk := g.KVs[j]; kv.Key != gk.Key || kv.Value.String() != gk.Value.String() {
					t.Errorf("key %d: %s = %s, llama.cpp: %s = %s", j, kv.Key, kv.Value, gk.Key, gk.Value)
				}
				j++
			}
			if j != len(g.KVs) {
				t.Errorf("missing keys from %s on", g.KVs[j].Key)
			}
		})
	}
}

// TestQ4KMRule checks the Q4_K_M mixture of a 16-layer model against
// llama.cpp's rule written out: the output (or tied embeddings) Q6_K;
// attn_v and ffn_down Q6_K on layers i with i < n/8, i >= 7n/8 or
// (i - n/8) % 3 == 2 (use_more_bits), i.e. 0, 1, 4, 7, 10, 13, 14, 15;
// everything else Q4_K; norms F32.
func TestQ4KMRule(t *testing.T) {
	moreBits := map[int]bool{0: true, 1: true, 4: true, 7: true, 10: true, 13: true, 14: true, 15: true}
	for _, tied := range []bool{false, true} {
		s := synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 16, NHead: 4, NHeadKV: 2, NFF: 256, Tied: tied}
		plan, err := synth.Plan(s, synth.Options{Mix: "Q4_K_M"})
		if err != nil {
			t.Fatal(err)
		}
		var n6 int
		for _, p := range plan {
			want := quant.Q4_K
			var layer int
			var kind string
			if _, err := fmt.Sscanf(p.Name, "blk.%d.%s", &layer, &kind); err == nil {
				switch {
				case len(p.Dims) == 1:
					want = quant.F32
				case (kind == "attn_v.weight" || kind == "ffn_down.weight") && moreBits[layer]:
					want = quant.Q6_K
				}
			} else {
				switch p.Name {
				case "output.weight":
					want = quant.Q6_K
				case "token_embd.weight":
					if tied {
						want = quant.Q6_K
					}
				default:
					want = quant.F32
				}
			}
			if p.Type != want {
				t.Errorf("tied=%v %s: %s, want %s", tied, p.Name, p.Type, want)
			}
			if p.Type == quant.Q6_K {
				n6++
			}
		}
		if n6 != 17 {
			t.Errorf("tied=%v: %d Q6_K tensors, want 17", tied, n6)
		}
	}
	// the written file carries the planned types
	s := synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 16, NHead: 4, NHeadKV: 2, NFF: 256}
	f, _ := write(t, s, synth.Options{Mix: "Q4_K_M"})
	for _, name := range []string{"blk.4.attn_v.weight", "blk.13.ffn_down.weight", "output.weight"} {
		if tt, ok := f.Tensor(name); !ok || tt.Type != quant.Q6_K {
			t.Errorf("%s is not Q6_K in the file", name)
		}
	}
	if tt, _ := f.Tensor("blk.5.attn_v.weight"); tt.Type != quant.Q4_K {
		t.Errorf("blk.5.attn_v.weight is %s, want q4_K", tt.Type)
	}
}
