// Tests against llama.cpp's reference data in ../../shared/golden: ggml's
// dequantization of real tensors must match bit for bit, and quantizing the
// float32 source models with QuantizeRowRef must reproduce llama-quantize's
// files byte for byte.

package quant_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"github.com/flowinfer/flowinfer/internal/golden"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/quant"
)

// goldenDir finds shared/golden by walking up from the working directory.
// It skips the test when the data is absent, unless CI=true.
func goldenDir(t testing.TB) string {
	t.Helper()
	return golden.Dir(t)
}

func openModel(t *testing.T, path string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestGoldenDequant(t *testing.T) {
	root := goldenDir(t)
	raw, err := os.ReadFile(filepath.Join(root, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		DequantVectors []struct {
			Model, Tensor, Type, File string
			Ne0, Rows                 int
		} `json:"dequant_vectors"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.DequantVectors) == 0 {
		t.Fatal("manifest has no dequant_vectors")
	}
	for _, v := range manifest.DequantVectors {
		t.Run(filepath.Base(v.File), func(t *testing.T) {
			f := openModel(t, filepath.Join(root, v.Model))
			tn, ok := f.Tensor(v.Tensor)
			if !ok {
				t.Fatalf("tensor %s not in %s", v.Tensor, v.Model)
			}
			if tn.Type.String() != v.Type || int(tn.Dims[0]) != v.Ne0 {
				t.Fatalf("tensor is %s with ne0 %d, manifest says %s with %d", tn.Type, tn.Dims[0], v.Type, v.Ne0)
			}
			want, err := os.ReadFile(filepath.Join(root, v.File))
			if err != nil {
				t.Fatal(err)
			}
			n := v.Ne0 * v.Rows
			if len(want) != 4*n {
				t.Fatalf("golden has %d bytes, want %d", len(want), 4*n)
			}
			rowBytes, err := quant.RowBytes(tn.Type, v.Ne0)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, n)
			for r := 0; r < v.Rows; r++ {
				src := tn.Data[r*rowBytes : (r+1)*rowBytes]
				if err := quant.DequantizeRow(tn.Type, src, got[r*v.Ne0:(r+1)*v.Ne0]); err != nil {
					t.Fatal(err)
				}
			}
			bad := 0
			for i, g := range got {
				w := binary.LittleEndian.Uint32(want[4*i:])
				if math.Float32bits(g) != w {
					if bad < 5 {
						t.Errorf("element %d (row %d): got %g (%#08x), want %g (%#08x)", i, i/v.Ne0, g, math.Float32bits(g), math.Float32frombits(w), w)
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d elements differ", bad, n)
			}
		})
	}
}

// TestGoldenQuantizeRef re-quantizes the float32 source of every quantized
// golden model and compares the bytes with llama-quantize's output, on the
// first rows of every non-F32 tensor.
func TestGoldenQuantizeRef(t *testing.T) {
	root := goldenDir(t)
	maxRows := 16 // all rows take ~15 s; set FLOWINFER_GOLDEN_ALL_ROWS=1 for them
	if os.Getenv("FLOWINFER_GOLDEN_ALL_ROWS") == "1" {
		maxRows = math.MaxInt
	}
	cases := []struct{ quantized, source string }{
		{"stories260K-q8_0", "stories260K"},
		{"synth-llama-F16", "synth-llama-F32"},
		{"synth-llama-BF16", "synth-llama-F32"},
		{"synth-llama-Q8_0", "synth-llama-F32"},
		{"synth-llama-Q4_0", "synth-llama-F32"},
		{"synth-llama-Q4_1", "synth-llama-F32"},
		{"synth-llama-Q5_0", "synth-llama-F32"},
		{"synth-llama-Q5_1", "synth-llama-F32"},
		{"synth-llama-Q2_K", "synth-llama-F32"},
		{"synth-llama-Q3_K_M", "synth-llama-F32"},
		{"synth-llama-Q4_K_M", "synth-llama-F32"},
		{"synth-llama-Q5_K_M", "synth-llama-F32"},
		{"synth-llama-Q6_K", "synth-llama-F32"},
		{"synth-qwen2-Q4_K_M", "synth-qwen2-F32"},
		{"synth-qwen3-Q8_0", "synth-qwen3-F32"},
		{"synth-qwen3moe-Q4_K_M", "synth-qwen3moe-F32"},
	}
	for _, c := range cases {
		t.Run(c.quantized, func(t *testing.T) {
			qf := openModel(t, filepath.Join(root, "models", c.quantized+".gguf"))
			sf := openModel(t, filepath.Join(root, "models", c.source+".gguf"))
			checked := 0
			for _, qt := range qf.Tensors {
				if qt.Type == quant.F32 {
					continue
				}
				st, ok := sf.Tensor(qt.Name)
				if !ok || st.Type != quant.F32 {
					t.Fatalf("%s: no F32 source tensor", qt.Name)
				}
				ne0 := int(qt.Dims[0])
				rows := min(int(qt.Rows()), maxRows)
				rowBytes, err := quant.RowBytes(qt.Type, ne0)
				if err != nil {
					t.Fatal(err)
				}
				src := make([]float32, ne0)
				got := make([]byte, rowBytes)
				for r := 0; r < rows; r++ {
					if err := quant.DequantizeRow(quant.F32, st.Data[r*ne0*4:], src); err != nil {
						t.Fatal(err)
					}
					if err := quant.QuantizeRowRef(qt.Type, src, got); err != nil {
						t.Fatalf("%s: %v", qt.Name, err)
					}
					want := qt.Data[r*rowBytes : (r+1)*rowBytes]
					if !bytes.Equal(got, want) {
						i := 0
						for got[i] == want[i] {
							i++
						}
						t.Errorf("%s (%s) row %d: first difference at byte %d of %d (block %d): got %#02x, want %#02x",
							qt.Name, qt.Type, r, i, rowBytes, i/qt.Type.BlockBytes(), got[i], want[i])
						break
					}
				}
				checked++
			}
			if checked == 0 {
				t.Fatal("no quantized tensors")
			}
		})
	}
}
