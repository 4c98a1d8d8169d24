package stages_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

type fixture struct {
	m   *model.Model
	tok *tokenizer.Tokenizer
	man *golden.Manifest
}

func load(t *testing.T, name string) fixture {
	t.Helper()
	dir, man := golden.Load(t)
	f, err := gguf.Open(filepath.Join(dir, "models", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{m, tok, man}
}

func greedy() sample.Params { return sample.Params{Temperature: 0, RepeatPenalty: 1} }

// collector gathers a request's events.
type collector struct {
	mu     sync.Mutex
	text   strings.Builder
	final  stages.Event
	done   chan struct{}
	events int
}

func newCollector() *collector { return &collector{done: make(chan struct{})} }

func (c *collector) emit(ev stages.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.text.WriteString(ev.Text)
	c.events++
	if ev.Finish != stages.FinishNone {
		c.final = ev
		close(c.done)
	}
	return nil
}

// runEngine runs e until its requests are done and returns Run's error.
func runEngine(t *testing.T, e *stages.Engine, reqs ...*stages.Request) error {
	t.Helper()
	for _, r := range reqs {
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	return e.Run(context.Background())
}

// TestStoryThroughGraph: stories260K, greedy, through the whole stage graph,
// must continue "Once upon a time" exactly as llama.cpp does.
func TestStoryThroughGraph(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	var want golden.Case
	for _, c := range fx.man.Cases {
		if c.ID == "stories260K__P1" {
			want = c
		}
	}
	rec := graph.NewRecorder(1 << 16)
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 256}, rec)
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	prompt := fx.tok.Encode(want.PromptText, true, true)
	r := &stages.Request{ID: 1, Prompt: prompt, Params: greedy(), MaxTokens: 48, IgnoreEOG: true, Emit: col.emit}
	if err := runEngine(t, e, r); err != nil {
		t.Fatal(err)
	}
	if got := col.text.String(); got != want.GenText {
		t.Errorf("story:\n got %q\nwant %q", got, want.GenText)
	}
	if col.final.Finish != stages.FinishLength || col.final.Usage.GeneratedTokens != 48 || col.final.Usage.PromptTokens != len(prompt) {
		t.Errorf("final event %+v", col.final)
	}
	// Every stage of the graph ran and was recorded (a dense model has no
	// weight path: nothing streams).
	names := map[string]bool{}
	for _, s := range rec.Summary() {
		names[s.Stage] = true
	}
	for _, n := range []string{"admit", "scheduler", "compute", "sampler", "streamer"} {
		if !names[n] {
			t.Errorf("stage %s missing from the recorder summary", n)
		}
	}
}

// TestParallelSequencesMatchSolo: several greedy requests running together
// (one step carries all of them) produce the same text as each run alone.
func TestParallelSequencesMatchSolo(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	prompts := []string{"Once upon a time", "The cat", "Lily and Max went to the park. They", "One day"}
	solo := make([]string, len(prompts))
	for i, p := range prompts {
		e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128}, nil)
		col := newCollector()
		if err := runEngine(t, e, &stages.Request{ID: 1, Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: 30, IgnoreEOG: true, Emit: col.emit}); err != nil {
			t.Fatal(err)
		}
		solo[i] = col.text.String()
	}
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128, NSeq: len(prompts), MaxBatch: 7}, nil)
	cols := make([]*collector, len(prompts))
	var reqs []*stages.Request
	for i, p := range prompts {
		cols[i] = newCollector()
		reqs = append(reqs, &stages.Request{ID: uint64(i), Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: 30, IgnoreEOG: true, Emit: cols[i].emit})
	}
	if err := runEngine(t, e, reqs...); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if got := cols[i].text.String(); got != solo[i] {
			t.Errorf("request %d together: %q, alone: %q", i, got, solo[i])
		}
	}
}

// TestPrefixReuse: a second request extending the first one's prompt reuses
// its cached tokens and still produces the same text as a cold run.
func TestPrefixReuse(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	base := fx.tok.Encode("Once upon a time, there was a little girl named Lily.", true, true)
	longer := fx.tok.Encode("Once upon a time, there was a little girl named Lily. She", true, true)
	cold := newCollector()
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128}, nil)
	runEngine(t, e, &stages.Request{Prompt: longer, Params: greedy(), MaxTokens: 20, Emit: cold.emit})

	e, _ = stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128}, nil)
	first, warm := newCollector(), newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	e.Submit(&stages.Request{Prompt: base, Params: greedy(), MaxTokens: 5, Emit: first.emit})
	<-first.done
	e.Submit(&stages.Request{Prompt: longer, Params: greedy(), MaxTokens: 20, Emit: warm.emit})
	<-warm.done
	e.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if warm.final.Usage.CachedTokens != len(base) {
		t.Errorf("cached tokens %d, want %d", warm.final.Usage.CachedTokens, len(base))
	}
	if warm.text.String() != cold.text.String() {
		t.Errorf("warm %q != cold %q", warm.text.String(), cold.text.String())
	}
}

// TestStopStringAcrossTokens: generation ends at a stop string that spans
// token boundaries, and the stop string is not emitted.
func TestStopStringAcrossTokens(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128}, nil)
	col := newCollector()
	// llama.cpp's continuation: ", there was a little girl named Lily. She loved..."
	r := &stages.Request{Prompt: fx.tok.Encode("Once upon a time", true, true), Params: greedy(), MaxTokens: 40, Stops: []string{"girl na"}, Emit: col.emit}
	if err := runEngine(t, e, r); err != nil {
		t.Fatal(err)
	}
	if got := col.text.String(); got != ", there was a little " {
		t.Errorf("text %q", got)
	}
	if col.final.Finish != stages.FinishStop {
		t.Errorf("finish %q", col.final.Finish)
	}
}

func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left behind (before: %d)\n%s", n-before, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestCancelMidGeneration: cancelling the run while tokens stream returns
// promptly and leaves no goroutine behind.
func TestCancelMidGeneration(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	before := runtime.NumGoroutine()
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	e.Submit(&stages.Request{Prompt: fx.tok.Encode("Once upon a time", true, true), Params: greedy(), IgnoreEOG: true,
		Emit: func(stages.Event) error {
			if n.Add(1) == 10 {
				cancel()
			}
			return nil
		}})
	start := time.Now()
	err := e.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancel took %v", d)
	}
	waitGoroutines(t, before)
}

// TestRequestCancel: a request whose own context ends frees its slot; the
// engine keeps serving others.
func TestRequestCancel(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512}, nil)
	rctx, rcancel := context.WithCancel(context.Background())
	var n atomic.Int32
	e.Submit(&stages.Request{Ctx: rctx, Prompt: fx.tok.Encode("Once", true, true), Params: greedy(), IgnoreEOG: true,
		Emit: func(stages.Event) error {
			if n.Add(1) == 5 {
				rcancel()
			}
			return nil
		}})
	col := newCollector()
	e.Submit(&stages.Request{Prompt: fx.tok.Encode("The cat", true, true), Params: greedy(), MaxTokens: 8, Emit: col.emit})
	e.Close()
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if col.final.Finish == stages.FinishNone {
		t.Error("second request did not finish")
	}
	if n.Load() > 50 {
		t.Errorf("cancelled request kept generating: %d events", n.Load())
	}
}

// failingOps makes the forward pass fail (panic) at a given call.
type failingOps struct {
	model.Ops
	calls atomic.Int32
	at    int32
}

func (f *failingOps) MatMul(out []float32, w *model.Weight, x []float32, n int) {
	if f.calls.Add(1) == f.at {
		panic("injected kernel failure")
	}
	f.Ops.MatMul(out, w, x, n)
}

// TestStageErrorSurfaces: a failure inside compute ends the run with an error
// naming the stage, and no goroutine is left behind.
func TestStageErrorSurfaces(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	before := runtime.NumGoroutine()
	ops := &failingOps{Ops: cpu.NewRef(), at: 200}
	e, _ := stages.NewEngine(fx.m, fx.tok, ops, stages.Config{NCtx: 256}, nil)
	e.Submit(&stages.Request{Prompt: fx.tok.Encode("Once upon a time", true, true), Params: greedy(), MaxTokens: 100, IgnoreEOG: true})
	e.Close()
	err := e.Run(context.Background())
	if err == nil || !errors.Is(err, graph.ErrPanic) || !strings.Contains(err.Error(), "compute") {
		t.Fatalf("Run: %v, want a compute panic error", err)
	}
	waitGoroutines(t, before)
}

// TestSlowConsumerBackpressure: while the consumer does not take events, the
// pipeline stops producing (bounded by the event edge) instead of buffering
// the whole generation.
func TestSlowConsumerBackpressure(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	const edge = 4
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512, EdgeCap: edge}, nil)
	gate := make(chan struct{})
	var sampled, emitted atomic.Int32
	e.Submit(&stages.Request{Prompt: fx.tok.Encode("Once", true, true), Params: greedy(), IgnoreEOG: true, MaxTokens: 400,
		OnLogits: func([]float32) { sampled.Add(1) },
		Emit: func(stages.Event) error {
			emitted.Add(1)
			<-gate // the consumer is stuck
			return nil
		}})
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	time.Sleep(500 * time.Millisecond)
	// One event is inside Emit, `edge` wait on the edge, the sampler holds
	// one more: nothing beyond that may have been computed.
	if n, s := emitted.Load(), sampled.Load(); n != 1 || s > edge+2 {
		t.Errorf("consumer blocked: %d events emitted, %d tokens sampled (want 1 and ≤ %d)", n, s, edge+2)
	}
	close(gate)
	e.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := sampled.Load(); s != 400 {
		t.Errorf("after release: %d tokens sampled, want 400", s)
	}
}

// TestLogprobs: each generated token's event carries its log probability
// under the softmax of the very logits row it was sampled from, and the
// step's most likely tokens; greedy picks the first of them.
func TestLogprobs(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 256}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]float32
	var lps []*stages.TokenLogprob
	r := &stages.Request{ID: 1, Prompt: fx.tok.Encode("Once upon a time", true, true), Params: greedy(), MaxTokens: 12, IgnoreEOG: true,
		Logprobs: true, TopLogprobs: 3,
		OnLogits: func(row []float32) { rows = append(rows, slices.Clone(row)) },
		Emit: func(ev stages.Event) error {
			if ev.Token >= 0 {
				lps = append(lps, ev.Logprob)
			}
			return nil
		}}
	if err := runEngine(t, e, r); err != nil {
		t.Fatal(err)
	}
	if len(lps) != 12 || len(rows) != 12 {
		t.Fatalf("%d logprobs, %d rows, want 12 each", len(lps), len(rows))
	}
	for i, lp := range lps {
		if lp == nil || len(lp.Top) != 3 {
			t.Fatalf("token %d: logprob %+v", i, lp)
		}
		row := rows[i]
		var sum float64
		for _, l := range row {
			sum += math.Exp(float64(l))
		}
		want := float64(row[lp.Token]) - math.Log(sum)
		if math.Abs(float64(lp.Logprob)-want) > 1e-4 {
			t.Errorf("token %d: logprob %v, softmax of its row gives %v", i, lp.Logprob, want)
		}
		if lp.Top[0].Token != lp.Token || lp.Top[0].Logprob != lp.Logprob || lp.Top[1].Logprob > lp.Top[0].Logprob {
			t.Errorf("token %d: greedy chose %d, top %+v", i, lp.Token, lp.Top)
		}
	}
}

// TestPrefixReuseKVRecent: with tq4/tq3 KV and --kv-recent, a request
// reusing a cached prefix (a previous request's prompt and generated
// tokens) produces the same logits as a cold run: the prefix is reused
// only as far as the f16 copies its next queries read are still kept.
// Both layouts: fixed (Ref) and paged (Backend).
func TestPrefixReuseKVRecent(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she saw a big, red ball in the park. She ran to get it, but a dog got there first. The dog was friendly and wanted to play with Lily too."
	base := fx.tok.Encode(text, true, true)
	kv := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 32}
	for _, ops := range []model.Ops{cpu.NewRef(), cpu.NewBackend(2, nil)} {
		t.Run(fmt.Sprintf("%T", ops), func(t *testing.T) {
			cfg := stages.Config{NCtx: 256, KVTypes: kv}
			gen := func(e *stages.Engine, prompt []int32, n int, rows *[][]float32) *collector {
				col := newCollector()
				r := &stages.Request{Prompt: prompt, Params: greedy(), MaxTokens: n, IgnoreEOG: true, Emit: col.emit}
				if rows != nil {
					r.OnLogits = func(row []float32) { *rows = append(*rows, slices.Clone(row)) }
				}
				if err := e.Submit(r); err != nil {
					t.Fatal(err)
				}
				<-col.done
				return col
			}
			start := func() (*stages.Engine, func()) {
				e, err := stages.NewEngine(fx.m, fx.tok, ops, cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- e.Run(context.Background()) }()
				return e, func() {
					e.Close()
					if err := <-done; err != nil {
						t.Fatal(err)
					}
				}
			}
			// the first turn, and the next one's prompt: the first's prompt,
			// its 20 tokens and more text
			e, stop := start()
			first := gen(e, base, 20, nil)
			next := append(slices.Clone(base), fx.tok.Encode(first.text.String()+" Lily laughed.", false, false)...)
			var warmRows [][]float32
			warm := gen(e, next, 12, &warmRows)
			stop()
			// the same without --kv-recent: what the prefix cache matches
			cfg.KVTypes.Recent = 0
			e, stop = start()
			gen(e, base, 20, nil)
			plain := gen(e, next, 12, nil).final.Usage.CachedTokens
			stop()
			cfg.KVTypes.Recent = kv.Recent
			e, stop = start()
			var coldRows [][]float32
			cold := gen(e, next, 12, &coldRows)
			stop()
			t.Logf("prompt %d tokens, %d reused (%d without --kv-recent)", len(next), warm.final.Usage.CachedTokens, plain)
			// the match's last, partial block is copied, not shared: its
			// copies are not, so reuse stops at the block before
			if got, want := warm.final.Usage.CachedTokens, plain/16*16; got < want || want == 0 {
				t.Errorf("reused %d tokens, want %d (the match of %d in whole blocks)", got, want, plain)
			}
			if warm.text.String() != cold.text.String() {
				t.Errorf("warm %q != cold %q", warm.text.String(), cold.text.String())
			}
			for i := range coldRows {
				if e := nmse(warmRows[i], coldRows[i]); e > 1e-9 {
					t.Errorf("logits row %d: NMSE %.3g between the warm and the cold run", i, e)
				}
			}
		})
	}
}

// nmse is Σ(got-want)² / Σwant².
func nmse(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return num / den
}

// TestParallelKVRecent: four sequences batched together (small batches,
// the paged cache, tq4/tq3 with --kv-recent: the f16 copies' slots taken
// and evicted among them) generate what each generates alone, byte for
// byte: rows read from the wrong f16 slot after the windows move (from
// position 65 on) would change every request's text. Batching changes no
// bits: the products of stories260K's F32 weights by several rows give
// each row its bits alone (cpu's TestMatMulBatchInvariant); products that
// round batched rows differently make request 0 drift after 212 bytes,
// which this test catches.
func TestParallelKVRecent(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	kv := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 8}
	prompts := []string{"Once upon a time", "The cat", "Lily and Max went to the park. They", "One day"}
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	solo := make([]string, len(prompts))
	for i, p := range prompts {
		e, _ := stages.NewEngine(fx.m, fx.tok, be, stages.Config{NCtx: 256, KVTypes: kv}, nil)
		col := newCollector()
		if err := runEngine(t, e, &stages.Request{ID: 1, Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: 150, IgnoreEOG: true, Emit: col.emit}); err != nil {
			t.Fatal(err)
		}
		solo[i] = col.text.String()
	}
	e, _ := stages.NewEngine(fx.m, fx.tok, be, stages.Config{NCtx: 256, NSeq: len(prompts), MaxBatch: 7, KVTypes: kv}, nil)
	cols := make([]*collector, len(prompts))
	var reqs []*stages.Request
	for i, p := range prompts {
		cols[i] = newCollector()
		reqs = append(reqs, &stages.Request{ID: uint64(i), Prompt: fx.tok.Encode(p, true, true), Params: greedy(), MaxTokens: 150, IgnoreEOG: true, Emit: cols[i].emit})
	}
	if err := runEngine(t, e, reqs...); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if got := cols[i].text.String(); got != solo[i] {
			n := 0
			for n < min(len(got), len(solo[i])) && got[n] == solo[i][n] {
				n++
			}
			t.Errorf("request %d: together and alone agree on %d of %d bytes\ntogether: %q\nalone:    %q", i, n, len(solo[i]), got, solo[i])
		}
	}
}
