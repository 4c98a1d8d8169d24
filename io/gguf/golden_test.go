// Tests and benchmarks over the GGUF files llama.cpp produced
// (shared/golden/models and shared/golden/vocab): every file opens, its
// tensors match the types and shapes gguf-py read (tensor_types.json), its
// data lies inside the file, and Open costs O(header), not O(file).
package gguf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

// goldenTensorTypes is tensor_types.json: per file, the tensors as gguf-py
// read them.
type goldenTensorTypes map[string]struct {
	TypeCounts map[string]int `json:"type_counts"`
	Tensors    []struct {
		Name string   `json:"name"`
		Type string   `json:"type"`
		Ne   []uint64 `json:"ne"`
	} `json:"tensors"`
}

// ggufFiles lists the *.gguf files in dir.
func ggufFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .gguf files in %s (%v)", dir, err)
	}
	return files
}

// checkDataInFile checks every tensor's data ends within the file and is a
// slice of the mapping.
func checkDataInFile(t *testing.T, f *File) {
	t.Helper()
	size := uint64(len(f.Bytes()))
	for _, tn := range f.Tensors {
		if end := f.DataOffset + tn.Offset + tn.Size; end > size {
			t.Errorf("%s: data ends at %d, beyond the file (%d bytes)", tn.Name, end, size)
		}
		if !inside(tn.Data, f.Bytes()) || uint64(len(tn.Data)) != tn.Size {
			t.Errorf("%s: Data (%d bytes) is not the mapped data (%d bytes)", tn.Name, len(tn.Data), tn.Size)
		}
	}
}

func TestGoldenModels(t *testing.T) {
	dir := goldenDir(t, "models")
	raw, err := os.ReadFile(filepath.Join(dir, "tensor_types.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden goldenTensorTypes
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	files := ggufFiles(t, dir)
	if len(files) != len(golden) {
		t.Errorf("%d .gguf files, tensor_types.json lists %d", len(files), len(golden))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := golden[name]
			if !ok {
				t.Fatalf("%s is not in tensor_types.json", name)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if arch, ok := f.GetString("general.architecture"); !ok || arch == "" {
				t.Errorf("general.architecture = %q, %v", arch, ok)
			}
			if len(f.Tensors) != len(want.Tensors) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(want.Tensors))
			}
			counts := map[quant.Type]int{}
			for i, wt := range want.Tensors {
				typ, ok := quant.TypeByName(wt.Type)
				if !ok {
					t.Fatalf("tensor_types.json: unknown type %q", wt.Type)
				}
				tn, ok := f.Tensor(wt.Name)
				if !ok {
					t.Errorf("missing tensor %s", wt.Name)
					continue
				}
				if f.Tensors[i] != tn {
					t.Errorf("tensor %d is %s, want %s (file order)", i, f.Tensors[i].Name, wt.Name)
				}
				if tn.Type != typ || !slices.Equal(tn.Dims, wt.Ne) {
					t.Errorf("%s: %s %v, want %s %v", wt.Name, tn.Type, tn.Dims, typ, wt.Ne)
				}
				counts[tn.Type]++
			}
			for ts, n := range want.TypeCounts {
				typ, _ := quant.TypeByName(ts)
				if counts[typ] != n {
					t.Errorf("%d tensors of type %s, want %d", counts[typ], ts, n)
				}
			}
			checkDataInFile(t, f)
		})
	}
}

func TestGoldenVocab(t *testing.T) {
	for _, path := range ggufFiles(t, goldenDir(t, "vocab")) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			checkDataInFile(t, f)
			tokens, ok := f.Get("tokenizer.ggml.tokens")
			if s, isStrs := tokens.Strings(); !ok || !isStrs || len(s) == 0 {
				t.Errorf("tokenizer.ggml.tokens = %v, %v", tokens, ok)
			}
			if model, ok := f.GetString("tokenizer.ggml.model"); !ok || model == "" {
				t.Errorf("tokenizer.ggml.model = %q, %v", model, ok)
			}
		})
	}
}

// largestGGUF returns the path and size of the biggest .gguf in dir.
func largestGGUF(b *testing.B, dir string) (string, int64) {
	var best string
	var size int64
	for _, p := range ggufFiles(b, dir) {
		st, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		if st.Size() > size {
			best, size = p, st.Size()
		}
	}
	return best, size
}

func benchOpen(b *testing.B, path string, size int64) {
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ReportMetric(float64(size), "file-bytes")
}

// BenchmarkOpen opens the largest golden model and the largest vocabulary.
// The model's cost is its header; the vocabulary's header is the whole file
// (hundreds of thousands of strings, each copied out of the mapping).
func BenchmarkOpen(b *testing.B) {
	for _, sub := range []string{"models", "vocab"} {
		path, size := largestGGUF(b, goldenDir(b, sub))
		b.Run("file="+filepath.Base(path), func(b *testing.B) { benchOpen(b, path, size) })
	}
}

// BenchmarkOpenDataSize opens files with the same header and data sections
// of 1 MiB and 4 GiB (the big one a sparse file): equal times show that
// Open reads the header only.
func BenchmarkOpenDataSize(b *testing.B) {
	for _, data := range []uint64{1 << 20, 4 << 30} {
		header := hdr(3, 2, 1).kv("general.architecture", TypeString).str("llama").
			tensor("small", quant.F32, 0, 8).
			tensor("big", quant.F32, 32, data/4).pad(32).bytes()
		path := filepath.Join(b.TempDir(), "f.gguf")
		if err := os.WriteFile(path, header, 0o644); err != nil {
			b.Fatal(err)
		}
		size := int64(len(header)) + 32 + int64(data)
		if err := os.Truncate(path, size); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("data=%dMiB", data>>20), func(b *testing.B) { benchOpen(b, path, size) })
	}
}
