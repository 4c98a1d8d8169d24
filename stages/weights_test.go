package stages_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/quant"
	"github.com/flowinfer/flowinfer/stages"
)

// openModel loads a GGUF (a golden model, or a copy) for the CPU backend.
func openModel(t *testing.T, path string) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, cpu.Best().Supports)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// probePlan returns the plan of m's weight path without a budget, which
// tests size theirs from.
func probePlan(t *testing.T, m *model.Model, path string, ops model.Ops) stages.Plan {
	t.Helper()
	probe, err := stages.NewWeightPath(m, path, ops, stages.WeightConfig{PlanOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	return probe.Plan()
}

// tokenBudget is the smallest budget plan p runs with (one token's experts
// cached), plus extra expert slots.
func tokenBudget(p stages.Plan, m *model.Model, extra int) int64 {
	return p.Resident + p.Staging + int64(m.NExpertUsed+extra)*p.SlotBytes
}

// openGolden loads the golden model file name.
func openGolden(t *testing.T, name string) (string, *model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir, _ := golden.Load(t)
	path := filepath.Join(dir, "models", name)
	m, tok := openModel(t, path)
	return path, m, tok
}

var streamPrompts = []string{"Once upon a time", "The cat sat on the mat and looked at the", "One day, Lily"}

// runLogits runs the prompts one after another (greedy, 12 tokens each;
// one sequence at a time, so each step's batch, and with it the grouping of
// tokens by expert, does not depend on timing) and returns each request's
// logits rows, prompt and generated, in order.
func runLogits(t *testing.T, m *model.Model, tok *tokenizer.Tokenizer, ops model.Ops, wp *stages.WeightPath, maxBatch int) ([][]float32, []stages.Event) {
	t.Helper()
	e, err := stages.NewEngine(m, tok, ops, stages.Config{NCtx: 128, NSeq: 1, MaxBatch: maxBatch, Weights: wp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, len(streamPrompts))
	finals := make([]stages.Event, len(streamPrompts))
	var mu sync.Mutex
	for i, p := range streamPrompts {
		r := &stages.Request{ID: uint64(i + 1), Prompt: tok.Encode(p, true, true), Params: greedy(), MaxTokens: 12, IgnoreEOG: true, AllLogits: true,
			OnLogits: func(row []float32) {
				mu.Lock()
				rows[i] = append(rows[i], row...)
				mu.Unlock()
			},
			Emit: func(ev stages.Event) error {
				if ev.Finish != stages.FinishNone {
					finals[i] = ev
				}
				return nil
			}}
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rows, finals
}

// residentRef returns a backend with every weight of m resident and
// packed: the reference the streamed runs are compared with.
func residentRef(t *testing.T, m *model.Model) *cpu.Backend {
	t.Helper()
	ref := cpu.NewBackend(2, nil)
	t.Cleanup(ref.Close)
	if _, err := ref.PackModel(m, true, nil); err != nil {
		t.Fatal(err)
	}
	return ref
}

// sameLogits fails t unless each request's logits in got are want's, bit
// for bit (rows of nVocab).
func sameLogits(t *testing.T, got, want [][]float32, nVocab int) {
	t.Helper()
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("request %d: %d logits, want %d", i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("request %d: logit %d (row %d) is %v, resident %v", i, j, j/nVocab, got[i][j], want[i][j])
			}
		}
	}
}

// gptOssFile writes the gpt-oss-small preset (seed 1) with MXFP4 experts
// and the other weights of type typ into a temporary directory.
func gptOssFile(t *testing.T, typ quant.Type) string {
	t.Helper()
	return presetFile(t, "gpt-oss-small", synth.Options{Type: typ, Seed: 1})
}

// presetFile writes a synth preset with options o into a temporary
// directory.
func presetFile(t *testing.T, preset string, o synth.Options) string {
	t.Helper()
	spec, err := synth.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	kind := o.Mix
	if kind == "" {
		kind = o.Type.String()
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%s.gguf", preset, kind))
	if err := synth.WriteFile(path, spec, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// gemma4MoEFile writes the gemma4-moe-small preset (seed 1) with options o
// to a temporary file and returns its path.
func gemma4MoEFile(t *testing.T, o synth.Options) string {
	t.Helper()
	spec, err := synth.Preset("gemma4-moe-small")
	if err != nil {
		t.Fatal(err)
	}
	o.Seed = 1
	path := filepath.Join(t.TempDir(), fmt.Sprintf("gemma4-moe-small-%s%s.gguf", o.Type, o.Mix))
	if err := synth.WriteFile(path, spec, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// nemotronMoEFile writes nemotronh-moe-small (seed 1) with weights of type
// typ into a temporary directory.
func nemotronMoEFile(t *testing.T, typ quant.Type) string {
	t.Helper()
	spec, err := synth.Preset("nemotronh-moe-small")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("nemotronh-moe-small-%s.gguf", typ))
	if err := synth.WriteFile(path, spec, synth.Options{Type: typ, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStreamedExpertsBitIdentical: with routed experts read from disk into
// an expert cache (packed by the uploader), logits are bit-identical to the
// fully resident run, at budgets from "one token's experts" (every step
// evicts) to unlimited, for prefill in one step and in chunks, with three
// sequences decoding together: qwen3moe's golden files, gpt-oss files
// (MXFP4 experts whose biases stay resident, the other weights F32 or
// Q8_0), the hybrid MoE files (qwen35moe F32 and Q4_K_M, qwen3next
// Q4_K_M: recurrent layers, a shared expert beside the streamed ones),
// gemma4-moe-small files (a dense FFN beside the experts, GeGLU experts;
// Q8_0 and Q4_K_M) and nemotron_h_moe files (ungated experts in some
// layers only, F32 or Q8_0) generated here.
func TestStreamedExpertsBitIdentical(t *testing.T) {
	dir, _ := golden.Load(t)
	var paths []string
	for _, name := range []string{"synth-qwen3moe-Q8_0.gguf", "synth-qwen3moe-Q4_K_M.gguf", "synth-qwen3moe-F32.gguf"} {
		paths = append(paths, filepath.Join(dir, "models", name))
	}
	paths = append(paths, gptOssFile(t, quant.F32), gptOssFile(t, quant.Q8_0),
		presetFile(t, "qwen35moe-small", synth.Options{Type: quant.F32, Seed: 1}),
		presetFile(t, "qwen35moe-small", synth.Options{Mix: "Q4_K_M", Seed: 1}),
		presetFile(t, "qwen3next-small", synth.Options{Mix: "Q4_K_M", Seed: 1}))
	paths = append(paths, gemma4MoEFile(t, synth.Options{Type: quant.Q8_0}), gemma4MoEFile(t, synth.Options{Mix: "Q4_K_M"}))
	paths = append(paths, nemotronMoEFile(t, quant.F32), nemotronMoEFile(t, quant.Q8_0))
	for _, path := range paths {
		name := filepath.Base(path)
		m, tok := openModel(t, path)
		ref := residentRef(t, m)
		for _, maxBatch := range []int{64, 5} {
			want, _ := runLogits(t, m, tok, ref, nil, maxBatch)
			p := probePlan(t, m, path, ref)
			minimal := tokenBudget(p, m, 0)
			for _, tc := range []struct {
				budget   int64
				prefetch int
				engine   configs.IOEngine
			}{{minimal, 0, ""}, {minimal + 3*p.SlotBytes, 0, ""}, {0, 0, ""}, {minimal, 1, ""}, {minimal + 5*p.SlotBytes, 1, ""}, {minimal, 0, "io_uring"}, {minimal, 1, "io_uring"}} {
				budget := tc.budget
				t.Run(fmt.Sprintf("%s/batch=%d/budget=%d/prefetch=%d/engine=%s", name, maxBatch, budget, tc.prefetch, tc.engine), func(t *testing.T) {
					be := cpu.NewBackend(2, nil)
					defer be.Close()
					if _, err := be.PackModel(m, false, nil); err != nil {
						t.Fatal(err)
					}
					wp, err := stages.NewWeightPath(m, path, be, stages.WeightConfig{Engine: tc.engine, Budget: budget, QueueDepth: 3, PrefetchDepth: tc.prefetch})
					if errors.Is(err, nvme.ErrNoURing) {
						t.Skip(err)
					}
					if err != nil {
						t.Fatal(err)
					}
					defer wp.Close()
					if !wp.Plan().Streaming() {
						t.Fatal("the weight path does not stream")
					}
					got, _ := runLogits(t, m, tok, be, wp, maxBatch)
					sameLogits(t, got, want, m.NVocab)
					st := wp.Stats()
					var hits, misses int64
					for l := range st.Hits {
						hits += st.Hits[l]
						misses += st.Misses[l]
					}
					if misses == 0 || st.BytesRead == 0 {
						t.Errorf("no expert was read (misses %d, bytes %d)", misses, st.BytesRead)
					}
					if tc.prefetch > 0 && st.PrefetchIssued == 0 {
						t.Errorf("prefetch on, nothing prefetched")
					}
					if budget == minimal && st.Evictions == 0 {
						t.Errorf("the smallest budget evicted nothing")
					}
					if budget == 0 && (st.Evictions != 0 || misses > int64(p.Experts)) {
						t.Errorf("unlimited budget: %d evictions, %d misses for %d experts", st.Evictions, misses, p.Experts)
					}
					t.Logf("slots %d of %d: %d hits, %d misses, %d evictions, %d bytes read; prefetch %d issued, %d used, %d wasted",
						wp.Plan().Slots, p.Experts, hits, misses, st.Evictions, st.BytesRead, st.PrefetchIssued, st.PrefetchUsed, st.PrefetchWasted)
				})
			}
		}
	}
}

// TestStreamedBatchBitIdentical: one batch holding three sequences' prompts,
// then decode steps of three rows (what continuous batching runs), through
// a Context driven by WeightPath.Run: streamed logits equal resident ones.
func TestStreamedBatchBitIdentical(t *testing.T) {
	dir, _ := golden.Load(t)
	path := filepath.Join(dir, "models", "synth-qwen3moe-Q4_K_M.gguf")
	m, tok := openModel(t, path)
	run := func(ops model.Ops, wp *stages.WeightPath) []float32 {
		mctx, err := m.NewContext(ops, 64, 3, 64)
		if err != nil {
			t.Fatal(err)
		}
		var all []float32
		step := func(ctx context.Context, b *model.Batch) error {
			out, err := mctx.Decode(b)
			all = append(all, out...)
			return err
		}
		err = wp.Run(context.Background(), nil, func(ctx context.Context, st *stages.Streams) error {
			mctx.SetHooks(st.Hooks(mctx.Hooks()))
			var b model.Batch
			for s, p := range streamPrompts {
				for i, id := range tok.Encode(p, true, true) {
					b.Tokens, b.Pos, b.Seq = append(b.Tokens, id), append(b.Pos, int32(i)), append(b.Seq, int32(s))
				}
			}
			if err := step(ctx, &b); err != nil {
				return err
			}
			pos := map[int32]int32{}
			for i := range b.Seq {
				pos[b.Seq[i]] = b.Pos[i] + 1
			}
			for k := range 6 {
				d := model.Batch{}
				for s := range int32(3) {
					d.Tokens, d.Pos, d.Seq = append(d.Tokens, int32(10+k+int(s))), append(d.Pos, pos[s]), append(d.Seq, s)
					pos[s]++
				}
				if err := step(ctx, &d); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	ref := cpu.NewBackend(2, nil)
	defer ref.Close()
	ref.PackModel(m, true, nil)
	mmap, err := stages.NewWeightPath(m, path, ref, stages.WeightConfig{Engine: "mmap"})
	if err != nil {
		t.Fatal(err)
	}
	want := run(ref, mmap)
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	be.PackModel(m, false, nil)
	wp, err := stages.NewWeightPath(m, path, be, stages.WeightConfig{Budget: tokenBudget(probePlan(t, m, path, be), m, 1), Policy: "lru", PrefetchDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close()
	got := run(be, wp)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %v, resident %v", i, got[i], want[i])
		}
	}
	if wp.Stats().Evictions == 0 {
		t.Error("no eviction: the budget was meant to force them")
	}
}

// TestStreamedReadErrorFailsRequests: when the model file changes under the
// engine, the requests whose step needed an unread expert end with
// FinishError naming the cause; the engine itself does not fail.
func TestStreamedReadErrorFailsRequests(t *testing.T) {
	dir, _ := golden.Load(t)
	src := filepath.Join(dir, "models", "synth-qwen3moe-Q8_0.gguf")
	path := filepath.Join(t.TempDir(), "m.gguf")
	copyFile(t, src, path)
	m, tok := openModel(t, path)
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	wp, err := stages.NewWeightPath(m, path, be, stages.WeightConfig{Budget: tokenBudget(probePlan(t, m, path, be), m, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close()
	runChangedFile(t, path, m, tok, be, wp)
}

// runChangedFile makes the model file at path grow by a byte (every later
// read fails with nvme.ErrChanged), runs the test prompts through wp and
// checks that each request ends with FinishError matching the read's
// cause and stages.ErrWeightRead.
func runChangedFile(t *testing.T, path string, m *model.Model, tok *tokenizer.Tokenizer, ops model.Ops, wp *stages.WeightPath) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	_, finals := runLogits(t, m, tok, ops, wp, 64)
	for i, ev := range finals {
		if ev.Finish != stages.FinishError || !errors.Is(ev.Err, nvme.ErrChanged) || !errors.Is(ev.Err, stages.ErrWeightRead) {
			t.Errorf("request %d: finish %q, err %v; want an error matching nvme.ErrChanged and stages.ErrWeightRead", i, ev.Finish, ev.Err)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStreamedCancel: cancelling a run whose weight path is reading stops
// every stage (reader workers included) and leaves no goroutine behind.
func TestStreamedCancel(t *testing.T) {
	path, m, tok := openGolden(t, "synth-qwen3moe-Q8_0.gguf")
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	budget := tokenBudget(probePlan(t, m, path, be), m, 0)
	before := runtime.NumGoroutine()
	wp, err := stages.NewWeightPath(m, path, be, stages.WeightConfig{Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close()
	e, err := stages.NewEngine(m, tok, be, stages.Config{NCtx: 512, Weights: wp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	e.Submit(&stages.Request{Prompt: tok.Encode("Once upon a time", true, true), Params: greedy(), IgnoreEOG: true,
		Emit: func(stages.Event) error {
			if n++; n == 5 {
				cancel()
			}
			return nil
		}})
	if err := e.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
	waitGoroutines(t, before)
}

// TestWeightPathPlanErrors: settings the weight path cannot honour are
// refused with the reason.
func TestWeightPathPlanErrors(t *testing.T) {
	path, m, _ := openGolden(t, "synth-qwen3moe-Q8_0.gguf")
	dense, md, _ := openGolden(t, "stories260K.gguf")
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	for _, tc := range []struct {
		m    *model.Model
		path string
		cfg  stages.WeightConfig
		want string
	}{
		{m, path, stages.WeightConfig{Engine: "aio"}, `unknown io_engine "aio"`},
		{m, path, stages.WeightConfig{Policy: "lfu"}, "unknown expert cache policy"},
		{m, path, stages.WeightConfig{Budget: 1 << 20}, "cannot hold the weights that always stay resident"},
		{m, path, stages.WeightConfig{Engine: "mmap", Budget: 1 << 20}, "io_engine mmap maps the whole model"},
		{md, dense, stages.WeightConfig{Budget: 1 << 10}, "cannot hold the weights that always stay resident"},
	} {
		_, err := stages.NewWeightPath(tc.m, tc.path, be, tc.cfg)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// packedBy reports the weights be multiplies through a packed copy.
func packedBy(be *cpu.Backend) func(*model.Weight) bool {
	return func(w *model.Weight) bool {
		d := be.MatMulBytes(w)
		return len(d) > 0 && len(w.Data) > 0 && &d[0] != &w.Data[0]
	}
}

// TestChangedFileNoFault: the model file truncated to its header, or
// rewritten in place with its size and modification time restored, under
// a loaded model (resident weights owned, OwnResident), with each engine
// and with experts streamed (cold: a one-token cache) or all cached, and a
// dense model whose layers all stream through one slot: the
// process does not fault; a request that needs a read ends with an error
// matching nvme.ErrChanged and stages.ErrWeightRead; a request that needs
// none gets the logits of the model as loaded, bit for bit.
func TestChangedFileNoFault(t *testing.T) {
	dir, _ := golden.Load(t)
	src := filepath.Join(dir, "models", "synth-qwen3moe-Q8_0.gguf")
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dense, err := os.ReadFile(filepath.Join(dir, "models", "synth-llama-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		engine configs.IOEngine
		cold   bool
		layers bool // the dense model, its layers streamed
	}
	cases := []tc{{configs.EnginePread, true, false}, {configs.EnginePread, false, false}, {configs.EngineIOUring, true, false},
		{configs.EngineIOUring, false, false}, {configs.EngineMmap, false, false}, {configs.EnginePread, true, true}, {configs.EngineIOUring, true, true}}
	for _, c := range cases {
		for _, change := range []string{"truncate", "rewrite"} {
			t.Run(fmt.Sprintf("%s/cold=%v/layers=%v/%s", c.engine, c.cold, c.layers, change), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "m.gguf")
				orig := orig
				if c.layers {
					orig = dense
				}
				if err := os.WriteFile(path, orig, 0o644); err != nil {
					t.Fatal(err)
				}
				m, tok := openModel(t, path)
				be := cpu.NewBackend(2, nil)
				defer be.Close()
				be.DropPacked = true
				cfg := stages.WeightConfig{Engine: c.engine}
				switch {
				case c.layers:
					stages.ForceLayerStreaming(&cfg, 0, 1) // both layers through one slot: every step reads
				case c.cold:
					cfg.Budget = tokenBudget(probePlan(t, m, path, be), m, 0)
				}
				wp, err := stages.NewWeightPath(m, path, be, cfg)
				if errors.Is(err, nvme.ErrNoURing) {
					t.Skipf("io_uring not tested: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer wp.Close()
				p := wp.Plan()
				if _, err := be.PackModel(m, p.Experts > 0 && !p.Streaming(), wp.StreamsLayer); err != nil {
					t.Fatal(err)
				}
				if _, err := wp.OwnResident(packedBy(be)); err != nil {
					t.Fatal(err)
				}
				if p.Streaming() && p.Slots == p.Experts {
					if err := wp.Preload(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				want, _ := runLogits(t, m, tok, be, wp, 64)
				st, _ := os.Stat(path)
				time.Sleep(20 * time.Millisecond) // a new tick of the kernel's clock: a new ctime
				switch change {
				case "truncate":
					err = os.Truncate(path, int64(m.File.DataOffset))
				case "rewrite":
					other := bytes.Clone(orig)
					for i := int(m.File.DataOffset); i < len(other); i++ {
						other[i] ^= 0x55
					}
					if err = os.WriteFile(path, other, 0o644); err == nil {
						err = os.Chtimes(path, st.ModTime(), st.ModTime())
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				got, finals := runLogits(t, m, tok, be, wp, 64)
				if !c.cold {
					for i, ev := range finals {
						if ev.Finish == stages.FinishError {
							t.Fatalf("request %d: %v; every weight was in memory", i, ev.Err)
						}
					}
					sameLogits(t, got, want, m.NVocab)
					return
				}
				for i, ev := range finals {
					if ev.Finish != stages.FinishError || !errors.Is(ev.Err, nvme.ErrChanged) || !errors.Is(ev.Err, stages.ErrWeightRead) {
						t.Errorf("request %d: finish %q, err %v; want an error matching nvme.ErrChanged and stages.ErrWeightRead", i, ev.Finish, ev.Err)
					}
				}
			})
		}
	}
}
