package model_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/quant"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
)

// gemma4Write, when set, makes TestGemma4Golden write its models and
// prompt to that directory (the inputs of llama.cpp in
// testdata/gemma4/README.md) instead of testing.
var gemma4Write = flag.String("gemma4-write", "", "write the gemma4 golden's models and prompt to this directory and skip the test")

// The gemma4 golden's tolerances are gemma3's (gemma3_test.go says why F32
// is not held to 1e-4: ggml's float16 GELU table, here also in the
// per-layer inputs' gate).
const (
	gemma4F32MaxAbs = gemma3F32MaxAbs
	gemma4F32PPLRel = gemma3F32PPLRel
)

// TestGemma4Golden: the gemma4-small preset (per-layer embeddings, two
// layers reading earlier layers' KV, sliding and global layers with their
// own RoPE, partial rotation through rope_freqs, a layer output scale,
// soft-capped logits; testdata/gemma4) and the gemma4-moe-small preset
// (a dense FFN beside 16 routed experts in every layer;
// testdata/gemma4moe), F32 and Q4_K_M, against llama.cpp (see the
// READMEs), as TestGemma3Golden: the last position's logits after
// a 1,500-token prompt, the 64-token greedy continuation, and
// llama-perplexity's running values at -c 512, with gemma3's tolerances
// (the same float16 GELU table). The models are regenerated here.
func TestGemma4Golden(t *testing.T) {
	dir := t.TempDir()
	if *gemma4Write != "" {
		dir = *gemma4Write
	}
	textBytes, err := os.ReadFile(filepath.Join(golden.Dir(t), "text", "stories_eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(textBytes)
	for _, g := range []struct{ preset, dir string }{{"gemma4-small", "gemma4"}, {"gemma4-mixed-small", "gemma4mixed"}, {"gemma4-moe-small", "gemma4moe"}} {
		t.Run(g.preset, func(t *testing.T) { gemma4Golden(t, g.preset, g.dir, dir, text) })
	}
}

// gemma4Golden runs TestGemma4Golden for one preset, whose numbers are in
// testdata/<goldenDir>; dir receives the models.
func gemma4Golden(t *testing.T, preset, goldenDir, dir, text string) {
	spec, err := synth.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range gemma3Files {
		t.Run(file.name, func(t *testing.T) {
			path := filepath.Join(dir, preset+"-"+file.name+".gguf")
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
			if *gemma4Write != "" {
				if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Skipf("wrote %s and prompt.txt (%d tokens)", path, len(ids))
			}
			want, wantLogits := readGemma3Golden(t, goldenDir, file.name)
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
				maxAbs, rms := gemma4F32MaxAbs, 0.0
				if file.name == "q4km" {
					maxAbs, rms = 0.1, 0.02
				}
				t.Logf("last of %d positions: max |Δlogit| %.3g, RMS %.3g", len(ids), s.MaxAbs, s.RMS())
				if s.MaxAbs > maxAbs || rms > 0 && s.RMS() > rms {
					t.Errorf("logits: max |Δ| %.3g (limit %g), RMS %.3g (limit %g)", s.MaxAbs, maxAbs, s.RMS(), rms)
				}
				// llama-completion prints each piece as a C string
				// (LOG("%s", token_str.c_str()) in completion.cpp): a
				// piece of byte 0 prints nothing
				piece := func(tok int) string {
					return strings.ReplaceAll(string(b.Tokenizer.AppendPiece(nil, int32(tok), false)), "\x00", "")
				}
				wantText, err := strconv.Unquote(want["greedy"])
				if err != nil {
					t.Fatalf("golden greedy %s: %v", want["greedy"], err)
				}
				wantTies, _ := strconv.Atoi(want["greedy_ties"])
				var out strings.Builder
				ties := 0
				for pos := len(ids); ; pos++ {
					l := logits[len(logits)-V:]
					best := golden.Argmax(l)
					if !strings.HasPrefix(wantText, out.String()+piece(best)) {
						// a tie: llama.cpp took another token, the one whose
						// (longest) piece continues its text; it must be
						// within the file's logit bound of our best
						alt := -1
						for tok := range V {
							p := piece(tok)
							if p != "" && strings.HasPrefix(wantText[out.Len():], p) && float64(l[best]-l[tok]) <= maxAbs && (alt < 0 || len(p) > len(piece(alt))) {
								alt = tok
							}
						}
						if alt < 0 {
							t.Errorf("greedy step %d: our %q (logit %.5f) leaves llama.cpp's text, and no token within %g continues it\n%s\n    llama.cpp:\n%s",
								pos-len(ids), piece(best), l[best], maxAbs, strconv.Quote(out.String()+piece(best)), want["greedy"])
							break
						}
						ties++
						t.Logf("greedy step %d: our best %q %.5f, llama.cpp's %q %.5f: %.3g apart", pos-len(ids), piece(best), l[best], piece(alt), l[alt], l[best]-l[alt])
						best = alt
					}
					out.WriteString(piece(best))
					if pos-len(ids)+1 == gemma3Greedy {
						break
					}
					if logits, err = mctx.Decode(&model.Batch{Tokens: []int32{int32(best)}, Pos: []int32{int32(pos)}, Seq: []int32{0}}); err != nil {
						t.Fatal(err)
					}
				}
				if out.String() != wantText || ties != wantTies {
					t.Errorf("greedy continuation with %d ties (golden: %d)\n%s\n    llama.cpp:\n%s", ties, wantTies, strconv.Quote(out.String()), want["greedy"])
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
					lim := gemma4F32PPLRel * w[i]
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

// gemma4File writes a gemma4 preset (F32, seed 1) with edit applied to
// its metadata, drop (a key if it starts with "gemma4.", else a tensor)
// left out and a one-value tensor add added, and parses it.
func gemma4File(t *testing.T, preset string, edit func(w *gguf.Writer), drop string, add string) *gguf.File {
	t.Helper()
	spec, err := synth.Preset(preset)
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
	if edit == nil && drop == "" && add == "" {
		return f
	}
	w := gguf.NewWriter()
	w.CopyKVs(f, func(key string) bool { return key != drop })
	if edit != nil {
		edit(w)
	}
	for _, tn := range f.Tensors {
		if tn.Name == drop {
			continue
		}
		if err := w.AddTensor(tn.Name, tn.Type, tn.Dims, tn.Data); err != nil {
			t.Fatal(err)
		}
	}
	if add != "" {
		if err := w.AddTensor(add, quant.F32, []uint64{1}, make([]byte, 4)); err != nil {
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

// TestGemma4Hyper: the sliding layers, the shared KV layers' sources,
// the RoPE of each kind of layer, the scale, the soft-cap (llama.cpp's
// default 30 without the key) as llama_model_gemma4 derives them, and
// the files we refuse, each by the key or tensor at fault.
func TestGemma4Hyper(t *testing.T) {
	supports := cpu.NewRef().Supports
	m, err := model.Load(gemma4File(t, "gemma4-small", nil, "", ""), supports)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.Window) != "[128 128 128 0 128 0]" || m.NLayerKV != 4 || m.NEmbdPerLayer != 64 {
		t.Errorf("windows %v, NLayerKV %d, NEmbdPerLayer %d", m.Window, m.NLayerKV, m.NEmbdPerLayer)
	}
	var src []int
	for il := range m.NLayer {
		src = append(src, m.KVSource(il))
	}
	if fmt.Sprint(src) != "[0 1 2 3 2 3]" {
		t.Errorf("KV sources %v, want [0 1 2 3 2 3] (llama.cpp: layer 4 reuses 2, 5 reuses 3)", src)
	}
	g, s := m.LayerRope(3), m.LayerRope(0)
	if g.Base != 1e6 || len(g.Factors) != 64 || g.Factors[15] != 1 || g.Factors[16] != 1e30 || s.Base != 1e4 || s.Factors != nil || s.Scale != 1 {
		t.Errorf("RoPE: global base %v factors %d, sliding base %v factors %v", g.Base, len(g.Factors), s.Base, s.Factors)
	}
	if m.AttnScale != 1 || m.SoftCap != 30 || m.Layers[0].OutScale == nil || m.Layers[4].Wk != nil || m.Layers[4].KNorm != nil {
		t.Errorf("scale %v, soft-cap %v, out scale %v, shared layer's K %v", m.AttnScale, m.SoftCap, m.Layers[0].OutScale, m.Layers[4].Wk)
	}
	for _, c := range []struct {
		name      string
		edit      func(w *gguf.Writer)
		drop, add string
		err       string
		check     func(m *model.Model) string
	}{
		{"no soft-cap key: 30", nil, "gemma4.final_logit_softcapping", "", "", func(m *model.Model) string {
			return fmt.Sprint(m.SoftCap)
		}},
		{"one pattern value for every layer", func(w *gguf.Writer) { w.Set("gemma4.attention.sliding_window_pattern", gguf.Uint32(1)) }, "", "", "", func(m *model.Model) string {
			return fmt.Sprint(m.Window, m.KVSource(5))
		}},
		{"pattern 0: every layer global", func(w *gguf.Writer) { w.Set("gemma4.attention.sliding_window_pattern", gguf.Uint32(0)) }, "", "", "", func(m *model.Model) string {
			return fmt.Sprint(m.Window)
		}},
		{"no shared layers", func(w *gguf.Writer) { w.Set("gemma4.attention.shared_kv_layers", gguf.Uint32(0)) }, "", "", "", func(m *model.Model) string {
			return fmt.Sprint(m.KVSource(5))
		}},
		{"swa key and value heads differ", func(w *gguf.Writer) { w.Set("gemma4.attention.key_length_swa", gguf.Uint32(64)) }, "", "", "key_length_swa", nil},
		{"missing per-layer width", nil, "gemma4.embedding_length_per_layer_input", "", "embedding_length_per_layer_input", nil},
		{"too many shared", func(w *gguf.Writer) { w.Set("gemma4.attention.shared_kv_layers", gguf.Uint32(5)) }, "", "", "shared_kv_layers", nil},
		{"per-layer FFN widths: one entry short", func(w *gguf.Writer) {
			v := make([]gguf.Value, 5)
			for i := range v {
				v[i] = gguf.Uint32(1024)
			}
			a, _ := gguf.Array(gguf.TypeUint32, v)
			w.Set("gemma4.feed_forward_length", a)
		}, "", "", "feed_forward_length", nil},
		{"per-layer KV heads: 0", func(w *gguf.Writer) {
			v := make([]gguf.Value, 6)
			for i := range v {
				v[i] = gguf.Uint32(2)
			}
			v[1] = gguf.Uint32(0)
			a, _ := gguf.Array(gguf.TypeUint32, v)
			w.Set("gemma4.attention.head_count_kv", a)
		}, "", "", "head_count_kv", nil},
		{"per-layer FFN widths", func(w *gguf.Writer) {
			v := make([]gguf.Value, 6)
			for i := range v {
				v[i] = gguf.Uint32(1024)
			}
			a, _ := gguf.Array(gguf.TypeUint32, v)
			w.Set("gemma4.feed_forward_length", a)
		}, "", "", "", func(m *model.Model) string {
			return fmt.Sprint(m.NFF, m.NFFArr, m.NFFAt(5), m.PerLayerShapes())
		}},
		{"no rope_freqs", nil, "rope_freqs.weight", "", "rope_freqs", nil},
		{"weight scale", nil, "", "blk.0.attn_q.scale", "blk.0.attn_q.scale", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := model.Load(gemma4File(t, "gemma4-small", c.edit, c.drop, c.add), supports)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"no soft-cap key: 30": "30", "per-layer FFN widths": "1024 [1024 1024 1024 1024 1024 1024] 1024 false", "one pattern value for every layer": "[128 128 128 128 128 128] 2", "pattern 0: every layer global": "[0 0 0 0 0 0]", "no shared layers": "5"}[c.name]
			if got := c.check(m); got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

// TestGemma4KVBytes: a cache keeps no rows for the shared KV layers, and
// its size is llama.cpp's (llama_kv_cache_iswa with the reuse callback of
// llama_model::create_memory: the global layers n_ctx cells, the sliding
// ones GGML_PAD(min(n_ctx, n_swa + n_ubatch), 256), the shared layers
// none) within our rings' padding (4·8192 + 20·1024 cells of 2 KiB:
// 109051904 bytes in f16), for an E4B-like shape (42 layers,
// five sliding to one global, the last 18 shared, window 512; one head
// size, which is what we run).
func TestGemma4KVBytes(t *testing.T) {
	const nLayer, shared, nCtx, nUbatch, nSwa = 42, 18, 8192, 512, 512
	h := model.Hyper{NLayer: nLayer, NHead: 8, NHeadKV: 2, HeadDimK: 256, HeadDimV: 256, Window: make([]int, nLayer), NLayerKV: nLayer - shared}
	for l := range nLayer {
		if l%6 < 5 {
			h.Window[l] = nSwa
		}
	}
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	cell := int64(2 * h.NHeadKV * h.HeadDimK * 2)
	pad := func(x, n int) int { return (x + n - 1) / n * n }
	var llama int64
	global, sliding := 0, 0
	for l := range h.NLayerKV {
		if h.Window[l] == 0 {
			global++
			llama += nCtx * cell
		} else {
			sliding++
			llama += int64(pad(min(nCtx, nSwa+nUbatch), 256)) * cell
		}
	}
	ours, err := model.KVCacheBytes(&h, f16, quantWholeTiles(nCtx), 1, nCtx, nUbatch)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d global and %d sliding layers with KV: ours %d bytes, llama.cpp %d", global, sliding, ours, llama)
	if ours < llama || float64(ours) > 1.01*float64(llama) {
		t.Errorf("ours %d bytes, llama.cpp's %d", ours, llama)
	}
	if global != 4 || sliding != 20 || llama != 109051904 {
		t.Errorf("llama.cpp's figure: %d global, %d sliding layers, %d bytes; want 4, 20, 109051904", global, sliding, llama)
	}
	kv, err := model.NewKVCacheOf(&h, f16, nCtx, 1)
	if err != nil {
		t.Fatal(err)
	}
	kv.ReserveSWA(nUbatch)
	for l := h.NLayerKV; l < nLayer; l++ {
		if len(kv.K[l]) != 0 || len(kv.V[l]) != 0 {
			t.Errorf("shared layer %d keeps %d+%d bytes", l, len(kv.K[l]), len(kv.V[l]))
		}
	}
	if kv.Bytes() != ours {
		t.Errorf("the cache holds %d bytes, KVCacheBytes says %d", kv.Bytes(), ours)
	}
	// a further cell costs the 4 global layers with their own KV, not the
	// 3 shared global ones (what KVCapacityFor and the admission count)
	if per, err := model.SWAFullBytesPerToken(&h, f16, nCtx, nUbatch); err != nil || per != 4*int(cell) {
		t.Errorf("bytes per cell %d (%v), want 4 layers × %d", per, err, cell)
	}
	if per, err := model.KVBytesPerToken(&h, f16); err != nil || per != 24*int(cell) {
		t.Errorf("KVBytesPerToken %d (%v), want the 24 layers with KV × %d", per, err, cell)
	}
}

// TestGemma4RingsMatchFull: gemma4-small with its sliding layers in rings
// (steps of up to 32 rows: rings of 160 rows for the window of 128) gives,
// step after step up to 300 positions of two sequences, exactly the logits
// of a cache whose every layer keeps all cells, contiguous and
// block-addressed; the shared KV layers read their source layers' rings
// and keep no rows of their own in either.
func TestGemma4RingsMatchFull(t *testing.T) {
	const nCtx, end = 512, 300
	spec, err := synth.Preset("gemma4-small")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, synth.Options{Type: quant.F32, Seed: 5}); err != nil {
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
	for _, blocks := range []bool{false, true} {
		be := cpu.NewBackend(2, nil)
		defer be.Close()
		mk := func(maxBatch int) *model.Context {
			var kv *model.KVCache
			var err error
			if blocks {
				kv, err = model.NewBlockKVCache(&m.Hyper, model.KVTypes{}, 16, nCtx, 2)
			} else {
				kv, err = model.NewKVCacheOf(&m.Hyper, model.KVTypes{}, nCtx, 2)
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, err := m.NewContextKV(be, kv, maxBatch)
			if err != nil {
				t.Fatal(err)
			}
			return ctx
		}
		ring, full := mk(32), mk(nCtx)
		if ring.KV.Ring(0) != 160 || ring.KV.Ring(3) != 0 || ring.KV.Ring(4) != 0 || full.KV.Ring(0) != 0 {
			t.Fatalf("blocks=%v: rings %d, %d, %d; want 160 for a sliding layer, none for a global or shared one", blocks, ring.KV.Ring(0), ring.KV.Ring(3), ring.KV.Ring(4))
		}
		for _, c := range []*model.Context{ring, full} {
			if len(c.KV.K[4])+len(c.KV.V[4])+len(c.KV.K[5])+len(c.KV.V[5]) != 0 {
				t.Fatalf("blocks=%v: the shared layers keep rows", blocks)
			}
		}
		var p [2]int
		for step := 0; p[0] < end; step++ {
			var b model.Batch
			for s := range 2 {
				n := min(1+(step*3+s*5)%16, end-p[s])
				for range n {
					b.Tokens = append(b.Tokens, int32((p[s]*7+s*13)%m.NVocab))
					b.Pos = append(b.Pos, int32(p[s]))
					b.Seq = append(b.Seq, int32(s))
					p[s]++
				}
			}
			b.Logits = make([]bool, b.Len())
			for i := range b.Logits {
				b.Logits[i] = i+1 == b.Len() || b.Seq[i+1] != b.Seq[i]
			}
			a, err := ring.Decode(&b)
			if err != nil {
				t.Fatalf("blocks=%v: step %d: %v", blocks, step, err)
			}
			a = slices.Clone(a)
			g, err := full.Decode(&b)
			if err != nil {
				t.Fatalf("blocks=%v: step %d: %v", blocks, step, err)
			}
			if !slices.Equal(a, g) {
				t.Fatalf("blocks=%v: step %d (positions up to %v): logits differ from the full cache's", blocks, step, p)
			}
		}
	}
}

// TestGemma4KVBytesPerLayer: with the real shapes' per-layer geometry
// (sliding heads of 256, global of 512; the 26B-A4B's 8 KV heads on
// sliding layers, 2 on global ones) the cache's size is llama.cpp's
// per-layer sum (llama_kv_cache: each layer's cells × (n_embd_k_gqa(il) +
// n_embd_v_gqa(il)) elements of f16, cells as in TestGemma4KVBytes) within
// our rings' padding, KVBytesPerToken is the per-layer sum, and each
// layer's rows have its own width.
func TestGemma4KVBytesPerLayer(t *testing.T) {
	const nCtx, nUbatch = 8192, 512
	for _, c := range []struct {
		name                 string
		nLayer, shared, nSwa int
		nkvSWA, nkvGlobal    int
		want, wantPerTok     int64
	}{
		// 4 global × 8192 × 2·2·512·2 + 20 sliding × 1024 × 2·2·256·2
		{"gemma-4-e4b", 42, 18, 512, 2, 2, 176160768, 4*4096 + 20*2048},
		// 5 global × 8192 × 2·2·512·2 + 25 sliding × 1536 × 2·8·256·2
		{"gemma-4-26b-a4b", 30, 0, 1024, 8, 2, 482344960, 5*4096 + 25*8192},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := model.Hyper{Arch: "gemma4", NLayer: c.nLayer, NHead: 16, NHeadKV: max(c.nkvSWA, c.nkvGlobal), HeadDimK: 512, HeadDimV: 512,
				HeadDimKSWA: 256, HeadDimVSWA: 256, Window: make([]int, c.nLayer), NHeadKVArr: make([]int, c.nLayer)}
			if c.shared > 0 {
				h.NLayerKV = c.nLayer - c.shared
			}
			for l := range c.nLayer {
				h.NHeadKVArr[l] = c.nkvGlobal
				if l%6 < 5 {
					h.Window[l] = c.nSwa
					h.NHeadKVArr[l] = c.nkvSWA
				}
			}
			pad := func(x, n int) int { return (x + n - 1) / n * n }
			var llama, perTok int64
			for l := range c.nLayer {
				if !h.KeepsKV(l) {
					continue
				}
				row := int64(h.KDimAt(l)+h.VDimAt(l)) * 2
				perTok += row
				if h.Window[l] == 0 {
					llama += nCtx * row
				} else {
					llama += int64(pad(min(nCtx, c.nSwa+nUbatch), 256)) * row
				}
			}
			if llama != c.want || perTok != c.wantPerTok {
				t.Fatalf("llama.cpp's figures %d bytes, %d per token; want %d, %d", llama, perTok, c.want, c.wantPerTok)
			}
			f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
			ours, err := model.KVCacheBytes(&h, f16, quantWholeTiles(nCtx), 1, nCtx, nUbatch)
			if err != nil {
				t.Fatal(err)
			}
			if ours < llama || float64(ours) > 1.01*float64(llama) {
				t.Errorf("ours %d bytes, llama.cpp's %d", ours, llama)
			}
			pt, err := model.KVBytesPerToken(&h, f16)
			if err != nil || int64(pt) != perTok {
				t.Errorf("KVBytesPerToken %d (%v), want %d", pt, err, perTok)
			}
			kv, err := model.NewKVCacheOf(&h, f16, nCtx, 1)
			if err != nil {
				t.Fatal(err)
			}
			kv.ReserveSWA(nUbatch)
			if kv.Bytes() != ours {
				t.Errorf("the cache holds %d bytes, KVCacheBytes says %d", kv.Bytes(), ours)
			}
			for l := range c.nLayer {
				if !h.KeepsKV(l) {
					continue
				}
				if kv.KDimOf(l) != h.KDimAt(l) || kv.VDimOf(l) != h.VDimAt(l) || kv.NHeadKV(l) != h.NHeadKVAt(l) {
					t.Errorf("layer %d: rows %d/%d of %d heads, want %d/%d of %d", l, kv.KDimOf(l), kv.VDimOf(l), kv.NHeadKV(l), h.KDimAt(l), h.VDimAt(l), h.NHeadKVAt(l))
				}
			}
		})
	}
}

// TestGemma4DecodeAllocs: a decode step of gemma4-mixed-small (layers of
// different head sizes, KV heads and FFN widths, shared-KV layers,
// per-layer inputs) allocates nothing once the Context exists.
func TestGemma4DecodeAllocs(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	m := openPreset(t, be, "gemma4-mixed-small").Model
	c, err := m.NewContextOf(be, model.KVTypes{}, 128, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	if allocs := decodeAllocs(t, c); allocs != 0 {
		t.Errorf("%v allocations per decode step, want 0", allocs)
	}
}
