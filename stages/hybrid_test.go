package stages_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
	"github.com/flowinfer/flowinfer/stages"
)

// hybridFixture is a hybrid preset (qwen35-small unless said, f32
// weights) and two prompts, the second extending the first.
type hybridFixture struct {
	b            *model.Bundle
	base, longer []int32
}

func openHybrid(t *testing.T) hybridFixture {
	t.Helper()
	return openHybridOf(t, "qwen35-small")
}

// openHybridOf is openHybrid on another hybrid preset.
func openHybridOf(t *testing.T, preset string) hybridFixture {
	t.Helper()
	s, err := synth.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), preset+".gguf")
	if err := synth.WriteFile(path, s, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := model.Open(path, cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return hybridFixture{b: b,
		base:   b.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She liked to play outside in the park.", true, true),
		longer: b.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She liked to play outside in the park. One day", true, true)}
}

// hybridRun is one request's outcome.
type hybridRun struct {
	rows   [][]float32
	cached int
}

// hybridEngine runs requests one after another on one engine.
type hybridEngine struct {
	t    *testing.T
	e    *stages.Engine
	done chan error
}

func startHybrid(t *testing.T, fx hybridFixture, ops model.Ops, cfg stages.Config) *hybridEngine {
	t.Helper()
	e, err := stages.NewEngine(fx.b.Model, fx.b.Tokenizer, ops, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &hybridEngine{t: t, e: e, done: make(chan error, 1)}
	go func() { h.done <- e.Run(context.Background()) }()
	t.Cleanup(func() {
		e.Close()
		if err := <-h.done; err != nil {
			t.Error(err)
		}
	})
	return h
}

// run submits a greedy request of prompt for 8 tokens and waits for it.
func (h *hybridEngine) run(prompt []int32) hybridRun {
	h.t.Helper()
	return h.runAt(prompt, nil)
}

// runAt is run with message starts at (Request.CheckpointAt).
func (h *hybridEngine) runAt(prompt []int32, at []int) hybridRun {
	h.t.Helper()
	var r hybridRun
	col := newCollector()
	req := &stages.Request{Prompt: prompt, CheckpointAt: at, Params: greedy(), MaxTokens: 8, IgnoreEOG: true, Emit: col.emit,
		OnLogits: func(row []float32) { r.rows = append(r.rows, slices.Clone(row)) }}
	if err := h.e.Submit(req); err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-col.done:
	case err := <-h.done:
		h.t.Fatalf("the engine stopped: %v", err)
	}
	r.cached = col.final.Usage.CachedTokens
	return r
}

// rowsDiff is the largest difference between two runs' logits (+Inf when
// they differ in length).
func rowsDiff(a, b [][]float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		for j := range a[i] {
			d = max(d, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return d
}

// hybridLayouts runs f on both cache layouts: fixed (contiguous, the
// reference backend) and paged (the CPU backend).
func hybridLayouts(t *testing.T, f func(t *testing.T, ops func() model.Ops, cfg stages.Config)) {
	for _, paged := range []bool{false, true} {
		name := "fixed"
		ops := func() model.Ops { return cpu.NewRef() }
		cfg := stages.Config{NCtx: 256, BlockSize: 16}
		if paged {
			name = "paged"
			cfg.KVTokens = 1024
			ops = func() model.Ops {
				be := cpu.NewBackend(1, nil)
				t.Cleanup(be.Close)
				return be
			}
		}
		t.Run(name, func(t *testing.T) { f(t, ops, cfg) })
	}
}

// TestHybridPrefixReused: a hybrid model (qwen35: recurrent layers whose
// state cannot be rebuilt from cached K/V rows) reuses a cached prompt
// prefix through a checkpoint of its recurrent state. A repeated prompt
// restores the checkpoint a block before its end and gives bit for bit the
// first run's logits at every generated token (the same chunks from the
// checkpoint on); a prompt extending an earlier one restores the
// checkpoint at that one's end. Both agree within 1e-4 with an engine
// without checkpoints, which prefills each prompt in one step. Without
// checkpoints (StateCheckpoints < 0) nothing is reused. Both cache
// layouts; qwen35, and the hybrid MoE qwen35moe and qwen3next.
func TestHybridPrefixReused(t *testing.T) {
	for _, preset := range []string{"qwen35-small", "qwen35moe-small", "qwen3next-small"} {
		t.Run(preset, func(t *testing.T) { hybridPrefixReused(t, openHybridOf(t, preset)) })
	}
}

func hybridPrefixReused(t *testing.T, fx hybridFixture) {
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		none := cfg
		none.StateCheckpoints = -1
		plain := startHybrid(t, fx, ops(), none)
		coldBase, coldLonger := plain.run(fx.base), plain.run(fx.longer)
		if again := plain.run(fx.base); again.cached != 0 || rowsDiff(again.rows, coldBase.rows) != 0 {
			t.Errorf("without checkpoints: %d cached tokens, logits differ by %g", again.cached, rowsDiff(again.rows, coldBase.rows))
		}
		if coldBase.cached != 0 || coldLonger.cached != 0 {
			t.Errorf("without checkpoints: %d and %d cached tokens", coldBase.cached, coldLonger.cached)
		}
		e := startHybrid(t, fx, ops(), cfg)
		first := e.run(fx.base)
		second := e.run(fx.base)
		longer := e.run(fx.longer)
		if first.cached != 0 {
			t.Errorf("first request: %d cached tokens", first.cached)
		}
		if want := (len(fx.base) - 1) / 16 * 16; second.cached != want {
			t.Errorf("repeated prompt of %d tokens: %d cached tokens, want %d (the last block boundary)", len(fx.base), second.cached, want)
		}
		if d := rowsDiff(second.rows, first.rows); d != 0 {
			t.Errorf("repeated prompt: logits differ from the first run's by %g", d)
		}
		if longer.cached < len(fx.base) {
			t.Errorf("extended prompt: %d cached tokens, want at least the first prompt's %d", longer.cached, len(fx.base))
		}
		for name, c := range map[string][2]hybridRun{"first": {first, coldBase}, "repeated": {second, coldBase}, "extended": {longer, coldLonger}} {
			if d := rowsDiff(c[0].rows, c[1].rows); d > 1e-4 {
				t.Errorf("%s prompt: logits differ from one-step prefill by %g", name, d)
			}
		}
		if st := e.e.Stats(); st.StateCheckpoints == 0 || st.CachedTokens != int64(second.cached+longer.cached) {
			t.Errorf("stats: %d checkpoints held, %d cached tokens (want %d)", st.StateCheckpoints, st.CachedTokens, second.cached+longer.cached)
		}
	})
}

// TestHybridCheckpointEviction: checkpoints and blocks under pressure. A
// pool of one checkpoint keeps only the latest state: after a request it
// is the state where the request left off (its prompt and the tokens fed
// after it), which a repeated prompt cannot use but a next turn extending
// it can; another prompt's checkpoint then evicts it, and the next turn
// recomputes from scratch. With the K/V blocks of a checkpointed prefix
// evicted (a cache of one context, filled by a longer prompt), the
// checkpoint is not used. Every answer keeps the logits of an engine
// without checkpoints.
func TestHybridCheckpointEviction(t *testing.T) {
	fx := openHybrid(t)
	other := fx.b.Tokenizer.Encode("The quick brown fox jumps over the lazy dog, and then it runs far away into the forest.", true, true)
	var long []int32
	for len(long) < 240 {
		long = append(long, other...)
	}
	long = long[:240]
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		none := cfg
		none.StateCheckpoints = -1
		plain := startHybrid(t, fx, ops(), none)
		coldBase := plain.run(fx.base)
		// the next turn: base, the 7 generated tokens fed, then more
		turn := slices.Clone(fx.base)
		for _, row := range coldBase.rows[:7] {
			turn = append(turn, int32(argmax(row)))
		}
		turn = append(turn, other[1:10]...)
		coldTurn, coldOther, coldLong := plain.run(turn), plain.run(other), plain.run(long)
		check := func(name string, got, want hybridRun, cached int) {
			t.Helper()
			if d := rowsDiff(got.rows, want.rows); d > 1e-4 {
				t.Errorf("%s: logits differ from one-step prefill by %g", name, d)
			}
			if got.cached != cached {
				t.Errorf("%s: %d cached tokens, want %d", name, got.cached, cached)
			}
		}
		one := cfg
		one.StateCheckpoints = 1
		e := startHybrid(t, fx, ops(), one)
		check("first", e.run(fx.base), coldBase, 0)
		check("first again", e.run(fx.base), coldBase, 0)
		check("next turn", e.run(turn), coldTurn, len(fx.base)+7)
		check("other", e.run(other), coldOther, 0)
		check("next turn after other", e.run(turn), coldTurn, 0)
		if st := e.e.Stats(); st.StateCheckpoints != 1 {
			t.Errorf("pool of one: %d held", st.StateCheckpoints)
		}
		if cfg.KVTokens == 0 {
			return // the fixed layout keeps a slot's blocks until the slot is reused
		}
		tight := cfg
		tight.KVTokens = cfg.NCtx // one context: long's blocks evict base's
		e = startHybrid(t, fx, ops(), tight)
		check("base", e.run(fx.base), coldBase, 0)
		check("long", e.run(long), coldLong, 0)
		if st := e.e.Stats(); st.StateCheckpoints == 0 {
			t.Error("no checkpoint held")
		}
		check("base after long", e.run(fx.base), coldBase, 0)
	})
}

func argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// TestHybridForkAndCancel: a second choice of the same prompt submitted
// once the first has its first token (as serve does for n > 1) forks the
// first one's state through its checkpoint a block before the prompt's
// end and generates what the first does; a request cancelled after its
// first token leaves no sequence or block held and no checkpoint pinned,
// and the next request of its prompt reuses the checkpoints it left.
func TestHybridForkAndCancel(t *testing.T) {
	fx := openHybrid(t)
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		cfg.NSeq = 2
		if cfg.KVTokens > 0 {
			cfg.KVTokens = 2 * cfg.NCtx
		}
		h := startHybrid(t, fx, ops(), cfg)
		boundary := (len(fx.base) - 1) / 16 * 16
		// fork: b submitted from a's first event
		var a, b hybridRun
		colA, colB := newCollector(), newCollector()
		reqB := &stages.Request{Prompt: fx.base, Params: greedy(), MaxTokens: 8, IgnoreEOG: true, Emit: colB.emit,
			OnLogits: func(row []float32) { b.rows = append(b.rows, slices.Clone(row)) }}
		submitted := false
		reqA := &stages.Request{Prompt: fx.base, Params: greedy(), MaxTokens: 8, IgnoreEOG: true,
			Emit: func(ev stages.Event) error {
				if !submitted {
					submitted = true
					if err := h.e.Submit(reqB); err != nil {
						t.Error(err)
					}
				}
				return colA.emit(ev)
			},
			OnLogits: func(row []float32) { a.rows = append(a.rows, slices.Clone(row)) }}
		if err := h.e.Submit(reqA); err != nil {
			t.Fatal(err)
		}
		<-colA.done
		<-colB.done
		if colB.final.Usage.CachedTokens != boundary {
			t.Errorf("fork: %d cached tokens, want %d", colB.final.Usage.CachedTokens, boundary)
		}
		if d := rowsDiff(a.rows, b.rows); d > 1e-5 {
			t.Errorf("fork: logits differ from the first choice's by %g", d)
		}
		// cancel after the first token
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		other := fx.b.Tokenizer.Encode("Tom had a big red ball. He liked to throw it high into the blue sky every morning.", true, true)
		var first []float32
		col := newCollector()
		started, once := make(chan struct{}), sync.Once{}
		req := &stages.Request{Ctx: ctx, Prompt: other, Params: greedy(), MaxTokens: 64, IgnoreEOG: true,
			Emit: func(ev stages.Event) error {
				cancel()
				once.Do(func() { close(started) })
				return col.emit(ev)
			},
			OnLogits: func(row []float32) {
				if first == nil {
					first = slices.Clone(row)
				}
			}}
		if err := h.e.Submit(req); err != nil {
			t.Fatal(err)
		}
		<-started
		for deadline := time.Now().Add(10 * time.Second); h.e.Stats().Running > 0 && time.Now().Before(deadline); { // until the scheduler retires it
			time.Sleep(time.Millisecond)
		}
		col.mu.Lock()
		if col.events == 0 || col.events >= 64 {
			t.Errorf("cancelled request: %d events, want it stopped before its 64 tokens", col.events)
		}
		col.mu.Unlock()
		again := h.run(other)
		// the last answer ends before the scheduler retires its sequence
		deadline := time.Now().Add(10 * time.Second)
		for h.e.Stats().Running > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if st := h.e.Stats(); st.Running != 0 || st.KVBlocksUsed != 0 {
			t.Errorf("after the requests: %d running, %d blocks used", st.Running, st.KVBlocksUsed)
		}
		if want := (len(other) - 1) / 16 * 16; again.cached != want {
			t.Errorf("after a cancelled request: %d cached tokens, want %d", again.cached, want)
		}
		if !slices.Equal(again.rows[0], first) {
			t.Errorf("after a cancelled request: first logits differ by %g", rowsDiff(again.rows[:1], [][]float32{first}))
		}
	})
}

// TestHybridBudget: a hybrid engine's KV cache (the attention layers'
// cells, no rows for the recurrent layers, one state per sequence and the
// state checkpoints) is what WeightBudget and KVCapacityFor count.
func TestHybridBudget(t *testing.T) {
	fx := openHybrid(t)
	h := &fx.b.Model.Hyper
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	cfg := stages.Config{NCtx: 256, NSeq: 2, BlockSize: 16, KVTokens: 1024, MaxBatch: 64, KVTypes: f16, StateCheckpoints: 3}
	e, err := stages.NewEngine(fx.b.Model, fx.b.Tokenizer, be, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	perTok, err := model.KVBytesPerToken(h, f16)
	if err != nil {
		t.Fatal(err)
	}
	attn := 0
	for l := range h.NLayer {
		if !h.IsRecurrent(l) {
			attn++
		}
	}
	if want := attn * h.NHeadKV * (h.HeadDimK + h.HeadDimV) * 2; perTok != want {
		t.Errorf("KV bytes per token %d, want the %d attention layers' %d", perTok, attn, want)
	}
	state := model.RecurrentStateBytes(h, 2+3) // 2 sequences, 3 checkpoints
	if want := int64(1024*perTok) + state; e.KVBytes() != want {
		t.Errorf("engine's KV cache %d bytes, want %d", e.KVBytes(), want)
	}
	const limit = 1 << 30
	f := stages.EngineFootprint(cfg)
	if got, want := stages.WeightBudget(limit, h, f16, f), limit-e.KVBytes()-stages.ActBytes(h, 64)-stages.Headroom; got != want {
		t.Errorf("weight budget %d, want %d (the engine's KV cache %d)", got, want, e.KVBytes())
	}
	c, err := stages.KVCapacityFor(h, f16, e.KVBytes(), 2, 256, 64, 16, cfg.Checkpoints(h))
	if err != nil || c.Tokens != 1024 || c.PerToken != perTok || c.Rings != state {
		t.Errorf("capacity of the engine's KV bytes: %+v, %v; want 1024 tokens of %d bytes after %d of state", c, err, perTok, state)
	}
	// a count wins; else the byte budget (default 512 MiB) holds as many
	// as fit, at most MaxStateCheckpoints
	per := model.RecurrentStateBytes(h, 1)
	for _, tc := range []struct {
		n     int
		bytes int64
		want  int
	}{
		{0, 0, int(min(stages.DefaultStateCheckpointBytes/per, stages.MaxStateCheckpoints))},
		{-1, 0, 0}, {5, 0, 5}, {5, 1 << 40, 5}, {-1, 1 << 40, 0},
		{0, 3*per + per/2, 3}, {0, per - 1, 0}, {0, 1 << 40, stages.MaxStateCheckpoints},
	} {
		if got := (stages.Config{StateCheckpoints: tc.n, StateCheckpointBytes: tc.bytes}).Checkpoints(h); got != tc.want {
			t.Errorf("StateCheckpoints %d, StateCheckpointBytes %d: %d checkpoints, want %d", tc.n, tc.bytes, got, tc.want)
		}
	}
	// Qwen3.5-9B's state (50.25 MiB) gets ten by default, not 16 (804 MiB)
	q9 := model.Hyper{NLayer: 32, Recurrent: make([]bool, 32), SSM: model.SSMHyper{Conv: 4, Inner: 4096, State: 128, DtRank: 32, Groups: 16}}
	for il := range q9.Recurrent {
		q9.Recurrent[il] = il%4 != 3 // full attention every 4th layer
	}
	if per := model.RecurrentStateBytes(&q9, 1); per != 50.25*(1<<20) {
		t.Fatalf("Qwen3.5-9B's state %d bytes, want 50.25 MiB", per)
	}
	if got := (stages.Config{}).Checkpoints(&q9); got != 10 {
		t.Errorf("Qwen3.5-9B's shape: %d checkpoints by default, want 10 (512 MiB of 50.25 MiB states)", got)
	}
	if _, err := stages.NewEngine(fx.b.Model, fx.b.Tokenizer, be, stages.Config{NCtx: 256, StateCheckpointBytes: -1}, nil); err == nil || !strings.Contains(err.Error(), "checkpoint budget") {
		t.Errorf("a negative checkpoint budget: %v, want an error naming it", err)
	}
	if got := (stages.Config{StateCheckpoints: 5}).Checkpoints(&model.Hyper{NLayer: 2}); got != 0 {
		t.Errorf("a model without recurrent layers: %d checkpoints", got)
	}
}

// TestHybridPreemption: two requests that do not fit the cache together
// preempt one another; the preempted one resumes from its state's
// checkpoint (or recomputes) and both keep the logits they have alone on
// an engine without checkpoints.
func TestHybridPreemption(t *testing.T) {
	fx := openHybrid(t)
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	a := fx.base
	b := fx.b.Tokenizer.Encode("The quick brown fox jumps over the lazy dog, and then it runs far away into the forest.", true, true)
	run := func(h *hybridEngine, prompts ...[]int32) []hybridRun {
		out := make([]hybridRun, len(prompts))
		cols := make([]*collector, len(prompts))
		for i, p := range prompts {
			cols[i] = newCollector()
			r := &out[i]
			req := &stages.Request{Prompt: p, Params: greedy(), MaxTokens: 100, IgnoreEOG: true, Emit: cols[i].emit,
				OnLogits: func(row []float32) { r.rows = append(r.rows, slices.Clone(row)) }}
			if err := h.e.Submit(req); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cols {
			<-c.done
		}
		return out
	}
	cold := startHybrid(t, fx, be, stages.Config{NCtx: 256, BlockSize: 16, StateCheckpoints: -1})
	wantA, wantB := run(cold, a)[0], run(cold, b)[0]
	h := startHybrid(t, fx, be, stages.Config{NCtx: 256, NSeq: 2, BlockSize: 16, KVTokens: 256})
	got := run(h, a, b)
	if h.e.Stats().Preemptions == 0 {
		t.Error("no preemption: the cache held both")
	}
	for i, w := range []hybridRun{wantA, wantB} {
		if d := rowsDiff(got[i].rows, w.rows); d > 1e-4 {
			t.Errorf("request %d: logits differ from alone by %g", i, d)
		}
	}
}

// TestHybridMessageCheckpoints: a checkpoint at a message start
// (Request.CheckpointAt, not on a block boundary) lets a prompt that
// shares the messages before it, and then differs for longer than the
// checkpoints planned near a prompt's end reach, reuse exactly those
// tokens, with the logits of a fresh engine given the same positions;
// without it nothing is reused. Positions outside the prompt or out of
// order are refused.
func TestHybridMessageCheckpoints(t *testing.T) {
	fx := openHybrid(t)
	tok := fx.b.Tokenizer
	system := tok.Encode("You are a helpful assistant. "+strings.Repeat("Remember the river, the stone and the garden. ", 8), true, true)
	userA := tok.Encode(strings.Repeat(" Tell me about the little girl named Lily and her park.", 30), false, true)
	userB := tok.Encode(strings.Repeat(" Which word comes last in the story of the old stone?", 30), false, true)
	a, b := append(slices.Clone(system), userA...), append(slices.Clone(system), userB...)
	at := []int{len(system)}
	if len(system)%16 == 0 || len(userB) < 16*16+16 {
		t.Fatalf("fixture: system prompt %d tokens (want off the block grid), user part %d (want beyond the planned checkpoints)", len(system), len(userB))
	}
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		cfg.NCtx = 1024
		if cfg.KVTokens > 0 {
			cfg.KVTokens = 2048
		}
		e := startHybrid(t, fx, ops(), cfg)
		if first := e.runAt(a, at); first.cached != 0 {
			t.Errorf("first request: %d cached tokens", first.cached)
		}
		second := e.runAt(b, at)
		if second.cached != len(system) {
			t.Errorf("second request: %d cached tokens, want the shared message's %d", second.cached, len(system))
		}
		fresh := startHybrid(t, fx, ops(), cfg).runAt(b, at)
		if d := rowsDiff(second.rows, fresh.rows); d != 0 {
			t.Errorf("second request: logits differ from a fresh engine's by %g", d)
		}
		// a pool of 4: the first prompt saves 8 (its message start, 5
		// near its end, its end, its release); the message start survives
		small := cfg
		small.StateCheckpoints = 4
		sm := startHybrid(t, fx, ops(), small)
		sm.runAt(a, at)
		if r := sm.runAt(b, at); r.cached != len(system) || rowsDiff(r.rows, fresh.rows) != 0 {
			t.Errorf("pool of 4: %d cached tokens (want %d), logits differ from a fresh engine's by %g", r.cached, len(system), rowsDiff(r.rows, fresh.rows))
		}
		plain := startHybrid(t, fx, ops(), cfg)
		plain.run(a)
		if r := plain.run(b); r.cached != 0 {
			t.Errorf("without message starts: %d cached tokens, want 0 (the prompts differ beyond the planned checkpoints)", r.cached)
		}
		for _, bad := range [][]int{{0}, {len(b)}, {20, 10}, {10, 10}, {-3}} {
			err := e.e.Submit(&stages.Request{Prompt: b, CheckpointAt: bad, Params: greedy(), Emit: func(stages.Event) error { return nil }})
			if !errors.Is(err, stages.ErrPrompt) || !strings.Contains(err.Error(), "CheckpointAt") {
				t.Errorf("CheckpointAt %v: %v, want ErrPrompt naming it", bad, err)
			}
		}
	})
}
