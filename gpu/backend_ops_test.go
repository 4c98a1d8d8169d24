//go:build cgo

package gpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// The Backend's ops against cpu.Ref with the same random inputs (as
// ops_test.go does for the kernels): NMSE per op, NaN/Inf fail (nmse),
// and guard floats on both sides of every output, which the device holds
// too (the whole guarded buffer is made device-owned first, so a write
// out of bounds comes back with ToHost).

func newOpsBackend(t *testing.T) (*rig, *Backend) {
	r := newRig(t)
	be, err := newBackend(r.d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	return r, be
}

// guardedOut returns a slice of n floats between guards (in one
// allocation), after making the whole allocation device-owned (+= 0).
func guardedOut(be *Backend, n int, init []float32) (full, mid []float32) {
	full = make([]float32, n+2*guardN)
	for i := range full {
		full[i] = math.Float32frombits(guardBits)
	}
	mid = full[guardN : guardN+n]
	copy(mid, init)
	be.Add(full, make([]float32, len(full)))
	return full, mid
}

// checkGuarded reads full back and checks its guards; it returns the
// output part.
func checkGuarded(t *testing.T, be *Backend, full []float32, n int) []float32 {
	t.Helper()
	if err := be.ToHost(full); err != nil {
		t.Fatal(err)
	}
	for i, v := range full {
		if (i < guardN || i >= guardN+n) && math.Float32bits(v) != guardBits {
			t.Fatalf("guard float %d (output is [%d,%d)) overwritten with %v", i, guardN, guardN+n, v)
		}
	}
	return full[guardN : guardN+n]
}

func TestBackendRope(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	yarn := model.Rope{Base: 10000, Scale: 0.25, ExtFactor: 1, AttnFactor: 1}
	for _, tc := range []struct {
		n, nHead, headDim, dim int
		typ                    model.RopeType
		rp                     model.Rope
	}{
		{1, 3, 8, 8, model.RopeNorm, model.Rope{Base: 10000, Scale: 1}},
		{5, 8, 64, 64, model.RopeNeox, model.Rope{Base: 1e6, Scale: 1}},
		{7, 2, 128, 64, model.RopeNorm, model.Rope{Base: 500000, Scale: 1}}, // partial rotation
		{3, 4, 64, 64, model.RopeNeox, yarn},
		{2, 4, 32, 32, model.RopeNorm, model.Rope{Base: 10000, Scale: 1, Factors: []float32{1, 1, 2, 4, 8, 8, 8, 16, 1, 2, 3, 4, 5, 6, 7, 8}}},
	} {
		rp := tc.rp
		rp.Type, rp.Dim = tc.typ, tc.dim
		if rp.ExtFactor != 0 {
			rp.Corr = model.YarnCorrDims(tc.dim, 4096, rp.Base, 32, 1)
		}
		t.Run(fmt.Sprintf("type=%d/n=%d/heads=%d/dim=%d/%d/yarn=%v", tc.typ, tc.n, tc.nHead, tc.headDim, tc.dim, rp.ExtFactor != 0), func(t *testing.T) {
			size := tc.n * tc.nHead * tc.headDim
			x := r.floats(size)
			pos := make([]int32, tc.n)
			for i := range pos {
				pos[i] = int32(r.rng.IntN(5000))
			}
			want := slices.Clone(x)
			ref.Rope(want, pos, tc.n, tc.nHead, tc.headDim, &rp)
			full, mid := guardedOut(be, size, x)
			be.Rope(mid, pos, tc.n, tc.nHead, tc.headDim, &rp)
			got := checkGuarded(t, be, full, size)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("NMSE %.3g > %g", e, nmseDefault)
			}
		})
	}
}

func TestBackendAddRowsSoftmax(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	for _, sh := range [][2]int{{1, 5}, {3, 13}, {4, 256}, {2, 1000}} {
		n, dim := sh[0], sh[1]
		t.Run(fmt.Sprintf("rows=%d/dim=%d", n, dim), func(t *testing.T) {
			x, bias := r.floats(n*dim), r.floats(dim)
			want := slices.Clone(x)
			ref.AddRows(want, bias)
			full, mid := guardedOut(be, n*dim, x)
			be.AddRows(mid, bias)
			got := checkGuarded(t, be, full, n*dim)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("AddRows NMSE %.3g > %g", e, nmseDefault)
			}
			for i := range x {
				x[i] *= 8 // logits of some spread
			}
			want = slices.Clone(x)
			ref.Softmax(want, n, dim)
			full, mid = guardedOut(be, n*dim, x)
			be.Softmax(mid, n, dim)
			got = checkGuarded(t, be, full, n*dim)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("Softmax NMSE %.3g > %g", e, nmseDefault)
			}
		})
	}
}

// TestBackendAttention stores 70 rows per sequence (more than one chunk
// of the shader) into f32 and f16 caches of two sequences, then attends a
// batch mixing both sequences, with and without a window and sinks, with
// grouped-query heads, against cpu.Ref on the same cache.
func TestBackendAttention(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	const nCtx, filled = 96, 70
	for _, kt := range []model.KVType{model.KVF32, model.KVF16} {
		for _, hd := range [][2]int{{16, 16}, {64, 64}, {128, 128}} {
			h := model.Hyper{NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: hd[0], HeadDimV: hd[1]}
			kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: kt, V: kt}, nCtx, 2)
			if err != nil {
				t.Fatal(err)
			}
			// fill both sequences of layer 1 (layer 0 stays empty)
			for s := range int32(2) {
				seq, pos := make([]int32, filled), make([]int32, filled)
				for i := range pos {
					seq[i], pos[i] = s, int32(i)
				}
				k, v := r.floats(filled*h.KDim()), r.floats(filled*h.VDim())
				if err := kv.Store(1, seq, pos, k, v); err != nil {
					t.Fatal(err)
				}
				be.StoreKV(kv, 1, seq, pos, k, v)
			}
			seq := []int32{1, 1, 1, 0}
			pos := []int32{filled - 3, filled - 2, filled - 1, 40}
			n := len(seq)
			for _, a := range []model.Attn{
				{Scale: 0.25},
				{Scale: 0.125, Window: 5},
				{Scale: 0.25, Window: 64, Sinks: r.floats(h.NHead)},
			} {
				t.Run(fmt.Sprintf("kv=%s/head=%d/window=%d/sinks=%v", kt, hd[0], a.Window, a.Sinks != nil), func(t *testing.T) {
					q := r.floats(n * h.QDim())
					size := n * h.NHead * h.HeadDimV
					want := make([]float32, size)
					ref.Attention(want, q, kv, 1, seq, pos, &h, a)
					full, mid := guardedOut(be, size, nil)
					be.Attention(mid, q, kv, 1, seq, pos, &h, a)
					got := checkGuarded(t, be, full, size)
					if e := nmse(got, want); e > nmseDefault {
						t.Errorf("NMSE %.3g > %g", e, nmseDefault)
					}
				})
			}
		}
	}
}
