package synth_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestHybridMoEMixture: qwen35moe-small and qwen3next-small in Q4_K_M have
// the tensors, order, shapes and types llama-quantize gave their F32
// files (testdata/README.md): the shared expert's down projection follows
// ffn_down's rule by layer, its 1-D gate and the routers stay F32, and
// qwen3next's single attn_v (its delta net layers have ssm_in, not
// attn_qkv) is the first and last of its count.
func TestHybridMoEMixture(t *testing.T) {
	for _, preset := range []string{"qwen35moe-small", "qwen3next-small"} {
		t.Run(preset, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", preset+"-q4km.types"))
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Split(strings.TrimSpace(string(b)), "\n")
			s, err := synth.Preset(preset)
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
				dims := strings.Trim(fmt.Sprint(tn.Dims), "[]")
				if got := fmt.Sprintf("%s %s [%s]", tn.Name, tn.Type, dims); got != want[i] {
					t.Errorf("tensor %d: %s, llama-quantize %s", i, got, want[i])
				}
			}
		})
	}
}

// TestHybridMoEPresets: the large presets have their models' published
// sizes, counted from the planned tensors with the real vocabularies
// (token_embd and output of 248,320 or 151,936 rows): Qwen3-Next-80B-A3B
// 79,674,391,296 parameters, 3,874,929,408 active per token (the figures
// its config gives, as quoted with the Qwen3-Coder-Next config);
// Qwen3.5-35B-A3B and Qwen3.5-122B-A10B within 2% of their names' totals
// (35B, 122B: rounded, and with a vision tower we do not write) and within
// 20% of their names' active counts (A3B, A10B: we count 3.45B and 9.77B,
// embeddings and output included). Non-hybrid architectures refuse a
// shared expert.
func TestHybridMoEPresets(t *testing.T) {
	for _, c := range []struct {
		preset        string
		vocab         int
		total, active float64
		tol           float64
	}{
		{"qwen3-next-80b-a3b", 151936, 79674391296, 3874929408, 1e-12},
		{"qwen3.5-35b-a3b", 248320, 35e9, 3e9, 0.2},
		{"qwen3.5-122b-a10b", 248320, 122e9, 10e9, 0.03},
	} {
		s, err := synth.Preset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := synth.Plan(s, synth.Options{Type: quant.Q8_0})
		if err != nil {
			t.Fatal(err)
		}
		var total, active float64
		for _, p := range plan {
			n := 1.0
			for _, d := range p.Dims {
				n *= float64(d)
			}
			if p.Name == "token_embd.weight" || p.Name == "output.weight" {
				n = float64(s.NEmbd * c.vocab)
			}
			total += n
			if len(p.Dims) == 3 { // routed experts: NExpertUsed of NExpert per token
				n = n / float64(s.NExpert) * float64(s.NExpertUsed)
			}
			active += n
		}
		t.Logf("%s: %.4gB parameters, %.4gB active", c.preset, total/1e9, active/1e9)
		if math.Abs(total-c.total)/c.total > min(c.tol, 0.02) || math.Abs(active-c.active)/c.active > c.tol {
			t.Errorf("%s: %.0f parameters, %.0f active; published %.0f, %.0f", c.preset, total, active, c.total, c.active)
		}
	}
	s, _ := synth.Preset("qwen3moe-small")
	s.NFFShexp = 256
	if _, err := synth.Plan(s, synth.Options{}); err == nil {
		t.Errorf("qwen3moe with a shared expert: no error")
	}
}
