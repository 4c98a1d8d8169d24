package model_test

import (
	"bufio"
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
	"unicode"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// gemma3Write, when set, makes TestGemma3Golden write its models and
// prompt to that directory (the inputs of llama.cpp in
// testdata/gemma3/README.md) instead of testing.
var gemma3Write = flag.String("gemma3-write", "", "write the gemma3 golden's models and prompt to this directory and skip the test")

// The gemma3 golden (testdata/gemma3/README.md): the gemma3-small preset
// (window 128) on the golden stories text.
const (
	gemma3PromptLen = 1500 // prompt tokens, BOS included, at most
	gemma3Greedy    = 64   // tokens llama-completion generated
	gemma3PPLCtx    = 512  // llama-perplexity -c
	gemma3Ctx       = 2048 // llama-completion -c and the logits' context

	// gemma3F32MaxAbs bounds |Δlogit| of the F32 file against llama.cpp.
	// It is not the 1e-4 of the other F32 goldens, because this path is
	// not exact math: every GELU rounds its input to float16 for ggml's
	// table (GGML_GELU_FP16), so a 1e-7 difference upstream (a summation
	// order) sometimes moves an input across a float16 rounding boundary,
	// a step of up to 2^-11 relative in that activation, as the activation
	// conversions of the F16 files do (their bound: 5e-3). Measured at the
	// last of the 1,499 positions: 1.2e-4 against llama.cpp (Backend),
	// 1.4e-4 (Ref), and 1.1e-4 between our own Ref and Backend, which fall
	// to 9.4e-7 when both compute GELU exactly instead. 5e-4 leaves 4x.
	gemma3F32MaxAbs = 5e-4
	// gemma3F32PPLRel bounds the F32 file's running perplexities relative
	// to llama-perplexity's, for the same reason: measured 2.4e-6 (one
	// unit of the 4th decimal would be 1.4e-7 here).
	gemma3F32PPLRel = 1e-5
)

// gemma3Files are the golden's two files: the preset in F32 and in
// llama-quantize's Q4_K_M mixture, seed 1.
var gemma3Files = []struct {
	name string
	o    synth.Options
}{
	{"f32", synth.Options{Type: quant.F32, Seed: 1}},
	{"q4km", synth.Options{Mix: "Q4_K_M", Seed: 1}},
}

// gemma3Prompt is the longest prefix of text ending at a word's end whose
// tokens (with BOS) number at most gemma3PromptLen.
func gemma3Prompt(text string, encode func(string) []int32) string {
	var ends []int
	for i, r := range text {
		if !unicode.IsSpace(r) && (i+1 == len(text) || unicode.IsSpace(rune(text[i+1]))) {
			ends = append(ends, i+1)
		}
	}
	lo, hi := 0, len(ends)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if len(encode(text[:ends[mid]])) <= gemma3PromptLen {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return text[:ends[lo]]
}

// readGemma3Golden reads testdata/<dir>/<name>.txt (the gemma3 and gemma4
// goldens): "key value" lines, values Go-quoted where they are strings,
// and "logit" lines in order.
func readGemma3Golden(t *testing.T, dir, name string) (map[string]string, []float32) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", dir, name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string]string{}
	var logits []float32
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if k == "logit" {
			x, err := strconv.ParseFloat(v, 32)
			if err != nil {
				t.Fatal(err)
			}
			logits = append(logits, float32(x))
			continue
		}
		kv[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return kv, logits
}

// TestGemma3Golden: the gemma3-small preset (five layers sliding over a
// window of 128, one global; RoPE bases 1e4 and 1e6), F32 and Q4_K_M,
// against llama.cpp (testdata/gemma3, see its README): the logits at the
// last position of a 1,500-token prompt (max |Δ| gemma3F32MaxAbs for F32;
// max 0.1 and RMS 0.02 for Q4_K_M, the bounds of the golden models'
// quantized files), the 64-token greedy continuation exactly, and
// llama-perplexity's running values at -c 512 (every scored position past
// the window) within gemma3F32PPLRel for F32, 0.5% for Q4_K_M (as the
// stories260K q8_0 golden). F32 KV cache, as llama.cpp
// was run (-ctk f32 -ctv f32 -fa off). The models are regenerated here.
func TestGemma3Golden(t *testing.T) {
	dir := t.TempDir()
	if *gemma3Write != "" {
		dir = *gemma3Write
	}
	textBytes, err := os.ReadFile(filepath.Join(golden.Dir(t), "text", "stories_eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(textBytes)
	spec, err := synth.Preset("gemma3-small")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range gemma3Files {
		t.Run(file.name, func(t *testing.T) {
			path := filepath.Join(dir, "gemma3-small-"+file.name+".gguf")
			if err := synth.WriteFile(path, spec, file.o); err != nil {
				t.Fatal(err)
			}
			b, err := model.Open(path, cpu.NewRef().Supports, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			encode := func(s string) []int32 { return b.Tokenizer.Encode(s, true, false) }
			prompt := gemma3Prompt(text, encode)
			ids := encode(prompt)
			if *gemma3Write != "" {
				if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Skipf("wrote %s and prompt.txt (%d tokens)", path, len(ids))
			}
			want, wantLogits := readGemma3Golden(t, "gemma3", file.name)
			if n, _ := strconv.Atoi(want["prompt_tokens"]); n != len(ids) {
				t.Fatalf("prompt of %d tokens, llama.cpp's %d", len(ids), n)
			}
			be := cpu.NewBackend(2, cpu.Best())
			defer be.Close()
			V := b.Model.NVocab

			t.Run("logits+greedy", func(t *testing.T) {
				mctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, gemma3Ctx, 1, len(ids))
				if err != nil {
					t.Fatal(err)
				}
				logits := promptLogits(t, mctx, ids)
				if len(wantLogits) != V {
					t.Fatalf("%d golden logits, vocabulary %d", len(wantLogits), V)
				}
				var s golden.Stats
				s.AddRow(logits, wantLogits)
				maxAbs, rms := gemma3F32MaxAbs, 0.0
				if file.name == "q4km" {
					maxAbs, rms = 0.1, 0.02
				}
				t.Logf("last of %d positions: max |Δlogit| %.3g, RMS %.3g", len(ids), s.MaxAbs, s.RMS())
				if s.MaxAbs > maxAbs || rms > 0 && s.RMS() > rms {
					t.Errorf("logits: max |Δ| %.3g (limit %g), RMS %.3g (limit %g)", s.MaxAbs, maxAbs, s.RMS(), rms)
				}
				var out []byte
				for pos := len(ids); ; pos++ {
					best := golden.Argmax(logits[len(logits)-V:])
					out = b.Tokenizer.AppendPiece(out, int32(best), false)
					if pos-len(ids)+1 == gemma3Greedy {
						break
					}
					if logits, err = mctx.Decode(&model.Batch{Tokens: []int32{int32(best)}, Pos: []int32{int32(pos)}, Seq: []int32{0}}); err != nil {
						t.Fatal(err)
					}
				}
				if got := strconv.Quote(string(out)); got != want["greedy"] {
					t.Errorf("greedy continuation\n%s\n    llama.cpp:\n%s", got, want["greedy"])
				}
			})

			t.Run("perplexity", func(t *testing.T) {
				mctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, gemma3PPLCtx, 1, gemma3PPLCtx)
				if err != nil {
					t.Fatal(err)
				}
				toks := encode(text)
				r, err := bench.Perplexity(context.Background(), mctx, toks, bench.PerplexityOptions{NCtx: gemma3PPLCtx, BOS: b.Tokenizer.BOS()})
				if err != nil {
					t.Fatal(err)
				}
				var w []float64
				for _, f := range strings.Split(strings.Trim(want["ppl"], ","), ",") {
					_, v, _ := strings.Cut(f, "]")
					x, err := strconv.ParseFloat(v, 64)
					if err != nil {
						t.Fatalf("golden ppl %q: %v", want["ppl"], err)
					}
					w = append(w, x)
				}
				var got strings.Builder
				for i, p := range r.Running {
					fmt.Fprintf(&got, "[%d]%.4f,", i+1, p)
				}
				t.Logf("%d tokens: %s; llama.cpp %s", len(toks), got.String(), want["ppl"])
				if len(w) != len(r.Running) {
					t.Fatalf("%d chunks, llama-perplexity %d", len(r.Running), len(w))
				}
				for i, p := range r.Running {
					lim := gemma3F32PPLRel * w[i]
					if file.name == "q4km" {
						lim = 0.005 * w[i]
					}
					if math.Abs(p-w[i]) > lim {
						t.Errorf("chunk %d: running PPL %.4f, llama.cpp %.4f (limit ±%.4g)", i+1, p, w[i], lim)
					}
				}
			})
		})
	}
}

// TestGemma3Chunked: a prompt of 400 tokens (past the window of 128 three
// times) fed in one pass, in chunks of 37, and as 300 tokens then one at a
// time gives the same logits at every position (Ref: each row's arithmetic
// does not depend on the batch, so bit for bit; the Backend, whose products
// take other paths for other batch sizes, within gemma3F32MaxAbs: the
// float16 GELU turns their 1e-7 differences into 2.3e-4 to 4.0e-4 over
// seeds 1-8, against 1.4e-6 with an exact GELU: see TestGemma4Chunked).
func TestGemma3Chunked(t *testing.T) {
	spec, err := synth.Preset("gemma3-small")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, synth.Options{Type: quant.F32, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % m.NVocab)
	}
	be := cpu.NewBackend(2, cpu.Best())
	defer be.Close()
	for _, c := range []struct {
		name string
		ops  model.Ops
		tol  float64
	}{{"ref", cpu.NewRef(), 0}, {"backend", be, gemma3F32MaxAbs}} {
		t.Run(c.name, func(t *testing.T) {
			run := func(split func(at int) int) []float32 {
				mctx, err := m.NewContext(c.ops, n, 1, n)
				if err != nil {
					t.Fatal(err)
				}
				var chunks []int
				for at := 0; at < n; {
					k := split(at)
					chunks = append(chunks, k)
					at += k
				}
				return chunkLogits(t, mctx, ids, chunks)
			}
			one := run(func(at int) int { return n - at })
			for _, alt := range []struct {
				name  string
				split func(at int) int
			}{
				{"chunks-37", func(at int) int { return min(37, n-at) }},
				{"prefill-300-decode", func(at int) int {
					if at == 0 {
						return 300
					}
					return 1
				}},
			} {
				got := run(alt.split)
				var worst float64
				for i := range one {
					worst = max(worst, math.Abs(float64(got[i]-one[i])))
				}
				if worst > c.tol {
					t.Errorf("%s: max |Δlogit| %.3g against one pass (limit %g)", alt.name, worst, c.tol)
				}
			}
		})
	}
}

// gemma3File writes the gemma3-small preset (F32, seed 1) with edit
// applied to its metadata and parses it.
func gemma3File(t *testing.T, edit func(w *gguf.Writer)) *gguf.File {
	t.Helper()
	spec, err := synth.Preset("gemma3-small")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return f
	}
	w := gguf.NewWriter()
	w.CopyKVs(f, nil)
	edit(w)
	for _, tn := range f.Tensors {
		if err := w.AddTensor(tn.Name, tn.Type, tn.Dims, tn.Data); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if f, err = gguf.Parse(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGemma3Hyper: the sliding layers, their RoPE and the attention scale
// as llama.cpp derives them, and the keys we refuse.
func TestGemma3Hyper(t *testing.T) {
	supports := cpu.NewRef().Supports
	m, err := model.Load(gemma3File(t, nil), supports)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.Window) != "[128 128 128 128 128 0]" {
		t.Errorf("windows %v, want five sliding layers of 128 then a global one (pattern 6)", m.Window)
	}
	if m.LayerRope(0).Base != 1e4 || m.LayerRope(0).Scale != 1 || m.LayerRope(5).Base != 1e6 || m.LayerRope(5) != &m.Rope {
		t.Errorf("RoPE bases: sliding %v, global %v", m.LayerRope(0).Base, m.LayerRope(5).Base)
	}
	if want := float32(1 / math.Sqrt(128)); m.AttnScale != want || m.FFNAct != model.ActGELU || m.Rope.Type != model.RopeNeox {
		t.Errorf("attention scale %v (want %v), activation %v", m.AttnScale, want, m.FFNAct)
	}
	for _, c := range []struct {
		name    string
		edit    func(w *gguf.Writer)
		windows string
		err     string
	}{
		{"pattern 2", func(w *gguf.Writer) { w.Set("gemma3.attention.sliding_window_pattern", gguf.Uint32(2)) }, "[128 0 128 0 128 0]", ""},
		{"pattern 0: every layer slides", func(w *gguf.Writer) { w.Set("gemma3.attention.sliding_window_pattern", gguf.Uint32(0)) }, "[128 128 128 128 128 128]", ""},
		{"no window", func(w *gguf.Writer) { w.Set("gemma3.attention.sliding_window", gguf.Uint32(0)) }, "[]", ""},
		{"swa base", func(w *gguf.Writer) { w.Set("gemma3.rope.freq_base_swa", gguf.Float32(5e4)) }, "[128 128 128 128 128 0]", ""},
		{"pattern array", func(w *gguf.Writer) {
			v, _ := gguf.Array(gguf.TypeBool, []gguf.Value{gguf.Bool(true), gguf.Bool(false)})
			w.Set("gemma3.attention.sliding_window_pattern", v)
		}, "", "per-layer array"},
		{"softcap", func(w *gguf.Writer) { w.Set("gemma3.final_logit_softcapping", gguf.Float32(30)) }, "", "final_logit_softcapping"},
		{"swa head", func(w *gguf.Writer) { w.Set("gemma3.attention.key_length_swa", gguf.Uint32(64)) }, "", "key_length_swa"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := model.Load(gemma3File(t, c.edit), supports)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(m.Window)
			if m.Window == nil {
				got = "[]"
			}
			if got != c.windows {
				t.Errorf("windows %s, want %s", got, c.windows)
			}
			if c.name == "swa base" && m.LayerRope(0).Base != 5e4 {
				t.Errorf("sliding base %v", m.LayerRope(0).Base)
			}
			if c.name == "no window" && m.LayerRope(0) != &m.Rope {
				t.Errorf("without a window every layer should take the global RoPE")
			}
		})
	}
}
