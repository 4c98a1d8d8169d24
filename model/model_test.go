package model_test

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// rewrite copies a golden model through the writer, letting edit change
// keys and tensors, and parses the result.
func rewrite(t *testing.T, name string, edit func(w *gguf.Writer, f *gguf.File, t *gguf.Tensor) bool, extra func(w *gguf.Writer)) *gguf.File {
	t.Helper()
	dir := golden.Dir(t)
	f, err := gguf.Open(filepath.Join(dir, "models", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	w.CopyKVs(f, nil)
	for _, tn := range f.Tensors {
		if edit != nil && !edit(w, f, tn) {
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

func TestLoadErrors(t *testing.T) {
	supports := cpu.NewRef().Supports
	cases := []struct {
		name  string
		edit  func(w *gguf.Writer, f *gguf.File, t *gguf.Tensor) bool
		extra func(w *gguf.Writer)
		want  []string
	}{
		{
			name: "missing tensor",
			edit: func(_ *gguf.Writer, _ *gguf.File, t *gguf.Tensor) bool { return t.Name != "blk.2.ffn_up.weight" },
			want: []string{`missing required tensor "blk.2.ffn_up.weight"`, "[64, 172]"},
		},
		{
			name: "wrong shape",
			edit: func(w *gguf.Writer, _ *gguf.File, t *gguf.Tensor) bool {
				if t.Name != "blk.1.attn_norm.weight" {
					return true
				}
				w.AddTensor(t.Name, quant.F32, []uint64{32}, make([]byte, 128))
				return false
			},
			want: []string{`tensor "blk.1.attn_norm.weight" has shape [32], expected [64]`},
		},
		{
			name: "unsupported type",
			edit: func(w *gguf.Writer, _ *gguf.File, t *gguf.Tensor) bool {
				if t.Name != "blk.0.attn_q.weight" {
					return true
				}
				// 64x64 as NVFP4 (a type ggml knows and we do not compute).
				rb, _ := quant.RowBytes(quant.NVFP4, 64)
				w.AddTensor(t.Name, quant.NVFP4, t.Dims, make([]byte, rb*64))
				return false
			},
			want: []string{`tensor "blk.0.attn_q.weight" has type nvfp4`, "not supported"},
		},
		{
			name:  "unknown architecture",
			extra: func(w *gguf.Writer) { w.Set("general.architecture", gguf.String("mamba9")) },
			want:  []string{`architecture "mamba9" is not supported`},
		},
		{
			name:  "bad head count",
			extra: func(w *gguf.Writer) { w.Set("llama.attention.head_count_kv", gguf.Uint32(3)) },
			want:  []string{"head_count 8 is not a multiple of head_count_kv 3"},
		},
		{
			name:  "unsupported rope scaling",
			extra: func(w *gguf.Writer) { w.Set("llama.rope.scaling.type", gguf.String("longrope")) },
			want:  []string{`rope scaling type "longrope" is not supported`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := rewrite(t, "stories260K.gguf", c.edit, c.extra)
			_, err := model.Load(f, supports)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if c.name == "unsupported type" && !errors.Is(err, quant.ErrUnsupportedType) {
				t.Errorf("error %v does not match quant.ErrUnsupportedType", err)
			}
		})
	}
	t.Run("missing key", func(t *testing.T) {
		f := rewrite(t, "stories260K.gguf", nil, nil)
		w := gguf.NewWriter()
		w.CopyKVs(f, func(k string) bool { return k != "llama.block_count" })
		var buf bytes.Buffer
		w.WriteTo(&buf)
		g, _ := gguf.Parse(buf.Bytes())
		if _, err := model.Load(g, supports); err == nil || !strings.Contains(err.Error(), `missing required key "llama.block_count"`) {
			t.Errorf("err %v", err)
		}
	})
}

// TestRopeFreqFactors: llama3-style rope_freqs.weight is loaded and divides
// each pair's angle: constant factors 2 equal a linear frequency scale of
// 1/2 without factors.
func TestRopeFreqFactors(t *testing.T) {
	factors := make([]float32, 4) // stories260K: rope.dimension_count 8
	for i := range factors {
		factors[i] = 2
	}
	raw := make([]byte, 0, 16)
	for _, v := range factors {
		b := math.Float32bits(v)
		raw = append(raw, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
	}
	f := rewrite(t, "stories260K.gguf", nil, func(w *gguf.Writer) {
		w.AddTensor("rope_freqs.weight", quant.F32, []uint64{4}, raw)
	})
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Rope.Factors) != 4 || m.Rope.Factors[0] != 2 {
		t.Fatalf("factors %v", m.Rope.Factors)
	}
	ref := cpu.NewRef()
	x := make([]float32, 8*8*3)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	a, b := append([]float32(nil), x...), append([]float32(nil), x...)
	pos := []int32{3, 57, 700}
	ref.Rope(a, pos, 3, 8, 8, &m.Rope)
	lin := model.Rope{Type: model.RopeNorm, Dim: 8, Base: m.Rope.Base, Scale: 0.5}
	ref.Rope(b, pos, 3, 8, 8, &lin)
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6 {
			t.Fatalf("element %d: factors %g, linear scale %g", i, a[i], b[i])
		}
	}
}

// TestBatchValidation: malformed batches are errors, not panics.
func TestBatchValidation(t *testing.T) {
	f := rewrite(t, "stories260K.gguf", nil, nil)
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := m.NewContext(cpu.NewRef(), 16, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []model.Batch{
		{},
		{Tokens: []int32{1, 2, 3, 4, 5}, Pos: []int32{0, 1, 2, 3, 4}, Seq: []int32{0, 0, 0, 0, 0}},
		{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{}},
		{Tokens: []int32{9999}, Pos: []int32{0}, Seq: []int32{0}},
		{Tokens: []int32{1}, Pos: []int32{16}, Seq: []int32{0}},
		{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{2}},
		{Tokens: []int32{1}, Pos: []int32{-1}, Seq: []int32{0}},
	} {
		if _, err := ctx.Decode(&b); !errors.Is(err, model.ErrBatch) {
			t.Errorf("batch %+v: err %v", b, err)
		}
	}
}
