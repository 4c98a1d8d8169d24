//go:build cgo

package stages_test

import (
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/gpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// countingTopK is the Vulkan backend with its TopK calls counted.
type countingTopK struct {
	*gpu.Backend
	calls, maxK int
}

func (c *countingTopK) TopK(logits []float32, rows, nVocab, k int, ids []int32, vals []float32) error {
	c.calls++
	c.maxK = max(c.maxK, k)
	return c.Backend.TopK(logits, rows, nVocab, k, ids, vals)
}

// TestGPUTopKSamplesAsWholeRows: stories260K on the Vulkan backend
// (lavapipe here) through the stage graph, two requests in one batch,
// generates the same tokens when the sampled rows' top k is ranked on the
// device and only k pairs are read back as when whole rows are read back,
// greedy and sampled with a seed (the default chain; top-k with
// penalties); rows that need the whole distribution (no top-k, logprobs)
// never use the reduction.
func TestGPUTopKSamplesAsWholeRows(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	defer in.Close()
	dev, err := in.OpenDevice(0, vk.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	fx := load(t, "stories260K.gguf")
	def := sample.DefaultParams()
	def.Seed = 11
	pen := sample.Params{Temperature: 1, TopK: 8, TopP: 0.9, RepeatPenalty: 1.3, RepeatLastN: 16, Seed: 5}
	noTopK := sample.Params{Temperature: 1, TopP: 0.9, RepeatPenalty: 1, Seed: 2}
	for _, c := range []struct {
		name     string
		p        sample.Params
		logprobs bool
		wantK    int // the largest k asked; 0: no reduction
	}{
		{"greedy", greedy(), false, 1},
		{"default", def, false, 40},
		{"penalties", pen, false, 8 + 16},
		{"no top-k", noTopK, false, 0},
		{"logprobs", greedy(), true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(on bool) ([][]int32, *countingTopK) {
				be, err := gpu.NewBackend(dev, fx.m)
				if err != nil {
					t.Fatal(err)
				}
				defer be.Close()
				be.SetTopK(on)
				ops := &countingTopK{Backend: be}
				e, err := stages.NewEngine(fx.m, fx.tok, ops, stages.Config{NCtx: 128, NSeq: 2}, nil)
				if err != nil {
					t.Fatal(err)
				}
				toks := make([][]int32, 2)
				var reqs []*stages.Request
				for i, prompt := range []string{"Once upon a time", "The little dog"} {
					reqs = append(reqs, &stages.Request{ID: uint64(i + 1), Prompt: fx.tok.Encode(prompt, true, true), Params: c.p,
						MaxTokens: 24, IgnoreEOG: true, Logprobs: c.logprobs,
						Emit: func(ev stages.Event) error {
							if ev.Token >= 0 {
								toks[i] = append(toks[i], ev.Token)
							}
							return nil
						}})
				}
				if err := runEngine(t, e, reqs...); err != nil {
					t.Fatal(err)
				}
				return toks, ops
			}
			want, off := run(false)
			got, on := run(true)
			if off.calls != 0 {
				t.Errorf("reduction off: %d TopK calls", off.calls)
			}
			for i := range want {
				if len(want[i]) != 24 || !slices.Equal(got[i], want[i]) {
					t.Errorf("request %d: top-k rows gave %v, whole rows %v", i+1, got[i], want[i])
				}
			}
			if c.wantK == 0 && on.calls != 0 || c.wantK > 0 && (on.calls == 0 || on.maxK != c.wantK) {
				t.Errorf("%d TopK calls, largest k %d; want k %d", on.calls, on.maxK, c.wantK)
			}
		})
	}
}
