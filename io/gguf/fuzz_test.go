// FuzzParse and the allocation bound: Parse never panics, what it accepts
// is consistent (tensor data inside the input, accessors safe, a rewrite
// with Writer parses back the same), and a hostile header cannot make it
// allocate more than the input justifies. Seeds: hand-made files, the
// malformed cases, testdata/fuzz/FuzzParse and the golden stories260K-q8_0.
package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/quant"
)

func FuzzParse(f *testing.F) {
	f.Add(smallValid(f))
	f.Add(smallNoTensors(f))
	f.Add(hdr(3, 0, 0).bytes())
	f.Add(hdr(2, 1, 0).tensor("s", quant.F32, 0).pad(32).zeros(4).bytes()) // v2, a 0-dim scalar
	for _, c := range malformedCases() {
		f.Add(c.data)
	}
	// The smallest golden model, a real file (read at test time).
	if b, err := os.ReadFile(filepath.Join(golden.Dir(f), "models", "stories260K-q8_0.gguf")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %T %v, want a *FormatError", err, err)
			}
			if file != nil {
				t.Fatal("Parse returned a file with an error")
			}
			return
		}
		checkParsed(t, file, data)
		checkRewrite(t, file)
	})
}

// checkParsed checks the invariants of a file Parse accepted.
func checkParsed(t *testing.T, f *File, data []byte) {
	if f.Alignment == 0 || f.Alignment&(f.Alignment-1) != 0 || f.DataOffset%f.Alignment != 0 {
		t.Fatalf("alignment %d, data offset %d", f.Alignment, f.DataOffset)
	}
	base, _ := addrRange(data)
	for _, tn := range f.Tensors {
		if got, ok := f.Tensor(tn.Name); !ok || got != tn {
			t.Fatalf("Tensor(%q) does not find it", tn.Name)
		}
		if uint64(len(tn.Data)) != tn.Size || tn.Offset%f.Alignment != 0 || len(tn.Dims) > MaxDims {
			t.Fatalf("%s: %d bytes of data, size %d, offset %d, dims %v", tn.Name, len(tn.Data), tn.Size, tn.Offset, tn.Dims)
		}
		if !inside(tn.Data, data) {
			t.Fatalf("%s: data is not inside the input", tn.Name)
		}
		if lo, _ := addrRange(tn.Data); tn.Size > 0 && uint64(lo-base) != f.DataOffset+tn.Offset {
			t.Fatalf("%s: data at %d, want %d", tn.Name, lo-base, f.DataOffset+tn.Offset)
		}
		rb, err := quant.RowBytes(tn.Type, int(firstDim(tn)))
		if err != nil || (tn.Rows() > 0 && uint64(rb)*tn.Rows() != tn.Size) {
			t.Fatalf("%s: size %d, row bytes %d (%v), rows %d", tn.Name, tn.Size, rb, err, tn.Rows())
		}
	}
	for _, kv := range f.KVs {
		v, ok := f.Get(kv.Key)
		if !ok || v.Type() != kv.Value.Type() {
			t.Fatalf("Get(%q) does not find it", kv.Key)
		}
		f.GetString(kv.Key)
		f.GetUint(kv.Key)
		f.GetFloat(kv.Key)
		f.GetBool(kv.Key)
		exercise(t, v, 0)
	}
}

// firstDim is Dims[0], or 1 for a scalar.
func firstDim(t *Tensor) uint64 {
	if len(t.Dims) == 0 {
		return 1
	}
	return t.Dims[0]
}

// exercise calls every accessor of v, recursing into a few elements of
// arrays.
func exercise(t *testing.T, v Value, depth int) {
	if depth > MaxArrayDepth {
		t.Fatalf("value nested %d deep", depth)
	}
	_ = v.String()
	v.Int()
	v.Uint()
	v.Float()
	v.Bool()
	v.Str()
	if s, ok := v.Strings(); ok && len(s) != v.Len() {
		t.Fatalf("Strings: %d of %d", len(s), v.Len())
	}
	if fs, ok := v.Float32s(); ok && len(fs) != v.Len() {
		t.Fatalf("Float32s: %d of %d", len(fs), v.Len())
	}
	if is, ok := v.Int32s(); ok && len(is) != v.Len() {
		t.Fatalf("Int32s: %d of %d", len(is), v.Len())
	}
	arr, isArr := v.Array()
	if isArr != (v.Type() == TypeArray) || len(arr) != v.Len() {
		t.Fatalf("Array: %d elements of %d, ok %v for %s", len(arr), v.Len(), isArr, v.Type())
	}
	for _, i := range []int{-1, 0, v.Len() - 1, v.Len()} {
		e, ok := v.Index(i)
		if ok != (isArr && i >= 0 && i < v.Len()) {
			t.Fatalf("Index(%d) ok = %v of %d elements", i, ok, v.Len())
		}
		if ok && e.Type() != v.ElemType() {
			t.Fatalf("Index(%d) has type %s in an array of %s", i, e.Type(), v.ElemType())
		}
	}
	for i := range min(len(arr), 4) {
		exercise(t, arr[i], depth+1)
	}
}

// checkRewrite writes f again with Writer and checks it parses back to the
// same metadata and tensor data.
func checkRewrite(t *testing.T, f *File) {
	w := NewWriter()
	w.CopyKVs(f, nil)
	var kept []*Tensor
	for _, tn := range f.Tensors {
		if len(tn.Dims) == 0 {
			continue // the Writer does not write 0-dim tensors
		}
		if err := w.AddTensor(tn.Name, tn.Type, tn.Dims, tn.Data); err != nil {
			t.Fatalf("Writer refused a tensor the reader accepted: %v", err)
		}
		kept = append(kept, tn)
	}
	// The rewrite is as large as its alignment (up to 2 GiB of padding
	// for a file of a few bytes): it goes into zero pages mapped for it,
	// of which only those written with something other than zeros are
	// touched (testdata/fuzz/FuzzParse/issue19-alignment-512MiB: a 45-byte
	// file with general.alignment 2^29 rewrites to 512 MiB).
	var size countZeros
	if _, err := w.WriteTo(&size); err != nil {
		t.Fatalf("Writer refused metadata the reader accepted: %v", err)
	}
	out, err := syscall.Mmap(-1, 0, max(int(size.n), 1), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		t.Fatalf("mapping %d bytes: %v", size.n, err)
	}
	defer syscall.Munmap(out)
	sw := &sparseWriter{buf: out[:size.n]}
	if _, err := w.WriteTo(sw); err != nil || sw.n != len(sw.buf) {
		t.Fatalf("second write: %d of %d bytes, %v", sw.n, len(sw.buf), err)
	}
	g, err := Parse(sw.buf)
	if err != nil {
		t.Fatalf("rewritten file does not parse: %v", err)
	}
	if len(g.KVs) != len(f.KVs) || len(g.Tensors) != len(kept) {
		t.Fatalf("rewrite has %d KVs, %d tensors; want %d, %d", len(g.KVs), len(g.Tensors), len(f.KVs), len(kept))
	}
	for i, kv := range f.KVs {
		if g.KVs[i].Key != kv.Key || !sameValue(g.KVs[i].Value, kv.Value) {
			t.Fatalf("rewrite: KV %d = %s %v, want %s %v", i, g.KVs[i].Key, g.KVs[i].Value, kv.Key, kv.Value)
		}
	}
	for i, tn := range kept {
		if g.Tensors[i].Name != tn.Name || !bytes.Equal(g.Tensors[i].Data, tn.Data) {
			t.Fatalf("rewrite: tensor %d differs", i)
		}
	}
}

// countZeros counts the bytes written to it.
type countZeros struct{ n int64 }

func (c *countZeros) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// sparseWriter writes into buf (zero pages), skipping runs of zeros.
type sparseWriter struct {
	buf []byte
	n   int
}

var zeroChunk [1 << 20]byte

func (s *sparseWriter) Write(p []byte) (int, error) {
	if len(p) > len(s.buf)-s.n {
		return 0, errors.New("write beyond the size of the first write")
	}
	for q := p; len(q) > 0; {
		k := min(len(q), len(zeroChunk))
		if !bytes.Equal(q[:k], zeroChunk[:k]) {
			copy(s.buf[s.n+len(p)-len(q):], q[:k])
		}
		q = q[k:]
	}
	s.n += len(p)
	return len(p), nil
}

// TestParseAllocBound feeds headers that claim huge counts and lengths and
// checks Parse allocates little before failing: counts from the file are
// trusted only as far as the elements actually parse.
func TestParseAllocBound(t *testing.T) {
	const big = 16 << 20
	cases := []struct {
		name string
		data []byte
	}{
		// 64-byte headers.
		{"64B/2^40-strings", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, 1<<40).pad(64).bytes()},
		{"64B/2^29-strings", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, 1<<29).pad(64).bytes()},
		{"64B/2^40-kvs", hdr(3, 0, 1<<40).pad(64).bytes()},
		{"64B/2^40-tensors", hdr(3, 1<<40, 0).pad(64).bytes()},
		{"64B/2^30-byte-string", hdr(3, 0, 1).kv("s", TypeString).u64(1 << 30).pad(64).bytes()},
		// 16 MiB inputs whose claimed counts fit the remaining bytes, with
		// the first element bad: nothing may be sized by the claim.
		{"16MiB/kvs", padTo(hdr(3, 0, (big-24)/14).bytes(), big)},
		{"16MiB/tensors", padTo(hdr(3, (big-24)/25, 0).bytes(), big)},
		{"16MiB/strings", padTo(hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, big/8-8).u64(1<<40).bytes(), big)},
		{"16MiB/arrays", padTo(hdr(3, 0, 1).kv("a", TypeArray).arr(TypeArray, big/12-8).arr(99, 0).bytes(), big)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Parse(tc.data)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if got := after.TotalAlloc - before.TotalAlloc; got >= 1<<20 {
				t.Errorf("Parse of %d bytes allocated %d bytes before failing (%v)", len(tc.data), got, err)
			}
		})
	}
}

// padTo appends zeros to b up to n bytes.
func padTo(b []byte, n int) []byte { return append(b, make([]byte, n-len(b))...) }

// TestWriterPadAlloc: padding to the largest alignment allocates nothing
// in proportion to it (it took a 2 GiB buffer per pad).
func TestWriterPadAlloc(t *testing.T) {
	w := NewWriter()
	w.Set("general.alignment", Uint32(1<<31))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var out countZeros
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if out.n != 1<<31 {
		t.Fatalf("wrote %d bytes, want %d", out.n, 1<<31)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("writing 2 GiB of padding allocated %d bytes", got)
	}
}
