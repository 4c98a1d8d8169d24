package stages_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
	"github.com/flowinfer/flowinfer/stages"
)

// TestHybridPrefixNotReused: a hybrid model (qwen35: recurrent layers
// whose state cannot be rebuilt from cached K/V rows) never takes a
// prompt prefix from the cache: a repeated prompt, and a prompt extending
// a previous request's, give the logits of a cold engine at every
// generated token, with no cached tokens reported. Both cache layouts.
func TestHybridPrefixNotReused(t *testing.T) {
	s, err := synth.Preset("qwen35-small")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := synth.WriteFile(path, s, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := model.Open(path, cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	base := b.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She liked to play outside in the park.", true, true)
	longer := b.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She liked to play outside in the park. One day", true, true)
	for _, paged := range []bool{false, true} {
		name := "fixed"
		var ops func() model.Ops = func() model.Ops { return cpu.NewRef() }
		cfg := stages.Config{NCtx: 256, BlockSize: 16}
		if paged {
			name = "paged"
			cfg.KVTokens = 1024
			ops = func() model.Ops {
				be := cpu.NewBackend(1, nil)
				t.Cleanup(be.Close)
				return be
			}
		}
		t.Run(name, func(t *testing.T) {
			request := func(prompt []int32, rows *[][]float32, col *collector) *stages.Request {
				return &stages.Request{Prompt: prompt, Params: greedy(), MaxTokens: 8, IgnoreEOG: true, Emit: col.emit,
					OnLogits: func(row []float32) { *rows = append(*rows, slices.Clone(row)) }}
			}
			cold := func(prompt []int32) [][]float32 {
				var rows [][]float32
				e, err := stages.NewEngine(b.Model, b.Tokenizer, ops(), cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := runEngine(t, e, request(prompt, &rows, newCollector())); err != nil {
					t.Fatal(err)
				}
				return rows
			}
			coldBase, coldLonger := cold(base), cold(longer)
			e, err := stages.NewEngine(b.Model, b.Tokenizer, ops(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			for i, prompt := range [][]int32{base, base, longer} {
				var rows [][]float32
				col := newCollector()
				e.Submit(request(prompt, &rows, col))
				select {
				case <-col.done:
				case err := <-done:
					t.Fatalf("request %d: the engine stopped: %v", i, err)
				}
				want := coldBase
				if i == 2 {
					want = coldLonger
				}
				if col.final.Usage.CachedTokens != 0 {
					t.Errorf("request %d: %d cached tokens reused", i, col.final.Usage.CachedTokens)
				}
				if len(rows) != len(want) {
					t.Fatalf("request %d: %d logit rows, cold %d", i, len(rows), len(want))
				}
				for j := range rows {
					if !slices.Equal(rows[j], want[j]) {
						t.Fatalf("request %d: logits of token %d differ from a cold engine's", i, j)
					}
				}
			}
			e.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
