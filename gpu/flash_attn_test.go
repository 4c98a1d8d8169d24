//go:build cgo

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TestFlashAttention: Backend.Attention of n > 1 rows (the tiled shader,
// flash_attn_*.comp) against cpu.Ref on the same cache and against the
// per-row shader (attn_*.comp: the same rows attended one call each, so
// n = 1), within nmseDefault, NaN/Inf failing, between guard floats.
// Shapes: rows 2..70 (tiles of 16 or 8 rows, most of them partial),
// caches of 100 cells (not a multiple of the 32- or 16-cell steps),
// grouped-query ratios 1, 4 and 8, heads of 64, 128, 256 (the 8 × 16 tile)
// and 40/24 (f32: not a multiple of the 16 threads across a value row),
// windows, sinks, f32/f16/q8_0 caches, and batches mixing two sequences
// at different positions, one tile holding rows of both.
func TestFlashAttention(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	const nCtx, filled = 100, 90
	for _, tc := range []struct {
		kt             model.KVType
		nHead, nHeadKV int
		dk, dv         int
		rows           []int
	}{
		{model.KVF32, 4, 4, 64, 64, []int{2, 17, 70}},
		{model.KVF32, 8, 2, 40, 24, []int{3, 33}},
		{model.KVF16, 8, 2, 128, 128, []int{5, 16, 41}},
		{model.KVF16, 4, 2, 256, 256, []int{9}},
		{model.KVQ8_0, 8, 1, 64, 64, []int{2, 31, 70}},
		{model.KVQ8_0, 8, 2, 128, 128, []int{7}},
	} {
		h := model.Hyper{NLayer: 2, NHead: tc.nHead, NHeadKV: tc.nHeadKV, HeadDimK: tc.dk, HeadDimV: tc.dv}
		kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: tc.kt, V: tc.kt}, nCtx, 2)
		if err != nil {
			t.Fatal(err)
		}
		// layer 1 of both sequences holds positions [0, filled)
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
		s := AttnShape{NHead: h.NHead, NHeadKV: h.NHeadKV, DK: h.HeadDimK, DV: h.HeadDimV, NCtx: nCtx, F16: tc.kt == model.KVF16, Q8_0: tc.kt == model.KVQ8_0}
		if _, _, ok := r.k.flashTile(s); !ok {
			t.Fatalf("heads %d/%d: no flash tile, the tiled shader would not run", tc.dk, tc.dv)
		}
		for _, n := range tc.rows {
			for _, mixed := range []bool{false, true} {
				// a prompt: seq 1 at positions filled-n.. (the last rows of
				// the cache); mixed: its first half from seq 1 at 3.., the
				// rest from seq 0 ending at filled-1
				seq, pos := make([]int32, n), make([]int32, n)
				for i := range n {
					seq[i], pos[i] = 1, int32(filled-n+i)
				}
				if mixed {
					for i := range n {
						if i < n/2 {
							seq[i], pos[i] = 1, int32(3+i)
						} else {
							seq[i], pos[i] = 0, int32(filled-n+i)
						}
					}
				}
				for _, a := range []model.Attn{
					{Scale: 0.125},
					{Scale: 0.25, Window: 7},
					{Scale: 0.2, Window: 40, Sinks: r.floats(h.NHead)},
				} {
					name := fmt.Sprintf("kv=%s/heads=%d:%d/d=%d:%d/n=%d/mixed=%v/window=%d/sinks=%v", tc.kt, tc.nHead, tc.nHeadKV, tc.dk, tc.dv, n, mixed, a.Window, a.Sinks != nil)
					t.Run(name, func(t *testing.T) {
						flashCheck(t, r, be, ref, kv, &h, seq, pos, a)
					})
				}
			}
		}
	}
}

// flashCheck attends q (random) for the rows (seq, pos) of layer 1 with
// the tiled shader, cpu.Ref and the per-row shader, and compares.
func flashCheck(t *testing.T, r *rig, be *Backend, ref *cpu.Ref, kv *model.KVCache, h *model.Hyper, seq, pos []int32, a model.Attn) {
	t.Helper()
	n := len(seq)
	q := r.floats(n * h.QDim())
	size := n * h.NHead * h.HeadDimV
	want := make([]float32, size)
	ref.Attention(want, q, kv, 1, seq, pos, h, a)
	full, mid := guardedOut(be, size, nil)
	be.Attention(mid, q, kv, 1, seq, pos, h, a)
	got := checkGuarded(t, be, full, size)
	if e := nmse(got, want); e > nmseDefault {
		t.Errorf("tiled vs cpu.Ref: NMSE %.3g > %g", e, nmseDefault)
	}
	// the per-row shader, one row a call
	rowQ, rowO := h.NHead*h.HeadDimK, h.NHead*h.HeadDimV
	rows := make([]float32, size)
	for i := range n {
		be.Attention(rows[i*rowO:(i+1)*rowO], q[i*rowQ:(i+1)*rowQ], kv, 1, seq[i:i+1], pos[i:i+1], h, a)
	}
	if err := be.ToHost(rows); err != nil {
		t.Fatal(err)
	}
	if e := nmse(got, rows); e > nmseDefault {
		t.Errorf("tiled vs per-row shader: NMSE %.3g > %g", e, nmseDefault)
	}
}

// TestFlashAttentionUnusedCells: cells between two rows' windows that no
// row of the tile attends hold NaN in K and V (as a cell never written
// could); the tiled shader walks past them (it loads the cells from the
// smallest window start to the largest position of the tile's rows) and
// must give cpu.Ref's finite result, which reads only each row's window.
func TestFlashAttentionUnusedCells(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	const nCtx, filled = 80, 70
	h := model.Hyper{NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64}
	for _, kt := range []model.KVType{model.KVF32, model.KVF16} {
		kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: kt, V: kt}, nCtx, 1)
		if err != nil {
			t.Fatal(err)
		}
		seq, pos := make([]int32, filled), make([]int32, filled)
		for i := range pos {
			pos[i] = int32(i)
		}
		k, v := r.floats(filled*h.KDim()), r.floats(filled*h.VDim())
		nan := float32(math.NaN())
		for j := 20; j < 50; j++ { // no row below attends [20, 50)
			for i := range h.KDim() {
				k[j*h.KDim()+i] = nan
			}
			for i := range h.VDim() {
				v[j*h.VDim()+i] = nan
			}
		}
		if err := kv.Store(1, seq, pos, k, v); err != nil {
			t.Fatal(err)
		}
		be.StoreKV(kv, 1, seq, pos, k, v)
		t.Run(fmt.Sprintf("kv=%s", kt), func(t *testing.T) {
			// windows of 6: [7, 12], [8, 13], [50, 55], [64, 69]
			flashCheck(t, r, be, ref, kv, &h, []int32{0, 0, 0, 0}, []int32{12, 13, 55, 69}, model.Attn{Scale: 0.125, Window: 6})
		})
	}
}
