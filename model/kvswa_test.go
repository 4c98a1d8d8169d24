package model_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// loadWindowed loads stories260K with sliding windows of w on its even
// layers (the odd ones stay full).
func loadWindowed(t *testing.T, w int) *model.Model {
	t.Helper()
	f, err := gguf.Open(filepath.Join(golden.Dir(t), "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	m.Hyper.Window = make([]int, m.NLayer)
	for l := 0; l < m.NLayer; l += 2 {
		m.Hyper.Window[l] = w
	}
	return m
}

// TestSWARingMatchesFull: a context whose window layers keep rings (steps
// of up to 16 rows: rings of 48 rows for a window of 20) gives, step after
// step up to 200 positions of two sequences, exactly the logits of one
// whose window layers keep every cell (steps of up to 256 rows: no ring),
// on Ref and on the SIMD backend, contiguous and block-addressed caches.
func TestSWARingMatchesFull(t *testing.T) {
	const w, nCtx = 20, 256
	m := loadWindowed(t, w)
	for _, ops := range []func() model.Ops{func() model.Ops { return cpu.NewRef() }, func() model.Ops { return cpu.NewBackend(2, nil) }} {
		for _, blocks := range []bool{false, true} {
			name := fmt.Sprintf("%T/blocks=%v", ops(), blocks)
			mk := func(maxBatch int) *model.Context {
				var kv *model.KVCache
				var err error
				if blocks {
					kv, err = model.NewBlockKVCache(&m.Hyper, model.KVTypes{}, 16, nCtx, 2)
				} else {
					kv, err = model.NewKVCacheOf(&m.Hyper, model.KVTypes{}, nCtx, 2)
				}
				if err != nil {
					t.Fatal(err)
				}
				ctx, err := m.NewContextKV(ops(), kv, maxBatch)
				if err != nil {
					t.Fatal(err)
				}
				return ctx
			}
			ring, full := mk(16), mk(nCtx)
			if got := ring.KV.Ring(0); got != 48 || ring.KV.Ring(1) != 0 || full.KV.Ring(0) != 0 {
				t.Fatalf("%s: rings %d, %d, %d; want 48 for a window layer, none for a full layer or steps of 256", name, got, ring.KV.Ring(1), full.KV.Ring(0))
			}
			if ring.KV.Bytes() >= full.KV.Bytes() {
				t.Errorf("%s: the rings' cache is %d bytes, the full one %d", name, ring.KV.Bytes(), full.KV.Bytes())
			}
			// steps of 1 to 8 rows of each sequence, sequence 1 lagging
			var p [2]int
			step := 0
			for p[0] < 200 {
				var b model.Batch
				for s := range 2 {
					n := 1 + (step*3+s*5)%8
					if p[s] < 24 {
						n = 8 // prefill: whole steps
					}
					n = min(n, 200-p[s])
					for range n {
						b.Tokens = append(b.Tokens, int32((p[s]*7+s*13)%m.NVocab))
						b.Pos = append(b.Pos, int32(p[s]))
						b.Seq = append(b.Seq, int32(s))
						p[s]++
					}
				}
				b.Logits = make([]bool, b.Len())
				for i := range b.Logits {
					b.Logits[i] = i == 0 || b.Seq[i] != b.Seq[i-1] || i+1 == b.Len() || b.Seq[i+1] != b.Seq[i]
				}
				a, err := ring.Decode(&b)
				if err != nil {
					t.Fatalf("%s: step %d: %v", name, step, err)
				}
				a = slices.Clone(a)
				f, err := full.Decode(&b)
				if err != nil {
					t.Fatalf("%s: step %d: %v", name, step, err)
				}
				if !slices.Equal(a, f) {
					t.Fatalf("%s: step %d (positions up to %v): logits differ from the full cache's", name, step, p)
				}
				step++
			}
		}
	}
}

// TestSWARewind: a window layer's ring refuses a step whose queries need
// rows it has overwritten (a sequence rewound too far), allows a short
// rewind and a restart from position 0.
func TestSWARewind(t *testing.T) {
	m := loadWindowed(t, 20)
	ctx, err := m.NewContextOf(cpu.NewRef(), model.KVTypes{}, 256, 1, 8) // rings of 32
	if err != nil {
		t.Fatal(err)
	}
	dec := func(p0, n int) error {
		var b model.Batch
		for p := p0; p < p0+n; p++ {
			b.Tokens, b.Pos, b.Seq = append(b.Tokens, int32(p%m.NVocab)), append(b.Pos, int32(p)), append(b.Seq, 0)
		}
		_, err := ctx.Decode(&b)
		return err
	}
	for p := 0; p < 100; p += 8 {
		if err := dec(p, 8); err != nil {
			t.Fatal(err)
		}
	}
	// written up to 103: the rings hold positions 72... (32 rows)
	if err := dec(98, 1); err != nil {
		t.Errorf("a rewind to 98 (window from 79): %v", err)
	}
	if err := dec(90, 1); !errors.Is(err, model.ErrBatch) {
		t.Errorf("a rewind to 90 (window from 71, ring from 72 after writing 98): err %v", err)
	}
	if err := dec(0, 8); err != nil {
		t.Errorf("a restart from 0: %v", err)
	}
	if err := dec(10, 1); !errors.Is(err, model.ErrBatch) {
		t.Errorf("a gap (position 10 after 7): err %v", err)
	}
}

// TestSWACacheBytes: KVCache.Bytes of caches with rings is exactly
// model.KVCacheBytes of the rows they allocate, for a contiguous and a
// paged cache and quantized types.
func TestSWACacheBytes(t *testing.T) {
	h := model.Hyper{NLayer: 6, NHead: 8, NHeadKV: 4, HeadDimK: 64, HeadDimV: 64, Window: []int{100, 100, 0, 100, 100, 0}}
	for _, types := range []model.KVTypes{{}, {K: model.KVF16, V: model.KVF16}, {K: model.KVQ8_0, V: model.KVQ4_0}} {
		const nCtx, nSeq, batch = 1000, 3, 64
		c, err := model.NewKVCacheOf(&h, types, nCtx, nSeq)
		if err != nil {
			t.Fatal(err)
		}
		c.ReserveSWA(batch)
		want, err := model.KVCacheBytes(&h, types, nSeq*1008, nSeq, nCtx, batch) // 1000 rounded up to a tile
		if err != nil || c.Bytes() != want {
			t.Errorf("%s contiguous: Bytes %d, KVCacheBytes %d (%v)", types, c.Bytes(), want, err)
		}
		p, err := model.NewPagedKVCache(&h, types, 16, 100, nSeq, nCtx)
		if err != nil {
			t.Fatal(err)
		}
		p.ReserveSWA(batch)
		want, _ = model.KVCacheBytes(&h, types, 1792, nSeq, nCtx, batch) // 1600 rows rounded up to layout blocks of 256
		if p.Bytes() != want {
			t.Errorf("%s paged: Bytes %d, KVCacheBytes %d", types, p.Bytes(), want)
		}
		if r := model.SWARingRows(types, 100, batch, nCtx); c.Ring(0) != r || r != 176 {
			t.Errorf("ring %d (SWARingRows %d), want 176: 100+64-1 in whole tiles", c.Ring(0), r)
		}
	}
}

// TestGemma3KVBytes compares the KV cache of a Gemma-3-4B-shaped model at
// a context of 8192 (one sequence, f16, steps of 512) with llama.cpp's:
// 34 layers, 4 KV heads of 256 (llama.cpp's gemma3 loader, LLM_TYPE_4B at
// 34 layers; google/gemma-3-4b-it config.json: num_key_value_heads 4,
// head_dim 256, sliding_window 1024), every 6th layer global
// (llama_hparams::set_swa_pattern(6): il % 6 == 5), the others a window of
// 1024. llama.cpp (llama_kv_cache_iswa) keeps a full cache of n_ctx cells
// for the 5 global layers and one of GGML_PAD(min(n_ctx, n_swa + n_ubatch),
// 256) = 1536 cells for the 29 SWA layers; ours must be within 10% of it
// (or below). (KVCacheBytes is KVCache.Bytes exactly: TestSWACacheBytes.)
func TestGemma3KVBytes(t *testing.T) {
	h := model.Hyper{NLayer: 34, NHead: 8, NHeadKV: 4, HeadDimK: 256, HeadDimV: 256, Window: make([]int, 34)}
	global := 0
	for l := range h.NLayer {
		if l%6 < 5 {
			h.Window[l] = 1024
		} else {
			global++
		}
	}
	const nCtx, nUbatch, nSwa = 8192, 512, 1024
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	cell := int64(2 * h.NHeadKV * h.HeadDimK * 2) // K and V of one layer, f16
	pad := func(x, n int) int { return (x + n - 1) / n * n }
	llama := int64(global)*nCtx*cell + int64(h.NLayer-global)*int64(pad(min(nCtx, nSwa+nUbatch), 256))*cell
	ours, err := model.KVCacheBytes(&h, f16, quantWholeTiles(nCtx), 1, nCtx, nUbatch)
	if err != nil {
		t.Fatal(err)
	}
	full := int64(h.NLayer) * nCtx * cell
	t.Logf("Gemma-3-4B shape, -c 8192, f16: ours %d bytes (%.1f MiB), llama.cpp %d (%.1f MiB), without windows %d (%.1f MiB)",
		ours, float64(ours)/(1<<20), llama, float64(llama)/(1<<20), full, float64(full)/(1<<20))
	if float64(ours) > 1.1*float64(llama) {
		t.Errorf("ours %d bytes > 1.1 × llama.cpp's %d", ours, llama)
	}
	if global != 5 || llama != 350224384 {
		t.Errorf("llama.cpp's figure: %d global layers, %d bytes; want 5 and 350224384", global, llama)
	}
}

// quantWholeTiles is nCtx rounded up to a whole tile of 16 rows: a
// contiguous cache's rows per sequence.
func quantWholeTiles(n int) int { return (n + 15) / 16 * 16 }

// TestSWASaveRestore: after RestoreSWA the rings hold what they held at
// SaveSWA, so a step from the saved position gives the logits it gave the
// first time, although the steps between overwrote the whole ring.
func TestSWASaveRestore(t *testing.T) {
	m := loadWindowed(t, 20)
	ctx, err := m.NewContextOf(cpu.NewRef(), model.KVTypes{}, 256, 1, 8) // rings of 32
	if err != nil {
		t.Fatal(err)
	}
	dec := func(p0, n int) ([]float32, error) {
		var b model.Batch
		for p := p0; p < p0+n; p++ {
			b.Tokens, b.Pos, b.Seq = append(b.Tokens, int32(p%m.NVocab)), append(b.Pos, int32(p)), append(b.Seq, 0)
		}
		out, err := ctx.Decode(&b)
		return slices.Clone(out), err
	}
	for p := 0; p < 64; p += 8 {
		if _, err := dec(p, 8); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctx.KV.SaveSWA(0); err != nil {
		t.Fatal(err)
	}
	first, err := dec(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	for p := 64; p < 128; p += 8 { // overwrites every row of the rings
		if _, err := dec(p, 8); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dec(64, 1); !errors.Is(err, model.ErrBatch) {
		t.Fatalf("a rewind to 64 without the saved rings: err %v", err)
	}
	if ctx.KV.RestoreSWA(1) {
		t.Error("RestoreSWA of a sequence never saved reported true")
	}
	if !ctx.KV.RestoreSWA(0) {
		t.Fatal("RestoreSWA(0) reported false")
	}
	again, err := dec(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 || !slices.Equal(first, again) {
		t.Error("the logits after RestoreSWA differ from those at SaveSWA")
	}
}

// TestWindowCheckpoint: a window checkpoint (SaveCheckpoint) taken at
// position 64 and restored after the steps that overwrote the whole rings
// gives the step from 64 the logits it gave the first time, in each KV
// type's layout (f32, f16, TurboQuant K tiles); the pool is counted in
// Bytes, CheckpointPos says where a sequence stands, and a cache with
// --kv-recent rows refuses checkpoints.
func TestWindowCheckpoint(t *testing.T) {
	m := loadWindowed(t, 20)
	for _, types := range []model.KVTypes{{}, {K: model.KVF16, V: model.KVF16}, {K: model.KVTQ4, V: model.KVTQ3}} {
		ctx, err := m.NewContextOf(cpu.NewRef(), types, 256, 1, 8) // rings of 32
		if err != nil {
			t.Fatal(err)
		}
		before := ctx.KV.Bytes()
		if err := ctx.KV.ReserveCheckpoints(2); err != nil {
			t.Fatal(err)
		}
		per, err := model.WindowCheckpointBytes(&m.Hyper, types, 256, 8)
		if err != nil || per == 0 || ctx.KV.Bytes() != before+2*per || ctx.KV.Checkpoints() != 2 {
			t.Errorf("%s: 2 checkpoints of %d bytes (%v): Bytes %d, was %d; pool %d", types, per, err, ctx.KV.Bytes(), before, ctx.KV.Checkpoints())
		}
		dec := func(p0, n int) ([]float32, error) {
			var b model.Batch
			for p := p0; p < p0+n; p++ {
				b.Tokens, b.Pos, b.Seq = append(b.Tokens, int32(p%m.NVocab)), append(b.Pos, int32(p)), append(b.Seq, 0)
			}
			out, err := ctx.Decode(&b)
			return slices.Clone(out), err
		}
		for p := 0; p < 64; p += 8 {
			if _, err := dec(p, 8); err != nil {
				t.Fatal(err)
			}
		}
		if n := ctx.KV.CheckpointPos(0); n != 64 {
			t.Fatalf("%s: CheckpointPos %d, want 64", types, n)
		}
		ctx.KV.SaveCheckpoint(1, 0)
		first, err := dec(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		for p := 64; p < 128; p += 8 { // overwrites every row of the rings
			if _, err := dec(p, 8); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := dec(64, 1); !errors.Is(err, model.ErrBatch) {
			t.Fatalf("%s: a rewind to 64 without the checkpoint: err %v", types, err)
		}
		ctx.KV.RestoreCheckpoint(0, 1)
		if n := ctx.KV.CheckpointPos(0); n != 64 || !ctx.KV.SWAHolds(0, 64) {
			t.Errorf("%s: after the restore: CheckpointPos %d, SWAHolds(64) %v", types, n, ctx.KV.SWAHolds(0, 64))
		}
		again, err := dec(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(first) == 0 || !slices.Equal(first, again) {
			t.Errorf("%s: the logits after RestoreCheckpoint differ from those at SaveCheckpoint", types)
		}
	}
	recent := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 8}
	ctx, err := m.NewContextOf(cpu.NewRef(), recent, 256, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.KV.ReserveCheckpoints(2); err == nil || !strings.Contains(err.Error(), "kv-recent") {
		t.Errorf("checkpoints with --kv-recent rows: %v, want an error naming it", err)
	}
	if _, err := model.WindowCheckpointBytes(&m.Hyper, recent, 256, 8); err == nil {
		t.Error("WindowCheckpointBytes with --kv-recent rows: no error")
	}
}
