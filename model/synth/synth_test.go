// End-to-end tests: written models parse, load through model.Load, decode
// to finite logits on the reference backend, tokenize with the built-in
// vocabulary, and are byte-identical for the same inputs.

package synth_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/quant"
)

// write writes a model to memory and parses it.
func write(t testing.TB, s synth.Spec, o synth.Options) (*gguf.File, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := synth.Write(&buf, s, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f, buf.Bytes()
}

// run loads f and decodes a 4-token prompt and then greedily 4 more tokens,
// one at a time, checking every logit is finite. It returns the tokens.
func run(t *testing.T, f *gguf.File) []int32 {
	t.Helper()
	ref := cpu.NewRef()
	m, err := model.Load(f, ref.Supports)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := m.NewContext(ref, 64, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 300, 301, 302}
	b := &model.Batch{Tokens: prompt, Pos: []int32{0, 1, 2, 3}, Seq: make([]int32, 4), Logits: []bool{false, false, false, true}}
	out := append([]int32(nil), prompt...)
	for step := range 5 {
		logits, err := ctx.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(logits) != m.NVocab {
			t.Fatalf("step %d: %d logits, want %d", step, len(logits), m.NVocab)
		}
		best := int32(0)
		var sumSq float64
		for i, x := range logits {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("step %d: logit %d is %g", step, i, x)
			}
			sumSq += float64(x) * float64(x)
			if x > logits[best] {
				best = int32(i)
			}
		}
		if sumSq == 0 {
			t.Fatalf("step %d: all logits are zero", step)
		}
		out = append(out, best)
		pos := int32(len(out) - 1)
		b = &model.Batch{Tokens: []int32{best}, Pos: []int32{pos}, Seq: []int32{0}}
	}
	return out
}

func demo(t testing.TB) synth.Spec {
	s, err := synth.Preset("demo")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDemo(t *testing.T) {
	f, data := write(t, demo(t), synth.Options{Mix: "Q8_0", Seed: 1})
	t.Logf("demo Q8_0: %d bytes, %d tensors", len(data), len(f.Tensors))
	if d, _ := f.GetString("general.description"); d != synth.Description(1) {
		t.Errorf("general.description = %q", d)
	}
	if ft, _ := f.GetUint("general.file_type"); ft != 7 {
		t.Errorf("general.file_type = %d, want 7 (MOSTLY_Q8_0)", ft)
	}
	if len(data) > 8<<20 {
		t.Errorf("demo model is %d bytes, want a few MB", len(data))
	}
	toks := run(t, f)
	t.Logf("tokens %v", toks)
}

func TestBuiltinVocab(t *testing.T) {
	f, _ := write(t, demo(t), synth.Options{Mix: "Q8_0"})
	tk, err := tokenizer.New(f)
	if err != nil {
		t.Fatal(err)
	}
	if tk.NVocab() != 1024 {
		t.Errorf("NVocab = %d, want 1024", tk.NVocab())
	}
	var want []int32
	want = append(want, tk.BOS())
	for _, p := range []string{"▁Once", "▁upon", "▁a", "▁time"} {
		id, ok := tk.Lookup(p)
		if !ok {
			t.Fatalf("piece %q not in the vocabulary", p)
		}
		want = append(want, id)
	}
	got := tk.Encode("Once upon a time", true, false)
	if !slicesEqual(got, want) {
		t.Errorf("Encode(Once upon a time) = %v, want %v", got, want)
	}
	for _, text := range []string{
		"Once upon a time",
		"Once upon a time, there was a little girl named Lily. She loved to play outside!",
		"Tom said: \"I want 3 apples\" (and\ta café) ~ {ok}\n\nThe end.",
		"  leading spaces and trailing  ",
	} {
		ids := tk.Encode(text, false, false)
		if back := tk.Decode(ids, false); back != text {
			t.Errorf("round trip of %q: %q (ids %v)", text, back, ids)
		}
	}
	// common words are single pieces, not spelled letter by letter
	ids := tk.Encode("the little dog was happy", false, false)
	if len(ids) != 5 {
		t.Errorf("\"the little dog was happy\" is %d tokens, want 5: %v", len(ids), ids)
	}
	kv1, kv2 := synth.BuiltinVocab(), synth.BuiltinVocab()
	if len(kv1) != len(kv2) {
		t.Fatal("BuiltinVocab is not deterministic")
	}
	for i := range kv1 {
		if kv1[i].Key != kv2[i].Key || kv1[i].Value.String() != kv2[i].Value.String() {
			t.Fatalf("BuiltinVocab differs at %s", kv1[i].Key)
		}
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// small is a llama spec whose rows are whole 256-blocks.
// withRope returns s with the given RoPE scaling fields.
func withRope(s synth.Spec, typ string, factor float32, origCtx int, attn float32) synth.Spec {
	s.RopeScaling, s.RopeFactor, s.RopeOrigCtx, s.RopeAttnFactor = typ, factor, origCtx, attn
	return s
}

// TestRopeScaling: the RoPE scaling fields become rope.scaling.* keys that
// model.ReadHyper resolves (the keys are written only when set).
func TestRopeScaling(t *testing.T) {
	f, _ := write(t, small(), synth.Options{})
	if _, ok := f.Get("llama.rope.scaling.type"); ok {
		t.Error("rope.scaling.type written without RopeScaling")
	}
	f, _ = write(t, withRope(small(), "yarn", 4, 256, 0.5), synth.Options{})
	h, err := model.ReadHyper(f, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if h.RopeScaling != "yarn" || h.RopeScale != 0.25 || h.RopeExtFactor != 1 || h.NCtxOrig != 256 || !(h.RopeAttnFactor > 0.49 && h.RopeAttnFactor < 0.51) {
		t.Errorf("yarn: %+v", h)
	}
	f, _ = write(t, withRope(small(), "none", 0, 0, 0), synth.Options{})
	if h, err = model.ReadHyper(f, "llama"); err != nil || h.RopeScaling != "none" || h.RopeScale != 1 {
		t.Errorf("none: %+v, %v", h, err)
	}
}

func small() synth.Spec {
	return synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 2, NHead: 8, NHeadKV: 4, NFF: 512}
}

func TestTypes(t *testing.T) {
	cases := []synth.Options{
		{Mix: "F16"}, {Mix: "Q8_0"}, {Mix: "Q6_K"}, {Mix: "Q4_K_M"}, {Mix: "Q4_0"},
		{Mix: "F32"}, {Mix: "BF16"}, {Mix: "Q4_1"}, {Mix: "Q5_0"}, {Mix: "Q5_1"},
		{Mix: "Q4_K_S"}, {Mix: "Q5_K_S"}, {Mix: "Q5_K_M"},
		{Type: quant.F16}, {Type: quant.Q8_0}, {Type: quant.Q4_K}, {Type: quant.Q5_K}, {Type: quant.Q6_K},
		{Type: quant.IQ4_NL}, {Type: quant.IQ4_XS}, {Type: quant.MXFP4},
		{Type: quant.IQ3_XXS}, {Type: quant.IQ3_S}, {Type: quant.IQ2_XXS}, {Type: quant.IQ2_XS},
		{Type: quant.IQ2_S}, {Type: quant.IQ1_S}, {Type: quant.IQ1_M},
	}
	for _, o := range cases {
		name := o.Mix
		if name == "" {
			name = "pure-" + o.Type.String()
		}
		t.Run(name, func(t *testing.T) {
			o.Seed = 7
			f, data := write(t, small(), o)
			plan, err := synth.Plan(small(), o)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[quant.Type]int{}
			for i, p := range plan {
				ft := f.Tensors[i]
				if ft.Name != p.Name || ft.Type != p.Type || ft.Size != p.Bytes {
					t.Fatalf("tensor %d: file has %s %s %d bytes, plan %s %s %d", i, ft.Name, ft.Type, ft.Size, p.Name, p.Type, p.Bytes)
				}
				counts[p.Type]++
			}
			t.Logf("%d bytes, types %v", len(data), counts)
			run(t, f)
		})
	}
}

func TestArchs(t *testing.T) {
	cases := map[string]synth.Spec{
		"qwen2-tied": {Arch: "qwen2", NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, NFF: 512, Tied: true},
		"qwen3":      {Arch: "qwen3", NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 128, NFF: 512, Tied: true},
		"qwen3moe":   {Arch: "qwen3moe", NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 64, NExpert: 8, NExpertUsed: 2, NFFExp: 256},
		"qwen3moe-16": {Arch: "qwen3moe", NEmbd: 256, NLayer: 3, NHead: 4, NHeadKV: 2, HeadDim: 64, NFF: 768,
			NExpert: 16, NExpertUsed: 4, NFFExp: 256},
	}
	for name, s := range cases {
		for _, mix := range []string{"Q8_0", "Q4_K_M"} {
			t.Run(name+"/"+mix, func(t *testing.T) {
				f, data := write(t, s, synth.Options{Mix: mix, Seed: 3})
				t.Logf("%d bytes", len(data))
				ref := cpu.NewRef()
				m, err := model.Load(f, ref.Supports)
				if err != nil {
					t.Fatal(err)
				}
				if m.NExpert > 0 {
					// routing is skewed but every token picks NExpertUsed experts
					ctx, err := m.NewContext(ref, 16, 1, 16)
					if err != nil {
						t.Fatal(err)
					}
					seen := map[int]bool{}
					ctx.SetHooks(model.Hooks{OnRoute: func(layer, row int, experts []int, weights []float32) {
						for _, e := range experts {
							seen[e] = true
						}
					}})
					toks := []int32{1, 400, 500, 600, 700, 800, 900, 1000}
					if _, err := ctx.Decode(&model.Batch{Tokens: toks, Pos: []int32{0, 1, 2, 3, 4, 5, 6, 7}, Seq: make([]int32, 8)}); err != nil {
						t.Fatal(err)
					}
					if len(seen) < m.NExpertUsed {
						t.Errorf("only experts %v were used", seen)
					}
				}
				run(t, f)
			})
		}
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestDeterminism(t *testing.T) {
	s := demo(t)
	o := synth.Options{Mix: "Q4_K_M", Seed: 42}
	_, a := write(t, s, o)
	_, b := write(t, s, o)
	if sha(a) != sha(b) {
		t.Fatal("same spec, options and seed gave different files")
	}
	// the bytes do not depend on how many chunks are generated at once
	prev := runtime.GOMAXPROCS(1)
	_, c := write(t, s, o)
	runtime.GOMAXPROCS(prev)
	if sha(a) != sha(c) {
		t.Fatal("GOMAXPROCS=1 gave a different file")
	}
	o.Seed = 43
	_, d := write(t, s, o)
	if sha(a) == sha(d) {
		t.Fatal("seeds 42 and 43 gave the same file")
	}
	// Pinned: a change here changes every generated model (e.g. the demo
	// that `flowinfer run` builds); update it only on purpose.
	const want = "7a24a4dee2179511698fc2a93762758c7015ce096350eb25920ca13c266d6777"
	if got := sha(a); got != want {
		t.Errorf("demo Q4_K_M seed 42: sha256 %s, pinned %s", got, want)
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "demo.gguf")
	if err := synth.WriteFile(path, demo(t), synth.Options{Mix: "Q8_0"}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run(t, f)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the model", len(ents))
	}
	// a failing write leaves nothing behind
	bad := synth.Spec{Arch: "llama", NEmbd: 250, NLayer: 1, NHead: 2, NFF: 500}
	if err := synth.WriteFile(filepath.Join(dir, "bad.gguf"), bad, synth.Options{Mix: "Q8_0"}); err == nil {
		t.Fatal("rows of 250 in Q8_0: no error")
	}
	if err := synth.WriteFile(filepath.Join(dir, "missing", "x.gguf"), demo(t), synth.Options{}); err == nil {
		t.Fatal("missing directory: no error")
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("after failures the directory holds %d entries, want 1", len(ents))
	}
}

type failWriter struct{ n int }

var errFull = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n < len(p) {
		return 0, errFull
	}
	w.n -= len(p)
	return len(p), nil
}

func TestErrors(t *testing.T) {
	good := small()
	cases := []struct {
		name string
		s    synth.Spec
		o    synth.Options
	}{
		{"arch", synth.Spec{Arch: "gpt2", NEmbd: 256, NLayer: 1, NHead: 4, NFF: 256}, synth.Options{}},
		{"no layers", synth.Spec{Arch: "llama", NEmbd: 256, NHead: 4, NFF: 256}, synth.Options{}},
		{"gqa", synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 1, NHead: 4, NHeadKV: 3, NFF: 256}, synth.Options{}},
		{"odd head", synth.Spec{Arch: "llama", NEmbd: 252, NLayer: 1, NHead: 4, NFF: 256}, synth.Options{}},
		{"no ffn", synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 1, NHead: 4}, synth.Options{}},
		{"moe without experts", synth.Spec{Arch: "qwen3moe", NEmbd: 256, NLayer: 1, NHead: 4, NFF: 256}, synth.Options{}},
		{"experts on llama", synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 1, NHead: 4, NFF: 256, NExpert: 4, NExpertUsed: 1, NFFExp: 64}, synth.Options{}},
		{"too many used", synth.Spec{Arch: "qwen3moe", NEmbd: 256, NLayer: 1, NHead: 4, NExpert: 4, NExpertUsed: 5, NFFExp: 64}, synth.Options{}},
		{"negative", synth.Spec{Arch: "llama", NEmbd: -256, NLayer: 1, NHead: 4, NFF: 256}, synth.Options{}},
		{"huge", synth.Spec{Arch: "llama", NEmbd: 1 << 30, NLayer: 1, NHead: 4, NFF: 256}, synth.Options{}},
		{"vocab size", synth.Spec{Arch: "llama", NVocab: 32000, NEmbd: 256, NLayer: 1, NHead: 4, NFF: 256}, synth.Options{}},
		{"mix", good, synth.Options{Mix: "Q4_K_XL"}},
		{"type", good, synth.Options{Type: quant.Q8_K}},
		{"unknown type", good, synth.Options{Type: quant.Type(99)}},
		{"no fallback", synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 1, NHead: 4, NFF: 200}, synth.Options{Mix: "Q8_0"}},
		{"rope scaling type", withRope(good, "ntk", 4, 0, 0), synth.Options{}},
		{"rope factor without type", withRope(good, "", 4, 0, 0), synth.Options{}},
		{"rope factor -1", withRope(good, "yarn", -1, 256, 0), synth.Options{}},
		{"rope factor NaN", withRope(good, "linear", float32(math.NaN()), 0, 0), synth.Options{}},
		{"rope attn_factor Inf", withRope(good, "yarn", 4, 256, float32(math.Inf(1))), synth.Options{}},
		{"rope original context", withRope(good, "yarn", 4, -1, 0), synth.Options{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := synth.Write(&buf, c.s, c.o); err == nil {
				t.Fatal("no error")
			} else if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing: %v", buf.Len(), err)
			} else {
				t.Log(err)
			}
		})
	}
	t.Run("vocab without tokens", func(t *testing.T) {
		w := gguf.NewWriter()
		w.Set("tokenizer.ggml.model", gguf.String("llama"))
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if err := synth.Write(&bytes.Buffer{}, good, synth.Options{Vocab: f}); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("writer fails", func(t *testing.T) {
		for _, n := range []int{0, 100, 5000, 300000} {
			if err := synth.Write(&failWriter{n: n}, good, synth.Options{Mix: "Q4_K_M"}); !errors.Is(err, errFull) {
				t.Errorf("writer failing after %d bytes: error %v", n, err)
			}
		}
	})
	if _, err := synth.Preset("llama-70b"); err == nil {
		t.Error("unknown preset: no error")
	}
}

// TestFallback: rows that are not whole 256-blocks fall back as
// llama-quantize does (Q4_K -> Q5_0, Q6_K -> Q8_0, then F16).
func TestFallback(t *testing.T) {
	s := synth.Spec{Arch: "llama", NEmbd: 288, NLayer: 2, NHead: 4, NFF: 200}
	plan, err := synth.Plan(s, synth.Options{Mix: "Q4_K_M"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]quant.Type{
		"output.weight":          quant.Q8_0, // 288 % 256 != 0: Q8_0 directly
		"token_embd.weight":      quant.Q5_0,
		"blk.0.attn_q.weight":    quant.Q5_0,
		"blk.0.attn_v.weight":    quant.Q5_0,
		"blk.1.attn_v.weight":    quant.Q8_0, // use_more_bits: Q6_K -> Q8_0
		"blk.0.ffn_down.weight":  quant.F16,  // Q4_K -> Q5_0, 200 % 32 != 0 -> F16
		"blk.1.ffn_down.weight":  quant.F16,  // Q6_K -> Q8_0 -> F16
		"blk.0.ffn_gate.weight":  quant.Q5_0,
		"blk.0.attn_norm.weight": quant.F32,
	}
	for _, p := range plan {
		if w, ok := want[p.Name]; ok && p.Type != w {
			t.Errorf("%s: %s, want %s", p.Name, p.Type, w)
		}
	}
	f, _ := write(t, s, synth.Options{Mix: "Q4_K_M"})
	run(t, f)
}

func TestPresets(t *testing.T) {
	for _, name := range synth.Presets() {
		s, err := synth.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		opts, label := synth.Options{Mix: "Q4_K_M"}, "Q4_K_M"
		if s.Arch == "gpt-oss" { // MXFP4 experts, one type for the rest
			opts, label = synth.Options{Type: quant.Q8_0}, "MXFP4+Q8_0"
		}
		plan, err := synth.Plan(s, opts)
		if err != nil {
			t.Fatal(err)
		}
		var params, bytes uint64
		for _, p := range plan {
			n := uint64(1)
			for _, d := range p.Dims {
				n *= d
			}
			params += n
			bytes += p.Bytes
		}
		t.Logf("%s (built-in vocab): %d tensors, %.1fM parameters, %s %.1f MB", name, len(plan), float64(params)/1e6, label, float64(bytes)/1e6)
	}
}

// TestKOutliers: KOutliers scales exactly kOutlierChannels (4) of each
// layer's attn_k_norm weights and leaves every other tensor as it was; it
// is refused for architectures without a per-head K norm.
func TestKOutliers(t *testing.T) {
	s := synth.Spec{Arch: "qwen3", NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 64, NFF: 512}
	plainF, plain := write(t, s, synth.Options{Seed: 3})
	s.KOutliers = 50
	f, data := write(t, s, synth.Options{Seed: 3})
	f32 := func(f *gguf.File, data []byte, i, j int) float32 {
		tt := f.Tensors[i]
		return math.Float32frombits(binary.LittleEndian.Uint32(data[f.DataOffset+tt.Offset+uint64(4*j):]))
	}
	for i, tt := range f.Tensors {
		pt := plainF.Tensors[i]
		a := data[f.DataOffset+tt.Offset:][:tt.Size]
		b := plain[plainF.DataOffset+pt.Offset:][:pt.Size]
		if !strings.HasSuffix(tt.Name, "attn_k_norm.weight") {
			if !bytes.Equal(a, b) {
				t.Errorf("%s changed", tt.Name)
			}
			continue
		}
		boosted := 0
		for j := range int(tt.Size / 4) {
			x, y := f32(f, data, i, j), f32(plainF, plain, i, j)
			switch x {
			case y:
			case y * 50:
				boosted++
			default:
				t.Errorf("%s[%d] = %v, was %v", tt.Name, j, x, y)
			}
		}
		if boosted != 4 {
			t.Errorf("%s: %d channels boosted, want 4", tt.Name, boosted)
		}
	}
	s.Arch = "llama"
	var buf bytes.Buffer
	if err := synth.Write(&buf, s, synth.Options{}); err == nil || !strings.Contains(err.Error(), "K outliers") {
		t.Errorf("llama with K outliers: %v", err)
	}
}

// TestIQ4Pure: --pure IQ4_XS falls back to IQ4_NL for rows that are not a
// whole number of 256-blocks (llama-quant.cpp's tensor_type_fallback), and
// the IQ4/MXFP4 names as mixtures are refused with an error pointing to
// --pure (their mixture rules are not implemented).
func TestIQ4Pure(t *testing.T) {
	s := synth.Spec{Arch: "llama", NEmbd: 288, NLayer: 1, NHead: 8, NHeadKV: 4, NFF: 512}
	plan, err := synth.Plan(s, synth.Options{Type: quant.IQ4_XS})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[quant.Type]int{}
	for _, p := range plan {
		counts[p.Type]++
		if len(p.Dims) < 2 {
			continue
		}
		want := quant.IQ4_XS
		if p.Dims[0]%256 != 0 {
			want = quant.IQ4_NL
		}
		if p.Type != want {
			t.Errorf("%s with rows of %d: %s, want %s", p.Name, p.Dims[0], p.Type, want)
		}
	}
	if counts[quant.IQ4_XS] == 0 || counts[quant.IQ4_NL] == 0 {
		t.Errorf("types %v: want both iq4_xs and iq4_nl", counts)
	}
	for _, mix := range []string{"IQ4_NL", "iq4_xs", "MXFP4"} {
		_, err := synth.Plan(small(), synth.Options{Mix: mix})
		if err == nil || !strings.Contains(err.Error(), "--pure") {
			t.Errorf("mixture %s: error %v, want one pointing to --pure", mix, err)
		}
	}
}

// TestIQLatticePure: --pure with a lattice type (IQ3_XXS ... IQ1_M) falls
// back to IQ4_NL for rows that are not a whole number of 256-blocks
// (llama-quant.cpp's tensor_type_fallback), the file type is the one whose
// base type it is, and the names as mixtures are refused pointing to
// --pure.
func TestIQLatticePure(t *testing.T) {
	s := synth.Spec{Arch: "llama", NEmbd: 288, NLayer: 1, NHead: 8, NHeadKV: 4, NFF: 512}
	ftypes := map[quant.Type]uint32{
		quant.IQ2_XXS: 19, quant.IQ2_XS: 20, quant.IQ3_XXS: 23, quant.IQ1_S: 24,
		quant.IQ3_S: 26, quant.IQ2_S: 29, quant.IQ1_M: 31,
	}
	for typ, ft := range ftypes {
		plan, err := synth.Plan(s, synth.Options{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		counts := map[quant.Type]int{}
		for _, p := range plan {
			counts[p.Type]++
			if len(p.Dims) < 2 {
				continue
			}
			want := typ
			if p.Dims[0]%256 != 0 {
				want = quant.IQ4_NL
			}
			if p.Type != want {
				t.Errorf("%s: %s with rows of %d: %s, want %s", typ, p.Name, p.Dims[0], p.Type, want)
			}
		}
		if counts[typ] == 0 || counts[quant.IQ4_NL] == 0 {
			t.Errorf("%s: types %v: want both %s and iq4_nl", typ, counts, typ)
		}
		tiny := synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 1, NHead: 4, NHeadKV: 2, NFF: 256}
		f, _ := write(t, tiny, synth.Options{Type: typ, Seed: 1})
		if got, _ := f.GetUint("general.file_type"); got != uint64(ft) {
			t.Errorf("%s: general.file_type = %d, want %d", typ, got, ft)
		}
		_, err = synth.Plan(small(), synth.Options{Mix: typ.String()})
		if err == nil || !strings.Contains(err.Error(), "--pure") {
			t.Errorf("mixture %s: error %v, want one pointing to --pure", typ, err)
		}
	}
}
