package bench_test

import (
	"context"
	"flag"
	"fmt"
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

// yarnWrite, when set, makes TestRopeScalingGolden write its models, text
// and prompt to that directory (the inputs of llama.cpp in
// testdata/ropescale/README.md) instead of testing.
var yarnWrite = flag.String("ropescale-write", "", "write the rope-scaling golden's models, text and prompt to this directory and skip the test")

// ropeScaled are the rope-scaling golden's models, F32, seed 1, context_length
// 1024: the demo preset (llama, RoPE on adjacent pairs) with
//
//	yarn:   flowinfer gen --preset demo --type F32 --pure --ctx 1024 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 256
//	linear: flowinfer gen --preset demo --type F32 --pure --ctx 1024 --rope-scaling linear --rope-factor 4 --rope-attn-factor 0.8
//
// and qwen3-yarn, the demo's shape as qwen3 (RoPE on halves, QK-norm, rope
// base 1e6, rms eps 1e-6; no preset, so only this test writes it) with YaRN
// factor 8 over an original context of 128.
var ropeScaled = []struct {
	name, scaling string
	edit          func(*synth.Spec)
}{
	{"yarn", "yarn", func(s *synth.Spec) { s.RopeScaling, s.RopeFactor, s.RopeOrigCtx = "yarn", 4, 256 }},
	{"linear", "linear", func(s *synth.Spec) { s.RopeScaling, s.RopeFactor, s.RopeAttnFactor = "linear", 4, 0.8 }},
	{"qwen3-yarn", "yarn", func(s *synth.Spec) {
		s.Arch, s.Name, s.RopeBase, s.RMSEps = "qwen3", "synth-qwen3-yarn", 0, 0
		s.RopeScaling, s.RopeFactor, s.RopeOrigCtx = "yarn", 8, 128
	}},
}

// ropeScaleText is the golden's text: 6000 words drawn from a fixed list by
// a seeded generator (a random model cannot tell prose from word salad).
func ropeScaleText() string {
	words := strings.Fields(`the of and to a in is it you that he was for on are with as I his they be at one
have this from or had by hot word but what some we can out other were all there when up use your how said an
each she which do their time if will way about many then them write would like so these her long make thing see
him two has look more day could go come did number sound no most people my over know water than call first who
may down side been now find any new work part take get place made live where after back little only round man
year came show every good me give our under name very through just form sentence great think say help low line
differ turn cause much mean before move right boy old too same tell does set three want air well also play small
end put home read hand port large spell add even land here must big high such follow act why ask men change went
light kind off need house picture try us again animal point mother world near build self earth father`)
	r := rand.New(rand.NewPCG(16, 7))
	var b strings.Builder
	for i := range 6000 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// ropeScalePrompt is the greedy continuation's prompt: the text's first 400
// words (610 tokens with BOS), so the continuation runs at positions well
// beyond the yarn model's original context of 256.
func ropeScalePrompt() string {
	return strings.Join(strings.Fields(ropeScaleText())[:400], " ")
}

// TestRopeScalingGolden: the two scaled models give llama-perplexity's
// running values at -c 1024 (every scored position is at 512 or beyond,
// twice the yarn model's original context) within one unit of the 4th
// decimal it prints (±0.00015 on values near 1050, 1.4e-7 relative), and
// llama-completion's greedy continuation of the prompt exactly, both
// recorded in testdata/ropescale/llama.txt (see its README). The models
// and text are regenerated here; llama.cpp is not needed. Getting the
// YaRN ramp's end one pair wrong moves the first value by 5.6 (0.5%).
func TestRopeScalingGolden(t *testing.T) {
	var want map[string]string
	if *yarnWrite == "" {
		want = golden.ReadQuoted(t, filepath.Join("testdata", "ropescale", "llama.txt"))
	}
	text, prompt := ropeScaleText(), ropeScalePrompt()
	dir := t.TempDir()
	if *yarnWrite != "" {
		dir = *yarnWrite
		for name, s := range map[string]string{"text.txt": text, "prompt.txt": prompt} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range ropeScaled {
		t.Run(c.name, func(t *testing.T) {
			spec, err := synth.Preset("demo")
			if err != nil {
				t.Fatal(err)
			}
			spec.NCtx = 1024
			c.edit(&spec)
			path := filepath.Join(dir, "demo-"+c.name+".gguf")
			if err := synth.WriteFile(path, spec, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
				t.Fatal(err)
			}
			if *yarnWrite != "" {
				t.Skipf("wrote %s", path)
			}
			b, err := model.Open(path, cpu.NewRef().Supports, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.Model.RopeScaling != c.scaling {
				t.Fatalf("rope scaling %q", b.Model.RopeScaling)
			}
			be := cpu.NewBackend(0, cpu.Best())
			defer be.Close()
			const nCtx = 1024
			mctx, err := b.Model.NewContext(be, nCtx, 1, nCtx)
			if err != nil {
				t.Fatal(err)
			}
			toks := b.Tokenizer.Encode(text, true, false)
			r, err := bench.Perplexity(context.Background(), mctx, toks, bench.PerplexityOptions{NCtx: nCtx, BOS: b.Tokenizer.BOS()})
			if err != nil {
				t.Fatal(err)
			}
			wantPPL := golden.ParseRunning(t, want[c.name+".ppl"])
			var got strings.Builder
			for i, p := range r.Running {
				fmt.Fprintf(&got, "[%d]%.4f,", i+1, p)
			}
			t.Logf("%d tokens; PPL %s; llama.cpp %s", len(toks), got.String(), want[c.name+".ppl"])
			if len(r.Running) != len(wantPPL) {
				t.Fatalf("%d chunks, llama.cpp %d", len(r.Running), len(wantPPL))
			}
			for i, p := range r.Running {
				if math.Abs(p-wantPPL[i]) > 1.5e-4 {
					t.Errorf("chunk %d: running PPL %.4f, llama.cpp %.4f (limit ±0.00015)", i+1, p, wantPPL[i])
				}
			}

			// Greedy continuation at positions 610..657.
			mctx, err = b.Model.NewContext(be, nCtx, 1, nCtx)
			if err != nil {
				t.Fatal(err)
			}
			ids := b.Tokenizer.Encode(prompt, true, false)
			var out []int32
			batch := &model.Batch{Tokens: ids, Pos: make([]int32, len(ids)), Seq: make([]int32, len(ids)), Logits: make([]bool, len(ids))}
			for i := range ids {
				batch.Pos[i] = int32(i)
			}
			batch.Logits[len(ids)-1] = true
			V := b.Model.NVocab
			for pos := len(ids); len(out) < 48; pos++ {
				logits, err := mctx.Decode(batch)
				if err != nil {
					t.Fatal(err)
				}
				best := golden.Argmax(logits[len(logits)-V:])
				out = append(out, int32(best))
				batch = &model.Batch{Tokens: []int32{int32(best)}, Pos: []int32{int32(pos)}, Seq: []int32{0}}
			}
			gen := b.Tokenizer.Decode(out, false)
			if gen != want[c.name+".greedy"] {
				t.Errorf("greedy continuation after %d prompt tokens:\n%q\n    llama.cpp:\n%q", len(ids), gen, want[c.name+".greedy"])
			}
		})
	}
}
