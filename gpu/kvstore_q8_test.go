//go:build cgo

package gpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestKVStoreQ8_0Exact stores rows through kv_store_q8_0 into cells of a
// cache on the device and checks every cache byte against
// quant.QuantizeRowQ8_0 (the CPU cache's q8_0 conversion) of the same row,
// and that the cells not written keep their bytes. The rows mix random
// values of several magnitudes with blocks made to hit the edge cases:
// all zeros, a ±Inf, values whose x·(127/amax) lands on .5 (ties go to
// even), one large value among tiny ones, amax that rounds d up.
func TestKVStoreQ8_0Exact(t *testing.T) {
	r := newRig(t)
	const dim, nCtx, nSeq = 256, 8, 2
	rowBytes := dim / 32 * 34
	rows := [][]float32{}
	for _, scale := range []float32{1, 1e-3, 300, 6e4} {
		x := r.floats(dim)
		for i := range x {
			x[i] *= scale
		}
		rows = append(rows, x)
	}
	edge := make([]float32, dim) // block 0 all zeros
	for j := range 32 {
		edge[32+j] = float32(j-16) + 0.5  // amax 127 (below): id 1, every x·id a tie
		edge[64+j] = 1e-6 * float32(j+1)  // tiny
		edge[96+j] = float32(j) / 254     // amax 31/254
		edge[128+j] = -float32(j) / 31    // amax 1: id 127
		edge[160+j] = float32(j%7) * 0.37 // repeated values
	}
	edge[32] = 127
	edge[64+5] = 1000                  // one large value among tiny ones
	edge[192] = float32(math.Inf(1))   // ±Inf: d = Inf, id = 0
	edge[193] = float32(math.Inf(-1))  //
	edge[224] = 65504 * 127 / 126.9999 // d near fp16's largest
	rows = append(rows, edge)
	n := len(rows)
	src := make([]float32, 0, n*dim)
	for _, x := range rows {
		src = append(src, x...)
	}
	idx := make([]int32, 0, 2*n)
	for i := range n {
		idx = append(idx, int32(i%nSeq), int32(nCtx-1-i)) // cells out of order
	}
	idxBytes := make([]byte, 4*len(idx))
	for i, v := range idx {
		binary.LittleEndian.PutUint32(idxBytes[4*i:], uint32(v))
	}
	// the cache starts as a pattern, to see which bytes are written
	cache := make([]byte, nSeq*nCtx*rowBytes)
	for i := range cache {
		cache[i] = byte(i*31 + 7)
	}
	want := bytes.Clone(cache)
	for i, x := range rows {
		cell := int(idx[2*i])*nCtx + int(idx[2*i+1])
		quant.QuantizeFunc(quant.Q8_0)(x, want[cell*rowBytes:(cell+1)*rowBytes])
	}
	dst := F32{Buf: r.buffer(cache)}
	sb := F32{Buf: r.buffer(f32bytes(append(make([]float32, 3), src...))), Off: 3}
	ib := F32{Buf: r.buffer(idxBytes)}
	r.run(func(cb *vk.CommandBuffer) error { return r.k.KVStoreQ8_0(cb, dst, sb, ib, n, dim, nCtx) })
	got := f32bytes(r.read(dst, len(cache)/4))[:len(cache)]
	for i := range want {
		if got[i] != want[i] {
			cell, off := i/rowBytes, i%rowBytes
			t.Fatalf("cache byte %d (cell %d, block %d, byte %d): %#x, want %#x", i, cell, off/34, off%34, got[i], want[i])
		}
	}
	for _, bad := range []int{0, 32, 96} {
		if err := r.k.KVStoreQ8_0(r.cb, dst, sb, ib, n, bad, nCtx); err == nil {
			t.Errorf("KVStoreQ8_0 took rows of %d values", bad)
		}
	}
}

// TestBackendAttentionQ8_0 is TestBackendAttention on q8_0 caches: rows
// stored through the backend (kv_store_q8_0) and the CPU's cache, the
// backend's attention (attn_q8_0) against cpu.Ref's on the CPU's cache.
// (The rotation llama.cpp applies to heads of a multiple of 64 is the
// model's, before StoreKV: TestBackendGreedyQ8KV.)
func TestBackendAttentionQ8_0(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	const nCtx, filled = 96, 70
	for _, hd := range []int{32, 96, 64, 128} {
		h := model.Hyper{NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: hd, HeadDimV: hd}
		kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: model.KVQ8_0, V: model.KVQ8_0}, nCtx, 2)
		if err != nil {
			t.Fatal(err)
		}
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
			t.Run(fmt.Sprintf("head=%d/window=%d/sinks=%v", hd, a.Window, a.Sinks != nil), func(t *testing.T) {
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

// TestHadamard: Backend.Hadamard (hadamard.comp) equals quant.Hadamard
// piece by piece, bit for bit, for the piece sizes llama.cpp's rotation
// uses, between guard floats.
func TestHadamard(t *testing.T) {
	r, be := newOpsBackend(t)
	for _, n := range []int{64, 128, 256, 1024} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			x := r.floats(5 * n)
			want := slices.Clone(x)
			for i := 0; i < len(want); i += n {
				quant.Hadamard(want[i : i+n])
			}
			full, mid := guardedOut(be, len(x), x)
			be.Hadamard(mid, n)
			got := checkGuarded(t, be, full, len(x))
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("value %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
	if err := r.k.Hadamard(r.cb, F32{Buf: r.buffer(make([]byte, 4*96))}, 1, 96); err == nil {
		t.Error("Hadamard took pieces of 96")
	}
}

// TestBackendGreedyQ8KV: the demo preset (random F32 weights, whose
// products cpu.Ref and the device both make in float32) on the Vulkan
// backend with a q8_0 KV cache gives cpu.Ref's greedy tokens and prompt
// logits (1e-3, as TestBackendGreedyStories), with heads of 32 (stored as they are) and of
// 64 (rotated in pieces of 64 as llama.cpp's attn_rot: Backend.Hadamard).
func TestBackendGreedyQ8KV(t *testing.T) {
	r := newRig(t)
	for _, hd := range []int{32, 64} {
		t.Run(fmt.Sprintf("head=%d", hd), func(t *testing.T) {
			s, err := synth.Preset("demo")
			if err != nil {
				t.Fatal(err)
			}
			s.HeadDim, s.NHead, s.NHeadKV = hd, 256/hd, 128/hd
			path := filepath.Join(t.TempDir(), "demo.gguf")
			if err := synth.WriteFile(path, s, synth.Options{Mix: "F32", Seed: 3}); err != nil {
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
			types := model.KVTypes{K: model.KVQ8_0, V: model.KVQ8_0}
			// cpu.Ref, not cpu.Backend: the Backend sums q8_0 V rows with
			// the softmax weights quantized to integers (Kernels.AttnSumQ),
			// which the device does not; Ref's attention is float32 on the
			// dequantized cache, as attn_q8_0
			cc, err := m.NewContextOf(cpu.NewRef(), types, 64, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			if rot := cc.KV.Layer(0).RotK; (rot > 0) != (hd%64 == 0) {
				t.Fatalf("heads of %d: RotK %d", hd, rot)
			}
			prompt := []int32{1, 40, 77, 300, 5, 9}
			const n = 24
			want, wantL := greedy(t, cc, prompt, n)
			be, err := NewBackend(r.d, m)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			gc, err := m.NewContextOf(be, types, 64, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			got, gotL := greedy(t, gc, prompt, n)
			if !slices.Equal(got, want) {
				t.Errorf("greedy tokens on the GPU\n%v\nCPU\n%v", got, want)
			}
			var maxd float64
			for i := range wantL {
				if math.IsNaN(float64(gotL[i])) || math.IsInf(float64(gotL[i]), 0) {
					t.Fatalf("logit %d is %v", i, gotL[i])
				}
				maxd = max(maxd, math.Abs(float64(gotL[i]-wantL[i])))
			}
			if maxd > 1e-3 {
				t.Errorf("prompt logits: max |Δ| %.3g against the CPU's", maxd)
			}
			t.Logf("prompt logits: max |Δ| %.3g; greedy tokens equal: %v", maxd, slices.Equal(got, want))
		})
	}
}
