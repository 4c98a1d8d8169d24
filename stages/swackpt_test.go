package stages_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// swaCkptFixture is gemma3-small (five layers of a 128-token window, one
// global) and three chat-like prompts: a system prompt longer than the
// window, then different user turns (a and b) longer than the rings' room
// beyond the window, and c: a's prompt cut inside its user turn and
// continued otherwise.
type swaCkptFixture struct {
	hybridFixture
	system, pa, pb, pc []int32
}

func openSWACkpt(t *testing.T) swaCkptFixture {
	t.Helper()
	fx := openHybridOf(t, "gemma3-small")
	tok := fx.b.Tokenizer
	system := tok.Encode("You are a helpful assistant. "+strings.Repeat("Remember the river, the stone and the garden. ", 22), true, true)
	userA := tok.Encode(strings.Repeat("Tell me about the little girl named Lily and her park. ", 8), false, true)
	userB := tok.Encode(strings.Repeat("Which word comes last in the story of the old stone? ", 12), false, true)
	f := swaCkptFixture{hybridFixture: fx, system: system}
	// all three prompts are as long as a: the checkpoints planned near
	// their ends (and so their chunks) fall at the same positions, and a
	// cold engine computes the shared prefix in the chunks a did (the CPU
	// backend's rows depend on where chunks are cut)
	f.pa = append(slices.Clone(system), userA...)
	f.pb = append(slices.Clone(system), userB[:len(userA)]...)
	// c leaves a a token short of the block boundary after the system
	// prompt: no checkpoint planned on a's blocks falls between
	k := (len(system)+15)/16*16 - 1
	f.pc = append(slices.Clone(f.pa[:k]), userB[:len(f.pa)-k]...)
	if w := fx.b.Model.Hyper.LayerWindow(0); len(system) <= w || k-len(system) < 1 || len(userA) < 64 || len(userB) < len(userA) || userA[0] == userB[0] {
		t.Fatalf("fixture: system prompt %d tokens (want more than the window %d, at least 2 short of a block boundary), user turns %d tokens (want more than the rings hold beyond the window)", len(system), w, len(userA))
	}
	return f
}

// swaCfg sizes the rings below the context: steps of 32 rows, a
// 128-token window: rings of 160 rows in a context of 1024.
func swaCfg(cfg stages.Config) stages.Config {
	cfg.NCtx, cfg.MaxBatch = 1024, 32
	if cfg.KVTokens > 0 {
		cfg.KVTokens = 2048
	}
	return cfg
}

// TestSWACheckpointPrefixReused: on a sliding-window model (gemma3-small),
// a second chat sharing a system prompt longer than the window, whose
// window the rings have overwritten since (the first chat's user turn),
// restores the window checkpoint at the system prompt's end (a message
// start): it prefills only its own tokens (cached = the system prompt) and
// gives bit for bit the logits of a cold engine given the same prompt.
// Without checkpoints it prefills everything. A prompt sharing more than
// the system prompt but leaving a's at a point no checkpoint holds falls
// back to the nearest earlier checkpoint (the message start) and
// recomputes from there, with the cold engine's logits too.
func TestSWACheckpointPrefixReused(t *testing.T) {
	if testing.Short() { // -race in CI: minutes each there; the plain run covers them, and the hybrid checkpoint tests the shared code under -race
		t.Skip("window checkpoint tests run without -short")
	}
	fx := openSWACkpt(t)
	at := []int{len(fx.system)}
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		cfg = swaCfg(cfg)
		e := startHybrid(t, fx.hybridFixture, ops(), cfg)
		if got := e.e.Config().Checkpoints(&fx.b.Model.Hyper); got == 0 {
			t.Fatal("no window checkpoints by default")
		}
		if first := e.runAt(fx.pa, at); first.cached != 0 {
			t.Errorf("first request: %d cached tokens", first.cached)
		}
		second := e.runAt(fx.pb, at)
		if second.cached != len(fx.system) {
			t.Errorf("second request: %d cached tokens (prefilled %d of %d), want the system prompt's %d", second.cached, len(fx.pb)-second.cached, len(fx.pb), len(fx.system))
		}
		cold := startHybrid(t, fx.hybridFixture, ops(), cfg).runAt(fx.pb, at)
		if d := rowsDiff(second.rows, cold.rows); d != 0 {
			t.Errorf("second request: logits differ from a cold engine's by %g", d)
		}
		// c shares a's first tokens up to a block boundary: no checkpoint there
		third := e.runAt(fx.pc, at)
		if third.cached != len(fx.system) {
			t.Errorf("prompt leaving a's inside its user turn: %d cached tokens, want the nearest earlier checkpoint's %d", third.cached, len(fx.system))
		}
		coldC := startHybrid(t, fx.hybridFixture, ops(), cfg).runAt(fx.pc, at)
		if d := rowsDiff(third.rows, coldC.rows); d != 0 {
			t.Errorf("fallback to an earlier checkpoint: logits differ from a cold engine's by %g", d)
		}
		if st := e.e.Stats(); st.StateCheckpoints == 0 || st.CachedTokens != int64(second.cached+third.cached) {
			t.Errorf("stats: %d checkpoints held, %d cached tokens (want %d)", st.StateCheckpoints, st.CachedTokens, second.cached+third.cached)
		}
		none := cfg
		none.StateCheckpoints = -1
		plain := startHybrid(t, fx.hybridFixture, ops(), none)
		plain.runAt(fx.pa, at)
		r := plain.runAt(fx.pb, at)
		if r.cached != 0 {
			t.Errorf("without checkpoints: %d cached tokens, want 0 (the rings no longer hold the system prompt's window)", r.cached)
		}
		if d := rowsDiff(r.rows, startHybrid(t, fx.hybridFixture, ops(), none).runAt(fx.pb, at).rows); d != 0 {
			t.Errorf("without checkpoints: logits differ from a cold engine's by %g", d)
		}
	})
}

// TestSWAFull: with KVTypes.SWAFull (--swa-full) no layer keeps a ring, so
// the second chat reuses the system prompt from blocks alone, with no
// checkpoints kept, and gives bit for bit a cold engine's logits (the
// system prompt is two whole steps long, so both cut the rest alike); the
// cache is as large as a model without windows', and KVCacheBytes and
// KVCapacityFor say so.
func TestSWAFull(t *testing.T) {
	if testing.Short() { // -race in CI: minutes each there; the plain run covers them, and the hybrid checkpoint tests the shared code under -race
		t.Skip("window checkpoint tests run without -short")
	}
	fx := openSWACkpt(t)
	sys := fx.system[:64]
	b := append(slices.Clone(sys), fx.pb[len(fx.system):]...)
	a := append(slices.Clone(sys), fx.pa[len(fx.system):]...)
	h := &fx.b.Model.Hyper
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		cfg = swaCfg(cfg)
		cfg.KVTypes = model.KVTypes{SWAFull: true}
		e := startHybrid(t, fx.hybridFixture, ops(), cfg)
		if n := e.e.Config().Checkpoints(h); n != 0 {
			t.Errorf("--swa-full: %d checkpoints, want none", n)
		}
		e.run(a)
		second := e.run(b)
		if second.cached != len(sys) {
			t.Errorf("second request: %d cached tokens, want the system prompt's %d", second.cached, len(sys))
		}
		cold := startHybrid(t, fx.hybridFixture, ops(), cfg).run(b)
		if d := rowsDiff(second.rows, cold.rows); d != 0 {
			t.Errorf("second request: logits differ from a cold engine's by %g", d)
		}
		rings := cfg // rings without checkpoints: chunks cut as --swa-full's
		rings.KVTypes, rings.StateCheckpoints = model.KVTypes{}, -1
		if d := rowsDiff(second.rows, startHybrid(t, fx.hybridFixture, ops(), rings).run(b).rows); d > 1e-4 {
			t.Errorf("--swa-full: logits differ from the rings' by %g", d)
		}
		perTok, err := model.KVBytesPerToken(h, cfg.KVTypes)
		if err != nil {
			t.Fatal(err)
		}
		cells := cfg.KVTokens
		if cells == 0 {
			cells = 1024
		}
		want, err := model.KVCacheBytes(h, cfg.KVTypes, cells, 1, cfg.NCtx, cfg.MaxBatch)
		if err != nil || want != int64(cells*perTok) || e.e.KVBytes() != want {
			t.Errorf("--swa-full: the engine's KV cache %d bytes, KVCacheBytes %d (%v), want %d cells of %d bytes", e.e.KVBytes(), want, err, cells, perTok)
		}
		withRings, _ := model.KVCacheBytes(h, model.KVTypes{}, cells, 1, cfg.NCtx, cfg.MaxBatch)
		if withRings >= want {
			t.Errorf("rings %d bytes, not less than --swa-full's %d", withRings, want)
		}
		c, err := stages.KVCapacityFor(h, cfg.KVTypes, want, 1, cfg.NCtx, cfg.MaxBatch, 16, 0)
		if err != nil || c.Tokens != cells || c.Rings != 0 {
			t.Errorf("--swa-full: capacity of %d bytes: %+v, %v; want %d tokens and no rings", want, c, err, cells)
		}
	})
}

// TestSWACheckpointBudget: window checkpoints count in the KV cache and
// the byte budget. The engine's KVBytes is its cache plus n checkpoints of
// Config.CheckpointBytes (the tiles of each window layer's last 127 rows);
// a budget of one and a half checkpoints keeps one, which after a request
// holds where that request left off, so the next chat's system prompt is
// recomputed (correctly); a pool of four keeps the message start (sparing
// it from a's near-end checkpoints) and the next chat reuses it. --kv-recent
// rows cannot be checkpointed: no checkpoints by default, an error when
// asked for.
func TestSWACheckpointBudget(t *testing.T) {
	if testing.Short() { // -race in CI: minutes each there; the plain run covers them, and the hybrid checkpoint tests the shared code under -race
		t.Skip("window checkpoint tests run without -short")
	}
	fx := openSWACkpt(t)
	h := &fx.b.Model.Hyper
	at := []int{len(fx.system)}
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		cfg = swaCfg(cfg)
		per, err := cfg.CheckpointBytes(h)
		if err != nil {
			t.Fatal(err)
		}
		ls, _ := model.KVLayers(h, cfg.KVTypes)
		var want int64
		for l := range h.NLayer {
			if w := h.LayerWindow(l); w > 0 {
				want += int64((w-2)/16+2) * 16 * int64(ls[l].RowBytes())
			}
		}
		if per != want || per == 0 {
			t.Errorf("a window checkpoint: %d bytes, want %d", per, want)
		}
		one := cfg
		one.StateCheckpointBytes = per + per/2
		if n := one.Checkpoints(h); n != 1 {
			t.Fatalf("a budget of 1.5 checkpoints: %d", n)
		}
		e1 := startHybrid(t, fx.hybridFixture, ops(), one)
		cells := cfg.KVTokens
		if cells == 0 {
			cells = 1024
		}
		kvb, _ := model.KVCacheBytes(h, cfg.KVTypes, cells, 1, cfg.NCtx, cfg.MaxBatch)
		if got := e1.e.KVBytes(); got != kvb+per {
			t.Errorf("engine with one checkpoint: KV %d bytes, want %d + %d", got, kvb, per)
		}
		if c, err := stages.KVCapacityFor(h, cfg.KVTypes, kvb+per, 1, cfg.NCtx, cfg.MaxBatch, 16, 1); err != nil || c.Tokens < cells {
			t.Errorf("capacity of the engine's bytes: %+v, %v; want at least %d tokens", c, err, cells)
		}
		e1.runAt(fx.pa, at)
		r := e1.runAt(fx.pb, at)
		cold := startHybrid(t, fx.hybridFixture, ops(), cfg).runAt(fx.pb, at)
		if r.cached != 0 || rowsDiff(r.rows, cold.rows) != 0 {
			t.Errorf("pool of one: %d cached tokens (want 0: it holds a's end), logits differ from a cold engine's by %g", r.cached, rowsDiff(r.rows, cold.rows))
		}
		if st := e1.e.Stats(); st.StateCheckpoints != 1 {
			t.Errorf("pool of one: %d held", st.StateCheckpoints)
		}
		four := cfg
		four.StateCheckpoints = 4
		e4 := startHybrid(t, fx.hybridFixture, ops(), four)
		e4.runAt(fx.pa, at)
		if r := e4.runAt(fx.pb, at); r.cached != len(fx.system) || rowsDiff(r.rows, cold.rows) != 0 {
			t.Errorf("pool of four: %d cached tokens (want %d), logits differ from a cold engine's by %g", r.cached, len(fx.system), rowsDiff(r.rows, cold.rows))
		}
		recent := cfg
		recent.KVTypes = model.KVTypes{K: model.KVQ8_0, V: model.KVQ8_0, Recent: 8}
		if n := recent.Checkpoints(h); n != 0 {
			t.Errorf("--kv-recent: %d checkpoints by default, want none", n)
		}
		recent.StateCheckpoints = 2
		if _, err := stages.NewEngine(fx.b.Model, fx.b.Tokenizer, ops(), recent, nil); err == nil || !strings.Contains(err.Error(), "kv-recent") {
			t.Errorf("--kv-recent with checkpoints asked for: %v, want an error naming it", err)
		}
	})
}

// TestSWACheckpointConcurrent: window checkpoints under continuous
// batching and forks. After a's chat, b and c are submitted together, and
// a second choice of b (n > 1) once b has its first token: b and its fork
// restore the message-start checkpoint or copy the running b's rings, c
// the same checkpoint; each greedy answer is the one it has alone on a
// cold engine, token for token, with logits within 1e-3: prompts sharing
// steps are cut into other chunks than alone, and chunk cuts alone move
// gemma3-small's F32 logits by up to 2.2e-4 on the CPU backend (measured:
// one prompt with and without the checkpoints' cuts; its GELU goes
// through a float16 table, see the gemma3 golden's 1.2e-4).
func TestSWACheckpointConcurrent(t *testing.T) {
	if testing.Short() { // -race in CI: minutes each there; the plain run covers them, and the hybrid checkpoint tests the shared code under -race
		t.Skip("window checkpoint tests run without -short")
	}
	fx := openSWACkpt(t)
	at := []int{len(fx.system)}
	hybridLayouts(t, func(t *testing.T, ops func() model.Ops, cfg stages.Config) {
		cfg = swaCfg(cfg)
		alone := map[string]hybridRun{}
		for name, p := range map[string][]int32{"b": fx.pb, "c": fx.pc} {
			alone[name] = startHybrid(t, fx.hybridFixture, ops(), cfg).runAt(p, at)
		}
		cfg.NSeq = 3
		if cfg.KVTokens > 0 {
			cfg.KVTokens = 3 * cfg.NCtx
		}
		e := startHybrid(t, fx.hybridFixture, ops(), cfg)
		e.runAt(fx.pa, at)
		runs := map[string]*hybridRun{"b": {}, "fork": {}, "c": {}}
		cols := map[string]*collector{}
		var mu sync.Mutex
		req := func(name string, p []int32) *stages.Request {
			cols[name] = newCollector()
			r := runs[name]
			return &stages.Request{Prompt: p, CheckpointAt: at, Params: greedy(), MaxTokens: 8, IgnoreEOG: true, Emit: cols[name].emit,
				OnLogits: func(row []float32) { mu.Lock(); r.rows = append(r.rows, slices.Clone(row)); mu.Unlock() }}
		}
		fork := req("fork", fx.pb)
		rb := req("b", fx.pb)
		submitted := false
		emitB := rb.Emit
		rb.Emit = func(ev stages.Event) error {
			if !submitted {
				submitted = true
				if err := e.e.Submit(fork); err != nil {
					t.Error(err)
				}
			}
			return emitB(ev)
		}
		for _, r := range []*stages.Request{rb, req("c", fx.pc)} {
			if err := e.e.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"b", "c", "fork"} {
			<-cols[name].done
		}
		for name, r := range runs {
			want := alone[name]
			if name == "fork" {
				want = alone["b"]
			}
			if d := rowsDiff(r.rows, want.rows); d > 1e-3 {
				t.Errorf("%s: logits differ from alone by %g", name, d)
			}
			for i := range min(len(r.rows), len(want.rows)) {
				if argmax(r.rows[i]) != argmax(want.rows[i]) {
					t.Errorf("%s: token %d is %d, alone %d", name, i, argmax(r.rows[i]), argmax(want.rows[i]))
					break
				}
			}
			if c := cols[name].final.Usage.CachedTokens; c < len(fx.system) {
				t.Errorf("%s: %d cached tokens, want at least the system prompt's %d", name, c, len(fx.system))
			}
		}
	})
}
