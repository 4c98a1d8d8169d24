//go:build cgo

package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// TestBackendGoldenExactF32 runs every exact-F32 golden case (llama.cpp's
// logits on F32 files holding the dequantized weights of each non-F32
// file, ../shared/golden README §1) and every F32 model's prompt logits on
// the Vulkan backend: the shaders multiply dequantized weights by float32
// activations, the arithmetic those goldens were made with, so the bounds
// are package cpu's exact ones (cpu/golden_test.go exactBounds: 1e-4 max
// |Δlogit|, 2e-4 for stories260K). The prompt runs as one batch with
// logits for every row. Files the backend cannot run are skipped naming
// why (routed experts, a weight type without a shader), and that refusal
// must be ErrUnsupported.
//
// On lavapipe a case takes seconds, so by default
// only the cases in quick run (one per architecture, the k-quant mixture,
// Q8_0 and BF16, then Q3_K_M, Q2_K, Q4_1, Q5_0 and Q5_1: every shader of a
// type with a golden but F16 and F32); FLOWINFER_GPU_GOLDEN=all runs them
// all.
func TestBackendGoldenExactF32(t *testing.T) {
	dir, man := golden.Load(t)
	r := newRig(t)
	cases := man.ExactF32
	for _, c := range man.Cases {
		if c.PromptID == "P2" && (strings.HasSuffix(c.Model, "-F32.gguf") || strings.HasSuffix(c.Model, "stories260K.gguf")) {
			cases = append(cases, c)
		}
	}
	quick := []string{"synth-llama-Q4_K_M__P2__exact_f32", "synth-llama-Q5_K_M__P2__exact_f32", "synth-qwen2-Q8_0__P2__exact_f32", "synth-qwen3-Q4_K_M__P2__exact_f32", "synth-qwen3moe-Q8_0__P2__exact_f32", "synth-llama-BF16__P2__exact_f32",
		"synth-llama-Q3_K_M__P2__exact_f32", "synth-llama-Q2_K__P2__exact_f32", "synth-llama-Q4_1__P2__exact_f32", "synth-llama-Q5_0__P2__exact_f32", "synth-llama-Q5_1__P2__exact_f32"}
	all := os.Getenv("FLOWINFER_GPU_GOLDEN") == "all"
	for _, c := range cases {
		if !all && !slices.Contains(quick, c.ID) {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join(dir, c.Model))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := model.Load(f, func(quant.Type) bool { return true }) // types are the backend's to refuse
			if err != nil {
				t.Fatal(err)
			}
			be, err := newBackendOf(r.d, m, r.k) // pipelines compiled once for all cases
			if errors.Is(err, vk.ErrUnsupported) {
				t.Skipf("not on the GPU yet: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			n := len(c.PromptTokens)
			ctx, err := m.NewContext(be, n, 1, n)
			if err != nil {
				t.Fatal(err)
			}
			b := &model.Batch{Tokens: c.PromptTokens, Pos: make([]int32, n), Seq: make([]int32, n)}
			for i := range n {
				b.Pos[i] = int32(i)
			}
			got, err := ctx.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			want, err := golden.ReadF32(filepath.Join(dir, c.PromptLogits))
			if err != nil {
				t.Fatal(err)
			}
			var s golden.Stats
			for row := 0; row < c.NRows; row++ {
				g := got[(c.FirstRow+row)*c.NVocab : (c.FirstRow+row+1)*c.NVocab]
				s.AddRow(g, want[row*c.NVocab:(row+1)*c.NVocab])
			}
			bound := 1e-4
			if strings.Contains(c.Model, "stories260K") {
				bound = 2e-4
			}
			t.Logf("max |Δlogit| %.2e, RMS %.2e, argmax agree %.1f%%", s.MaxAbs, s.RMS(), 100*s.Agree())
			if s.MaxAbs > bound {
				t.Errorf("max |Δlogit| %.3g > %.0e", s.MaxAbs, bound)
			}
		})
	}
}
