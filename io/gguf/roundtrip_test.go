// Round-trip tests: files built with Writer parse back (with Parse and with
// Open) to the same metadata and tensors, tensor data is aligned and
// zero-copy, and the Writer refuses what the reader would reject.
package gguf

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

// scalarCases are metadata scalars with the value each accessor must give.
// want is int64 (Int), uint64 (Uint), float64 (Float), bool or string.
var scalarCases = []struct {
	key  string
	v    Value
	typ  ValueType
	want any
}{
	{"s.u8", Uint8(250), TypeUint8, uint64(250)},
	{"s.i8", Int8(-128), TypeInt8, int64(-128)},
	{"s.u16", Uint16(65535), TypeUint16, uint64(65535)},
	{"s.i16", Int16(-32768), TypeInt16, int64(-32768)},
	{"s.u32", Uint32(4294967295), TypeUint32, uint64(4294967295)},
	{"s.i32", Int32(math.MinInt32), TypeInt32, int64(math.MinInt32)},
	{"s.u64", Uint64(math.MaxUint64), TypeUint64, uint64(math.MaxUint64)},
	{"s.i64", Int64(math.MinInt64), TypeInt64, int64(math.MinInt64)},
	{"s.f32", Float32(-3.25), TypeFloat32, float64(-3.25)},
	{"s.f32.tiny", Float32(math.SmallestNonzeroFloat32), TypeFloat32, float64(float32(math.SmallestNonzeroFloat32))},
	{"s.f64", Float64(1e-300), TypeFloat64, float64(1e-300)},
	{"s.true", Bool(true), TypeBool, true},
	{"s.false", Bool(false), TypeBool, false},
	{"s.str", String("héllo\x00wörld\n"), TypeString, "héllo\x00wörld\n"},
	{"s.str.empty", String(""), TypeString, ""},
}

// arrayKVs returns arrays of every element type, including empty and
// nested ones.
func arrayKVs(t testing.TB) []KV {
	a := func(elem ValueType, vals ...Value) Value { return mustArray(t, elem, vals...) }
	return []KV{
		{"a.u8", a(TypeUint8, Uint8(0), Uint8(255), Uint8(7))},
		{"a.i8", a(TypeInt8, Int8(-1), Int8(127), Int8(-128))},
		{"a.u16", a(TypeUint16, Uint16(1), Uint16(65535))},
		{"a.i16", a(TypeInt16, Int16(-2), Int16(32767))},
		{"a.u32", a(TypeUint32, Uint32(0), Uint32(4294967295))},
		{"a.i32", Int32s([]int32{math.MinInt32, -1, 0, math.MaxInt32})},
		{"a.u64", a(TypeUint64, Uint64(math.MaxUint64), Uint64(3))},
		{"a.i64", a(TypeInt64, Int64(math.MinInt64), Int64(math.MaxInt64))},
		{"a.f32", Float32s([]float32{0, float32(math.Copysign(0, -1)), 1.5, float32(math.Inf(1)), float32(math.NaN())})},
		{"a.f64", a(TypeFloat64, Float64(math.Pi), Float64(-1e300))},
		{"a.bool", a(TypeBool, Bool(true), Bool(false), Bool(true))},
		{"a.str", Strings([]string{"", "a", "日本語", strings.Repeat("x", 300)})},
		{"a.empty.u32", a(TypeUint32)},
		{"a.empty.str", Strings(nil)},
		{"a.nested", a(TypeArray,
			a(TypeUint8, Uint8(1), Uint8(2)),
			Strings([]string{"p", "q"}),
			a(TypeArray, a(TypeInt64, Int64(-5)), a(TypeBool)),
			a(TypeFloat64),
		)},
		{"a.nested.max", nestArrays(t, MaxArrayDepth)},
	}
}

// nestArrays returns depth arrays nested in each other around a u8.
func nestArrays(t testing.TB, depth int) Value {
	v := mustArray(t, TypeUint8, Uint8(42))
	for range depth - 1 {
		v = mustArray(t, TypeArray, v)
	}
	return v
}

// sameValue compares two values through the public accessors.
func sameValue(a, b Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Type() {
	case TypeArray:
		if a.ElemType() != b.ElemType() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			ea, oka := a.Index(i)
			eb, okb := b.Index(i)
			if !oka || !okb || !sameValue(ea, eb) {
				return false
			}
		}
		return true
	case TypeString:
		sa, _ := a.Str()
		sb, _ := b.Str()
		return sa == sb
	case TypeBool:
		ba, _ := a.Bool()
		bb, _ := b.Bool()
		return ba == bb
	case TypeFloat32, TypeFloat64:
		fa, _ := a.Float()
		fb, _ := b.Float()
		return math.Float64bits(fa) == math.Float64bits(fb)
	}
	ia, oka := a.Int()
	ib, okb := b.Int()
	ua, _ := a.Uint()
	ub, _ := b.Uint()
	return oka == okb && ia == ib && ua == ub
}

// fixtureTensors covers the tensor types and 1 to 4 dimensions, plus empty
// tensors.
var fixtureTensors = []tensorSpec{
	{"f32.1d", quant.F32, []uint64{7}},
	{"f16.2d", quant.F16, []uint64{5, 3}},
	{"q4_0.2d", quant.Q4_0, []uint64{64, 3}},
	{"q8_0.3d", quant.Q8_0, []uint64{32, 2, 3}},
	{"q4_k.4d", quant.Q4_K, []uint64{256, 1, 2, 2}},
	{"q6_k.2d", quant.Q6_K, []uint64{512, 2}},
	{"empty.rows", quant.F32, []uint64{4, 0}},
	{"empty.cols", quant.Q8_0, []uint64{0, 3}},
	{"f32.last", quant.F32, []uint64{3}}, // 12 bytes: the file ends in padding
}

// fixture describes a Writer fixture and what it should parse back to.
type fixture struct {
	kvs     []KV // as set, in order
	tensors []tensorSpec
	data    [][]byte
	align   uint64
}

func buildFixture(t testing.TB, align uint64, alignByKey bool, kvs []KV, tensors []tensorSpec, useFunc bool) (*Writer, fixture) {
	w := NewWriter()
	fx := fixture{tensors: tensors, align: align}
	if align == 0 {
		fx.align = DefaultAlignment
	}
	if alignByKey {
		kvs = append([]KV{{"general.alignment", Uint32(uint32(align))}}, kvs...)
	} else {
		w.Alignment = align
	}
	for _, kv := range kvs {
		w.Set(kv.Key, kv.Value)
	}
	fx.kvs = kvs
	if !alignByKey && align != 0 && align != DefaultAlignment {
		fx.kvs = append(slices.Clone(kvs), KV{"general.alignment", Uint32(uint32(align))}) // the Writer adds it last
	}
	for i, ts := range tensors {
		data := randBytes(uint64(100+i), ts.size(t))
		fx.data = append(fx.data, data)
		var err error
		if useFunc {
			err = w.AddTensorFunc(ts.name, ts.typ, ts.dims, func(out io.Writer) error {
				_, err := out.Write(data)
				return err
			})
		} else {
			err = w.AddTensor(ts.name, ts.typ, ts.dims, data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return w, fx
}

// checkFile verifies f against the fixture.
func checkFile(t *testing.T, f *File, fx fixture) {
	t.Helper()
	if f.Version != 3 {
		t.Errorf("Version = %d, want 3", f.Version)
	}
	if f.Alignment != fx.align {
		t.Errorf("Alignment = %d, want %d", f.Alignment, fx.align)
	}
	if len(f.KVs) != len(fx.kvs) {
		t.Fatalf("%d KVs, want %d", len(f.KVs), len(fx.kvs))
	}
	for i, want := range fx.kvs {
		got := f.KVs[i]
		if got.Key != want.Key || !sameValue(got.Value, want.Value) {
			t.Errorf("KV %d = %s %v, want %s %v", i, got.Key, got.Value, want.Key, want.Value)
		}
		if v, ok := f.Get(want.Key); !ok || !sameValue(v, want.Value) {
			t.Errorf("Get(%q) = %v, %v", want.Key, v, ok)
		}
	}
	if f.DataOffset%f.Alignment != 0 {
		t.Errorf("DataOffset %d not aligned to %d", f.DataOffset, f.Alignment)
	}
	if len(f.Tensors) != len(fx.tensors) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(fx.tensors))
	}
	file := f.Bytes()
	base, _ := addrRange(file)
	for i, ts := range fx.tensors {
		tn := f.Tensors[i]
		if tn.Name != ts.name || tn.Type != ts.typ || !slices.Equal(tn.Dims, ts.dims) {
			t.Errorf("tensor %d = %s %s %v, want %s %s %v", i, tn.Name, tn.Type, tn.Dims, ts.name, ts.typ, ts.dims)
		}
		if byName, ok := f.Tensor(ts.name); !ok || byName != tn {
			t.Errorf("Tensor(%q) = %p, %v; want %p", ts.name, byName, ok, tn)
		}
		wantElems := uint64(1)
		for _, d := range ts.dims {
			wantElems *= d
		}
		if tn.Elements() != wantElems || (ts.dims[0] != 0 && tn.Rows() != wantElems/ts.dims[0]) {
			t.Errorf("%s: Elements %d Rows %d, want %d elements", tn.Name, tn.Elements(), tn.Rows(), wantElems)
		}
		if tn.Size != uint64(len(fx.data[i])) || !bytes.Equal(tn.Data, fx.data[i]) {
			t.Errorf("%s: Size %d, data differs from what was written (%d bytes)", tn.Name, tn.Size, len(fx.data[i]))
		}
		if tn.Offset%f.Alignment != 0 {
			t.Errorf("%s: Offset %d not aligned to %d", tn.Name, tn.Offset, f.Alignment)
		}
		end := f.DataOffset + tn.Offset + tn.Size
		if end > uint64(len(file)) {
			t.Errorf("%s: data ends at %d, beyond the file (%d bytes)", tn.Name, end, len(file))
		}
		if len(tn.Data) == 0 {
			continue
		}
		// Zero-copy: Data is the file's bytes at DataOffset+Offset.
		if !inside(tn.Data, file) {
			t.Errorf("%s: Data is not inside f.Bytes()", tn.Name)
			continue
		}
		lo, _ := addrRange(tn.Data)
		if got := uint64(lo - base); got != f.DataOffset+tn.Offset {
			t.Errorf("%s: Data at file offset %d, want DataOffset+Offset = %d", tn.Name, got, f.DataOffset+tn.Offset)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	var kvs []KV
	for _, c := range scalarCases {
		kvs = append(kvs, KV{c.key, c.v})
	}
	kvs = append(kvs, arrayKVs(t)...)
	cases := []struct {
		name       string
		align      uint64
		alignByKey bool
		kvs        []KV
		tensors    []tensorSpec
		useFunc    bool
	}{
		{"default-align", 0, false, kvs, fixtureTensors, false},
		{"writer-align-64", 64, false, kvs, fixtureTensors, false},
		{"key-align-64", 64, true, kvs, fixtureTensors, false},
		{"key-align-1", 1, true, kvs, fixtureTensors, false},
		{"tensor-func", 0, false, kvs[:3], fixtureTensors, true},
		{"no-tensors", 0, false, kvs, nil, false},
		{"no-tensors-align-64", 64, false, kvs, nil, false},
		{"empty", 0, false, nil, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, fx := buildFixture(t, tc.align, tc.alignByKey, tc.kvs, tc.tensors, tc.useFunc)
			data := write(t, w)

			t.Run("Parse", func(t *testing.T) {
				f, err := Parse(data)
				if err != nil {
					t.Fatal(err)
				}
				if len(data) > 0 && &f.Bytes()[0] != &data[0] {
					t.Error("f.Bytes() is not the input")
				}
				checkFile(t, f, fx)
				if err := f.Close(); err != nil {
					t.Errorf("Close of a parsed buffer: %v", err)
				}
			})

			t.Run("Open", func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "f.gguf")
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				f, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				if inside(f.Bytes(), data) {
					t.Error("Open returned the test's buffer, not a mapping")
				}
				checkFile(t, f, fx)
				// The mapping is page aligned, so data is aligned in memory too.
				for _, tn := range f.Tensors {
					if lo, _ := addrRange(tn.Data); len(tn.Data) > 0 && uint64(lo)%f.Alignment != 0 {
						t.Errorf("%s: data at address %#x, not aligned to %d", tn.Name, lo, f.Alignment)
					}
				}
				kvsBefore := slices.Clone(f.KVs)
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				if f.Bytes() != nil || (len(f.Tensors) > 0 && f.Tensors[0].Data != nil) {
					t.Error("Close left the mapping reachable")
				}
				// Metadata was copied out of the mapping: still readable.
				for i, kv := range kvsBefore {
					if !sameValue(kv.Value, fx.kvs[i].Value) {
						t.Errorf("after Close, %s = %v", kv.Key, kv.Value)
					}
					kv.Value.Float32s()
					kv.Value.Array()
				}
				if err := f.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			})
		})
	}
}

// TestScalarAccessors checks each accessor on each scalar type, after a
// round trip.
func TestScalarAccessors(t *testing.T) {
	w := NewWriter()
	for _, c := range scalarCases {
		w.Set(c.key, c.v)
	}
	f, err := Parse(write(t, w))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range scalarCases {
		t.Run(c.key, func(t *testing.T) {
			v, ok := f.Get(c.key)
			if !ok || v.Type() != c.typ {
				t.Fatalf("Get = %v (%s), %v; want type %s", v, v.Type(), ok, c.typ)
			}
			switch want := c.want.(type) {
			case int64:
				if got, ok := v.Int(); !ok || got != want {
					t.Errorf("Int = %d, %v; want %d", got, ok, want)
				}
				if _, ok := v.Uint(); ok != (want >= 0) {
					t.Errorf("Uint ok = %v for %d", ok, want)
				}
			case uint64:
				if got, ok := f.GetUint(c.key); !ok || got != want {
					t.Errorf("GetUint = %d, %v; want %d", got, ok, want)
				}
				if _, ok := v.Int(); ok != (want <= math.MaxInt64) {
					t.Errorf("Int ok = %v for %d", ok, want)
				}
			case float64:
				if got, ok := f.GetFloat(c.key); !ok || got != want {
					t.Errorf("GetFloat = %g, %v; want %g", got, ok, want)
				}
				if _, ok := v.Int(); ok {
					t.Error("Int of a float succeeded")
				}
			case bool:
				if got, ok := f.GetBool(c.key); !ok || got != want {
					t.Errorf("GetBool = %v, %v; want %v", got, ok, want)
				}
				if _, ok := v.Uint(); ok {
					t.Error("Uint of a bool succeeded")
				}
			case string:
				if got, ok := f.GetString(c.key); !ok || got != want {
					t.Errorf("GetString = %q, %v; want %q", got, ok, want)
				}
				if _, ok := v.Float(); ok {
					t.Error("Float of a string succeeded")
				}
			}
			if _, ok := v.Index(0); ok {
				t.Error("Index of a scalar succeeded")
			}
			if _, ok := v.Array(); ok {
				t.Error("Array of a scalar succeeded")
			}
		})
	}
	if _, ok := f.Get("missing"); ok {
		t.Error("Get(missing) succeeded")
	}
}

// TestArrayAccessors checks the typed array accessors on parsed arrays.
func TestArrayAccessors(t *testing.T) {
	w := NewWriter()
	for _, kv := range arrayKVs(t) {
		w.Set(kv.Key, kv.Value)
	}
	f, err := Parse(write(t, w))
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) Value {
		v, ok := f.Get(key)
		if !ok {
			t.Fatalf("missing %s", key)
		}
		return v
	}
	if got, ok := get("a.i32").Int32s(); !ok || !slices.Equal(got, []int32{math.MinInt32, -1, 0, math.MaxInt32}) {
		t.Errorf("a.i32 Int32s = %v, %v", got, ok)
	}
	if got, ok := get("a.i8").Int32s(); !ok || !slices.Equal(got, []int32{-1, 127, -128}) {
		t.Errorf("a.i8 Int32s = %v, %v", got, ok)
	}
	if _, ok := get("a.u32").Int32s(); ok {
		t.Error("a.u32 Int32s succeeded with 4294967295 in it")
	}
	if got, ok := get("a.u16").Float32s(); !ok || !slices.Equal(got, []float32{1, 65535}) {
		t.Errorf("a.u16 Float32s = %v, %v", got, ok)
	}
	if got, ok := get("a.f32").Float32s(); !ok || len(got) != 5 || got[2] != 1.5 || !math.IsNaN(float64(got[4])) || !math.Signbit(float64(got[1])) {
		t.Errorf("a.f32 Float32s = %v, %v", got, ok)
	}
	if _, ok := get("a.bool").Float32s(); ok {
		t.Error("Float32s of bools succeeded")
	}
	if got, ok := get("a.str").Strings(); !ok || len(got) != 4 || got[2] != "日本語" {
		t.Errorf("a.str Strings = %q, %v", got, ok)
	}
	if _, ok := get("a.u8").Strings(); ok {
		t.Error("Strings of u8s succeeded")
	}
	if got, ok := get("a.empty.str").Strings(); !ok || len(got) != 0 {
		t.Errorf("a.empty.str Strings = %q, %v", got, ok)
	}
	nested := get("a.nested")
	if nested.ElemType() != TypeArray || nested.Len() != 4 {
		t.Fatalf("a.nested = %v", nested)
	}
	inner, _ := nested.Index(2)
	deep, _ := inner.Index(0)
	if x, ok := deep.Index(0); !ok || x.Type() != TypeInt64 {
		t.Errorf("a.nested[2][0][0] = %v", x)
	} else if i, _ := x.Int(); i != -5 {
		t.Errorf("a.nested[2][0][0] = %d, want -5", i)
	}
	for _, i := range []int{-1, 4, math.MaxInt} {
		if _, ok := nested.Index(i); ok {
			t.Errorf("Index(%d) of a 4-element array succeeded", i)
		}
	}
	if vals, ok := get("a.bool").Array(); !ok || len(vals) != 3 {
		t.Errorf("a.bool Array = %v, %v", vals, ok)
	} else if b, _ := vals[1].Bool(); b {
		t.Error("a.bool[1] is true")
	}
}

// TestPrefixTruncation cuts a small valid file at every byte offset: each
// proper prefix must fail with a *FormatError, never panic.
func TestPrefixTruncation(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"tensors", smallValid(t)},
		{"tensor-infos", hdr(3, 2, 0).tensor("a", quant.F32, 0, 8).tensor("b", quant.Q8_0, 32, 32).pad(32).zeros(32 + 34).bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.data); err != nil {
				t.Fatalf("the whole file does not parse: %v", err)
			}
			for n := range len(tc.data) {
				_, err := Parse(tc.data[:n])
				var fe *FormatError
				if !errors.As(err, &fe) || !errors.Is(err, ErrMalformed) {
					t.Fatalf("prefix of %d bytes: err = %v, want a *FormatError", n, err)
				}
			}
		})
	}
}

// TestWriterRejects checks that the Writer refuses what would not parse.
func TestWriterRejects(t *testing.T) {
	f32 := func(n int) []byte { return make([]byte, 4*n) }
	cases := []struct {
		name  string
		build func(w *Writer) error
		want  string
	}{
		{"empty-name", func(w *Writer) error { return w.AddTensor("", quant.F32, []uint64{1}, f32(1)) }, "bad tensor name"},
		{"long-name", func(w *Writer) error {
			return w.AddTensor(strings.Repeat("n", MaxNameLen+1), quant.F32, []uint64{1}, f32(1))
		}, "bad tensor name"},
		{"duplicate", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{1}, f32(1))
			return w.AddTensor("t", quant.F32, []uint64{1}, f32(1))
		}, `duplicate tensor "t"`},
		{"no-dims", func(w *Writer) error { return w.AddTensor("t", quant.F32, nil, f32(1)) }, "has 0 dims"},
		{"five-dims", func(w *Writer) error { return w.AddTensor("t", quant.F32, []uint64{1, 1, 1, 1, 1}, f32(1)) }, "has 5 dims"},
		{"size-mismatch", func(w *Writer) error { return w.AddTensor("t", quant.F32, []uint64{3}, f32(2)) }, "8 bytes given"},
		{"partial-block", func(w *Writer) error { return w.AddTensor("t", quant.Q4_0, []uint64{33}, nil) }, "not a whole number"},
		{"unknown-type", func(w *Writer) error { return w.AddTensor("t", quant.Type(4), []uint64{1}, nil) }, "unknown tensor type"},
		{"shape-overflow", func(w *Writer) error { return w.AddTensor("t", quant.F32, []uint64{1 << 32, 1 << 32}, nil) }, "overflows"},
		{"fill-short", func(w *Writer) error {
			w.AddTensorFunc("t", quant.F32, []uint64{4}, func(out io.Writer) error { _, err := out.Write(f32(3)); return err })
			_, err := w.WriteTo(io.Discard)
			return err
		}, "wrote 12 bytes, want 16"},
		{"fill-error", func(w *Writer) error {
			w.AddTensorFunc("t", quant.F32, []uint64{4}, func(io.Writer) error { return errors.New("boom") })
			_, err := w.WriteTo(io.Discard)
			return err
		}, `tensor "t": boom`},
		{"align-not-pow2", func(w *Writer) error {
			w.Alignment = 48
			_, err := w.WriteTo(io.Discard)
			if _, set := w.kvIndex["general.alignment"]; set {
				return errors.New("a failed WriteTo added general.alignment")
			}
			return err
		}, "alignment 48 is not a power of two"},
		{"align-key-u64", func(w *Writer) error {
			w.Set("general.alignment", Uint64(64))
			_, err := w.WriteTo(io.Discard)
			return err
		}, "general.alignment has type u64"},
		{"align-key-zero", func(w *Writer) error {
			w.Set("general.alignment", Uint32(0))
			_, err := w.WriteTo(io.Discard)
			return err
		}, "general.alignment 0"},
		{"empty-key", func(w *Writer) error { w.Set("", Uint8(1)); _, err := w.WriteTo(io.Discard); return err }, `bad key ""`},
		{"too-deep", func(w *Writer) error {
			w.Set("deep", nestArrays(t, MaxArrayDepth+1))
			_, err := w.WriteTo(io.Discard)
			return err
		}, "nested deeper than 8"},
		{"array-mixed", func(*Writer) error { _, err := Array(TypeUint8, []Value{Uint8(1), Int8(1)}); return err }, "element 1 has type i8"},
		{"array-bad-elem", func(*Writer) error { _, err := Array(ValueType(13), nil); return err }, "invalid array element type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.build(NewWriter())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCopyKVs copies metadata from a parsed file into a new one.
func TestCopyKVs(t *testing.T) {
	src, err := Parse(smallValid(t))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter()
	w.CopyKVs(src, func(key string) bool { return strings.HasPrefix(key, "tokenizer.") })
	w.Set("tokenizer.ggml.model", String("llama"))
	f, err := Parse(write(t, w))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range f.KVs {
		keys = append(keys, kv.Key)
	}
	want := []string{"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.model"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %q, want %q", keys, want)
	}
	for _, k := range want[:3] {
		a, _ := src.Get(k)
		b, _ := f.Get(k)
		if !sameValue(a, b) {
			t.Errorf("%s: %v != %v", k, a, b)
		}
	}
}
