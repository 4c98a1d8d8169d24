package cpu_test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestBackendIQ1MatchesRef: the "demo" llama preset written as `flowinfer
// gen --pure --type IQ1_S` (and IQ1_M) gives the logits of cpu.Ref through
// the Backend on every kernel path (the AVX2 and AVX-512 paths run
// kern_avx2_iq1.c) on 1 and 2 threads, prefilling a prompt of 37 tokens
// (tiles of 4 activation rows and a tail) and then decoding 8 tokens one at
// a time, within TestBackendMatchesRef's bounds for files with rounded
// activations: max |Δ| ≤ 2e-2·scale and RMS ≤ 3e-3·scale, scale the largest
// |logit| of the reference rows. It also checks that the file's matrices
// are of the type asked for (none fallen back to IQ4_NL).
func TestBackendIQ1MatchesRef(t *testing.T) {
	spec, err := synth.Preset("demo")
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int32, 37)
	gen := make([]int32, 8)
	for i := range prompt {
		prompt[i] = int32((i*37 + 11) % 1000)
	}
	for i := range gen {
		gen[i] = int32((i*101 + 7) % 1000)
	}
	for _, typ := range []quant.Type{quant.IQ1_S, quant.IQ1_M} {
		t.Run(fmt.Sprintf("type=%s", typ), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "demo.gguf")
			if err := synth.WriteFile(path, spec, synth.Options{Type: typ, Seed: 5}); err != nil {
				t.Fatal(err)
			}
			b, err := model.Open(path, cpu.NewRef().Supports, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			m := b.Model
			l := &m.Layers[0]
			for _, w := range []*model.Weight{l.Wq, l.Wk, l.Wv, l.Wo, l.Gate, l.Up, l.Down} {
				if w.Type != typ {
					t.Fatalf("%s is %s, want %s", w.Name, w.Type, typ)
				}
			}
			nCtx := len(prompt) + len(gen)
			refCtx, err := m.NewContext(cpu.NewRef(), nCtx, 1, len(prompt))
			if err != nil {
				t.Fatal(err)
			}
			want := decodeAll(t, refCtx, prompt, gen)
			var scale float64
			for _, r := range want {
				for _, v := range r {
					scale = max(scale, math.Abs(float64(v)))
				}
			}
			for _, isa := range cpu.Available() {
				for _, threads := range []int{1, 2} {
					t.Run(fmt.Sprintf("isa=%s/threads=%d", isa, threads), func(t *testing.T) {
						be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
						t.Cleanup(be.Close)
						ctx, err := m.NewContext(be, nCtx, 1, len(prompt))
						if err != nil {
							t.Fatal(err)
						}
						got := decodeAll(t, ctx, prompt, gen)
						var s golden.Stats
						for i := range want {
							s.AddRow(got[i], want[i])
						}
						t.Logf("scale %.3g: max |Δ| %.3g (%.2g·scale), RMS %.3g, argmax agree %.1f%%",
							scale, s.MaxAbs, s.MaxAbs/scale, s.RMS(), 100*s.Agree())
						if s.MaxAbs > 2e-2*scale {
							t.Errorf("max |Δlogit| %.3g > %.3g", s.MaxAbs, 2e-2*scale)
						}
						if s.RMS() > 3e-3*scale {
							t.Errorf("RMS Δlogit %.3g > %.3g", s.RMS(), 3e-3*scale)
						}
					})
				}
			}
		})
	}
}
