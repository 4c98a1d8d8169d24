package model_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// TestEmbeddings: the rows marked in Batch.Embd come back from
// Embeddings packed in batch order, equal to the "result_norm" of the same
// rows when their logits are asked for; unmarked rows cost nothing, and
// flags of the wrong length are a bad batch.
func TestEmbeddings(t *testing.T) {
	f, err := gguf.Open(filepath.Join(golden.Dir(t), "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.NewContext(cpu.NewRef(), 16, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	var norm []float32
	c.SetHooks(model.Hooks{Eval: func(name string, layer int, x []float32, n, dim int) {
		if name == "result_norm" {
			norm = append(norm[:0], x...)
		}
	}})
	b := &model.Batch{Tokens: []int32{1, 400, 30, 7, 99}, Pos: []int32{0, 1, 2, 3, 4}, Seq: make([]int32, 5),
		Logits: []bool{false, true, false, true, true}, Embd: []bool{false, true, false, true, true}}
	if _, err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	got := c.Embeddings()
	if len(got) != 3*m.NEmbd || len(norm) != len(got) {
		t.Fatalf("%d values, result_norm %d, want %d", len(got), len(norm), 3*m.NEmbd)
	}
	for i := range got {
		if got[i] != norm[i] {
			t.Fatalf("value %d: %v, result_norm %v", i, got[i], norm[i])
		}
	}
	// the next step without flags has none
	if _, err := c.Decode(&model.Batch{Tokens: []int32{5}, Pos: []int32{5}, Seq: []int32{0}}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Embeddings()); n != 0 {
		t.Errorf("a step without Embd returned %d values", n)
	}
	_, err = c.Decode(&model.Batch{Tokens: []int32{5}, Pos: []int32{6}, Seq: []int32{0}, Embd: []bool{true, true}})
	if !errors.Is(err, model.ErrBatch) {
		t.Errorf("Embd of the wrong length: %v", err)
	}
}
