package bench_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
)

// TestPerplexityStories: stories260K on text/stories_eval.txt at -c 128
// must be within 0.5% of llama-perplexity's figure with an F32 KV cache
// (6.0079), and the q8_0 file within 0.5% of 6.0141.
func TestPerplexityStories(t *testing.T) {
	dir, man := golden.Load(t)
	text, err := os.ReadFile(filepath.Join(dir, man.Perplexity.Text))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		want golden.Perplexity
	}{
		{"models/stories260K.gguf", man.Perplexity.KVF32},
		{"models/stories260K-q8_0.gguf", man.Perplexity.Q8KVF32},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			b, err := model.Open(filepath.Join(dir, c.file), cpu.NewRef().Supports, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			toks := b.Tokenizer.Encode(string(text), true, false)
			if len(toks) != man.Perplexity.NTokens {
				t.Fatalf("%d tokens, llama-perplexity had %d", len(toks), man.Perplexity.NTokens)
			}
			nCtx := man.Perplexity.Ctx
			mctx, err := b.Model.NewContext(cpu.NewRef(), nCtx, 1, nCtx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := bench.Perplexity(context.Background(), mctx, toks, nCtx, b.Tokenizer.BOS(), nil)
			if err != nil {
				t.Fatal(err)
			}
			rel := math.Abs(r.PPL-c.want.PPL) / c.want.PPL
			t.Logf("PPL %.4f ± %.5f over %d chunks; llama.cpp %.4f ± %.5f; relative difference %.3f%%", r.PPL, r.PM, r.Chunks, c.want.PPL, c.want.PM, 100*rel)
			if r.Chunks != man.Perplexity.NChunks {
				t.Errorf("%d chunks, llama-perplexity %d", r.Chunks, man.Perplexity.NChunks)
			}
			if strings.HasSuffix(c.file, "stories260K.gguf") {
				// llama-perplexity's running values, "[1]4.6167,[2]3.7972,...",
				// must match to the 4 decimals it prints.
				log, err := os.ReadFile(filepath.Join(dir, "perplexity", "ppl_f32kv.out"))
				if err != nil {
					t.Fatal(err)
				}
				var got strings.Builder
				for i, p := range r.Running {
					fmt.Fprintf(&got, "[%d]%.4f,", i+1, p)
				}
				if !strings.Contains(string(log), got.String()) {
					t.Errorf("running values %s\nnot in llama-perplexity's output:\n%s", got.String(), log)
				}
			}
			if rel > 0.005 {
				t.Errorf("PPL %.4f is %.2f%% from llama.cpp's %.4f (limit 0.5%%)", r.PPL, 100*rel, c.want.PPL)
			}
		})
	}
}
