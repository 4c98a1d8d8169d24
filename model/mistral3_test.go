package model_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// mistral3File writes the mistral3-small preset (F32, seed 1) through
// edit, which may change the spec, and parses it.
func mistral3File(t *testing.T, edit func(*synth.Spec)) *gguf.File {
	t.Helper()
	s, err := synth.Preset("mistral3-small")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&s)
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, s, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// reWrite copies f, letting edit drop or replace tensors (false: drop) and
// extra add keys and tensors.
func reWrite(t *testing.T, f *gguf.File, edit func(w *gguf.Writer, tn *gguf.Tensor) bool, extra func(w *gguf.Writer)) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	w.CopyKVs(f, nil)
	for _, tn := range f.Tensors {
		if edit != nil && !edit(w, tn) {
			continue
		}
		if err := w.AddTensor(tn.Name, tn.Type, tn.Dims, append([]byte(nil), tn.Data...)); err != nil {
			t.Fatal(err)
		}
	}
	if extra != nil {
		extra(w)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	out, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMistral3Hyper: the preset's keys resolve as llama.cpp resolves them
// (llama_model_mistral3::load_arch_hparams and the llama_context
// constructor): the ramp bounds read from the file, the attention factor
// get_mscale(16, 1)/get_mscale(16, 0.5)/(1 + 0.1·ln 16) (llama.cpp logs
// "setting new yarn_attn_factor = 1.1218" before the last division), the
// temperature stepping at the original context of 256.
func TestMistral3Hyper(t *testing.T) {
	m, err := model.Load(mistral3File(t, nil), cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	ln16 := float32(math.Log(16))
	wantAttn := (0.1*ln16 + 1) / (0.05*ln16 + 1) * (1 / (1 + 0.1*ln16))
	switch {
	case m.RopeType != model.RopeNorm || m.Rope.Type != model.RopeNorm:
		t.Errorf("rope type %v, want norm (adjacent pairs)", m.RopeType)
	case m.YarnBetaFast != 16 || m.YarnBetaSlow != 2 || m.YarnLogMul != 0.5:
		t.Errorf("beta fast %g slow %g log mul %g, want 16, 2, 0.5", m.YarnBetaFast, m.YarnBetaSlow, m.YarnLogMul)
	case m.RopeAttnFactor != wantAttn:
		t.Errorf("attn factor %.9g, want %.9g", m.RopeAttnFactor, wantAttn)
	case m.Rope.Corr != model.YarnCorrDims(64, 256, 1e6, 16, 2) || m.Rope.Corr == model.YarnCorrDims(64, 256, 1e6, 32, 1):
		t.Errorf("ramp %v: want the file's bounds 16 and 2 (%v)", m.Rope.Corr, model.YarnCorrDims(64, 256, 1e6, 16, 2))
	case m.AttnTempScale != 0.1 || m.AttnTempFloor != 256:
		t.Errorf("temperature %g every %d, want 0.1 every 256", m.AttnTempScale, m.AttnTempFloor)
	case math.Abs(float64(m.Rope.MScale())-1.1218) > 5e-5:
		t.Errorf("cos/sin multiplier %g, want llama.cpp's 1.1218", m.Rope.MScale())
	}
	// Without the log multiplier the factor is llama's (mscale 1 + 0.1·ln 16).
	m, err = model.Load(mistral3File(t, func(s *synth.Spec) { s.YarnLogMul = 0 }), cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Rope.MScale(), 1+0.1*ln16; math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("without yarn_log_multiplier: cos/sin multiplier %g, want %g", got, want)
	}
}

// TestAttnTempFactor pins llm_graph_input_attn_temp's formula: 1 below the
// floor, then log(⌊p/floor⌋ + 1)·scale + 1 in steps of the floor.
func TestAttnTempFactor(t *testing.T) {
	h := model.Hyper{AttnTempScale: 0.1, AttnTempFloor: 256}
	for _, c := range []struct {
		pos  int32
		want float64
	}{
		{0, 1}, {255, 1}, {256, 1 + 0.1*math.Log(2)}, {511, 1 + 0.1*math.Log(2)}, {512, 1 + 0.1*math.Log(3)},
		{1520, 1 + 0.1*math.Log(6)}, {1 << 20, 1 + 0.1*math.Log(4097)},
	} {
		if got := h.AttnTempFactor(c.pos); got != float32(c.want) {
			t.Errorf("factor at %d = %.9g, want %.9g", c.pos, got, float32(c.want))
		}
	}
	// Ministral 3's own figures: beta 0.1 over 16384 positions.
	h = model.Hyper{AttnTempScale: 0.1, AttnTempFloor: 16384}
	if got := h.AttnTempFactor(131071); got != float32(1+0.1*math.Log(8)) {
		t.Errorf("factor at 131071 = %.9g, want %.9g", got, float32(1+0.1*math.Log(8)))
	}
}

// TestMistral3Errors: what mistral3 does not do is refused by name.
func TestMistral3Errors(t *testing.T) {
	supports := cpu.NewRef().Supports
	f32 := func(name string, n int) func(w *gguf.Writer) {
		return func(w *gguf.Writer) {
			if err := w.AddTensor(name, quant.F32, []uint64{uint64(n)}, make([]byte, 4*n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name  string
		keys  map[string]gguf.Value
		extra func(w *gguf.Writer)
		want  string
	}{
		{name: "output bias", extra: f32("blk.1.attn_output.bias", 256), want: `tensor "blk.1.attn_output.bias" (an optional bias llama.cpp adds) is not supported`},
		{name: "ffn bias", extra: f32("blk.0.ffn_up.bias", 768), want: `tensor "blk.0.ffn_up.bias"`},
		{name: "beta_fast 0", keys: map[string]gguf.Value{"mistral3.rope.scaling.yarn_beta_fast": gguf.Float32(0)},
			want: `key "mistral3.rope.scaling.yarn_beta_fast" = 0: want a positive number`},
		{name: "log multiplier negative", keys: map[string]gguf.Value{"mistral3.rope.scaling.yarn_log_multiplier": gguf.Float32(-1)},
			want: `key "mistral3.rope.scaling.yarn_log_multiplier" = -1`},
		{name: "log multiplier NaN", keys: map[string]gguf.Value{"mistral3.rope.scaling.yarn_log_multiplier": gguf.Float32(float32(math.NaN()))},
			want: `want a finite number`},
		{name: "temperature Inf", keys: map[string]gguf.Value{"mistral3.attention.temperature_scale": gguf.Float32(float32(math.Inf(1)))},
			want: `key "mistral3.attention.temperature_scale" = +Inf: want a finite number`},
		{name: "rope dims below the head", keys: map[string]gguf.Value{"mistral3.rope.dimension_count": gguf.Uint32(32)},
			want: `mistral3 needs key_length 64, value_length 64 and rope.dimension_count 32 to be equal`},
		{name: "ext_factor still refused", keys: map[string]gguf.Value{"mistral3.rope.scaling.yarn_ext_factor": gguf.Float32(0.5)},
			want: `"mistral3.rope.scaling.yarn_ext_factor" = 0.5 is not supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := reWrite(t, mistral3File(t, nil), nil, func(w *gguf.Writer) {
				for k, v := range c.keys {
					w.Set(k, v)
				}
				if c.extra != nil {
					c.extra(w)
				}
			})
			_, err := model.Load(f, supports)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// mistral3Tokens returns n deterministic token ids below nVocab (BOS first).
func mistral3Tokens(n, nVocab int) []int32 {
	ids := make([]int32, n)
	ids[0] = 1
	x := uint32(12345)
	for i := 1; i < n; i++ {
		x = x*1664525 + 1013904223
		ids[i] = int32(3 + x>>8%uint32(nVocab-3))
	}
	return ids
}

// decodeAll feeds ids in chunks of at most chunk tokens (logits of the
// last row only) and then greedily decodes steps tokens; it returns every
// step's logits.
func decodeAll(t *testing.T, m *model.Model, ops model.Ops, ids []int32, chunk, steps int) [][]float32 {
	t.Helper()
	mctx, err := m.NewContext(ops, 1024, 1, chunk)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	var last []float32
	for lo := 0; lo < len(ids); lo += chunk {
		hi := min(lo+chunk, len(ids))
		b := &model.Batch{Tokens: ids[lo:hi], Pos: make([]int32, hi-lo), Seq: make([]int32, hi-lo), Logits: make([]bool, hi-lo)}
		for i := range b.Pos {
			b.Pos[i] = int32(lo + i)
		}
		b.Logits[hi-lo-1] = true
		if last, err = mctx.Decode(b); err != nil {
			t.Fatal(err)
		}
	}
	for pos := len(ids); ; pos++ {
		out = append(out, append([]float32(nil), last...))
		if len(out) > steps {
			return out
		}
		best := int32(0)
		for i, v := range last {
			if v > last[best] {
				best = int32(i)
			}
		}
		if last, err = mctx.Decode(&model.Batch{Tokens: []int32{best}, Pos: []int32{int32(pos)}, Seq: []int32{0}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMistral3ChunkedPrefill: a prompt past the temperature's steps (its
// factor depends on each row's own position) fed in chunks, then 8 greedy
// steps, leaves the same state as one pass: the same logits after the
// prompt and at every step. The reference backend computes each row alone,
// so they are identical (300 tokens, chunks of 97); the SIMD backend's
// (700 tokens, chunks of 1, 97 and 256) agree to float rounding.
func TestMistral3ChunkedPrefill(t *testing.T) {
	m, err := model.Load(mistral3File(t, nil), cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	for _, o := range []struct {
		name   string
		ops    model.Ops
		n      int // prompt tokens (the scalar reference is slow: a shorter prompt, past one step)
		chunks []int
		tol    float64
	}{{"ref", cpu.NewRef(), 300, []int{97}, 0}, {"simd", be, 700, []int{1, 97, 256}, 2e-5}} {
		t.Run(o.name, func(t *testing.T) {
			ids := mistral3Tokens(o.n, m.NVocab)
			one := decodeAll(t, m, o.ops, ids, len(ids), 8)
			for _, chunk := range o.chunks {
				got := decodeAll(t, m, o.ops, ids, chunk, 8)
				var worst float64
				for s := range one {
					for i := range one[s] {
						d := math.Abs(float64(got[s][i] - one[s][i]))
						if worst = max(worst, d); d > o.tol || math.IsNaN(d) {
							t.Fatalf("chunks of %d: step %d logit %d differs by %.3g from one pass (limit %g)", chunk, s, i, d, o.tol)
						}
					}
				}
				t.Logf("chunks of %d: logits within %.3g of one pass over %d steps", chunk, worst, len(one))
			}
		})
	}
}

// TestMistral3Experts: a mistral3 file with experts runs the shared expert
// path. With one expert used of one, the router's weight renormalises to 1
// and the block equals the dense FFN with the same matrices, so the model
// must give the dense file's logits; experts with their own width, no
// renormalisation, groups or no gate are refused.
func TestMistral3Experts(t *testing.T) {
	dense := mistral3File(t, nil)
	toMoE := func(w *gguf.Writer, tn *gguf.Tensor) bool {
		for _, name := range []string{"ffn_gate", "ffn_up", "ffn_down"} {
			if strings.HasSuffix(tn.Name, "."+name+".weight") {
				dims := append(append([]uint64(nil), tn.Dims...), 1)
				exp := strings.TrimSuffix(tn.Name, ".weight") + "_exps.weight"
				if err := w.AddTensor(exp, tn.Type, dims, append([]byte(nil), tn.Data...)); err != nil {
					t.Fatal(err)
				}
				return false
			}
		}
		return true
	}
	router := func(w *gguf.Writer) {
		w.Set("mistral3.expert_count", gguf.Uint32(1))
		w.Set("mistral3.expert_used_count", gguf.Uint32(1))
		for i := range 4 {
			if err := w.AddTensor(blkName(i, "ffn_gate_inp.weight"), quant.F32, []uint64{256, 1}, make([]byte, 4*256)); err != nil {
				t.Fatal(err)
			}
		}
	}
	moe := reWrite(t, dense, toMoE, router)
	supports := cpu.NewRef().Supports
	md, err := model.Load(dense, supports)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := model.Load(moe, supports)
	if err != nil {
		t.Fatal(err)
	}
	if mm.NExpert != 1 || mm.NFFExp != 768 || mm.Layers[2].Router == nil || len(mm.Layers[2].GateExps) != 1 {
		t.Fatalf("experts %d of width %d, router %v: the expert path was not loaded", mm.NExpert, mm.NFFExp, mm.Layers[2].Router != nil)
	}
	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	ids := mistral3Tokens(300, md.NVocab)
	want := decodeAll(t, md, be, ids, 100, 2)
	got := decodeAll(t, mm, be, ids, 100, 2)
	for s := range want {
		for i := range want[s] {
			if got[s][i] != want[s][i] {
				t.Fatalf("step %d logit %d: %g with one expert, %g dense", s, i, got[s][i], want[s][i])
			}
		}
	}
	for _, c := range []struct {
		name string
		keys map[string]gguf.Value
		drop string
		want string
	}{
		{name: "own expert width", keys: map[string]gguf.Value{"mistral3.expert_feed_forward_length": gguf.Uint32(512)},
			want: "expert_feed_forward_length 512 differs from feed_forward_length 768"},
		{name: "no renormalisation", keys: map[string]gguf.Value{"mistral3.expert_weights_norm": gguf.Bool(false)},
			want: "expert_weights_norm false is not supported"},
		{name: "expert groups", keys: map[string]gguf.Value{"mistral3.expert_group_count": gguf.Uint32(2)},
			want: "expert_group_count 2 is not supported"},
		{name: "no gate", drop: "blk.3.ffn_gate_exps.weight", want: `tensor "blk.3.ffn_gate_exps.weight" is missing; experts without a gate are not supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := reWrite(t, moe, func(w *gguf.Writer, tn *gguf.Tensor) bool { return tn.Name != c.drop }, func(w *gguf.Writer) {
				for k, v := range c.keys {
					w.Set(k, v)
				}
			})
			_, err := model.Load(f, supports)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func blkName(i int, name string) string {
	return "blk." + string(rune('0'+i)) + "." + name
}
