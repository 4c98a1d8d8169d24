// Tests of compute's recorder plumbing: per-layer span names and no
// allocation per span once names exist.

package stages

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages/sample"
)

func TestLayerSpans(t *testing.T) {
	rec := graph.NewRecorder(1 << 20)
	g := graph.New(rec)
	stg := g.Stage("compute")
	var allocs float64
	stg.Do(func(context.Context) error {
		ls := &layerSpans{rec: rec, stg: stg, ops: true, names: map[string][]string{}}
		step := func() {
			for il := range 4 {
				ls.hook("attn", il, true)
				ls.hook("attn_q", il, true)
				ls.hook("attn_q", il, false)
				ls.hook("attn", il, false)
			}
			ls.hook("output", -1, true)
			ls.hook("output", -1, false)
		}
		step() // builds the names
		allocs = testing.AllocsPerRun(1000, step)
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per step with recording on, want 0", allocs)
	}
	spans := rec.Summary()[0].Spans
	for _, name := range []string{"attn-0", "attn-3", "attn_q-2", "output"} {
		if spans[name].Count != 1002 {
			t.Errorf("span %s: %+v, want 1002 (a warm-up, AllocsPerRun's own warm-up and 1000 runs)", name, spans[name])
		}
	}
	if len(spans) != 9 {
		t.Errorf("%d span names, want 9: %v", len(spans), spans)
	}
}

// TestComputeDetail: the recorder's detail level decides which sub-spans
// compute records: none below DetailLayers, sections at DetailLayers,
// sections and ops at DetailOps.
func TestComputeDetail(t *testing.T) {
	dir, _ := golden.Load(t)
	b, err := model.Open(filepath.Join(dir, "models", "stories260K.gguf"), cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prompt := b.Tokenizer.Encode("Once upon a time", true, true)
	tests := []struct {
		detail       graph.Detail
		attn, attnQ  bool
		wantSpanKind int // distinct span names
	}{
		{graph.DetailStages, false, false, 1}, // "forward" only
		{graph.DetailLayers, true, false, 1 + 5*2 + 1},
		{graph.DetailOps, true, true, 1 + 5*11 + 2}, // 11 ops per layer, kv_store included
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("detail=", tc.detail), func(t *testing.T) {
			rec := graph.NewRecorder(0)
			rec.SetDetail(tc.detail)
			e, err := NewEngine(b.Model, b.Tokenizer, cpu.NewRef(), Config{NCtx: 64}, rec)
			if err != nil {
				t.Fatal(err)
			}
			e.Submit(&Request{Prompt: prompt, Params: sample.Params{RepeatPenalty: 1}, MaxTokens: 4, IgnoreEOG: true})
			e.Close()
			if err := e.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			var spans map[string]graph.SpanStats
			for _, s := range rec.Summary() {
				if s.Stage == "compute" {
					spans = s.Spans
				}
			}
			_, attn := spans["attn-0"]
			_, attnQ := spans["attn_q-0"]
			if attn != tc.attn || attnQ != tc.attnQ || len(spans) != tc.wantSpanKind {
				t.Errorf("attn-0 %v, attn_q-0 %v, %d span names: %v", attn, attnQ, len(spans), spans)
			}
		})
	}
}
