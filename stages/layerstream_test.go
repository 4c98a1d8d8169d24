package stages_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
	"github.com/flowinfer/flowinfer/stages"
)

// TestStreamedLayersBitIdentical: with a budget below the model's resident
// size, layers stream from disk through a few layer slots (packed by the
// uploader), and the logits are bit-identical to the fully resident run:
// dense families (llama, qwen2 biases, qwen3 QK-norm), packed and unpacked
// types, and a MoE model whose attention streams along with its experts;
// budgets from "every layer streams through two slots" up; prefill in one
// step and in chunks, three sequences decoding together; a gpt-oss file
// (attention biases and sinks, MXFP4 experts with resident biases); and
// qwen35moe and qwen3next files (gated delta net layers' projections,
// qwen3next's fused ssm_in and ssm_ba, the shared expert stream with
// their layer; its one-row gate and the router stay resident).
func TestStreamedLayersBitIdentical(t *testing.T) {
	dir, _ := golden.Load(t)
	var paths []string
	for _, name := range []string{"synth-llama-Q4_K_M.gguf", "synth-qwen2-Q8_0.gguf", "synth-qwen3-F32.gguf", "synth-qwen3moe-Q4_K_M.gguf"} {
		paths = append(paths, filepath.Join(dir, "models", name))
	}
	paths = append(paths, gptOssFile(t, quant.Q8_0),
		presetFile(t, "qwen35moe-small", synth.Options{Mix: "Q4_K_M", Seed: 1}),
		presetFile(t, "qwen3next-small", synth.Options{Mix: "Q4_K_M", Seed: 1}))
	for _, path := range paths {
		name := filepath.Base(path)
		m, tok := openModel(t, path)
		ref := residentRef(t, m)
		for _, maxBatch := range []int{64, 5} {
			want, _ := runLogits(t, m, tok, ref, nil, maxBatch)
			// every layer through one slot (the golden models have two
			// layers: each layer evicts the other, every step reads
			// both), through two slots (both stay once read), the
			// first layer resident with three slots; pread and io_uring
			for _, lc := range []struct {
				resident, slots int
				engine          configs.IOEngine
			}{{0, 1, ""}, {0, 2, ""}, {1, 3, ""}, {0, 1, "io_uring"}} {
				t.Run(fmt.Sprintf("%s/batch=%d/resident=%d/slots=%d/engine=%s", name, maxBatch, lc.resident, lc.slots, lc.engine), func(t *testing.T) {
					be := cpu.NewBackend(2, nil)
					defer be.Close()
					cfg := stages.WeightConfig{QueueDepth: 3, Engine: lc.engine}
					stages.ForceLayerStreaming(&cfg, lc.resident, lc.slots)
					wp, err := stages.NewWeightPath(m, path, be, cfg)
					if errors.Is(err, nvme.ErrNoURing) {
						t.Skip(err)
					}
					if err != nil {
						t.Fatal(err)
					}
					defer wp.Close()
					lp := wp.Plan()
					if lp.Layers != m.NLayer-lc.resident || lp.LayerSlots != lc.slots {
						t.Fatalf("plan: %d layers stream through %d slots", lp.Layers, lp.LayerSlots)
					}
					if _, err := be.PackModel(m, false, wp.StreamsLayer); err != nil {
						t.Fatal(err)
					}
					got, finals := runLogits(t, m, tok, be, wp, maxBatch)
					for i, ev := range finals {
						if ev.Err != nil {
							t.Fatalf("request %d: %v", i, ev.Err)
						}
					}
					sameLogits(t, got, want, m.NVocab)
					st := wp.Stats()
					if st.BytesRead < lp.LayerFile {
						t.Errorf("%d bytes read, less than one pass over the streamed layers (%d)", st.BytesRead, lp.LayerFile)
					}
					if lp.Layers > lp.LayerSlots && st.LayersWaited+st.LayersReady == 0 {
						t.Errorf("no layer was acquired")
					}
					t.Logf("%d of %d layers stream through %d slots; %d layers ready, %d waited for; %d bytes read",
						lp.Layers, m.NLayer, lp.LayerSlots, st.LayersReady, st.LayersWaited, st.BytesRead)
				})
			}
		}
	}
}

// TestStreamedLayerReadErrorFailsRequests: a failed layer read fails the
// requests of the step that needed it, with the reader's error.
func TestStreamedLayerReadErrorFailsRequests(t *testing.T) {
	dir, _ := golden.Load(t)
	path := filepath.Join(t.TempDir(), "m.gguf")
	copyFile(t, filepath.Join(dir, "models", "synth-llama-Q8_0.gguf"), path)
	m, tok := openModel(t, path)
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	var cfg stages.WeightConfig
	stages.ForceLayerStreaming(&cfg, 0, 2)
	wp, err := stages.NewWeightPath(m, path, be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close()
	runChangedFile(t, path, m, tok, be, wp)
}
