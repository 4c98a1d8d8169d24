package bench

// throughput.go: prompt-processing and generation throughput with
// llama-bench's meaning, so the two engines' numbers compare directly:
//
//   - pp<N>: N random tokens (the first one BOS when the model adds it)
//     decoded from an empty cache in batches of up to the context's
//     MaxBatch, logits for the last token of each batch only (as
//     llama_batch_get_one); t/s = N / time.
//   - tg<N>: N single-token decode steps from an empty cache, each with its
//     logits, the next token random (nothing is sampled); t/s = N / time.
//   - with a depth D (llama-bench -d, "pp512 @ d8192"): both tests start
//     after D tokens already in the cache, so they measure prompt
//     processing and generation at that depth. The D tokens are processed
//     once, untimed, before the warm-ups; the timed runs write
//     positions D on only, so every repetition finds the same D cells (as
//     llama-bench restores its saved state instead of recomputing them).
//
// Each test runs once unmeasured as a warm-up (pp: the whole prompt; tg:
// one token), then Reps times measured. Tokenization and sampling are not
// part of either; a repetition starts again at position 0, which is what
// clearing the cache means to a model.Context (cells beyond a position are
// never read).

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/flowinfer/flowinfer/model"
)

// ThroughputConfig selects the tests.
type ThroughputConfig struct {
	NPrompt int // tokens of the pp test (0: no pp test)
	NGen    int // tokens of the tg test (0: no tg test)
	NDepth  int // tokens in the cache before each test (llama-bench -d)
	// DepthReady: the context's cache already holds the depth's cells (an
	// earlier call at the same depth on the same context, whose tests wrote
	// positions NDepth on only), so they are not processed again.
	DepthReady bool
	Reps       int    // measured repetitions (llama-bench -r; default 5)
	NoWarmup   bool   // skip the warm-up runs (llama-bench --no-warmup)
	Seed       uint64 // random tokens
	BOS        int32  // first token of each test, or -1 (model adds no BOS)
	// Probe, if set, is called before and after each measured repetition
	// of the tg test, untimed; the larger of the two results goes to
	// Test.Probes (bench --roofline: the read bandwidth next to each
	// repetition; a probe that fell in a moment when other tenants took
	// the bus would otherwise put the ceiling below what the run itself
	// read).
	Probe func() float64
}

// Test is one measured test: pp (NGen 0) or tg (NPrompt 0).
type Test struct {
	NPrompt, NGen int
	NDepth        int     // tokens in the cache before the test
	SamplesNS     []int64 // wall time of each repetition
	Time          time.Time
	Load          MachineLoad // the rest of the machine during the repetitions
	Probes        []float64   // ThroughputConfig.Probe next to each repetition (the larger of before and after)
}

// Name is llama-bench's test column: "pp512", "tg128", "pp512 @ d8192".
func (t *Test) Name() string {
	var s string
	switch {
	case t.NGen == 0:
		s = fmt.Sprintf("pp%d", t.NPrompt)
	case t.NPrompt == 0:
		s = fmt.Sprintf("tg%d", t.NGen)
	default:
		s = fmt.Sprintf("pp%d+tg%d", t.NPrompt, t.NGen)
	}
	if t.NDepth > 0 {
		s += fmt.Sprintf(" @ d%d", t.NDepth)
	}
	return s
}

// TS returns each repetition's tokens per second.
func (t *Test) TS() []float64 {
	ts := make([]float64, len(t.SamplesNS))
	for i, ns := range t.SamplesNS {
		ts[i] = 1e9 * float64(t.NPrompt+t.NGen) / float64(ns)
	}
	return ts
}

// AvgTS and StddevTS are the mean and sample standard deviation of TS, as
// llama-bench's avg_ts and stddev_ts.
func (t *Test) AvgTS() float64    { return mean(t.TS()) }
func (t *Test) StddevTS() float64 { return stddev(t.TS()) }

// AvgNS and StddevNS summarise the samples in nanoseconds.
func (t *Test) AvgNS() float64 { return mean(intsToFloats(t.SamplesNS)) }
func (t *Test) StddevNS() float64 {
	return stddev(intsToFloats(t.SamplesNS))
}

func intsToFloats(x []int64) []float64 {
	f := make([]float64, len(x))
	for i, v := range x {
		f[i] = float64(v)
	}
	return f
}

func mean(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// stddev is the sample standard deviation (n-1), 0 for fewer than 2.
func stddev(x []float64) float64 {
	if len(x) < 2 {
		return 0
	}
	m := mean(x)
	var s float64
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return math.Sqrt(s / float64(len(x)-1))
}

// Throughput runs the pp test and then the tg test on mctx (sequence 0).
// The context needs KV room for NDepth + max(NPrompt, NGen) positions;
// prompts (and the depth) longer than its MaxBatch are decoded in several
// batches.
func Throughput(ctx context.Context, mctx *model.Context, cfg ThroughputConfig) ([]Test, error) {
	if cfg.Reps <= 0 {
		cfg.Reps = 5
	}
	if cfg.NPrompt < 0 || cfg.NGen < 0 || cfg.NPrompt+cfg.NGen == 0 || cfg.NDepth < 0 {
		return nil, fmt.Errorf("bench: need a positive prompt or generation length and a depth ≥ 0 (have %d, %d and %d)",
			cfg.NPrompt, cfg.NGen, cfg.NDepth)
	}
	if n := cfg.NDepth + max(cfg.NPrompt, cfg.NGen); n > mctx.KV.NCtx {
		return nil, fmt.Errorf("bench: %d tokens (depth %d) do not fit the context of %d", n, cfg.NDepth, mctx.KV.NCtx)
	}
	r := &runner{mctx: mctx, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))}
	r.alloc()
	// the tests from position d (the depth's cells, written once below)
	d := cfg.NDepth
	// a sliding-window model's rings lose the depth's window to each
	// test's rows: they are saved after the depth and put back before
	// every run, as llama-bench restores its depth's state
	restore := func() error {
		if d > 0 && !mctx.KV.RestoreSWA(0) {
			return fmt.Errorf("bench: no saved sliding-window state at depth %d", d)
		}
		return nil
	}
	prompt := func(n int) error {
		if err := restore(); err != nil {
			return err
		}
		return r.prompt(d, n)
	}
	gen := func(n int) error {
		if err := restore(); err != nil {
			return err
		}
		return r.gen(d, n)
	}
	if !cfg.DepthReady {
		if err := r.prompt(0, d); err != nil {
			return nil, err
		}
		if err := mctx.KV.SaveSWA(0); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	var out []Test
	for _, tc := range []struct {
		np, ng int
		run    func(n int) error
	}{{cfg.NPrompt, 0, prompt}, {0, cfg.NGen, gen}} {
		n := tc.np + tc.ng
		if n == 0 {
			continue
		}
		if !cfg.NoWarmup {
			warm := n
			if tc.ng > 0 {
				warm = 1
			}
			if err := tc.run(warm); err != nil {
				return out, err
			}
		}
		t := Test{NPrompt: tc.np, NGen: tc.ng, NDepth: d, Time: time.Now().UTC()}
		c0 := readCPUTimes()
		for range cfg.Reps {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			probe := cfg.Probe != nil && tc.ng > 0
			var before float64
			if probe {
				before = cfg.Probe()
			}
			t0 := time.Now()
			if err := tc.run(n); err != nil {
				return out, err
			}
			t.SamplesNS = append(t.SamplesNS, time.Since(t0).Nanoseconds())
			if probe {
				t.Probes = append(t.Probes, max(before, cfg.Probe()))
			}
		}
		t.Load = loadBetween(c0, readCPUTimes())
		out = append(out, t)
	}
	return out, nil
}

// runner holds the batches, allocated before anything is timed.
type runner struct {
	mctx  *model.Context
	cfg   ThroughputConfig
	rng   *rand.Rand
	batch model.Batch // up to MaxBatch tokens
	one   model.Batch // one token
}

func (r *runner) alloc() {
	n := min(max(r.cfg.NPrompt, r.cfg.NDepth), r.mctx.MaxBatch)
	r.batch = model.Batch{Tokens: make([]int32, n), Pos: make([]int32, n), Seq: make([]int32, n), Logits: make([]bool, n)}
	r.one = model.Batch{Tokens: make([]int32, 1), Pos: make([]int32, 1), Seq: make([]int32, 1)}
}

func (r *runner) token() int32 { return int32(r.rng.IntN(r.mctx.M.NVocab)) }

// prompt decodes n tokens from position p0 in batches of up to MaxBatch
// (the first one BOS when p0 is 0 and the model adds it).
func (r *runner) prompt(p0, n int) error {
	for done := 0; done < n; {
		k := min(n-done, len(r.batch.Tokens))
		b := model.Batch{Tokens: r.batch.Tokens[:k], Pos: r.batch.Pos[:k], Seq: r.batch.Seq[:k], Logits: r.batch.Logits[:k]}
		for i := range k {
			b.Tokens[i] = r.token()
			b.Pos[i] = int32(p0 + done + i)
			b.Logits[i] = i == k-1
		}
		if p0+done == 0 && r.cfg.BOS >= 0 {
			b.Tokens[0] = r.cfg.BOS
		}
		if _, err := r.mctx.Decode(&b); err != nil {
			return fmt.Errorf("bench: prompt batch at %d: %w", p0+done, err)
		}
		done += k
	}
	return nil
}

// gen decodes n single tokens from position p0 (the first one BOS when p0
// is 0 and the model adds it).
func (r *runner) gen(p0, n int) error {
	tok := r.token()
	if p0 == 0 && r.cfg.BOS >= 0 {
		tok = r.cfg.BOS
	}
	for i := range n {
		r.one.Tokens[0], r.one.Pos[0] = tok, int32(p0+i)
		if _, err := r.mctx.Decode(&r.one); err != nil {
			return fmt.Errorf("bench: generation step at %d: %w", p0+i, err)
		}
		tok = r.token()
	}
	return nil
}
