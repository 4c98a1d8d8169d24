package model_test

import (
	"context"
	"flag"
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
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// mistral3Write, when set, makes TestMistral3Golden write its models and
// prompt to that directory (the inputs of llama.cpp in
// testdata/mistral3/README.md) instead of testing.
var mistral3Write = flag.String("mistral3-write", "", "write the mistral3 golden's models and prompt to this directory and skip the test")

// mistral3Golden are the golden's files: the mistral3-small preset, seed 1,
// as `flowinfer gen --preset mistral3-small` writes them.
var mistral3Golden = []struct {
	name string
	o    synth.Options
	// logits bounds at the last prompt position (cpu/golden_test.go's
	// exactBounds for F32, nativeBounds for quantized files) and the
	// running perplexity's bound: absolute (one unit of the 4th printed
	// decimal) plus relative
	maxAbs, rms, pplAbs, pplRel float64
	// perplexity chunks compared (0: all); slow says the file's type has
	// no SIMD kernel (skipped with -short)
	chunks int
	slow   bool
}{
	{"F32", synth.Options{Type: quant.F32, Seed: 1}, 1e-4, 0, 1.5e-4, 0, 0, false},
	{"Q4_K_M", synth.Options{Mix: "Q4_K_M", Seed: 1}, 0.1, 0.02, 0, 1e-3, 0, false},
	{"IQ4_XS", synth.Options{Type: quant.IQ4_XS, Seed: 1}, 0.1, 0.02, 0, 1e-3, 1, true},
}

// mistral3Prompt is the golden's prompt: the first 850 words of the golden
// stories text joined by single spaces (1521 tokens with BOS), so its last
// positions are 5 steps of the temperature (256 positions each) past the
// original context.
func mistral3Prompt(text string) string {
	return strings.Join(strings.Fields(text)[:850], " ")
}

// TestMistral3Golden: on the mistral3-small files (YaRN with the file's
// ramp bounds and log multiplier, attention temperature), we reproduce
// llama.cpp's logits at the last position of a 1521-token prompt (where the
// temperature multiplies q by 1 + 0.1·ln 6), its 64-token greedy
// continuation exactly, and llama-perplexity's running values on the golden
// stories text at -c 512 (scored positions 256..510, one temperature step),
// all recorded in testdata/mistral3 (see its README). The models are
// regenerated here; llama.cpp is not needed.
func TestMistral3Golden(t *testing.T) {
	gdir := golden.Dir(t)
	raw, err := os.ReadFile(filepath.Join(gdir, "text", "stories_eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	prompt := mistral3Prompt(text)
	var want map[string]string
	dir := t.TempDir()
	if *mistral3Write != "" {
		dir = *mistral3Write
		if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		want = golden.ReadQuoted(t, filepath.Join("testdata", "mistral3", "llama.txt"))
	}
	spec, err := synth.Preset("mistral3-small")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range mistral3Golden {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "mistral3-small-"+c.name+".gguf")
			if err := synth.WriteFile(path, spec, c.o); err != nil {
				t.Fatal(err)
			}
			if *mistral3Write != "" {
				t.Skipf("wrote %s", path)
			}
			if c.slow && testing.Short() {
				t.Skip("IQ4_XS has no SIMD kernel: slow; not with -short")
			}
			b, err := model.Open(path, cpu.NewRef().Supports, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			be := cpu.NewBackend(0, cpu.Best())
			defer be.Close()
			V := b.Model.NVocab

			// Logits at the last prompt position, the prompt in one batch.
			const nCtx = 2048
			mctx, err := b.Model.NewContext(be, nCtx, 1, nCtx)
			if err != nil {
				t.Fatal(err)
			}
			ids := b.Tokenizer.Encode(prompt, true, false)
			if len(ids) != 1521 {
				t.Fatalf("prompt is %d tokens, llama.cpp's 1521", len(ids))
			}
			logits := promptLogits(t, mctx, ids)
			ref, err := golden.ReadF32(filepath.Join("testdata", "mistral3", "logits-"+c.name+".f32"))
			if err != nil {
				t.Fatal(err)
			}
			var st golden.Stats
			st.AddRow(logits[:V], ref)
			t.Logf("last-position logits: max |Δ| %.3g, RMS %.3g, argmax same %v", st.MaxAbs, st.RMS(), st.ArgmaxSame == 1)
			if st.MaxAbs > c.maxAbs || c.rms > 0 && st.RMS() > c.rms {
				t.Errorf("last-position logits: max |Δ| %.3g (limit %g), RMS %.3g (limit %g)", st.MaxAbs, c.maxAbs, st.RMS(), c.rms)
			}

			// Greedy continuation at positions 1521..1584: llama.cpp's
			// tokens (its logits tool, the prompt in one batch) are
			// llama-completion's text, and we choose them too at every step
			// whose top-2 margin in llama.cpp exceeds twice our deviation at
			// the last prompt position, as cpu/golden_test.go's
			// TestGoldenLogits does (below that a near-tie may go either
			// way; the first one ends the comparison). We are fed
			// llama.cpp's tokens, which equals free-running greedy while
			// the choices agree.
			wantIDs, margins := fields[int32](t, want[c.name+".ids"]), fields[float64](t, want[c.name+".margins"])
			var pieces []byte
			for _, id := range wantIDs {
				pieces = b.Tokenizer.AppendPiece(pieces, id, false)
			}
			if string(pieces) != want[c.name+".greedy"] || len(wantIDs) != 64 || len(margins) != 64 {
				t.Fatalf("llama.txt: the %d ids are %q, llama-completion's text %q", len(wantIDs), pieces, want[c.name+".greedy"])
			}
			limit := 2 * st.MaxAbs
			same, compared := 0, 0
			for i, wantTok := range wantIDs {
				tok := int32(golden.Argmax(logits[len(logits)-V:]))
				if tok == wantTok && same == i {
					same++
				}
				if compared == i && margins[i] > limit {
					compared++
					if tok != wantTok {
						t.Errorf("greedy step %d: token %d, llama.cpp %d (margin %.3g > 2×max|Δ| %.3g)", i, tok, wantTok, margins[i], limit)
					}
				}
				if logits, err = mctx.Decode(&model.Batch{Tokens: []int32{wantTok}, Pos: []int32{int32(len(ids) + i)}, Seq: []int32{0}}); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("greedy: %d/64 steps compared (margin > %.3g), identical prefix %d/64", compared, limit, same)
			if c.name == "F32" && same != 64 {
				t.Errorf("F32 greedy continuation: %d of 64 tokens identical to llama.cpp's", same)
			}

			// llama-perplexity -c 512 on the stories text.
			const pplCtx = 512
			mctx, err = b.Model.NewContext(be, pplCtx, 1, pplCtx)
			if err != nil {
				t.Fatal(err)
			}
			toks := b.Tokenizer.Encode(text, true, false)
			r, err := bench.Perplexity(context.Background(), mctx, toks, bench.PerplexityOptions{NCtx: pplCtx, BOS: b.Tokenizer.BOS(), Chunks: c.chunks})
			if err != nil {
				t.Fatal(err)
			}
			wantPPL := golden.ParseRunning(t, want[c.name+".ppl"])
			if c.chunks > 0 {
				wantPPL = wantPPL[:c.chunks]
			}
			if len(r.Running) != len(wantPPL) {
				t.Fatalf("%d chunks, llama.cpp %d", len(r.Running), len(wantPPL))
			}
			for i, p := range r.Running {
				t.Logf("chunk %d: running PPL %.4f, llama.cpp %.4f", i+1, p, wantPPL[i])
				if lim := c.pplAbs + c.pplRel*wantPPL[i]; math.Abs(p-wantPPL[i]) > lim {
					t.Errorf("chunk %d: running PPL %.4f, llama.cpp %.4f (limit ±%.2g)", i+1, p, wantPPL[i], lim)
				}
			}
		})
	}
}

// fields parses a space-separated list of numbers.
func fields[T int32 | float64](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	for _, f := range strings.Fields(s) {
		var x T
		if _, err := fmt.Sscan(f, &x); err != nil {
			t.Fatalf("llama.txt: %q: %v", f, err)
		}
		out = append(out, x)
	}
	return out
}
