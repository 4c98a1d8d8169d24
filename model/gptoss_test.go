package model_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// gptOssWrite, when set, makes TestGptOssGolden write its models and
// prompt to that directory (llama.cpp's inputs in
// testdata/gptoss/README.md) instead of testing.
var gptOssWrite = flag.String("gptoss-write", "", "write the gpt-oss golden's models and prompt to this directory and skip the test")

const (
	gptOssPromptLen = 1500 // prompt tokens at most, BOS included
	gptOssGreedy    = 64   // llama-completion -n
	gptOssPPLCtx    = 512  // llama-perplexity -c
	gptOssCtx       = 2048 // llama-completion -c
)

// gptOssVariants are the golden's files: the gpt-oss-small preset, seed 1,
// experts MXFP4 and the other weights F32 (as the converter writes the real
// models) or Q8_0 (llama-quantize's MXFP4_MOE layout).
var gptOssVariants = []struct {
	name string
	typ  quant.Type
	// bounds on the last-position logits and on each running perplexity
	// (relative)
	maxAbs, rms, ppl float64
}{
	// F32 outside the experts: the shared goldens' exact class (max 1e-4;
	// measured 2.1e-7: the MXFP4 products round their activations to
	// Q8_0 exactly as ggml does), perplexity within 1e-5 (measured 3e-7)
	{"F32", quant.F32, 1e-4, 0, 1e-5},
	// Q8_0 everywhere else: the shared goldens' class for quantized files
	// (max 0.1, RMS 0.02; measured 0.0056, 0.0016: a Q8_0 rounding of an
	// activation flips now and then) and their q8_0 perplexity bound, 0.5%
	// (measured 1e-5)
	{"Q8_0", quant.Q8_0, 0.1, 0.02, 0.005},
}

// gptOssPrompt returns the longest word prefix of the golden stories text
// that tokenizes (with BOS) to at most gptOssPromptLen tokens, and the text.
func gptOssPrompt(t *testing.T, encode func(string) []int32) (prompt, text string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(golden.Dir(t), "text", "stories_eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text = string(raw)
	words := strings.Fields(text)
	lo, hi := 0, len(words)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if len(encode(strings.Join(words[:mid], " "))) <= gptOssPromptLen {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strings.Join(words[:lo], " "), text
}

// TestGptOssGolden: on a random-weight gpt-oss-small (4 layers: 0 and 2
// slide over a window of 128, 1 and 3 see everything; sinks, biases,
// YaRN, MXFP4 experts with the clamped SwiGLU), flowinfer gives
// llama.cpp's numbers, recorded in testdata/gptoss (see its README):
//
//   - the logits after a prompt of 1,500 tokens of the golden stories
//     text (one batch, as llama.cpp ran it), within the variant's bounds;
//   - llama-completion's 64-token greedy continuation, identically;
//   - llama-perplexity's running values over the text (-c 512, 4 chunks,
//     positions 256..510 scored: past the window), within the variant's
//     relative bound.
//
// Both on the SIMD backend with an F32 KV cache (llama.cpp: -ctk f32
// -ctv f32 -fa off).
func TestGptOssGolden(t *testing.T) {
	dir := t.TempDir()
	if *gptOssWrite != "" {
		dir = *gptOssWrite
	}
	spec, err := synth.Preset("gpt-oss-small")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range gptOssVariants {
		t.Run(v.name, func(t *testing.T) {
			path := filepath.Join(dir, "gpt-oss-small-"+v.name+".gguf")
			if err := synth.WriteFile(path, spec, synth.Options{Type: v.typ, Seed: 1}); err != nil {
				t.Fatal(err)
			}
			b, err := model.Open(path, cpu.Best().Supports, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			tok := b.Tokenizer
			prompt, text := gptOssPrompt(t, func(s string) []int32 { return tok.Encode(s, true, false) })
			ids := tok.Encode(prompt, true, false)
			if *gptOssWrite != "" {
				if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Skipf("wrote %s: prompt %d tokens", dir, len(ids))
			}
			want := golden.ReadQuoted(t, filepath.Join("testdata", "gptoss", v.name+".txt"))
			if got := fmt.Sprint(ids); got != "["+want["tokens"]+"]" {
				t.Fatalf("prompt tokens differ from llama.cpp's (%d tokens)", len(ids))
			}
			be := cpu.NewBackend(0, cpu.Best())
			defer be.Close()
			mctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, gptOssCtx, 1, len(ids))
			if err != nil {
				t.Fatal(err)
			}
			logits := promptLogits(t, mctx, ids)
			V := b.Model.NVocab
			wantLogits := readFloats(t, filepath.Join("testdata", "gptoss", v.name+".logits"))
			var s golden.Stats
			s.AddRow(logits[len(logits)-V:], wantLogits)
			t.Logf("last-position logits after %d tokens: max |Δ| %.3g, RMS %.3g", len(ids), s.MaxAbs, s.RMS())
			if s.MaxAbs > v.maxAbs || v.rms > 0 && s.RMS() > v.rms {
				t.Errorf("logits: max |Δ| %.3g (limit %g), RMS %.3g (limit %g)", s.MaxAbs, v.maxAbs, s.RMS(), v.rms)
			}
			var out []int32
			for pos := len(ids); ; pos++ {
				best := golden.Argmax(logits[len(logits)-V:])
				out = append(out, int32(best))
				if len(out) == gptOssGreedy {
					break
				}
				if logits, err = mctx.Decode(&model.Batch{Tokens: []int32{int32(best)}, Pos: []int32{int32(pos)}, Seq: []int32{0}}); err != nil {
					t.Fatal(err)
				}
			}
			var gb []byte
			for _, id := range out {
				gb = tok.AppendPiece(gb, id, false)
			}
			if gen := string(gb); gen != want["greedy"] {
				t.Errorf("greedy continuation:\n%q\n    llama.cpp:\n%q", gen, want["greedy"])
			}

			if testing.Short() {
				return // the perplexity's 2048 tokens
			}
			pctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, gptOssPPLCtx, 1, gptOssPPLCtx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := bench.Perplexity(context.Background(), pctx, tok.Encode(text, true, false), bench.PerplexityOptions{NCtx: gptOssPPLCtx, BOS: tok.BOS()})
			if err != nil {
				t.Fatal(err)
			}
			wantPPL := golden.ParseRunning(t, want["ppl"])
			if len(r.Running) != len(wantPPL) {
				t.Fatalf("%d perplexity chunks, llama.cpp %d", len(r.Running), len(wantPPL))
			}
			for i, w := range wantPPL {
				if rel := math.Abs(r.Running[i]-w) / w; rel > v.ppl {
					t.Errorf("running PPL [%d] %.4f, llama.cpp %.4f (relative %.2g > %g)", i+1, r.Running[i], w, rel, v.ppl)
				}
			}
			t.Logf("running PPL %.4f, llama.cpp %.4f", r.Running, wantPPL)
		})
	}
}

// TestGptOssChunked: a gpt-oss prompt longer than the sliding window,
// prefilled in one pass, in chunks of 7 and 64 tokens, and as 40 tokens
// then one token at a time, gives the same logits at every position, bit
// for bit (Ref backend: each row's arithmetic does not depend on the
// batch; the cache, the window masks and the sinks must not either).
func TestGptOssChunked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpt-oss-small.gguf")
	spec, err := synth.Preset("gpt-oss-small")
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.WriteFile(path, spec, synth.Options{Type: quant.Q8_0, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := model.Open(path, cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := b.Model
	if m.LayerWindow(0) != 128 || m.LayerWindow(1) != 0 || m.LayerWindow(2) != 128 || m.LayerWindow(3) != 0 {
		t.Fatalf("windows %v, want [128 0 128 0]", m.Window)
	}
	const n = 200 // > the window of 128
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*37 + 11) % m.NVocab)
	}
	run := func(chunks []int) []float32 {
		mctx, err := m.NewContext(cpu.NewRef(), n, 1, n)
		if err != nil {
			t.Fatal(err)
		}
		return chunkLogits(t, mctx, ids, chunks)
	}
	split := func(first, size int) []int {
		var cs []int
		if first > 0 {
			cs = append(cs, first)
		}
		for at := first; at < n; at += size {
			cs = append(cs, min(size, n-at))
		}
		return cs
	}
	want := run([]int{n})
	for _, c := range []struct {
		name   string
		chunks []int
	}{{"chunks=7", split(0, 7)}, {"chunks=64", split(0, 64)}, {"prefill=40/decode", split(40, 1)}} {
		got := run(c.chunks)
		if len(got) != len(want) {
			t.Fatalf("%s: %d logits, want %d", c.name, len(got), len(want))
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: logit %d (position %d) %v, one pass %v", c.name, i, i/m.NVocab, got[i], want[i])
			}
		}
	}
}

// readFloats reads one float per line (# comments).
func readFloats(t *testing.T, path string) []float32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		x, err := strconv.ParseFloat(line, 32)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, float32(x))
	}
	return out
}

// TestGptOssLoadErrors: a gpt-oss file missing what llama.cpp requires, or
// using what we do not implement, is refused with an error naming it; a
// backend without the clamped SwiGLU is refused when the context is made.
func TestGptOssLoadErrors(t *testing.T) {
	spec := synth.Spec{Arch: "gpt-oss", NEmbd: 64, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 16, NFF: 64, NExpert: 4,
		NExpertUsed: 2, NFFExp: 64, RopeBase: 150000, RMSEps: 1e-5, SlidingWindow: 8, RopeScaling: "yarn", RopeFactor: 32, RopeOrigCtx: 4096}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, synth.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	base, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	ref := cpu.NewRef()
	if _, err := model.Load(base, ref.Supports); err != nil {
		t.Fatalf("the unedited file: %v", err)
	}
	pattern, err := gguf.Array(gguf.TypeUint32, []gguf.Value{gguf.Uint32(2), gguf.Uint32(2)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		drop string                // a tensor left out
		set  map[string]gguf.Value // keys set
		want string
	}{
		{"no sinks", "blk.1.attn_sinks.weight", nil, `missing required tensor "blk.1.attn_sinks.weight"`},
		{"no output", "output.weight", nil, `"output.weight"`},
		{"no expert bias", "blk.0.ffn_down_exps.bias", nil, `missing required tensor "blk.0.ffn_down_exps.bias"`},
		{"no router bias", "blk.0.ffn_gate_inp.bias", nil, `"blk.0.ffn_gate_inp.bias"`},
		{"no post-attention norm", "blk.0.post_attention_norm.weight", nil, `"blk.0.post_attention_norm.weight"`},
		{"no window", "", map[string]gguf.Value{"gpt-oss.attention.sliding_window": gguf.Uint32(0)}, "sliding_window is 0"},
		{"swa base", "", map[string]gguf.Value{"gpt-oss.rope.freq_base_swa": gguf.Float32(10000)}, "freq_base_swa"},
		{"pattern array", "", map[string]gguf.Value{"gpt-oss.attention.sliding_window_pattern": pattern}, "per-layer array"},
		{"partial rope", "", map[string]gguf.Value{"gpt-oss.rope.dimension_count": gguf.Uint32(8)}, "must be equal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err = model.Load(edited(t, base, c.drop, c.set), ref.Supports)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// llama_hparams::set_swa_pattern: period 3 slides layers 0 and 1 of
	// each 3, period 1 none, period 0 all
	for _, c := range []struct {
		period uint32
		want   [2]int
	}{{3, [2]int{8, 8}}, {1, [2]int{0, 0}}, {0, [2]int{8, 8}}, {2, [2]int{8, 0}}} {
		m, err := model.Load(edited(t, base, "", map[string]gguf.Value{"gpt-oss.attention.sliding_window_pattern": gguf.Uint32(c.period)}), ref.Supports)
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]int{m.LayerWindow(0), m.LayerWindow(1)}; got != c.want {
			t.Errorf("pattern %d: windows %v, want %v", c.period, got, c.want)
		}
	}
	m, err := model.Load(base, ref.Supports)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewContext(plainOps{ref}, 16, 1, 4); err == nil || !strings.Contains(err.Error(), "swiglu_oai") {
		t.Errorf("a backend without SwiGLUOAI: error %v", err)
	}
}

// edited returns f without the tensor drop and with the keys set.
func edited(t *testing.T, f *gguf.File, drop string, set map[string]gguf.Value) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	w.CopyKVs(f, nil)
	for k, v := range set {
		w.Set(k, v)
	}
	for _, tn := range f.Tensors {
		if tn.Name == drop {
			continue
		}
		if err := w.AddTensor(tn.Name, tn.Type, tn.Dims, append([]byte(nil), tn.Data...)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// plainOps hides every method of its Ops but model.Ops's.
type plainOps struct{ model.Ops }
