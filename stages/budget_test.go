package stages_test

import (
	"testing"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// budgetHyper is a small model: 2 layers, 2 KV heads of headDim, so an
// f16 token is 2 × 2 × 2 × headDim × 2 bytes (512 for heads of 32).
func budgetHyper(headDim int, moe bool) *model.Hyper {
	h := &model.Hyper{NVocab: 100, NEmbd: 64, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: headDim, HeadDimV: headDim, NFF: 128}
	if moe {
		h.NFFExp, h.NExpert, h.NExpertUsed = 256, 8, 2
	}
	return h
}

// TestWeightBudget pins the arithmetic of the default weight budget: the
// limit less the KV cache, its recent windows, the activations (logits and
// per-layer scratch in f32 per batch token) and Headroom.
func TestWeightBudget(t *testing.T) {
	const gib = 1 << 30
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	tq4 := model.KVTypes{K: model.KVTQ4, V: model.KVTQ4, Recent: model.DefaultKVRecent}
	dense, moe, narrow := budgetHyper(32, false), budgetHyper(32, true), budgetHyper(8, false)
	denseAct := int64(100+12*64+2*128) * 4    // per batch token
	moeAct := int64(100+12*64+2*256+2*64) * 4 // NFFExp > NFF, NExpertUsed rows
	tests := []struct {
		name  string
		limit int64
		h     *model.Hyper
		kv    model.KVTypes
		f     stages.Footprint
		want  int64
	}{
		{"f16", gib, dense, f16, stages.Footprint{Cells: 4096, MaxBatch: 512},
			gib - 4096*512 - 512*denseAct - stages.Headroom},
		{"four sequences' cells", gib, dense, f16, stages.Footprint{Cells: 4 * 4096, Running: 4, MaxBatch: 512},
			gib - 4*4096*512 - 512*denseAct - stages.Headroom},
		{"blocks wider than the heads count as f32", gib, narrow, model.KVTypes{K: model.KVQ8_0, V: model.KVQ8_0}, stages.Footprint{Cells: 4096, MaxBatch: 1},
			gib - 4096*(2*2*2*8*4) - denseAct - stages.Headroom},
		{"moe activations", gib, moe, f16, stages.Footprint{Cells: 1000, MaxBatch: 8},
			gib - 1000*512 - 8*moeAct - stages.Headroom},
		{"nothing fits", 300 << 20, dense, f16, stages.Footprint{Cells: 1 << 20, MaxBatch: 512},
			300<<20 - (1<<20)*512 - 512*denseAct - stages.Headroom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stages.WeightBudget(tc.limit, tc.h, tc.kv, tc.f); got != tc.want {
				t.Errorf("WeightBudget = %d, want %d", got, tc.want)
			}
		})
	}
	// the recent windows come off the budget too (their size is model's
	// arithmetic)
	f := stages.Footprint{Cells: 8192, Running: 2, MaxBatch: 64, BlockSize: 16}
	win := model.KVRecentReserve(dense, tq4, 2, 64, 16, 8192)
	if win <= 0 {
		t.Fatalf("no recent windows for %v", tq4)
	}
	if got, want := stages.WeightBudget(gib, dense, tq4, f), gib-stages.KVBytes(dense, tq4, 8192)-win-64*denseAct-stages.Headroom; got != want {
		t.Errorf("with recent windows: %d, want %d", got, want)
	}
}

// TestEngineFootprint: an engine's footprint follows NewEngine's defaults.
func TestEngineFootprint(t *testing.T) {
	tests := []struct {
		c    stages.Config
		want stages.Footprint
	}{
		{stages.Config{NCtx: 512, MaxBatch: 64}, stages.Footprint{Cells: 512, Running: 1, MaxBatch: 64, BlockSize: 16, NCtx: 512}},
		{stages.Config{NCtx: 512, NSeq: 4, MaxBatch: 64}, stages.Footprint{Cells: 2048, Running: 4, MaxBatch: 64, BlockSize: 16, NCtx: 512}},
		{stages.Config{NCtx: 512, NSeq: 4, MaxBatch: 64, KVTokens: 1000, BlockSize: 32}, stages.Footprint{Cells: 1000, Running: 4, MaxBatch: 64, BlockSize: 32, NCtx: 512}},
	}
	for _, tc := range tests {
		if got := stages.EngineFootprint(tc.c); got != tc.want {
			t.Errorf("EngineFootprint(%+v) = %+v, want %+v", tc.c, got, tc.want)
		}
	}
}

// TestKVCapacityFor: a KV byte budget holds whole cells after the windows.
func TestKVCapacityFor(t *testing.T) {
	h := budgetHyper(32, false)
	p, err := stages.KVCapacityFor(h, model.KVTypes{K: model.KVF16, V: model.KVF16}, 1<<20+100, 4, 4096, 512, 16, 0)
	if err != nil || p != (stages.KVCapacity{Tokens: 2048, PerToken: 512}) {
		t.Errorf("f16: %+v, %v", p, err)
	}
	tq4 := model.KVTypes{K: model.KVTQ4, V: model.KVTQ4, Recent: model.DefaultKVRecent}
	p, err = stages.KVCapacityFor(h, tq4, 1<<20, 4, 4096, 512, 16, 0)
	per, _ := model.KVBytesPerToken(h, tq4)
	if err != nil || p.Windows <= 0 || p.PerToken != per || p.Tokens != int((1<<20-p.Windows)/int64(per)) {
		t.Errorf("tq4 with recent windows: %+v, %v", p, err)
	}
	if _, err := stages.KVCapacityFor(budgetHyper(8, false), model.KVTypes{K: model.KVQ8_0, V: model.KVF16}, 1<<20, 1, 4096, 1, 16, 0); err == nil {
		t.Error("q8_0 on heads of 8: no error")
	}
}

// TestSWABudget: a model with sliding-window layers counts their rings,
// not a cell per token, in the weights' budget and in a KV byte budget,
// exactly as model.KVCacheBytes sizes them, and the window checkpoints
// the default budget holds.
func TestSWABudget(t *testing.T) {
	h := budgetHyper(32, false)
	h.Window = make([]int, h.NLayer)
	for l := range h.NLayer {
		if l%2 == 0 {
			h.Window[l] = 256
		}
	}
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	const nCtx, nSeq, batch = 4096, 2, 64
	ring := model.SWARingRows(f16, 256, batch, nCtx)
	if ring != 320 {
		t.Fatalf("ring of window 256, batch 64: %d rows, want 320", ring)
	}
	full, _ := model.KVBytesPerToken(h, f16)
	perLayer := int64(full / h.NLayer)
	nFull, nRing := int64(h.NLayer-h.NLayer/2-h.NLayer%2), int64(h.NLayer/2+h.NLayer%2)
	want := nFull*perLayer*nSeq*nCtx + nRing*perLayer*nSeq*int64(ring)
	f := stages.Footprint{Cells: nSeq * nCtx, Running: nSeq, MaxBatch: batch, BlockSize: 16, NCtx: nCtx}
	denseAct := stages.ActBytes(h, batch)
	// the window checkpoints the default budget holds (Config.Checkpoints)
	ckCfg := stages.Config{KVTypes: f16, NCtx: nCtx, MaxBatch: batch}
	per, err := ckCfg.CheckpointBytes(h)
	if err != nil || per != int64(nRing)*int64((256-2)/16+2)*16*perLayer {
		t.Fatalf("a window checkpoint: %d bytes (%v), want %d: each window layer's tiles holding 255 rows", per, err, int64(nRing)*int64((256-2)/16+2)*16*perLayer)
	}
	ck := int64(ckCfg.Checkpoints(h)) * per
	if ck == 0 {
		t.Fatal("no window checkpoints by default")
	}
	const gib = 1 << 30
	if got := stages.WeightBudget(gib, h, f16, f); got != gib-want-ck-denseAct-stages.Headroom {
		t.Errorf("weight budget %d, want %d (KV %d, window checkpoints %d)", got, gib-want-ck-denseAct-stages.Headroom, want, ck)
	}
	p, err := stages.KVCapacityFor(h, f16, want, nSeq, nCtx, batch, 16, 0)
	if err != nil || p.Rings != nRing*perLayer*nSeq*int64(ring) || p.PerToken != int(nFull*perLayer) || p.Tokens != nSeq*nCtx {
		t.Errorf("capacity of %d bytes: %+v, %v; want %d tokens of %d bytes after %d of rings", want, p, err, nSeq*nCtx, nFull*perLayer, nRing*perLayer*nSeq*int64(ring))
	}
}
