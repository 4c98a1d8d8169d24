//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

func loadGolden(t *testing.T, rel string) *model.Model {
	t.Helper()
	f, err := gguf.Open(filepath.Join(golden.Dir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, SupportsMatVec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// greedy decodes prompt as one batch, then n greedy tokens one by one; it
// returns the tokens and the logits of the prompt's last row.
func greedy(t *testing.T, c *model.Context, prompt []int32, n int) ([]int32, []float32) {
	t.Helper()
	b := &model.Batch{Tokens: prompt, Pos: make([]int32, len(prompt)), Seq: make([]int32, len(prompt)), Logits: make([]bool, len(prompt))}
	for i := range prompt {
		b.Pos[i] = int32(i)
	}
	b.Logits[len(prompt)-1] = true
	logits, err := c.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Clone(logits)
	var toks []int32
	for pos := len(prompt); len(toks) < n; pos++ {
		tok := int32(argmax(logits))
		toks = append(toks, tok)
		if logits, err = c.Decode(&model.Batch{Tokens: []int32{tok}, Pos: []int32{int32(pos)}, Seq: []int32{0}}); err != nil {
			t.Fatal(err)
		}
	}
	return toks, first
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// TestBackendGreedyStories: stories260K on the Vulkan backend (prompt as
// one batch of 5 rows, then 40 single-token steps) gives the CPU
// backend's greedy tokens with the same KV cache types (f32, f16), and
// the prompt's logits agree to 1e-3.
func TestBackendGreedyStories(t *testing.T) {
	r := newRig(t)
	m := loadGolden(t, "models/stories260K.gguf")
	prompt := []int32{1, 403, 407, 261, 378} // "Once upon a time" (golden README)
	const n = 40
	be, err := NewBackend(r.d, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	for _, kt := range []model.KVType{model.KVF32, model.KVF16} {
		t.Run("kv="+kt.String(), func(t *testing.T) {
			types := model.KVTypes{K: kt, V: kt}
			cc, err := m.NewContextOf(cpu.NewBackend(1, nil), types, 128, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			want, wantL := greedy(t, cc, prompt, n)
			gc, err := m.NewContextOf(be, types, 128, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			got, gotL := greedy(t, gc, prompt, n)
			if !slices.Equal(got, want) {
				t.Errorf("greedy tokens on the GPU\n%v\nCPU\n%v", got, want)
			}
			var maxd float64
			for i := range wantL {
				if math.IsNaN(float64(gotL[i])) || math.IsInf(float64(gotL[i]), 0) {
					t.Fatalf("logit %d is %v", i, gotL[i])
				}
				maxd = max(maxd, math.Abs(float64(gotL[i]-wantL[i])))
			}
			if maxd > 1e-3 {
				t.Errorf("prompt logits: max |Δ| %.3g against the CPU's", maxd)
			}
			t.Logf("prompt logits: max |Δ| %.3g; %d greedy tokens equal", maxd, n)
		})
	}
}

// TestBackendRefuses: a KV cache type without a shader fails the step
// with an error naming it, and the next step on a good context works.
func TestBackendRefuses(t *testing.T) {
	r := newRig(t)
	m := loadGolden(t, "models/stories260K.gguf")
	be, err := NewBackend(r.d, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	c, err := m.NewContextOf(be, model.KVTypes{K: model.KVBF16, V: model.KVBF16}, 64, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Decode(&model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{0}})
	if !errors.Is(err, vk.ErrUnsupported) || !strings.Contains(err.Error(), "bf16") {
		t.Fatalf("bf16 KV cache: got %v, want ErrUnsupported naming bf16", err)
	}
	t.Log(err)
	// the same with an eval hook, whose ToHost calls meet the error first
	hooked := 0
	c.SetHooks(model.Hooks{Eval: func(string, int, []float32, int, int) { hooked++ }})
	_, err = c.Decode(&model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{0}})
	if !errors.Is(err, vk.ErrUnsupported) || !strings.Contains(err.Error(), "bf16") {
		t.Fatalf("bf16 KV cache with an eval hook: got %v, want ErrUnsupported naming bf16", err)
	}
	if hooked == 0 {
		t.Error("the eval hook never ran before the failing op")
	}
	c2, err := m.NewContext(be, 64, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Decode(&model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{0}}); err != nil {
		t.Fatalf("after a refused step: %v", err)
	}
}

// TestBackendHostPaths: the paths where the Context touches activations on
// the host (HostSync): every named intermediate an eval hook sees, and the
// embeddings of Batch.Embd, equal the CPU backend's, on a prompt batch and
// the decode step after it.
func TestBackendHostPaths(t *testing.T) {
	r := newRig(t)
	m := loadGolden(t, "models/stories260K.gguf")
	be, err := NewBackend(r.d, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	type dump struct {
		names []string
		vals  [][]float32
		embd  [][]float32
	}
	run := func(ops model.Ops) *dump {
		c, err := m.NewContext(ops, 32, 1, 8)
		if err != nil {
			t.Fatal(err)
		}
		d := &dump{}
		c.SetHooks(model.Hooks{Eval: func(name string, layer int, x []float32, n, dim int) {
			d.names = append(d.names, fmt.Sprintf("%s-%d", name, layer))
			d.vals = append(d.vals, slices.Clone(x))
		}})
		for _, b := range []*model.Batch{
			{Tokens: []int32{1, 403, 407}, Pos: []int32{0, 1, 2}, Seq: []int32{0, 0, 0}, Embd: []bool{true, false, true}},
			{Tokens: []int32{261}, Pos: []int32{3}, Seq: []int32{0}, Embd: []bool{true}},
		} {
			if _, err := c.Decode(b); err != nil {
				t.Fatal(err)
			}
			d.embd = append(d.embd, slices.Clone(c.Embeddings()))
		}
		return d
	}
	want, got := run(cpu.NewBackend(1, nil)), run(be)
	if !slices.Equal(got.names, want.names) || len(want.names) < 20 {
		t.Fatalf("intermediates %v, want %v", got.names, want.names)
	}
	for i, name := range want.names {
		if e := nmse(got.vals[i], want.vals[i]); e > 1e-9 {
			t.Errorf("%s (call %d): NMSE %.3g", name, i, e)
		}
	}
	for i := range want.embd {
		if len(got.embd[i]) != len(want.embd[i]) || len(want.embd[i]) == 0 {
			t.Fatalf("step %d: %d embedding floats, want %d", i, len(got.embd[i]), len(want.embd[i]))
		}
		if e := nmse(got.embd[i], want.embd[i]); e > 1e-9 {
			t.Errorf("step %d embeddings: NMSE %.3g", i, e)
		}
	}
}
