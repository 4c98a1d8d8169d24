// Malformed files: one hand-made broken file per failure class, each of
// which Parse must reject with a *FormatError that says what is wrong and
// where. The same files are the seed corpus of FuzzParse, kept under
// testdata/fuzz/FuzzParse (regenerate with go test ./io/gguf/ -run TestFuzzCorpus -update).
package gguf

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

var update = flag.Bool("update", false, "rewrite the FuzzParse seed corpus in testdata/fuzz/FuzzParse")

// malformedCase is one broken file and a substring its error must contain.
type malformedCase struct {
	name string
	data []byte
	want string
}

// nestedTooDeep is a key whose value nests MaxArrayDepth+1 arrays.
func nestedTooDeep() []byte {
	e := hdr(3, 0, 1).kv("a", TypeArray)
	for range MaxArrayDepth {
		e.arr(TypeArray, 1)
	}
	return e.arr(TypeUint8, 1).u8(1).bytes()
}

// oneTensor is a file with no metadata and one tensor info, its data section
// holding dataLen zero bytes.
func oneTensor(name string, t quant.Type, off uint64, dataLen int, dims ...uint64) []byte {
	return hdr(3, 1, 0).tensor(name, t, off, dims...).pad(32).zeros(dataLen).bytes()
}

// alignKV is a file whose only metadata is general.alignment written by
// value, followed by one F32 tensor of 16 elements.
func alignKV(value func(e *enc) *enc) []byte {
	e := value(hdr(3, 1, 1).str("general.alignment"))
	return e.tensor("t", quant.F32, 0, 16).pad(64).zeros(64).bytes()
}

func malformedCases() []malformedCase {
	return []malformedCase{
		// Magic and version.
		{"bad-magic", append([]byte("GGUX"), hdr(3, 0, 0).bytes()[4:]...), `bad magic "GGUX", want "GGUF"`},
		{"bad-magic-short", []byte("GG"), `bad magic "GG"`},
		{"bad-magic-empty", nil, `bad magic ""`},
		{"version-missing", []byte("GGUF\x03\x00"), "truncated: version needs 4 bytes, 2 remain"},
		{"version-0", hdr(0, 0, 0).bytes(), "unknown GGUF version 0"},
		{"version-1", hdr(1, 0, 0).bytes(), "GGUF v1 is not supported"},
		{"version-4", hdr(4, 0, 0).bytes(), "unknown GGUF version 4"},
		{"version-max", hdr(math.MaxUint32, 0, 0).bytes(), "unknown GGUF version 4294967295"},
		{"version-byte-swapped", hdr(3<<24, 0, 0).bytes(), "version 0x3000000 looks byte-swapped"},

		// Counts.
		{"tensor-count-absurd", hdr(3, 1<<62, 0).zeros(40).bytes(), "tensor count 4611686018427387904 cannot fit in the 40 bytes"},
		{"tensor-count-negative", hdr(3, math.MaxUint64, 0).bytes(), "tensor count 18446744073709551615 cannot fit"},
		{"kv-count-absurd", hdr(3, 0, 1<<40).zeros(40).bytes(), "metadata count 1099511627776 cannot fit in the 40 bytes"},
		{"kv-count-negative", hdr(3, 0, math.MaxUint64).bytes(), "metadata count 18446744073709551615 cannot fit"},
		{"kv-count-too-many", hdr(3, 0, 2).kv("a", TypeUint8).u8(1).zeros(16).bytes(), "metadata pair 1 has an empty key"},
		{"tensor-count-too-many", hdr(3, 2, 0).tensor("a", quant.F32, 0, 1).zeros(40).bytes(), "tensor 1 has an empty name"},

		// Keys and strings.
		{"empty-key", hdr(3, 0, 1).kv("", TypeUint8).u8(1).zeros(8).bytes(), "metadata pair 0 has an empty key"},
		{"duplicate-key", hdr(3, 0, 2).kv("k", TypeUint8).u8(1).kv("k", TypeUint8).u8(2).bytes(), `duplicate key "k"`},
		{"key-length-huge", hdr(3, 0, 1).u64(1 << 40).zeros(16).bytes(), "key of metadata pair 0 length 1099511627776 exceeds the limit 65536"},
		{"key-beyond-eof", hdr(3, 0, 1).u64(100).raw([]byte("abcdefgh")...).zeros(8).bytes(), "truncated: key of metadata pair 0 of 100 bytes, 16 remain"},
		{"string-length-huge", hdr(3, 0, 1).kv("k", TypeString).u64(1 << 31).zeros(8).bytes(), `string value of key "k" length 2147483648 exceeds the limit 1073741824`},
		{"string-length-max", hdr(3, 0, 1).kv("k", TypeString).u64(math.MaxUint64).bytes(), `string value of key "k" length 18446744073709551615 exceeds the limit`},
		{"string-beyond-eof", hdr(3, 0, 1).kv("k", TypeString).u64(1000).raw([]byte("abc")...).bytes(), `truncated: string value of key "k" of 1000 bytes, 3 remain`},
		{"value-beyond-eof", hdr(3, 0, 1).kv("k", TypeUint64).u32(7).bytes(), `truncated: value of key "k" needs 8 bytes, 4 remain`},
		{"value-type-missing", hdr(3, 0, 1).str("kkkkkkkk").u16(0).bytes(), `truncated: value type of key "kkkkkkkk" needs 4 bytes, 2 remain`},

		// Value types.
		{"invalid-value-type", hdr(3, 0, 1).kv("k", 13).u32(0).bytes(), `key "k": invalid value type 13`},
		{"invalid-value-type-max", hdr(3, 0, 1).kv("k", math.MaxUint32).u32(0).bytes(), `key "k": invalid value type 4294967295`},
		{"invalid-array-elem-type", hdr(3, 0, 1).kv("a", TypeArray).arr(13, 1).zeros(8).bytes(), `key "a": invalid array element type 13`},
		{"nesting-too-deep", nestedTooDeep(), `key "a": arrays nested deeper than 8`},
		{"bool-2", hdr(3, 0, 1).kv("b", TypeBool).u8(2).bytes(), `key "b": bool value 2 is neither 0 nor 1`},
		{"bool-array-7", hdr(3, 0, 1).kv("b", TypeArray).arr(TypeBool, 3).raw(1, 0, 7).bytes(), `key "b": bool element 2 is 7`},

		// Arrays.
		{"array-length-huge", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeUint32, 1<<40).zeros(8).bytes(), `key "a": array length 1099511627776 exceeds the limit 1073741824`},
		{"array-length-max", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, math.MaxUint64).bytes(), `key "a": array length 18446744073709551615 exceeds the limit`},
		{"array-beyond-eof", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeUint32, 1000).zeros(8).bytes(), `truncated: key "a": array of 1000 u32 needs at least 4000 bytes, 8 remain`},
		{"string-array-beyond-eof", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, 1<<29).zeros(16).bytes(), `truncated: key "a": array of 536870912 str needs at least 4294967296 bytes, 16 remain`},
		{"string-element-beyond-eof", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, 3).str("x").u64(50).zeros(20).bytes(), `truncated: element 1 of key "a" of 50 bytes, 20 remain`},
		{"string-element-huge", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeString, 1).u64(1 << 31).bytes(), `element 0 of key "a" length 2147483648 exceeds the limit`},
		{"nested-array-beyond-eof", hdr(3, 0, 1).kv("a", TypeArray).arr(TypeArray, 2).arr(TypeUint8, 0).zeros(4).bytes(), `truncated: key "a": array of 2 arr needs at least 24 bytes, 16 remain`},

		// general.alignment.
		{"alignment-u64", alignKV(func(e *enc) *enc { return e.u32(uint32(TypeUint64)).u64(64) }), "general.alignment has type u64, want u32"},
		{"alignment-string", alignKV(func(e *enc) *enc { return e.u32(uint32(TypeString)).str("64") }), "general.alignment has type str, want u32"},
		{"alignment-zero", alignKV(func(e *enc) *enc { return e.u32(uint32(TypeUint32)).u32(0) }), "general.alignment 0 is not a power of two"},
		{"alignment-48", alignKV(func(e *enc) *enc { return e.u32(uint32(TypeUint32)).u32(48) }), "general.alignment 48 is not a power of two"},

		// Tensor names.
		{"duplicate-tensor", hdr(3, 2, 0).tensor("t", quant.F32, 0, 4).tensor("t", quant.F32, 32, 4).pad(32).zeros(64).bytes(), `duplicate tensor name "t"`},
		{"empty-tensor-name", oneTensor("", quant.F32, 0, 16, 4), "tensor 0 has an empty name"},
		{"tensor-name-64", oneTensor(strings.Repeat("n", MaxNameLen+1), quant.F32, 0, 16, 4), "name of tensor 0 length 64 exceeds the limit 63"},
		{"tensor-name-huge", hdr(3, 1, 0).u64(1 << 40).zeros(64).bytes(), "name of tensor 0 length 1099511627776 exceeds the limit 63"},

		// Tensor shapes and types.
		{"dims-5", oneTensor("t", quant.F32, 0, 32, 1, 1, 1, 1, 1), `tensor "t" has 5 dimensions, at most 4 allowed`},
		{"dims-count-max", hdr(3, 1, 0).str("t").u32(math.MaxUint32).zeros(64).bytes(), `tensor "t" has 4294967295 dimensions`},
		{"dims-overflow", oneTensor("t", quant.F32, 0, 32, 1<<32, 1<<32), `tensor "t": element count overflows with shape [4294967296 4294967296]`},
		{"dims-overflow-4d", oneTensor("t", quant.F32, 0, 32, 1<<16, 1<<16, 1<<16, 1<<16), `tensor "t": element count overflows`},
		{"dim-negative", oneTensor("t", quant.F32, 0, 32, 1<<63), `tensor "t": dimension 0 is 9223372036854775808 (negative as int64)`},
		{"dim-negative-last", oneTensor("t", quant.F32, 0, 32, 4, 1, math.MaxUint64), `tensor "t": dimension 2 is 18446744073709551615`},
		{"size-overflow", oneTensor("t", quant.F32, 0, 32, 1<<62), `tensor "t": size in bytes overflows`},
		{"type-4", oneTensor("t", 4, 0, 32, 4), `tensor "t" has unknown tensor type 4`},
		{"type-31", oneTensor("t", 31, 0, 32, 4), `tensor "t" has unknown tensor type 31`},
		{"type-43", oneTensor("t", 43, 0, 32, 4), `tensor "t" has unknown tensor type 43`},
		{"type-1000", oneTensor("t", 1000, 0, 32, 4), `tensor "t" has unknown tensor type 1000`},
		{"row-not-whole-q4_0", oneTensor("t", quant.Q4_0, 0, 64, 33), `tensor "t": row of 33 elements is not a whole number of q4_0 blocks of 32`},
		{"row-not-whole-q4_K", oneTensor("t", quant.Q4_K, 0, 512, 128, 2), `tensor "t": row of 128 elements is not a whole number of q4_K blocks of 256`},
		{"scalar-q8_0", oneTensor("t", quant.Q8_0, 0, 64), `tensor "t": scalar of block type q8_0`},

		// Tensor data placement.
		{"offset-unaligned", oneTensor("t", quant.F32, 16, 64, 4), `tensor "t": data offset 16 is not a multiple of the alignment 32`},
		{"offset-unaligned-64", alignKVOffset(32), `tensor "t": data offset 32 is not a multiple of the alignment 64`},
		{"data-beyond-eof", oneTensor("t", quant.F32, 0, 60, 16), `tensor "t": data [0, +64) beyond the end of the file (data section has 60 bytes)`},
		{"offset-beyond-eof", oneTensor("t", quant.F32, 1<<63, 64, 4), `tensor "t": data [9223372036854775808, +16) beyond the end of the file`},
		{"offset-wraps", oneTensor("t", quant.F32, math.MaxUint64-31, 64, 16), `tensor "t": data [18446744073709551584, +64) beyond the end`},
		{"data-section-beyond-eof", hdr(3, 1, 0).tensor("t", quant.F32, 0, 0).bytes(), "data section starts at 64, beyond the end of the file (size 57)"},
		{"overlap", hdr(3, 2, 0).tensor("a", quant.F32, 0, 16).tensor("b", quant.F32, 32, 16).pad(32).zeros(96).bytes(), `tensors "a" [0, +64) and "b" [32, +64) overlap`},
		{"overlap-same-offset", hdr(3, 2, 0).tensor("a", quant.F32, 0, 8).tensor("b", quant.Q8_0, 0, 32).pad(32).zeros(64).bytes(), `tensors "a" [0, +32) and "b" [0, +34) overlap`},
		{"overlap-behind-empty", hdr(3, 3, 0).tensor("a", quant.F32, 0, 32).tensor("e", quant.F32, 32, 0).tensor("b", quant.F32, 64, 8).pad(32).zeros(128).bytes(), `tensors "a" [0, +128) and "b" [64, +32) overlap`},
	}
}

// alignKVOffset is a file with general.alignment 64 and one tensor at off.
func alignKVOffset(off uint64) []byte {
	return hdr(3, 1, 1).kv("general.alignment", TypeUint32).u32(64).tensor("t", quant.F32, off, 16).pad(64).zeros(128).bytes()
}

// truncatedSeeds are a few prefixes of smallValid for the corpus (the test
// itself tries every prefix).
func truncatedSeeds(t testing.TB) []malformedCase {
	data := smallValid(t)
	var out []malformedCase
	for _, n := range []int{3, 7, 15, 23, 30, len(data) / 4, len(data) / 2, 3 * len(data) / 4, len(data) - 1} {
		out = append(out, malformedCase{fmt.Sprintf("truncated-%d", n), data[:n], ""})
	}
	return out
}

func TestMalformed(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range malformedCases() {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %s", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(tc.data)
			if err == nil {
				t.Fatalf("Parse succeeded (%d KVs, %d tensors)", len(f.KVs), len(f.Tensors))
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %T %v, want a *FormatError", err, err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("errors.Is(err, ErrMalformed) = false for %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q\nwant it to contain %q", err, tc.want)
			}
			if fe.Offset > int64(len(tc.data)) {
				t.Errorf("error offset %d beyond the input (%d bytes)", fe.Offset, len(tc.data))
			}
		})
	}
}

// TestMalformedOpen checks that Open reports the same errors for a file on
// disk, wrapped with the path, and that a too-short file is rejected.
func TestMalformedOpen(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range malformedCases() {
		path := filepath.Join(dir, tc.name+".gguf")
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err == nil {
			f.Close()
			t.Errorf("%s: Open succeeded", tc.name)
			continue
		}
		want := tc.want
		if len(tc.data) < 4 {
			want = "too short for a GGUF header"
		}
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want ErrMalformed naming %s and %q", tc.name, err, path, want)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil || errors.Is(err, ErrMalformed) {
		t.Errorf("Open(missing) = %v, want a not-found error", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Open(dir) = %v", err)
	}
}

// corpusFile encodes data in Go's fuzz corpus format.
func corpusFile(data []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n")
}

// TestFuzzCorpus keeps testdata/fuzz/FuzzParse in step with the generator:
// each malformed case and truncated prefix is a seed file. With -update it
// rewrites them.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	seeds := append(malformedCases(), truncatedSeeds(t)...)
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range seeds {
		path := filepath.Join(dir, "seed-"+s.name)
		want := corpusFile(s.data)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s is missing or stale (err %v): run go test ./io/gguf/ -run TestFuzzCorpus -update", path, err)
		}
	}
}
