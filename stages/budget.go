// This file is the RAM arithmetic of a run: what the KV cache and the
// activations take beside the weights, hence the weight budget a memory
// limit leaves (when --ram-budget is 0), and the KV cells a byte budget
// holds (serve --kv-budget). It is pure arithmetic on hyperparameters:
// reading the machine's or cgroup's limit is the caller's (configs.MemoryLimit).

package stages

import "github.com/flowinfer/flowinfer/model"

// Headroom is RAM kept outside the weight budget for the Go runtime, the
// tokenizer, buffers of the server and the page cache of the mapping's few
// pages still used (embedding rows). Measured: llama-8b preset under a
// 3.22 GiB budget peaked at 3.27 GiB RSS (KV cache included), so 512 MiB
// left a fifth of a 2 GiB cap unused.
const Headroom = 256 << 20

// defaultBlockSize is Config.BlockSize's default, in NewEngine and in the
// budget arithmetic alike.
const defaultBlockSize = 16

// Footprint is what a run holds in RAM beside its weights.
type Footprint struct {
	// Cells is the KV cache's cells, all sequences together.
	Cells int
	// Running is the sequences running at once, whose recent f16 windows
	// (KVTypes.Recent) the cache keeps beside the cells [1].
	Running int
	// MaxBatch is the most tokens of one forward step.
	MaxBatch int
	// BlockSize is the KV cache's block size; 0: a contiguous cache (a
	// model.Context of one's own, as bench's).
	BlockSize int
	// NCtx is one sequence's context: with Running and MaxBatch it sizes
	// the rings of sliding-window layers (model.KVCacheBytes; 0: Cells).
	NCtx int
	// Checkpoints and CheckpointBytes are Config.StateCheckpoints and
	// StateCheckpointBytes: a hybrid model's recurrent-state checkpoints
	// and a sliding-window model's window checkpoints (Config.Checkpoints),
	// each of Config.CheckpointBytes.
	Checkpoints     int
	CheckpointBytes int64
}

// EngineFootprint is the footprint of an engine of config c, with
// NewEngine's defaults (one sequence, blocks of defaultBlockSize, a KV
// cache of NSeq × NCtx cells unless KVTokens says otherwise).
func EngineFootprint(c Config) Footprint {
	f := Footprint{Cells: c.KVTokens, Running: max(c.NSeq, 1), MaxBatch: c.MaxBatch, BlockSize: c.BlockSize, NCtx: c.NCtx, Checkpoints: c.StateCheckpoints, CheckpointBytes: c.StateCheckpointBytes}
	if f.Cells <= 0 {
		f.Cells = f.Running * c.NCtx
	}
	if f.BlockSize <= 0 {
		f.BlockSize = defaultBlockSize
	}
	return f
}

// WeightBudget returns the bytes of weights that fit in limit beside the
// KV cache of types kv, its recent windows, the activations and Headroom,
// for a model of hyperparameters h and a run of footprint f (a hybrid
// model's recurrent state for its sequences included); zero or less when
// nothing does.
func WeightBudget(limit int64, h *model.Hyper, kv model.KVTypes, f Footprint) int64 {
	return limit - footprintKVBytes(h, kv, f) -
		model.KVRecentReserve(h, kv, max(f.Running, 1), f.MaxBatch, f.BlockSize, f.Cells) -
		ActBytes(h, f.MaxBatch) - Headroom
}

// KVBytes is the size of a KV cache of cells cells of types kv (f32's if
// the model's heads do not fit kv: the cache itself then refuses to be
// made, naming why).
func KVBytes(h *model.Hyper, kv model.KVTypes, cells int) int64 {
	per, err := model.KVBytesPerToken(h, kv)
	if err != nil {
		per = h.NLayer * (h.KDim() + h.VDim()) * 4
	}
	return int64(cells) * int64(per)
}

// footprintKVBytes is the KV cache of footprint f in types kv: its cells
// in the full layers, the sliding-window layers' rings and a hybrid
// model's recurrent state with its checkpoints (model.KVCacheBytes), or
// KVBytes when the heads do not fit kv.
func footprintKVBytes(h *model.Hyper, kv model.KVTypes, f Footprint) int64 {
	nCtx := f.NCtx
	if nCtx <= 0 {
		nCtx = f.Cells
	}
	cfg := Config{StateCheckpoints: f.Checkpoints, StateCheckpointBytes: f.CheckpointBytes, KVTypes: kv, NCtx: nCtx, MaxBatch: max(f.MaxBatch, 1)}
	per, _ := cfg.CheckpointBytes(h) // an error: Checkpoints is 0
	ck := int64(cfg.Checkpoints(h)) * per
	n, err := model.KVCacheBytes(h, kv, f.Cells, max(f.Running, 1), nCtx, max(f.MaxBatch, 1))
	if err != nil {
		return KVBytes(h, kv, f.Cells) + ck
	}
	return n + ck
}

// ActBytes estimates a context's scratch for batches of maxBatch tokens:
// the logits and the per-layer activations, in f32.
func ActBytes(h *model.Hyper, maxBatch int) int64 {
	w := int64(h.NVocab) + 12*int64(h.NEmbd) + 2*int64(h.FFWidth()) + int64(h.NExpertUsed)*int64(h.NEmbd)
	return int64(maxBatch)*w*4 + model.HybridActBytes(h, maxBatch) + model.Gemma4ActBytes(h, maxBatch)
}

// KVCapacity is what a byte budget for the KV cache holds (serve --kv-budget).
type KVCapacity struct {
	Tokens   int   // cells that fit
	PerToken int   // bytes of one cell, all layers without a sliding-window ring
	Windows  int64 // bytes of the recent f16 windows, taken first
	Rings    int64 // bytes of the sliding-window layers' rings and a hybrid model's recurrent state, and the prefix checkpoints (both kinds), taken first too
}

// KVCapacityFor returns what budget bytes of KV cache hold in types kv, for nSeq
// sequences of nCtx positions at once, batches of maxBatch and blocks of
// blockSize: the recent windows and the sliding-window layers' rings
// (and a hybrid model's recurrent state, and checkpoints prefix
// checkpoints of model.CheckpointBytes each, Config.Checkpoints) first (the windows sized for as many
// cells as the whole budget would hold), then as many cells as the rest
// holds.
func KVCapacityFor(h *model.Hyper, kv model.KVTypes, budget int64, nSeq, nCtx, maxBatch, blockSize, checkpoints int) (KVCapacity, error) {
	per, err := model.SWAFullBytesPerToken(h, kv, nCtx, maxBatch)
	if err != nil {
		return KVCapacity{}, err
	}
	rings, err := model.KVCacheBytes(h, kv, 0, nSeq, nCtx, maxBatch)
	if err != nil {
		return KVCapacity{}, err
	}
	if checkpoints > 0 {
		per, err := model.CheckpointBytes(h, kv, nCtx, maxBatch)
		if err != nil {
			return KVCapacity{}, err
		}
		rings += int64(checkpoints) * per
	}
	if per == 0 { // every layer is a ring: cells cost nothing more
		return KVCapacity{Tokens: nSeq * nCtx, Rings: rings}, nil
	}
	win := model.KVRecentReserve(h, kv, nSeq, maxBatch, blockSize, int(budget/int64(per)))
	return KVCapacity{Tokens: int(max(budget-win-rings, 0) / int64(per)), PerToken: per, Windows: win, Rings: rings}, nil
}
