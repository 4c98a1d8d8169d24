package model_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// syncOps is a backend that says it keeps activations elsewhere
// (HostSync): it computes with cpu.Ref and counts the ToHost calls that
// name each buffer, by the address of its first float.
type syncOps struct {
	*cpu.Ref
	calls map[*float32]int
}

func (s *syncOps) ToHost(x []float32) error {
	if cap(x) > 0 {
		s.calls[&x[:1][0]]++
	}
	return nil
}

// TestSplitLayers: a Context made with a model.Split runs each layer on
// its Ops: stories260K split at every layer between cpu.Ref and a
// HostSync backend computing the same arithmetic gives bit-identical
// logits to cpu.Ref alone, over a prompt and a decode step; the hidden
// state is brought to the host once per step by the backend the layers
// leave (ToHost on it), and layers kept there keep their host KV (the
// backend stores no KV rows of its own). Splits that do not fit the model
// are errors.
func TestSplitLayers(t *testing.T) {
	f, err := gguf.Open(filepath.Join(golden.Dir(t), "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref := cpu.NewRef()
	m, err := model.Load(f, ref.Supports)
	if err != nil {
		t.Fatal(err)
	}
	n := m.NLayer
	prompt := []int32{1, 403, 407, 261, 429, 291, 322, 108, 29}
	run := func(ops model.Ops) [][]float32 {
		ctx, err := m.NewContext(ops, 32, 1, 16)
		if err != nil {
			t.Fatal(err)
		}
		for l := range n {
			if !ctx.KV.HostKV(l) {
				t.Fatalf("layer %d has no host KV", l)
			}
		}
		var out [][]float32
		b := &model.Batch{Tokens: prompt, Pos: make([]int32, len(prompt)), Seq: make([]int32, len(prompt))}
		for i := range prompt {
			b.Pos[i] = int32(i)
		}
		logits, err := ctx.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, slices.Clone(logits))
		logits, err = ctx.Decode(&model.Batch{Tokens: []int32{42}, Pos: []int32{int32(len(prompt))}, Seq: []int32{0}})
		if err != nil {
			t.Fatal(err)
		}
		return append(out, slices.Clone(logits))
	}
	want := run(cpu.NewRef())
	for k := 0; k <= n; k++ { // layers < k on the syncing backend, the rest and the output on cpu.Ref
		dev := &syncOps{Ref: cpu.NewRef(), calls: map[*float32]int{}}
		host := cpu.NewRef()
		s := &model.Split{Input: host, Output: host, Layers: make([]model.Ops, n)}
		if k > 0 {
			s.Input = dev // layer 0 is the device's: it looks up the embeddings
		}
		for il := range n {
			s.Layers[il] = host
			if il < k {
				s.Layers[il] = dev
			}
		}
		got := run(s)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("layers < %d on the other backend: step %d's logits differ", k, i)
			}
		}
		// Each step the hidden state leaves the device once (after layer
		// k-1); the output's own ToHost calls go through Split.ToHost to
		// every HostSync part, the device included: 3 per step (x, the
		// output rows, the logits).
		total := 0
		for _, c := range dev.calls {
			total += c
		}
		wantCalls := 0 // k = 0: the backend is no part of the split
		if k > 0 {
			wantCalls = 2 * (1 + 3)
		}
		if total != wantCalls {
			t.Errorf("layers < %d on the other backend: %d ToHost calls on it over 2 steps, want %d", k, total, wantCalls)
		}
	}
	for _, c := range []struct {
		s    *model.Split
		want string
	}{
		{&model.Split{Input: ref, Output: ref, Layers: make([]model.Ops, n-1)}, "one per layer"},
		{&model.Split{Input: ref, Output: nil, Layers: slices.Repeat([]model.Ops{ref}, n)}, "input and output"},
		{&model.Split{Input: ref, Output: ref, Layers: append(slices.Repeat([]model.Ops{ref}, n-1), nil)}, "no backend for layer"},
	} {
		if _, err := m.NewContext(c.s, 32, 1, 16); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("split %+v: error %v, want %q", c.s, err, c.want)
		}
	}
}
