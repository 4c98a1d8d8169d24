// Tests of compute's recorder plumbing: per-layer span names and no
// allocation per span once names exist.

package stages

import (
	"context"
	"testing"

	"github.com/flowinfer/flowinfer/graph"
)

func TestLayerSpans(t *testing.T) {
	rec := graph.NewRecorder(1 << 20)
	g := graph.New(rec)
	stg := g.Stage("compute")
	var allocs float64
	stg.Do(func(context.Context) error {
		ls := &layerSpans{rec: rec, stg: stg, names: map[string][]string{}}
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
