package bench_test

import (
	"context"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// longWrite, when set, makes TestLongPromptGolden write its model, text and
// prompt to that directory (the inputs of llama.cpp in
// testdata/longprompt/README.md) instead of testing.
var longWrite = flag.String("longprompt-write", "", "write the long-prompt golden's model, text and prompt to this directory and skip the test")

// Long-prompt golden (issue 20): a model with llama-1b's attention shape
// (heads of 64, 4 query heads per KV head, rope base 500000) trained, by
// its metadata, for 8192 positions, evaluated by llama.cpp at 16384.
const (
	longCtx       = 16384 // llama-perplexity -c, llama-completion -c
	longPromptLen = 16000 // prompt tokens of the greedy continuation, BOS included
	longGreedy    = 32    // tokens generated after it
	longBatch     = 2048  // prompt chunk (llama.cpp's default -b)
)

func longSpec() synth.Spec {
	return synth.Spec{Arch: "llama", Name: "flowinfer-longprompt", NCtx: 8192, NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 1,
		HeadDim: 64, NFF: 768, RopeBase: 500000, RMSEps: 1e-5}
}

// longText is the golden's text: n words drawn from ropeScaleText's list by
// PCG(20, 11).
func longText(n int) string {
	words := strings.Fields(ropeScaleText()) // the list's words, in a fixed order of use
	seen := map[string]bool{}
	var list []string
	for _, w := range words {
		if !seen[w] {
			seen[w] = true
			list = append(list, w)
		}
	}
	r := rand.New(rand.NewPCG(20, 11))
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(list[r.IntN(len(list))])
	}
	return b.String()
}

// TestLongPromptGolden: beyond the model's training context, at 16384
// positions, flowinfer gives llama-perplexity's value for one chunk of 16384
// (positions 8192..16382 scored, every one beyond the training context of
// 8192) within one unit of the 4th decimal it prints, and llama-completion's
// greedy continuation of a 16,000-token prompt fed in chunks of 2048 (as
// llama.cpp's -b) exactly; both recorded in testdata/longprompt/llama.txt
// (see its README). F32 weights and F32 KV, as llama.cpp was run (-ctk f32
// -ctv f32 -fa off); the model and text are regenerated here.
func TestLongPromptGolden(t *testing.T) {
	var want map[string]string
	if *longWrite == "" {
		want = golden.ReadQuoted(t, filepath.Join("testdata", "longprompt", "llama.txt"))
	}
	dir := t.TempDir()
	if *longWrite != "" {
		dir = *longWrite
	}
	path := filepath.Join(dir, "longprompt.gguf")
	if err := synth.WriteFile(path, longSpec(), synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := model.Open(path, cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	text := longText(23000)
	toks := b.Tokenizer.Encode(text, true, false)
	if len(toks) < 2*longCtx {
		t.Fatalf("text is %d tokens, llama-perplexity needs %d", len(toks), 2*longCtx)
	}
	// The prompt: the text's longest word prefix of at most longPromptLen tokens.
	words := strings.Fields(text)
	lo, hi := 0, len(words)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if len(b.Tokenizer.Encode(strings.Join(words[:mid], " "), true, false)) <= longPromptLen {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	prompt := strings.Join(words[:lo], " ")
	ids := b.Tokenizer.Encode(prompt, true, false)
	if *longWrite != "" {
		for name, s := range map[string]string{"text.txt": text, "prompt.txt": prompt} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Skipf("wrote %s: text %d tokens, prompt %d words, %d tokens", dir, len(toks), lo, len(ids))
	}

	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	// perplexity with F32 KV against llama.cpp's -fa off (its softmax
	// accumulates as ours does), within one unit of the 4th decimal; with
	// F16 KV (the default) between llama.cpp's F16 values with -fa off and
	// -fa on (which differ by 0.0006: its flash path rounds Q to F16 too),
	// widened by that unit.
	for _, c := range []struct {
		name string
		kv   model.KVType
		keys []string
	}{
		{"perplexity", model.KVF32, []string{"c16384.ppl"}},
		{"perplexity-f16", model.KVF16, []string{"c16384.f16.fa-off.ppl", "c16384.f16.fa-on.ppl"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mctx, err := b.Model.NewContextOf(be, model.KVTypes{K: c.kv, V: c.kv}, longCtx, 1, longCtx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := bench.Perplexity(context.Background(), mctx, toks, bench.PerplexityOptions{NCtx: longCtx, BOS: b.Tokenizer.BOS(), Chunks: 1})
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, k := range c.keys {
				w := golden.ParseRunning(t, want[k])
				if len(w) != 1 || len(r.Running) != 1 {
					t.Fatalf("%d chunks, llama.cpp %d", len(r.Running), len(w))
				}
				lo, hi = min(lo, w[0]), max(hi, w[0])
			}
			t.Logf("%d tokens; PPL [1]%.4f; llama.cpp [%.4f, %.4f]", len(toks), r.Running[0], lo, hi)
			if p := r.Running[0]; p < lo-1.5e-4 || p > hi+1.5e-4 {
				t.Errorf("running PPL %.4f, llama.cpp [%.4f, %.4f] (limit ±0.00015 beyond)", p, lo, hi)
			}
		})
	}
	t.Run("greedy", func(t *testing.T) {
		mctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, longCtx, 1, longBatch)
		if err != nil {
			t.Fatal(err)
		}
		var logits []float32
		for at := 0; at < len(ids); at += longBatch {
			n := min(longBatch, len(ids)-at)
			batch := &model.Batch{Tokens: ids[at : at+n], Pos: make([]int32, n), Seq: make([]int32, n), Logits: make([]bool, n)}
			for i := range n {
				batch.Pos[i] = int32(at + i)
			}
			batch.Logits[n-1] = at+n == len(ids)
			if logits, err = mctx.Decode(batch); err != nil {
				t.Fatal(err)
			}
		}
		V := b.Model.NVocab
		var out []int32
		for pos := len(ids); ; pos++ {
			best := golden.Argmax(logits[len(logits)-V:])
			out = append(out, int32(best))
			if len(out) == longGreedy {
				break
			}
			if logits, err = mctx.Decode(&model.Batch{Tokens: []int32{int32(best)}, Pos: []int32{int32(pos)}, Seq: []int32{0}}); err != nil {
				t.Fatal(err)
			}
		}
		// llama-completion prints each generated token's piece (a
		// continuation: no leading space removed)
		var gb []byte
		for _, id := range out {
			gb = b.Tokenizer.AppendPiece(gb, id, false)
		}
		if gen := string(gb); gen != want["greedy"] {
			t.Errorf("greedy continuation after %d prompt tokens:\n%q\n    llama.cpp:\n%q", len(ids), gen, want["greedy"])
		}
	})
}
