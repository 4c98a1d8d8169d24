package cpu_test

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// openModel loads a golden model file for the backend tests.
func openModel(tb testing.TB, rel string) *model.Model {
	tb.Helper()
	dir := golden.Dir(tb)
	f, err := gguf.Open(filepath.Join(dir, rel))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// newBackend returns a backend closed at the end of the test.
func newBackend(tb testing.TB, threads int) *cpu.Backend {
	tb.Helper()
	b := cpu.NewBackend(threads, nil)
	tb.Cleanup(b.Close)
	return b
}

// decodeAll runs the prompt as one batch (logits of every row), then feeds
// gen tokens one at a time; it returns every row of logits.
func decodeAll(tb testing.TB, ctx *model.Context, prompt, gen []int32) [][]float32 {
	tb.Helper()
	n := len(prompt)
	b := &model.Batch{Tokens: prompt, Pos: make([]int32, n), Seq: make([]int32, n)}
	for i := range b.Pos {
		b.Pos[i] = int32(i)
	}
	out, err := ctx.Decode(b)
	if err != nil {
		tb.Fatal(err)
	}
	V := ctx.M.NVocab
	var rows [][]float32
	for i := range n {
		rows = append(rows, slices.Clone(out[i*V:(i+1)*V]))
	}
	for i, tok := range gen {
		out, err := ctx.Decode(&model.Batch{Tokens: []int32{tok}, Pos: []int32{int32(n + i)}, Seq: []int32{0}})
		if err != nil {
			tb.Fatal(err)
		}
		rows = append(rows, slices.Clone(out))
	}
	return rows
}

// TestBackendMatchesRef runs the same prompts through Ref and the Backend
// on 1, 2 and 3 threads and compares every row of logits. The two compute
// the same per-block integer products on the same converted activations;
// only float additions are ordered differently (and exp is ours), so
// differences start near 1e-7 relative. In files whose activations are
// rounded (to int8, f16) such a difference now and then moves a value
// across a rounding step, and that step propagates through the KV cache:
// measured max |Δ| up to 0.012·scale and RMS up to 0.002·scale on the
// synthetic models. The bounds are max |Δ| ≤ 1e-4·scale and RMS ≤
// 1e-5·scale for F32 files, max |Δ| ≤ 2e-2·scale and RMS ≤ 3e-3·scale for
// the others, where scale is the largest |logit| of the reference rows.
func TestBackendMatchesRef(t *testing.T) {
	_, man := golden.Load(t)
	models := []struct {
		file  string
		exact bool // F32 weights: no activation rounding
	}{
		{"models/stories260K.gguf", true},
		{"models/synth-llama-F32.gguf", true},
		{"models/synth-qwen3-F32.gguf", true},
		{"models/synth-llama-Q4_K_M.gguf", false},
		{"models/synth-llama-Q6_K.gguf", false},
		{"models/synth-llama-Q8_0.gguf", false},
		{"models/synth-llama-F16.gguf", false},
		{"models/synth-qwen2-Q4_K_M.gguf", false},
		{"models/synth-qwen3moe-Q8_0.gguf", false},
	}
	prompt := man.Prompts["P2"].TokenIDs
	gen := man.Prompts["P1"].TokenIDs[1:] // any tokens: teacher forcing
	for _, mc := range models {
		t.Run(filepath.Base(mc.file), func(t *testing.T) {
			m := openModel(t, mc.file)
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
			for _, threads := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
					ctx, err := m.NewContext(newBackend(t, threads), nCtx, 1, len(prompt))
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
					maxRel, rmsRel := 2e-2, 3e-3
					if mc.exact {
						maxRel, rmsRel = 1e-4, 1e-5
					}
					if s.MaxAbs > maxRel*scale {
						t.Errorf("max |Δlogit| %.3g > %.3g", s.MaxAbs, maxRel*scale)
					}
					if s.RMS() > rmsRel*scale {
						t.Errorf("RMS Δlogit %.3g > %.3g", s.RMS(), rmsRel*scale)
					}
				})
			}
		})
	}
}

// TestBackendPackModel packs a model up front and checks the logits are
// those of packing on first use and of no packing, up to float rounding.
func TestBackendPackModel(t *testing.T) {
	_, man := golden.Load(t)
	m := openModel(t, "models/synth-llama-Q4_K_M.gguf")
	prompt := man.Prompts["P1"].TokenIDs
	var rows [3][][]float32
	for i := range rows {
		be := newBackend(t, 2)
		switch i {
		case 0:
			n, err := be.PackModel(m, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cpu.KernelsFor(cpu.ISAAVX2) != nil && n == 0 {
				t.Error("nothing packed on AVX2")
			}
		case 2:
			be.NoPack = true
		}
		ctx, err := m.NewContext(be, 16, 1, 8)
		if err != nil {
			t.Fatal(err)
		}
		rows[i] = decodeAll(t, ctx, prompt, []int32{5, 6})
	}
	for i := 1; i < 3; i++ {
		var s golden.Stats
		for r := range rows[0] {
			s.AddRow(rows[i][r], rows[0][r])
		}
		if s.MaxAbs > 1e-3 {
			t.Errorf("variant %d: max |Δ| %.3g from PackModel's", i, s.MaxAbs)
		}
	}
}

// TestBackendDecodeAllocates0 checks that a decode step of one token
// allocates nothing once the context exists, for every kind of KV type
// (float, block, TurboQuant with protected layers).
func TestBackendDecodeAllocates0(t *testing.T) {
	for _, file := range []string{"models/stories260K.gguf", "models/synth-llama-Q4_K_M.gguf", "models/synth-qwen3moe-Q8_0.gguf"} {
		for _, types := range []model.KVTypes{{}, {K: model.KVF16, V: model.KVF16}, {K: model.KVQ8_0, V: model.KVQ4_0}, {K: model.KVQ4_0, V: model.KVQ4_0}, {K: model.KVTQ4, V: model.KVTQ3, Protect: 1}, {K: model.KVTQ4, V: model.KVTQ3, Recent: 64}, {K: model.KVQ8_0, V: model.KVQ4_0, Recent: 1}} {
			m := openModel(t, file)
			ctx, err := m.NewContextOf(newBackend(t, 2), types, 256, 1, 8)
			if err != nil {
				continue // block types need heads of a multiple of 32
			}
			t.Run(filepath.Base(file)+"/"+strings.ReplaceAll(types.String(), "/", "-"), func(t *testing.T) {
				b := &model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{0}}
				allocs := testing.AllocsPerRun(100, func() {
					if _, err := ctx.Decode(b); err != nil {
						t.Fatal(err)
					}
					b.Pos[0]++
					b.Tokens[0] = (b.Tokens[0]*7 + 3) % int32(m.NVocab)
				})
				if allocs != 0 {
					t.Errorf("a decode step allocates %v times", allocs)
				}
			})
		}
	}
}

// TestMatMulBytes: the bytes MatMul reads for a weight are the file's
// until the backend packs it, then the packed copy; MatMulBytes packs
// nothing itself, and with NoPack they stay the file's.
func TestMatMulBytes(t *testing.T) {
	const rows, cols = 64, 512
	rb, _ := quant.RowBytes(quant.Q4_K, cols)
	w := &model.Weight{Name: "w", Type: quant.Q4_K, Cols: cols, Rows: rows, RowBytes: rb, Data: randomWeights(quant.Q4_K, rows, cols)}
	for _, noPack := range []bool{false, true} {
		be := cpu.NewBackend(1, nil)
		be.NoPack = noPack
		same := func(b []byte) bool { return len(b) == len(w.Data) && &b[0] == &w.Data[0] }
		if !same(be.MatMulBytes(w)) {
			t.Errorf("noPack %v: before any product, not the file's bytes", noPack)
		}
		out := make([]float32, rows)
		be.MatMul(out, w, randomF32(cols, 1), 1)
		got := be.MatMulBytes(w)
		switch packed := be.PackedSize(w); {
		case packed == 0 && !same(got): // NoPack, or kernels with no packed form (no cgo)
			t.Errorf("noPack %v: not the file's bytes", noPack)
		case packed > 0 && (same(got) || len(got) != packed):
			t.Errorf("packed: %d bytes, want the packed copy's %d", len(got), packed)
		}
		be.Close()
	}
}
