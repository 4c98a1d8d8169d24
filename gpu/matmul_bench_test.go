//go:build cgo

package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// BenchmarkPrefill decodes one prompt of 64 tokens (logits of the last
// row) on the Vulkan backend with the llama-1b preset (Llama-3.2-1B's
// shape, random Q4_K_M weights written by model/synth into a temporary
// directory, untimed) cut to its first benchLayers layers, its products
// through the mat-vec shaders (8 vectors per workgroup) and through the
// matrix-matrix ones; it reports prompt tokens per second. On lavapipe a
// whole 16-layer prompt takes minutes on the mat-vec path, hence the cut:
// every layer has the same shape, so tokens/s scales by 1/layers (plus the
// output layer's share). Each iteration overwrites the same cache cells.
//
//	go test ./gpu/ -run '^$' -bench Prefill -benchtime 1x
func BenchmarkPrefill(b *testing.B) {
	const nPrompt, benchLayers = 64, 1
	s, err := synth.Preset("llama-1b")
	if err != nil {
		b.Fatal(err)
	}
	s.NLayer = benchLayers
	path := filepath.Join(b.TempDir(), "llama-1b.gguf")
	if err := synth.WriteFile(path, s, synth.Options{Mix: "Q4_K_M", Seed: 1}); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, func(quant.Type) bool { return true })
	if err != nil {
		b.Fatal(err)
	}
	r := benchRig(b)
	be, err := newBackendOf(r.d, m, r.k)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx, err := m.NewContext(be, nPrompt, 1, nPrompt)
	if err != nil {
		b.Fatal(err)
	}
	batch := &model.Batch{Tokens: make([]int32, nPrompt), Pos: make([]int32, nPrompt), Seq: make([]int32, nPrompt), Logits: make([]bool, nPrompt)}
	for i := range nPrompt {
		batch.Tokens[i], batch.Pos[i] = int32(i*37%m.NVocab), int32(i)
	}
	batch.Logits[nPrompt-1] = true
	for _, c := range []struct {
		name  string
		least int
	}{{"matvec", nPrompt + 1}, {"matmat", 0}} {
		b.Run(fmt.Sprintf("path=%s/tokens=%d", c.name, nPrompt), func(b *testing.B) {
			r.k.SetMatMatMin(c.least)
			if _, err := ctx.Decode(batch); err != nil { // warm-up: pipelines built
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := ctx.Decode(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(nPrompt*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
	r.k.SetMatMatMin(0)
}

// BenchmarkMatMul: one 2048×2048 product of n vectors already on the
// device, per weight type, through the mat-vec shaders and the
// matrix-matrix ones (recorded once; each iteration is submit + fence
// wait), reporting vectors per second. FLOWINFER_BENCH_N sets n (default
// 64).
func BenchmarkMatMul(b *testing.B) {
	n := 64
	if v, err := strconv.Atoi(os.Getenv("FLOWINFER_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	r := benchRig(b)
	mk := func(size uint64) *vk.Buffer {
		buf, err := r.d.NewBuffer(size, vk.DeviceLocal)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(buf.Free)
		return buf
	}
	for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		rb, err := quant.RowBytes(typ, benchDim)
		if err != nil {
			b.Fatal(err)
		}
		// zero bytes are valid blocks of every type (scales 0)
		w := Weight{Buf: mk(uint64(benchDim * rb)), Type: typ, Rows: benchDim, Cols: benchDim}
		x, y := F32{Buf: mk(uint64(4 * n * benchDim))}, F32{Buf: mk(uint64(4 * n * benchDim))}
		for _, path := range []string{"matvec", "matmat"} {
			b.Run(fmt.Sprintf("type=%s/path=%s/n=%d", typ, path, n), func(b *testing.B) {
				op := r.k.MatVec
				if path == "matmat" {
					op = r.k.MatMat
				}
				if err := r.cb.Begin(); err != nil {
					b.Fatal(err)
				}
				if err := op(r.cb, y, w, x, n); err != nil {
					b.Fatal(err)
				}
				if err := r.cb.End(); err != nil {
					b.Fatal(err)
				}
				r.replay(b)
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "vectors/s")
			})
		}
	}
}
