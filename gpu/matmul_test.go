//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// The matrix-matrix shaders against cpu.Ref on random inputs, as
// TestMatVec (ops_test.go) does for the mat-vec ones: NMSE against the
// native reference (activations rounded to the weight's dot type) at
// test_mul_mat's 5e-4, against the Exact reference (dequantized weights,
// float32 activations: only the summation order differs) at 1e-7,
// NaN/Inf fail, and guard floats around the output catch writes out of
// bounds.

var mmTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// checkProduct runs op (a MatVec, MatMat or MatMul of Kernels) on random
// inputs of the shape and compares it with cpu.Ref, natively and Exact.
// For the types whose shaders quantize the activations as the CPU does
// (actQuantized: MXFP4) the two references swap roles: the native one
// (same quantized activations, only the summation order differs) is held
// to 1e-7, the Exact one to 5e-4.
func (r *rig) checkProduct(op func(*vk.CommandBuffer, F32, Weight, F32, int) error, typ quant.Type, rows, cols, n int) {
	t := r.t
	wb := quantize(t, typ, r.floats(rows*cols), rows, cols)
	x := r.floats(n * cols)
	// The weights start 16 bytes into their buffer and x 5 floats in, so
	// the offsets are exercised.
	w := Weight{Buf: r.buffer(append(make([]byte, 16), wb...)), Off: 16, Type: typ, Rows: rows, Cols: cols}
	xb := F32{Buf: r.buffer(f32bytes(append(make([]float32, 5), x...))), Off: 5}
	y := r.guarded(n * rows)
	dt := r.run(func(cb *vk.CommandBuffer) error { return op(cb, y, w, xb, n) })
	got := r.read(y, n*rows)

	mw := &model.Weight{Name: "w", Type: typ, Rows: rows, Cols: cols, RowBytes: len(wb) / rows, Data: wb}
	want := make([]float32, n*rows)
	cpu.NewRef().MatMul(want, mw, x, n)
	exact := make([]float32, n*rows)
	ref := cpu.NewRef()
	ref.Exact = true
	ref.MatMul(exact, mw, x, n)
	e, ee := nmse(got, want), nmse(got, exact)
	loose, looseName, tight, tightName := e, "cpu.Ref", ee, "cpu.Ref (Exact)"
	if actQuantized(typ) {
		loose, looseName, tight, tightName = ee, "cpu.Ref (Exact)", e, "cpu.Ref"
	}
	if len(want) >= minNMSEOutputs && loose > nmseMatVec {
		t.Errorf("NMSE against %s %.3g > %.0e", looseName, loose, nmseMatVec)
	}
	if tight > nmseMatVecExact {
		t.Errorf("NMSE against %s %.3g > %.0e", tightName, tight, nmseMatVecExact)
	}
	t.Logf("NMSE %.2e (exact %.2e), %v on device", e, ee, dt)
}

// TestMatMat: every type on aligned shapes and on rows, weights per row
// (float types) and vectors that are not multiples of the 64×32 tile or
// of the 32 weights of a step.
func TestMatMat(t *testing.T) {
	r := newRig(t)
	type shape struct{ rows, cols, n int }
	shapes := []shape{
		{64, 256, 32},        // one whole tile
		{128, 512, 64},       // 2×2 tiles
		{7, 256, 9},          // fewer rows and vectors than a tile
		{65, 2048 + 256, 33}, // one row and one vector past a tile
		{130, 256, 70},
		{130, 256, 129}, // the wide tile (mmWideMin vectors and more), one vector past it
		{1, 32, 40},
		{33, 33, 17},  // float types: a row of 33 (a partial step)
		{70, 100, 45}, // float types: a partial step, odd everything
		{3, 7, 11},
	}
	for _, typ := range mmTypes {
		for _, s := range shapes {
			if s.cols%typ.BlockSize() != 0 {
				continue
			}
			t.Run(fmt.Sprintf("type=%s/rows=%d/cols=%d/n=%d", typ, s.rows, s.cols, s.n), func(t *testing.T) {
				r.t = t
				r.checkProduct(r.k.MatMat, typ, s.rows, s.cols, s.n)
			})
		}
	}
}

// TestMatMatTiles runs the shaders with other tiles (specialization
// constants): one output per thread, a tall tile, a wide one; MXFP4 too,
// whose shader takes mm_head.glsl's other path (Q8_ACT: per-step integer
// sums and per-row, per-vector scales).
func TestMatMatTiles(t *testing.T) {
	r := newRig(t)
	for _, tile := range [][3]int{{16, 16, 1}, {128, 16, 2}, {32, 64, 2}, {64, 32, 8}} {
		for _, typ := range append(slices.Clone(mmTypes), quant.MXFP4) {
			t.Run(fmt.Sprintf("tile=%dx%d/per_thread=%d/type=%s", tile[0], tile[1], tile[2], typ), func(t *testing.T) {
				r.t = t
				if err := r.k.SetMatMatTile(tile[0], tile[1], tile[2]); err != nil {
					t.Fatal(err)
				}
				cols := 512
				if typ.BlockSize() == 1 {
					cols = 250
				}
				r.checkProduct(r.k.MatMat, typ, 131, cols, 37)
			})
		}
	}
	for _, bad := range [][3]int{{0, 32, 1}, {24, 32, 1}, {64, 3, 1}, {512, 1, 1}, {64, 64, 3}, {256, 256, 1}, {64, 64, 0}} {
		if err := r.k.SetMatMatTile(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("tile %v accepted", bad)
		}
	}
	if err := r.k.SetMatMatTile(int(defaultTile[0]), int(defaultTile[1]), int(defaultTile[2])); err != nil {
		t.Fatal(err)
	}
}

// TestMatVecBF16: the BF16 mat-vec shader (TestMatVec's shapes and
// odd rows of 33 weights, one starting off a word).
func TestMatVecBF16(t *testing.T) {
	r := newRig(t)
	for _, s := range [][3]int{{1, 32, 1}, {7, 256, 1}, {257, 2048 + 256, 1}, {7, 256, 3}, {5, 256, 11}, {9, 33, 2}, {64, 2048, 8}} {
		t.Run(fmt.Sprintf("rows=%d/cols=%d/n=%d", s[0], s[1], s[2]), func(t *testing.T) {
			r.t = t
			r.checkProduct(r.k.MatVec, quant.BF16, s[0], s[1], s[2])
		})
	}
}

// TestMatMulPicks: MatMul takes the mat-vec shaders below MatMatMin
// vectors and the matrix-matrix ones from it, with the same results.
func TestMatMulPicks(t *testing.T) {
	r := newRig(t)
	for _, n := range []int{1, MatMatMin - 1, MatMatMin, 50} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			r.t = t
			r.checkProduct(r.k.MatMul, quant.Q4_K, 40, 512, n)
		})
	}
}

func TestMatMatBadArgs(t *testing.T) {
	r := newRig(t)
	buf := r.buffer(make([]byte, 1024))
	if err := r.cb.Begin(); err != nil {
		t.Fatal(err)
	}
	defer r.cb.End()
	w := Weight{Buf: buf, Type: quant.Q4_K, Rows: 8, Cols: 256} // 8·144 bytes > 1024
	if err := r.k.MatMat(r.cb, F32{Buf: buf}, w, F32{Buf: buf}, 16); err == nil {
		t.Error("weights overrunning their buffer accepted")
	}
	w = Weight{Buf: buf, Off: 2, Type: quant.Q4_K, Rows: 1, Cols: 256}
	if err := r.k.MatMat(r.cb, F32{Buf: buf}, w, F32{Buf: buf}, 16); err == nil {
		t.Error("Q4_K weights off a word accepted")
	}
	w = Weight{Buf: buf, Type: quant.Q8_K, Rows: 1, Cols: 256} // an activation type
	if err := r.k.MatMat(r.cb, F32{Buf: buf}, w, F32{Buf: buf}, 16); !errors.Is(err, vk.ErrUnsupported) {
		t.Errorf("Q8_K mat-mat: %v, want ErrUnsupported", err)
	}
	w = Weight{Buf: buf, Type: quant.F32, Rows: 4, Cols: 8}
	if err := r.k.MatMat(r.cb, F32{Buf: buf, Off: 240}, w, F32{Buf: buf}, 16); err == nil {
		t.Error("output overrunning its buffer accepted")
	}
}
