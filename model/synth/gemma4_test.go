package synth_test

import (
	"fmt"
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestGemma4Presets: the large gemma4 presets have the shapes their
// comments cite: per layer the head size and KV heads of its kind
// (sliding 256, global 512; the 26B-A4B's global layers 2 KV heads and no
// attn_v), the E4B's per-layer embeddings, and parameter counts near the
// published ones with the real 262,144-token vocabulary (the plan uses the
// built-in 1,024 tokens; the difference is added back): the 26B-A4B
// 25.2B total and 3.8B active (Google's figures as third-party code
// records them); for the E4B, whose published totals include the vision
// and audio encoders, the "effective" count its name gives (the
// parameters without the per-layer embeddings, the part that stays on
// the accelerator): 4B, checked within [4, 5]B.
func TestGemma4Presets(t *testing.T) {
	const realVocab, builtin = 262144, 1024
	for _, c := range []struct {
		preset        string
		q, k          map[int][2]uint64 // layer -> attn_q, attn_k dims
		noV           int               // a layer without attn_v (-1: none)
		total, active float64           // billions, published
	}{
		{"gemma-4-e4b", map[int][2]uint64{0: {2560, 2048}, 5: {2560, 4096}}, map[int][2]uint64{0: {2560, 512}, 5: {2560, 1024}}, -1, 0, 0},
		{"gemma-4-26b-a4b", map[int][2]uint64{0: {2816, 4096}, 5: {2816, 8192}}, map[int][2]uint64{0: {2816, 2048}, 5: {2816, 1024}}, 5, 25.2, 3.8},
	} {
		t.Run(c.preset, func(t *testing.T) {
			s, err := synth.Preset(c.preset)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := synth.Plan(s, synth.Options{Type: quant.F32})
			if err != nil {
				t.Fatal(err)
			}
			dims := map[string][]uint64{}
			var total, active float64
			for _, p := range plan {
				dims[p.Name] = p.Dims
				n := 1.0
				for _, d := range p.Dims {
					n *= float64(d)
				}
				total += n
				if len(p.Dims) == 3 { // routed experts: 8 of 128 per token
					n *= float64(s.NExpertUsed) / float64(s.NExpert)
				}
				active += n
			}
			for l, d := range c.q {
				if got := dims[fmt.Sprintf("blk.%d.attn_q.weight", l)]; fmt.Sprint(got) != fmt.Sprint(d[:]) {
					t.Errorf("layer %d attn_q %v, want %v", l, got, d)
				}
			}
			for l, d := range c.k {
				if got := dims[fmt.Sprintf("blk.%d.attn_k.weight", l)]; fmt.Sprint(got) != fmt.Sprint(d[:]) {
					t.Errorf("layer %d attn_k %v, want %v", l, got, d)
				}
			}
			for l := range s.NLayer {
				_, hasV := dims[fmt.Sprintf("blk.%d.attn_v.weight", l)]
				if hasV == (c.noV >= 0 && l%6 == 5) {
					t.Errorf("layer %d: attn_v present %v", l, hasV)
				}
			}
			// the real vocabulary: token_embd (tied) and, for the E4B,
			// per_layer_token_embd
			extra := float64(s.NEmbd) * (realVocab - builtin)
			ple := float64(s.Gemma4.NEmbdPerLayer*s.NLayer) * realVocab
			total, active = (total+extra)/1e9, (active+extra)/1e9
			if s.Gemma4.NEmbdPerLayer > 0 {
				total += (ple - float64(s.Gemma4.NEmbdPerLayer*s.NLayer)*builtin) / 1e9
				eff := total - ple/1e9
				t.Logf("%s: %.2fB parameters, %.2fB without the per-layer embeddings", c.preset, total, eff)
				if eff < 4 || eff > 5 {
					t.Errorf("%.2fB effective parameters, want 4B-class", eff)
				}
				return
			}
			t.Logf("%s: %.2fB parameters, %.2fB active", c.preset, total, active)
			if total < 0.95*c.total || total > 1.05*c.total {
				t.Errorf("%.2fB parameters, published %.1fB", total, c.total)
			}
			if c.active > 0 && (active < 0.9*c.active || active > 1.1*c.active) {
				t.Errorf("%.2fB active, published %.1fB", active, c.active)
			}
		})
	}
}
