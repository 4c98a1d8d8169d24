//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

func openStories(t *testing.T) *model.Bundle {
	t.Helper()
	b, err := model.Open(filepath.Join(golden.Dir(t), "models", "stories260K.gguf"), func(quant.Type) bool { return true }, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.File.Close() })
	return b
}

// TestPlanLayers: --n-gpu-layers as llama.cpp's load_tensors assigns
// layers (i_gpu_start = n_layer + 1 - ngl; the output layer counts as
// layer n_layer), and the memory figures add up to the model.
func TestPlanLayers(t *testing.T) {
	m := openStories(t).Model
	n := m.NLayer
	var total int64
	for il := range m.Layers {
		total += layerBytes(&m.Layers[il])
	}
	total += outputBytes(m) + int64(m.TokEmbd.Rows*m.TokEmbd.RowBytes)
	for _, c := range []struct {
		ngl, gpuLayers int
		output         bool
	}{{0, 0, false}, {1, 0, true}, {2, 1, true}, {n, n - 1, true}, {n + 1, n, true}, {n + 5, n, true}, {-1, n, true}} {
		p := PlanLayers(m, c.ngl, 1000)
		if p.NGPU() != c.gpuLayers || p.Output != c.output {
			t.Errorf("-ngl %d: %d layers and output %v on the GPU, want %d and %v", c.ngl, p.NGPU(), p.Output, c.gpuLayers, c.output)
		}
		for il := range n {
			if want := il >= n-c.gpuLayers; p.GPU[il] != want {
				t.Errorf("-ngl %d: layer %d on the GPU %v, want %v", c.ngl, il, p.GPU[il], want)
			}
		}
		if m.Output == m.TokEmbd {
			t.Fatal("stories260K has a tied output: the byte sum below assumes not")
		}
		if got := p.GPUWeights + p.CPUWeights; got != total {
			t.Errorf("-ngl %d: weights %d on the GPU + %d on the CPU = %d, want %d", c.ngl, p.GPUWeights, p.CPUWeights, got, total)
		}
		if p.GPUKV != int64(1000*c.gpuLayers) || p.CPUKV != int64(1000*(n-c.gpuLayers)) {
			t.Errorf("-ngl %d: KV %d on the GPU, %d on the CPU", c.ngl, p.GPUKV, p.CPUKV)
		}
		t.Logf("-ngl %d: %s", c.ngl, &p)
	}
}

// TestPlanVRAM: the output first, then layers from the last while they
// fit; the reserve is kept.
func TestPlanVRAM(t *testing.T) {
	m := openStories(t).Model
	n := m.NLayer
	const kv, reserve = 4096, 1 << 16
	layer := layerBytes(&m.Layers[n-1]) + kv
	out := outputBytes(m)
	for _, c := range []struct {
		budget int64
		ngl    int
	}{
		{reserve + out - 1, 0},
		{reserve + out, 1},
		{reserve + out + 2*layer, 3},
		{reserve + out + 2*layer + layer - 1, 3},
		{reserve + out + int64(n)*layer, n + 1},
		{1 << 40, n + 1},
	} {
		p := PlanVRAM(m, c.budget, kv, reserve)
		if p.NGL() != c.ngl {
			t.Errorf("budget %d: -ngl %d, want %d (%s)", c.budget, p.NGL(), c.ngl, &p)
		}
		if p.GPUWeights+p.GPUKV > c.budget-reserve && !p.NoGPU() {
			t.Errorf("budget %d: %d bytes placed", c.budget, p.GPUWeights+p.GPUKV)
		}
	}
}

// TestPlaceableRefuses: routed experts and architectures without device
// shaders are refused by name.
func TestPlaceableRefuses(t *testing.T) {
	r := newRig(t)
	m := openStories(t).Model
	moe, arch := *m, *m
	moe.NExpert = 8
	arch.Arch = "mistral3"
	for _, c := range []struct {
		m    *model.Model
		want string
	}{{&moe, "routed experts"}, {&arch, "architecture mistral3"}} {
		p := PlanLayers(c.m, 2, 0)
		_, err := newPlaced(r.d, c.m, r.k, &p)
		if !errors.Is(err, vk.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrUnsupported naming %q", c.want, err, c.want)
		}
	}
}

// TestSplitStories runs stories260K with -ngl 0, half, all and all+1 (the
// CPU computing the rest, cpu.Backend) against the CPU alone: the logits
// of a prompt (one batch, every row, through the matrix-matrix shaders)
// within the exact bound of stories260K's goldens (2e-4 max |Δlogit|,
// cpu/golden_test.go: both sides multiply float32 weights by float32
// activations, only summation order differs) and 64 greedy tokens from
// "Once upon a time" identical. The host KV cache holds exactly the CPU's
// layers.
func TestSplitStories(t *testing.T) {
	r := newRig(t)
	bd := openStories(t)
	m := bd.Model
	n := m.NLayer
	text, err := os.ReadFile(filepath.Join(golden.Dir(t), "text", "stories_eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := bd.Tokenizer.Encode(string(text[:200]), true, false)
	start := bd.Tokenizer.Encode("Once upon a time", true, false)
	const nGen, nCtx = 64, 256
	cb := cpu.NewBackend(1, nil)
	defer cb.Close()
	refLogits, refGen := runStories(t, m, cb, prompt, start, nGen, nCtx)
	for _, ngl := range []int{0, n / 2, n, n + 1} {
		t.Run(fmt.Sprintf("ngl=%d", ngl), func(t *testing.T) {
			p := PlanLayers(m, ngl, 0)
			be, err := newPlaced(r.d, m, r.k, &p)
			if ngl == 0 {
				if err == nil || !p.NoGPU() {
					t.Fatalf("-ngl 0: plan %s, backend error %v: want nothing on the GPU and a refusal", &p, err)
				}
				return // the command computes on the CPU alone
			}
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			ops := SplitOps(&p, be, cb)
			if _, split := ops.(*model.Split); split == p.AllGPU() {
				t.Fatalf("plan %s: ops %T", &p, ops)
			}
			logits, gen := runStories(t, m, ops, prompt, start, nGen, nCtx)
			var s golden.Stats
			for row := range len(prompt) {
				s.AddRow(logits[row*m.NVocab:(row+1)*m.NVocab], refLogits[row*m.NVocab:(row+1)*m.NVocab])
			}
			t.Logf("%s: %d prompt rows, max |Δlogit| %.2e, RMS %.2e", &p, len(prompt), s.MaxAbs, s.RMS())
			if s.MaxAbs > 2e-4 || math.IsNaN(s.MaxAbs) {
				t.Errorf("max |Δlogit| %.3g > 2e-4", s.MaxAbs)
			}
			if !slices.Equal(gen, refGen) {
				t.Errorf("greedy tokens differ:\n got %v\nwant %v", gen, refGen)
			}
		})
	}
	t.Logf("greedy: %q", detok(bd, refGen))
}

func detok(bd *model.Bundle, ids []int32) string {
	var b []byte
	for _, id := range ids {
		b = bd.Tokenizer.AppendPiece(b, id, false)
	}
	return string(b)
}

// runStories decodes prompt as one batch (logits of every row, copied),
// then from a fresh cache start followed by nGen greedy tokens one at a
// time; it checks the host KV cache holds the layers the Ops keep there.
func runStories(t *testing.T, m *model.Model, ops model.Ops, prompt, start []int32, nGen, nCtx int) ([]float32, []int32) {
	t.Helper()
	decode := func(ctx *model.Context, toks []int32, pos0 int) []float32 {
		b := &model.Batch{Tokens: toks, Pos: make([]int32, len(toks)), Seq: make([]int32, len(toks))}
		for i := range toks {
			b.Pos[i] = int32(pos0 + i)
		}
		out, err := ctx.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	newCtx := func() *model.Context {
		ctx, err := m.NewContext(ops, nCtx, 1, nCtx)
		if err != nil {
			t.Fatal(err)
		}
		s, split := ops.(*model.Split)
		for l := range m.NLayer {
			_, onCPU := ops.(*cpu.Backend)
			if split {
				_, onCPU = s.Layers[l].(*cpu.Backend)
			}
			if ctx.KV.HostKV(l) != onCPU {
				t.Fatalf("layer %d: host KV %v, computed on the CPU %v", l, ctx.KV.HostKV(l), onCPU)
			}
		}
		return ctx
	}
	logits := slices.Clone(decode(newCtx(), prompt, 0))
	ctx := newCtx()
	out := decode(ctx, start, 0)
	var gen []int32
	pos := len(start)
	for range nGen {
		last := out[len(out)-m.NVocab:]
		tok := int32(golden.Argmax(last))
		gen = append(gen, tok)
		out = decode(ctx, []int32{tok}, pos)
		pos++
	}
	return logits, gen
}

// TestSplitGoldenExact: the quick exact-F32 golden cases (llama.cpp's
// logits on F32 files holding the dequantized weights of quantized ones,
// as TestBackendGoldenExactF32) with the model split at its middle layer,
// the CPU's layers on cpu.Ref with Exact set (dequantized weights, float32
// activations, the arithmetic those goldens were made with): within the
// same 1e-4 max |Δlogit|.
func TestSplitGoldenExact(t *testing.T) {
	dir, man := golden.Load(t)
	r := newRig(t)
	for _, c := range man.ExactF32 {
		if c.ID != "synth-llama-Q4_K_M__P2__exact_f32" && c.ID != "synth-qwen2-Q8_0__P2__exact_f32" && c.ID != "synth-qwen3-Q4_K_M__P2__exact_f32" {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			bd, err := model.Open(filepath.Join(dir, c.Model), func(quant.Type) bool { return true }, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer bd.File.Close()
			m := bd.Model
			p := PlanLayers(m, m.NLayer/2+1, 0)
			if p.NGPU() == 0 || p.NGPU() == m.NLayer {
				t.Fatalf("plan %s does not split", &p)
			}
			be, err := newPlaced(r.d, m, r.k, &p)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			ref := cpu.NewRef()
			ref.Exact = true
			n := len(c.PromptTokens)
			ctx, err := m.NewContext(SplitOps(&p, be, ref), n, 1, n)
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
				s.AddRow(got[(c.FirstRow+row)*c.NVocab:(c.FirstRow+row+1)*c.NVocab], want[row*c.NVocab:(row+1)*c.NVocab])
			}
			t.Logf("%s, %d prompt tokens: max |Δlogit| %.2e, RMS %.2e", &p, n, s.MaxAbs, s.RMS())
			if s.MaxAbs > 1e-4 {
				t.Errorf("max |Δlogit| %.3g > 1e-4", s.MaxAbs)
			}
		})
	}
}
