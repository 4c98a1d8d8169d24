package stages_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// contiguousOps hides Ref's PagedKV: the engine then uses the fixed layout
// (a contiguous range per sequence, shared prefixes copied).
type contiguousOps struct{ model.Ops }

// layouts are the KV layouts every engine test of this file runs on.
var layouts = []struct {
	name string
	ops  func() model.Ops
}{
	{"paged", func() model.Ops { return cpu.NewRef() }},
	{"fixed", func() model.Ops { return contiguousOps{cpu.NewRef()} }},
}

// prompts32 are 32 distinct prompts of mixed length, some sharing prefixes.
func prompts32() []string {
	base := []string{"Once upon a time", "The cat", "Lily and Max went to the park. They", "One day", "Tom had a big red ball.", "The sun was hot and the sky was blue. A little bird"}
	var out []string
	for i := range 32 {
		out = append(out, base[i%len(base)]+strings.Repeat(" and then", i/len(base)))
	}
	return out
}

// soloTexts runs each prompt alone on a fresh engine.
func soloTexts(t *testing.T, fx fixture, prompts []string, n int) []string {
	return soloTextsKV(t, fx, prompts, n, model.KVTypes{})
}

// soloTextsKV is soloTexts with a cache of types kv.
func soloTextsKV(t *testing.T, fx fixture, prompts []string, n int, kv model.KVTypes) []string {
	t.Helper()
	out := make([]string, len(prompts))
	for i, p := range prompts {
		e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128, KVTypes: kv}, nil)
		if err != nil {
			t.Fatal(err)
		}
		col := newCollector()
		if err := runEngine(t, e, &stages.Request{Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: n, IgnoreEOG: true, Emit: col.emit}); err != nil {
			t.Fatal(err)
		}
		out[i] = col.text.String()
	}
	return out
}

// runConcurrent runs the prompts together (greedy, n tokens each) on an
// engine of cfg and checks that each gives its solo text, that a small
// pool (cfg.KVTokens set) preempted, and that the run left no block held.
func runConcurrent(t *testing.T, fx fixture, ops model.Ops, cfg stages.Config, prompts []string, n int, solo []string) {
	t.Helper()
	e, err := stages.NewEngine(fx.m, fx.tok, ops, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]*collector, len(prompts))
	var reqs []*stages.Request
	for i, p := range prompts {
		cols[i] = newCollector()
		reqs = append(reqs, &stages.Request{ID: uint64(i), Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: n, IgnoreEOG: true, Emit: cols[i].emit})
	}
	if err := runEngine(t, e, reqs...); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if got := cols[i].text.String(); got != solo[i] {
			t.Errorf("request %d together: %q\nalone: %q", i, got, solo[i])
		}
	}
	st := e.Stats()
	if cfg.KVTokens > 0 && st.Preemptions == 0 {
		t.Errorf("a pool of %d tokens for %d sequences never preempted", cfg.KVTokens, cfg.NSeq)
	}
	if st.KVBlocksUsed != 0 || st.Running != 0 {
		t.Errorf("after the run: %+v", st)
	}
	t.Logf("%+v", st)
}

// TestConcurrentMatchesSolo: 32 concurrent greedy streams each produce
// exactly the text of the same request run alone, on both layouts, with a
// pool large enough for all and with one so small that sequences are
// preempted and resumed.
func TestConcurrentMatchesSolo(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	prompts := prompts32()
	n := 40
	if testing.Short() { // -race in CI
		prompts, n = prompts[:12], 16
	}
	solo := soloTexts(t, fx, prompts, n)
	for _, lay := range layouts {
		for _, pool := range []struct {
			name   string
			tokens int
		}{{"full pool", 0}, {"small pool", 128}} {
			if lay.name == "fixed" && pool.tokens > 0 {
				continue // the fixed layout always holds NSeq × NCtx
			}
			t.Run(lay.name+"/"+pool.name, func(t *testing.T) {
				runConcurrent(t, fx, lay.ops(), stages.Config{NCtx: 128, NSeq: 8, MaxBatch: 24, BlockSize: 8, KVTokens: pool.tokens}, prompts, n, solo)
			})
		}
	}
}

// TestConcurrentKVRecent: TestConcurrentMatchesSolo with tq4/tq3 KV and
// --kv-recent 8: streams batched together, preempted and resumed in a
// small paged pool (their f16 windows evicted and their prefixes reused
// only as far as the windows remain), produce each request's text alone.
func TestConcurrentKVRecent(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	kv := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 8}
	prompts, n := prompts32()[:12], 40
	solo := soloTextsKV(t, fx, prompts, n, kv)
	for _, lay := range layouts {
		tokens := 128 // a pool of one context: sequences are preempted
		if lay.name == "fixed" {
			tokens = 0 // the fixed layout always holds NSeq × NCtx
		}
		t.Run(lay.name, func(t *testing.T) {
			runConcurrent(t, fx, lay.ops(), stages.Config{NCtx: 128, NSeq: 8, MaxBatch: 24, BlockSize: 8, KVTokens: tokens, KVTypes: kv}, prompts, n, solo)
		})
	}
}

// TestPrefixSharing: a repeated system prompt is not recomputed (the hit
// shows in CachedTokens), also while the first request is still running,
// and the text is the same as without the cache.
func TestPrefixSharing(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	system := "Lily and Max went to the park. They played on the swings and the slide. Then they saw a big dog."
	questions := []string{" The dog", " Max said", " Lily was", " The sun"}
	solo := soloTexts(t, fx, func() []string {
		var p []string
		for _, q := range questions {
			p = append(p, system+q)
		}
		return p
	}(), 16)
	sysToks := len(fx.tok.Encode(system, true, true))
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			e, err := stages.NewEngine(fx.m, fx.tok, lay.ops(), stages.Config{NCtx: 128, NSeq: 4, BlockSize: 8}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			// The first request alone; the others once its prompt is in
			// the cache, while it still generates.
			cols := make([]*collector, len(questions))
			started := make(chan struct{})
			var once sync.Once
			for i, q := range questions {
				cols[i] = newCollector()
				r := &stages.Request{Prompt: fx.tok.Encode(system+q, true, true), Params: greedy(), MaxTokens: 16, IgnoreEOG: true, Emit: cols[i].emit}
				if i == 0 {
					emit := r.Emit
					r.Emit = func(ev stages.Event) error {
						once.Do(func() { close(started) })
						time.Sleep(2 * time.Millisecond) // keep it running a while
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
			// Whole blocks of the shared prefix at least.
			for i, c := range cols {
				if c.text.String() != solo[i] {
					t.Errorf("request %d: %q, cold: %q", i, c.text.String(), solo[i])
				}
				if i > 0 && c.final.Usage.CachedTokens < sysToks/8*8-8 {
					t.Errorf("request %d reused %d tokens of a %d-token shared prefix", i, c.final.Usage.CachedTokens, sysToks)
				}
			}
			if st := e.Stats(); st.CachedTokens == 0 || st.KVBlocksUsed != 0 || st.KVBlocksCached == 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestAbortedLeaveNothing: 200 requests cancelled mid-generation leave no
// running sequence, no held KV block and no goroutine.
func TestAbortedLeaveNothing(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			e, err := stages.NewEngine(fx.m, fx.tok, lay.ops(), stages.Config{NCtx: 256, NSeq: 8, Queue: 256}, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- e.Run(context.Background()) }()
			var wg sync.WaitGroup
			aborts := 200
			if testing.Short() { // -race in CI
				aborts = 50
			}
			for i := range aborts {
				ctx, cancel := context.WithCancel(context.Background())
				var n int
				var mu sync.Mutex
				wg.Add(1)
				var once sync.Once
				r := &stages.Request{Ctx: ctx, Prompt: fx.tok.Encode(fmt.Sprintf("Once upon a time %d", i), true, true), Params: greedy(), IgnoreEOG: true,
					Emit: func(ev stages.Event) error {
						mu.Lock()
						defer mu.Unlock()
						if n++; n == 3+i%7 {
							cancel()
							once.Do(wg.Done)
						}
						return nil
					}}
				for {
					err := e.Submit(r)
					if err == nil {
						break
					}
					if err != stages.ErrQueueFull {
						t.Fatal(err)
					}
					time.Sleep(time.Millisecond)
				}
			}
			wg.Wait()
			deadline := time.Now().Add(10 * time.Second)
			for {
				st := e.Stats()
				if st.Running == 0 && st.KVBlocksUsed == 0 && st.Queued == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %d cancels: %+v", aborts, st)
				}
				time.Sleep(5 * time.Millisecond)
			}
			e.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			waitGoroutines(t, before)
		})
	}
}

// TestPrefixWholeBlocksKVRecent: with --kv-recent, a prompt that is
// exactly whole cached blocks reuses all but its last token, so the last
// block is copied (partly), not shared, and its f16 copies do not come
// with it: the reuse must stop where they are missing, and the request
// gives its text alone (an error "no longer kept" otherwise).
func TestPrefixWholeBlocksKVRecent(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	kv := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 8}
	long := fx.tok.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true, true)
	if len(long) < 24 {
		t.Fatalf("prompt of %d tokens", len(long))
	}
	short := long[:16] // two whole blocks of 8
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128, KVTypes: kv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	solo := newCollector()
	if err := runEngine(t, e, &stages.Request{Prompt: short, Params: greedy(), MaxTokens: 6, IgnoreEOG: true, Emit: solo.emit}); err != nil {
		t.Fatal(err)
	}
	alone := solo.text.String()
	for _, lay := range layouts {
		e, err := stages.NewEngine(fx.m, fx.tok, lay.ops(), stages.Config{NCtx: 128, BlockSize: 8, KVTypes: kv}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, b := newCollector(), newCollector()
		if err := runEngine(t, e,
			&stages.Request{Prompt: long, Params: greedy(), MaxTokens: 4, IgnoreEOG: true, Emit: a.emit},
			&stages.Request{Prompt: short, Params: greedy(), MaxTokens: 6, IgnoreEOG: true, Emit: b.emit}); err != nil {
			t.Fatalf("%s: %v", lay.name, err)
		}
		if b.text.String() != alone {
			t.Errorf("%s: %q after the longer prompt, alone %q", lay.name, b.text.String(), alone)
		}
		t.Logf("%s: reused %d of %d tokens", lay.name, b.final.Usage.CachedTokens, len(short))
	}
}
