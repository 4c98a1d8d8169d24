package model_test

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// infoFile writes a small GGUF with the given keys and tensors (each of
// its type's size in bytes, zeros) and parses it.
func infoFile(t *testing.T, kvs []gguf.KV, tensors map[string]struct {
	typ  quant.Type
	dims []uint64
}) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, kv := range kvs {
		w.Set(kv.Key, kv.Value)
	}
	for name, tn := range tensors {
		size, err := gguf.TensorBytes(tn.typ, tn.dims)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(name, tn.typ, tn.dims, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestNewInfo: the pairs in file order with long arrays left out, the
// template and license, the parameter count and the type holding the most
// bytes.
func TestNewInfo(t *testing.T) {
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "general.license", Value: gguf.String("MIT")},
		{Key: "llama.context_length", Value: gguf.Uint32(128)},
		{Key: "tokenizer.chat_template", Value: gguf.String("{{ messages }}")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings([]string{"a", "b", "c"})},
	}
	type tensor = struct {
		typ  quant.Type
		dims []uint64
	}
	f := infoFile(t, kvs, map[string]tensor{
		"token_embd.weight":   {quant.Q8_0, []uint64{64, 4}}, // 256 elements, 272 bytes
		"output_norm.weight":  {quant.F32, []uint64{64}},     // 64 elements, 256 bytes
		"blk.0.ffn_up.weight": {quant.F16, []uint64{64, 2}},  // 128 elements, 256 bytes
	})
	in := model.NewInfo(f, 2)
	if in.Template != "{{ messages }}" || in.License != "MIT" {
		t.Errorf("template %q, license %q", in.Template, in.License)
	}
	if in.Params != 256+64+128 || in.WeightType != "q8_0" {
		t.Errorf("params %d, weight type %q; want 448, q8_0", in.Params, in.WeightType)
	}
	want := []model.Meta{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.license", Value: "MIT"},
		{Key: "llama.context_length", Value: int64(128)},
		{Key: "tokenizer.chat_template", Value: "{{ messages }}"},
		{Key: "tokenizer.ggml.tokens", Value: nil}, // 3 > maxArray 2
	}
	if !reflect.DeepEqual(in.Metadata, want) {
		t.Errorf("metadata %v, want %v", in.Metadata, want)
	}
	if got := model.NewInfo(f, -1).Metadata[4].Value; !reflect.DeepEqual(got, []any{"a", "b", "c"}) {
		t.Errorf("maxArray -1: tokens %v", got)
	}

	// a tie in bytes goes to the smaller name; no tensors, no type
	f = infoFile(t, nil, map[string]tensor{
		"a": {quant.F32, []uint64{64}},
		"b": {quant.F16, []uint64{128}},
	})
	if in := model.NewInfo(f, -1); in.WeightType != "f16" || in.Params != 192 || in.Template != "" || in.License != "" || len(in.Metadata) != 0 {
		t.Errorf("tie: %+v", in)
	}
	if in := model.NewInfo(infoFile(t, kvs[:1], nil), -1); in.WeightType != "" || in.Params != 0 {
		t.Errorf("no tensors: %+v", in)
	}
}

// TestMetaValue: every value type as a plain Go value.
func TestMetaValue(t *testing.T) {
	floats, err := gguf.Array(gguf.TypeFloat32, []gguf.Value{gguf.Float32(0.5), gguf.Float32(1e-5)})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := gguf.Array(gguf.TypeArray, []gguf.Value{gguf.Int32s([]int32{1, -2}), gguf.Strings([]string{"x"})})
	if err != nil {
		t.Fatal(err)
	}
	deep, err := gguf.Array(gguf.TypeArray, []gguf.Value{gguf.Int32s([]int32{1, 2, 3})})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v        gguf.Value
		maxArray int
		want     any
	}{
		{gguf.String("llama"), -1, "llama"},
		{gguf.Bool(true), -1, true},
		{gguf.Uint8(7), -1, int64(7)},
		{gguf.Int32(-3), -1, int64(-3)},
		{gguf.Uint32(4096), -1, int64(4096)},
		{gguf.Int64(math.MinInt64), -1, int64(math.MinInt64)},
		{gguf.Uint64(math.MaxUint64), -1, uint64(math.MaxUint64)},
		{gguf.Float32(1e-5), -1, float32(1e-5)},
		{gguf.Float64(0.25), -1, 0.25},
		{gguf.Float32(float32(math.Inf(1))), -1, float32(math.Inf(1))},
		{floats, -1, []any{float32(0.5), float32(1e-5)}},
		{floats, 2, []any{float32(0.5), float32(1e-5)}},
		{floats, 1, nil},
		{floats, 0, nil},
		{nested, -1, []any{[]any{int64(1), int64(-2)}, []any{"x"}}},
		{nested, 2, []any{[]any{int64(1), int64(-2)}, []any{"x"}}},
		{nested, 1, nil},
		{deep, 2, []any{nil}}, // the limit holds at every depth
	} {
		if got := model.MetaValue(c.v, c.maxArray); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v (maxArray %d): %#v, want %#v", c.v, c.maxArray, got, c.want)
		}
	}
	nan := model.MetaValue(gguf.Float64(math.NaN()), -1)
	if x, ok := nan.(float64); !ok || !math.IsNaN(x) {
		t.Errorf("NaN: %#v", nan)
	}
}
