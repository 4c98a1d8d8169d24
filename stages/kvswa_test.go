package stages_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// swaWindow is the sliding window the tests below give stories260K's
// even layers (the odd ones stay full): with batches of 24 rows a window
// layer keeps a ring of 48 rows per sequence, less than the 128 of the
// context.
const swaWindow = 16

// loadSWA loads stories260K with a sliding window of swaWindow on its even
// layers.
func loadSWA(t *testing.T) fixture {
	fx := load(t, "stories260K.gguf")
	h := &fx.m.Hyper
	h.Window = make([]int, h.NLayer)
	for l := 0; l < h.NLayer; l += 2 {
		h.Window[l] = swaWindow
	}
	return fx
}

// TestSWAConcurrentMatchesSolo: with sliding-window layers kept in rings
// (steps of 24: rings of 48 rows), concurrent greedy streams (both
// layouts; a pool so small that sequences are preempted and resume into
// rings others have overwritten; f32 KV, and tq4/tq3 with --kv-recent 8)
// each give the text of the request run alone on an engine whose steps of
// 512 leave the window layers full (a ring would hold the whole context).
func TestSWAConcurrentMatchesSolo(t *testing.T) {
	fx := loadSWA(t)
	prompts := prompts32()[:12]
	n := 30
	for _, kv := range []model.KVTypes{{}, {K: model.KVTQ4, V: model.KVTQ3, Recent: 8}} {
		solo := soloTextsKV(t, fx, prompts, n, kv)
		cfg := stages.Config{NCtx: 128, NSeq: 6, MaxBatch: 24, BlockSize: 8, KVTypes: kv}
		for _, lay := range layouts {
			for _, pool := range []int{0, 128} {
				if lay.name == "fixed" && pool > 0 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/pool=%d", kv, lay.name, pool), func(t *testing.T) {
					c := cfg
					c.KVTokens = pool
					runConcurrent(t, fx, lay.ops(), c, prompts, n, solo)
				})
			}
		}
	}
}

// TestSWAPrefixSharing: requests sharing a system prompt longer than the
// window, submitted while the first still runs (as n > 1 choices are),
// reuse the prefix (the full layers' blocks, and the window layers' rows
// copied from the running sequence's rings) and give their text alone.
func TestSWAPrefixSharing(t *testing.T) {
	fx := loadSWA(t)
	system := "Lily and Max went to the park. They played on the swings and the slide. Then they saw a big dog."
	questions := []string{" The dog", " Max said", " Lily was"}
	var prompts []string
	for _, q := range questions {
		prompts = append(prompts, system+q)
	}
	solo := soloTexts(t, fx, prompts, 16)
	sysToks := len(fx.tok.Encode(system, true, true))
	if sysToks <= swaWindow {
		t.Fatalf("the system prompt (%d tokens) must be longer than the window (%d)", sysToks, swaWindow)
	}
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			e, err := stages.NewEngine(fx.m, fx.tok, lay.ops(), stages.Config{NCtx: 128, NSeq: 4, BlockSize: 8, MaxBatch: 24}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			cols := make([]*collector, len(prompts))
			started := make(chan struct{})
			var once sync.Once
			for i, p := range prompts {
				cols[i] = newCollector()
				r := &stages.Request{Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: 16, IgnoreEOG: true, Emit: cols[i].emit}
				if i == 0 {
					emit := r.Emit
					r.Emit = func(ev stages.Event) error {
						once.Do(func() { close(started) })
						time.Sleep(2 * time.Millisecond)
						return emit(ev)
					}
				}
				if err := e.Submit(r); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					<-started
				}
			}
			for _, c := range cols {
				<-c.done
			}
			e.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				if c.text.String() != solo[i] {
					t.Errorf("request %d: %q, alone: %q", i, c.text.String(), solo[i])
				}
				if i > 0 && c.final.Usage.CachedTokens < sysToks/8*8-8 {
					t.Errorf("request %d reused %d tokens of a %d-token shared prefix", i, c.final.Usage.CachedTokens, sysToks)
				}
			}
		})
	}
}

// TestSWAPrefixBeyondRing: after a request has finished, the same prompt
// again reuses its prefix (the slot's rings still hold the window before
// it), but a prompt sharing only the first part of it does not: the rings
// have since overwritten that part's window, so the whole prompt is
// computed again (where a model without windows reuses the shared blocks),
// and both give the text they give alone. The engine keeps no window
// checkpoints (StateCheckpoints < 0), which would restart the prompt at an
// earlier checkpoint instead (TestSWACheckpointPrefixReused).
func TestSWAPrefixBeyondRing(t *testing.T) {
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she saw a big, red ball in the park. She ran to get it, but a dog got there first."
	for _, windowed := range []bool{true, false} {
		fx := load(t, "stories260K.gguf")
		if windowed {
			fx = loadSWA(t)
		}
		base := fx.tok.Encode(text, true, true)
		half := len(base) / 2
		// ring 48, 20 tokens generated: the rings end up holding positions
		// from len(base)+19-48 on, past half's window
		if half-swaWindow+1 >= len(base)+19-48 || half < 24 {
			t.Fatalf("prompt of %d tokens: the test's premise does not hold", len(base))
		}
		other := append(slices.Clone(base[:half]), fx.tok.Encode(" The cat sat on the mat and looked at the sky.", false, false)...)
		solo := func(p []int32) string {
			e, err := stages.NewEngine(fx.m, fx.tok, layouts[0].ops(), stages.Config{NCtx: 128, MaxBatch: 24, BlockSize: 8}, nil)
			if err != nil {
				t.Fatal(err)
			}
			col := newCollector()
			if err := runEngine(t, e, &stages.Request{Prompt: p, Params: greedy(), MaxTokens: 12, IgnoreEOG: true, Emit: col.emit}); err != nil {
				t.Fatal(err)
			}
			return col.text.String()
		}
		wantSame, wantOther := solo(base), solo(other)
		for _, lay := range layouts {
			// no window checkpoints: the rings alone (swackpt_test.go
			// has the checkpoints' fallback to an earlier one)
			e, err := stages.NewEngine(fx.m, fx.tok, lay.ops(), stages.Config{NCtx: 128, NSeq: 1, MaxBatch: 24, BlockSize: 8, StateCheckpoints: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- e.Run(context.Background()) }()
			gen := func(p []int32, n int) *collector {
				col := newCollector()
				if err := e.Submit(&stages.Request{Prompt: p, Params: greedy(), MaxTokens: n, IgnoreEOG: true, Emit: col.emit}); err != nil {
					t.Fatal(err)
				}
				<-col.done
				return col
			}
			gen(base, 20)
			same := gen(base, 12)
			gen(base, 20) // the rings hold the end of base's 20 tokens again
			part := gen(other, 12)
			e.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			name := lay.name
			if windowed {
				name += "/windowed"
			}
			if same.text.String() != wantSame || part.text.String() != wantOther {
				t.Errorf("%s: %q and %q, alone %q and %q", name, same.text.String(), part.text.String(), wantSame, wantOther)
			}
			if got := same.final.Usage.CachedTokens; got != len(base)-1 {
				t.Errorf("%s: the same prompt again reused %d tokens, want %d", name, got, len(base)-1)
			}
			got := part.final.Usage.CachedTokens
			switch {
			case windowed && got != 0:
				t.Errorf("%s: a prompt sharing %d tokens whose window rows are gone reused %d", name, half, got)
			case !windowed && got < half/8*8:
				t.Errorf("%s: a prompt sharing %d tokens reused %d", name, half, got)
			}
			t.Logf("%s: prompt %d tokens; reused %d of the same prompt, %d of one sharing %d", name, len(base), same.final.Usage.CachedTokens, got, half)
		}
	}
}
