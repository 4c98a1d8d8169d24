// Test helpers shared by the gguf tests: a byte-level encoder for hand-made
// (often broken) files, the valid fixtures built with Writer, checks that a
// tensor's data lies inside a buffer, and locating the golden data.
package gguf

import (
	"bytes"
	"encoding/binary"
	"github.com/flowinfer/flowinfer/internal/golden"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/flowinfer/flowinfer/quant"
)

// enc builds GGUF bytes field by field, so a test can write exactly the
// malformed header it wants.
type enc struct{ b []byte }

// hdr starts a file: magic, version, tensor count, metadata count.
func hdr(version uint32, nTensors, nKV uint64) *enc {
	e := &enc{b: []byte(Magic)}
	return e.u32(version).u64(nTensors).u64(nKV)
}

func (e *enc) u8(v uint8) *enc   { e.b = append(e.b, v); return e }
func (e *enc) u16(v uint16) *enc { e.b = binary.LittleEndian.AppendUint16(e.b, v); return e }
func (e *enc) u32(v uint32) *enc { e.b = binary.LittleEndian.AppendUint32(e.b, v); return e }
func (e *enc) u64(v uint64) *enc { e.b = binary.LittleEndian.AppendUint64(e.b, v); return e }
func (e *enc) raw(b ...byte) *enc {
	e.b = append(e.b, b...)
	return e
}

// str writes a length-prefixed string.
func (e *enc) str(s string) *enc { return e.u64(uint64(len(s))).raw([]byte(s)...) }

// kv writes a key and a value type; the caller writes the value.
func (e *enc) kv(key string, t ValueType) *enc { return e.str(key).u32(uint32(t)) }

// arr writes an array header (element type and length) after a kv(..., TypeArray).
func (e *enc) arr(elem ValueType, n uint64) *enc { return e.u32(uint32(elem)).u64(n) }

// tensor writes a tensor info.
func (e *enc) tensor(name string, t quant.Type, off uint64, dims ...uint64) *enc {
	e.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		e.u64(d)
	}
	return e.u32(uint32(t)).u64(off)
}

// pad appends zeros up to a multiple of align.
func (e *enc) pad(align int) *enc {
	for len(e.b)%align != 0 {
		e.b = append(e.b, 0)
	}
	return e
}

// zeros appends n zero bytes.
func (e *enc) zeros(n int) *enc { e.b = append(e.b, make([]byte, n)...); return e }

func (e *enc) bytes() []byte { return e.b }

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tensorSpec is a tensor for a Writer fixture.
type tensorSpec struct {
	name string
	typ  quant.Type
	dims []uint64
}

// size returns the tensor's byte size.
func (ts tensorSpec) size(t testing.TB) int {
	t.Helper()
	rb, err := quant.RowBytes(ts.typ, int(ts.dims[0]))
	if err != nil {
		t.Fatal(err)
	}
	n := rb
	for _, d := range ts.dims[1:] {
		n *= int(d)
	}
	return n
}

// write serializes w, failing the test on error.
func write(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// smallValid is a small valid file whose last byte is the last byte of tensor
// data (no trailing padding), so that every proper prefix is invalid. It
// has metadata of several kinds and three tensors.
func smallValid(t testing.TB) []byte {
	t.Helper()
	w := NewWriter()
	w.Set("general.architecture", String("llama"))
	w.Set("llama.block_count", Uint32(2))
	w.Set("llama.rope.freq_base", Float32(10000))
	w.Set("tokenizer.ggml.tokens", Strings([]string{"<unk>", "<s>", "</s>", "a"}))
	w.Set("tokenizer.ggml.scores", Float32s([]float32{0, -1, -2, -3.5}))
	w.Set("tokenizer.ggml.token_type", Int32s([]int32{2, 3, 3, 1}))
	w.Set("general.flag", Bool(true))
	nested, err := Array(TypeArray, []Value{Int32s([]int32{1, 2}), Strings([]string{"x"})})
	if err != nil {
		t.Fatal(err)
	}
	w.Set("test.nested", nested)
	for i, ts := range []tensorSpec{
		{"a.weight", quant.F32, []uint64{4, 2}},
		{"b.weight", quant.Q8_0, []uint64{32, 2}},
		{"c.weight", quant.F16, []uint64{16}}, // 32 bytes: no padding after it
	} {
		if err := w.AddTensor(ts.name, ts.typ, ts.dims, randBytes(uint64(i), ts.size(t))); err != nil {
			t.Fatal(err)
		}
	}
	return write(t, w)
}

// smallNoTensors is a valid file with metadata and no tensors.
func smallNoTensors(t testing.TB) []byte {
	t.Helper()
	w := NewWriter()
	w.Set("general.architecture", String("llama"))
	w.Set("general.alignment", Uint32(64))
	w.Set("x.u64s", mustArray(t, TypeUint64, Uint64(1), Uint64(1<<63)))
	return write(t, w)
}

func mustArray(t testing.TB, elem ValueType, vals ...Value) Value {
	t.Helper()
	v, err := Array(elem, vals)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// addrRange returns the address range [lo, hi) of b's bytes.
func addrRange(b []byte) (lo, hi uintptr) {
	lo = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return lo, lo + uintptr(len(b))
}

// inside reports whether sub's bytes lie within whole's.
func inside(sub, whole []byte) bool {
	if len(sub) == 0 {
		return true
	}
	slo, shi := addrRange(sub)
	wlo, whi := addrRange(whole)
	return slo >= wlo && shi <= whi
}

// goldenDir returns shared/golden/<sub>, found by walking up from the test's
// working directory. It skips the test when absent, or fails it when CI=true.
func goldenDir(t testing.TB, sub string) string {
	t.Helper()
	return filepath.Join(golden.Dir(t), sub)
}
