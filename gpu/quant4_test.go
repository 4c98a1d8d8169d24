//go:build cgo

package gpu

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// quant4Types are the weight types of the mul_mat_vec_<type> and mm_<type>
// shaders that include quant4.glsl: the 16-level table types (MXFP4,
// IQ4_NL, IQ4_XS) and the other legacy and K-quant types of llama-quantize's
// mixtures.
var quant4Types = []quant.Type{quant.MXFP4, quant.IQ4_NL, quant.IQ4_XS, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q2_K, quant.Q3_K}

// TestMatMulQuant4: each of quant4Types through the mat-vec shader (n = 1,
// 2, 7, 32, 65: one vector, then one partial and several workgroups of
// matVecCols vectors) and the matrix-matrix shader (n = 2, 7, 32, 65: a
// partial tile, a 64-vector tile and one past it), on an aligned shape
// (64 rows of 512) and an odd one (67 rows, not a multiple of the 4 or 8
// rows of a mat-vec workgroup nor of a tile's 128; 768 = 256·3 weights a
// row), and for the 32-weight block types rows of 96 weights (3 blocks:
// MXFP4 rows of 51 bytes start at every byte offset). Weights are our
// quantizers' output of uniform [-1, 1) floats; checkProduct compares with
// cpu.Ref (test_mul_mat's 5e-4 natively, 1e-7 against the dequantized
// weights), fails on NaN/Inf and on a changed guard float.
func TestMatMulQuant4(t *testing.T) {
	r := newRig(t)
	type shape struct{ rows, cols int }
	for _, typ := range quant4Types {
		if !SupportsMatVec(typ) || !SupportsMatMat(typ) {
			t.Errorf("%s: mat-vec %v, mat-mat %v", typ, SupportsMatVec(typ), SupportsMatMat(typ))
		}
		shapes := []shape{{64, 512}, {67, 768}}
		if typ.BlockSize() == 32 {
			shapes = append(shapes, shape{9, 96})
		}
		for _, s := range shapes {
			for _, n := range []int{1, 2, 7, 32, 65} {
				t.Run(fmt.Sprintf("type=%s/matvec/rows=%d/cols=%d/n=%d", typ, s.rows, s.cols, n), func(t *testing.T) {
					r.t = t
					r.checkProduct(r.k.MatVec, typ, s.rows, s.cols, n)
				})
			}
			for _, n := range []int{2, 7, 32, 65} {
				t.Run(fmt.Sprintf("type=%s/matmat/rows=%d/cols=%d/n=%d", typ, s.rows, s.cols, n), func(t *testing.T) {
					r.t = t
					r.checkProduct(r.k.MatMat, typ, s.rows, s.cols, n)
				})
			}
		}
		// Other mat-vec variants (TestMatVecVariants'): 3 rows a
		// workgroup of 16 threads, 2 of 128 (threads beyond a row's
		// slots), then the default again.
		for _, v := range [][2]int{{16, 3}, {128, 2}} {
			t.Run(fmt.Sprintf("type=%s/matvec/threads=%d/rows_per_group=%d", typ, v[0], v[1]), func(t *testing.T) {
				r.t = t
				if err := r.k.SetMatVecVariant(typ, v[0], v[1]); err != nil {
					t.Fatal(err)
				}
				r.checkProduct(r.k.MatVec, typ, 67, 768, 2)
			})
		}
		def := matVecShaders[typ].spec
		if err := r.k.SetMatVecVariant(typ, int(def[0]), int(def[1])); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBackendGreedyQuant4: the demo preset (a small llama: hidden 256,
// FFN 768, 4 layers) generated with every 2-D weight of one of
// quant4Types (gen --pure --type T) on the Vulkan backend, a prompt of 40
// tokens as one batch (the matrix-matrix shaders: MatMatMin is 32) then
// single-token steps (mat-vec), gives the CPU reference's greedy tokens,
// and the prompt's logits agree to 1e-3 (as TestBackendGreedyStories).
// The reference is cpu.Ref with Exact set (dequantized weights times
// float32 activations, as the shaders multiply), except for the types
// whose shaders quantize the activations as the CPU does (actQuantized:
// MXFP4), whose reference is cpu.Ref as it is; the comparison with
// cpu.Backend is logged, not asserted: that backend rounds activations to
// Q8_0/Q8_K for its dot products, which moves logits by 1-3e-2 on these
// random weights, enough to change greedy tokens (it did for four of the
// eight types with a 6-token prompt).
func TestBackendGreedyQuant4(t *testing.T) {
	r := newRig(t)
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(1 + 37*i%1000)
	}
	if len(prompt) < MatMatMin {
		t.Fatalf("a prompt of %d tokens does not reach the matrix-matrix shaders", len(prompt))
	}
	const n = 12
	for _, typ := range quant4Types {
		t.Run("type="+typ.String(), func(t *testing.T) {
			s, err := synth.Preset("demo")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "demo.gguf")
			if err := synth.WriteFile(path, s, synth.Options{Type: typ, Seed: 5}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := model.Load(f, SupportsMatVec)
			if err != nil {
				t.Fatal(err)
			}
			if w := m.Layers[0].Down; w == nil || w.Type != typ {
				t.Fatalf("ffn_down is not %s: %+v", typ, w)
			}
			types := model.KVTypes{K: model.KVF32, V: model.KVF32}
			ref := cpu.NewRef()
			ref.Exact = !actQuantized(typ)
			cc, err := m.NewContextOf(ref, types, 64, 1, 64)
			if err != nil {
				t.Fatal(err)
			}
			want, wantL := greedy(t, cc, prompt, n)
			be, err := NewBackend(r.d, m)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			if !be.Supports(typ) {
				t.Fatalf("Backend.Supports(%s) is false", typ)
			}
			gc, err := m.NewContextOf(be, types, 64, 1, 64)
			if err != nil {
				t.Fatal(err)
			}
			got, gotL := greedy(t, gc, prompt, n)
			if !slices.Equal(got, want) {
				t.Errorf("greedy tokens on the GPU\n%v\ncpu.Ref (Exact %v)\n%v", got, ref.Exact, want)
			}
			var maxd float64
			for i := range wantL {
				if math.IsNaN(float64(gotL[i])) || math.IsInf(float64(gotL[i]), 0) {
					t.Fatalf("logit %d is %v", i, gotL[i])
				}
				maxd = max(maxd, math.Abs(float64(gotL[i]-wantL[i])))
			}
			if maxd > 1e-3 {
				t.Errorf("prompt logits: max |Δ| %.3g against cpu.Ref's (Exact %v)", maxd, ref.Exact)
			}
			bc, err := m.NewContextOf(cpu.NewBackend(1, nil), types, 64, 1, 64)
			if err != nil {
				t.Fatal(err)
			}
			cb, cbL := greedy(t, bc, prompt, n)
			var maxb float64
			for i := range cbL {
				maxb = max(maxb, math.Abs(float64(gotL[i]-cbL[i])))
			}
			t.Logf("prompt logits: max |Δ| %.3g against cpu.Ref (Exact %v), %.3g against cpu.Backend; %d greedy tokens equal to Ref's; cpu.Backend's equal: %v", maxd, ref.Exact, maxb, n, slices.Equal(got, cb))
		})
	}
}
