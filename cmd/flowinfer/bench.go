package main

// bench.go: `flowinfer bench`, throughput as llama-bench measures it (the
// harness is bench.Throughput), printed as llama-bench's markdown table or
// JSON, so the two engines' figures on one file compare line by line.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// BenchCmd measures prompt processing (pp) and generation (tg) throughput.
type BenchCmd struct {
	ModelFlags
	WeightFlags
	NPrompt    []int  `short:"p" name:"n-prompt" default:"512" sep:"," help:"Prompt tokens of the pp tests, comma-separated (0: no pp test)."`
	NGen       []int  `short:"n" name:"n-gen" default:"128" sep:"," help:"Generated tokens of the tg tests, comma-separated (0: no tg test)."`
	NDepth     []int  `short:"d" name:"n-depth" default:"0" sep:"," help:"Tokens already in the context before each test, comma-separated (llama-bench -d: \"pp512 @ d8192\" is prompt processing at depth 8192). The depth is processed once per depth, untimed."`
	Reps       int    `short:"r" name:"repetitions" default:"5" help:"Measured repetitions of each test."`
	Threads    int    `short:"t" default:"0" help:"Threads (0 = physical cores)."`
	BatchSize  int    `short:"b" name:"batch-size" default:"2048" help:"Most prompt tokens per forward step."`
	Output     string `short:"o" name:"output" default:"md" enum:"md,json" help:"Output format: md (llama-bench's table) or json."`
	ISA        string `name:"isa" default:"" help:"Kernel path: avx512, avx2 or go (default: the fastest this CPU runs)."`
	NoPack     bool   `name:"no-pack" help:"Multiply by the file's weight layout, not the kernels' packed copies."`
	NoWarmup   bool   `name:"no-warmup" help:"Skip the warm-up runs."`
	Seed       uint64 `name:"seed" default:"1234" help:"Seed of the random tokens."`
	CPUProfile string `name:"cpuprofile" help:"Write a pprof CPU profile of the measured runs." type:"path"`
	Roofline   bool   `name:"roofline" help:"Also measure read bandwidth (a scan of the resident weights) before and after each tg repetition and print the decode ceiling (bytes read per token / bandwidth) on stderr, and a second one that also holds attention's arithmetic to the measured peaks of its kernels' instructions (float32 FMAs, int16 multiply-adds)."`
}

func (c *BenchCmd) apply(cfg *configs.Config) {
	p := &cfg.Pipeline
	c.WeightFlags.setPipeline(p) // -ctk and -ctv as lists: variants splits them
	p.Threads, p.BatchSize = c.Threads, c.BatchSize
}

// variants returns the configuration of each -ctk × -ctv combination
// (each flag a comma-separated list, as llama-bench's), K outer.
func (c *BenchCmd) variants(cfg configs.Config) []configs.Config {
	var out []configs.Config
	for _, ks := range strings.Split(cfg.Pipeline.KVCache.TypeK, ",") {
		for _, vs := range strings.Split(cfg.Pipeline.KVCache.TypeV, ",") {
			v := cfg
			v.Pipeline.KVCache.TypeK, v.Pipeline.KVCache.TypeV = strings.TrimSpace(ks), strings.TrimSpace(vs)
			out = append(out, v)
		}
	}
	return out
}

func (c *BenchCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	maxP, maxN, maxD := maxOf(c.NPrompt), maxOf(c.NGen), maxOf(c.NDepth)
	if c.Reps <= 0 || minOf(c.NPrompt) < 0 || minOf(c.NGen) < 0 || minOf(c.NDepth) < 0 || maxP+maxN <= 0 {
		return fmt.Errorf("bench: need -r > 0, -p, -n and -d ≥ 0 and some -p or -n positive")
	}
	p := g.Config.Pipeline
	be, err := c.backend(p.Threads)
	if err != nil {
		return err
	}
	defer be.Close()
	path, _, err := c.resolve(ctx, g.Log)
	if err != nil {
		return err
	}
	b, err := model.Open(path, be.Supports, g.Log)
	if err != nil {
		return err
	}
	defer b.Close()
	nCtx := maxD + max(maxP, maxN, 1)
	maxBatch := max(1, min(max(maxP, maxD), p.BatchSize))
	combos := c.kvCombos(g.Config.Config)
	if done, err := c.runGPU(ctx, g, b, path, be, combos, nCtx, maxBatch); done || err != nil {
		return err // measured on the Vulkan backend (benchgpu.go)
	}
	wp, err := c.weights(&loaded{Bundle: b, path: path}, be, p, combos, stages.Footprint{Cells: nCtx, Running: 1, MaxBatch: maxBatch}, g.Log)
	if err != nil {
		return err
	}
	defer wp.Close()
	stopProfile, err := c.startProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	rl := c.roofline(be, b.Model, wp)
	tests, testKV, ubatch, err := c.measure(ctx, wp, be, b, combos, nCtx, maxBatch, rl.probe)
	if err != nil {
		return err
	}
	if wp.Plan().Streaming() {
		printWeightStats(wp)
	}
	rs := c.results(b, path, be, p.BatchSize, ubatch, tests, testKV)
	if err := c.write(rs, combos); err != nil {
		return err
	}
	if c.Roofline {
		rl.print(be, b.Model, combos, testKV, rs)
	}
	return nil
}

// backend makes the CPU backend of --isa's kernels (the fastest this CPU
// runs by default).
func (c *BenchCmd) backend(threads int) (*cpu.Backend, error) {
	kern := cpu.Best()
	if c.ISA != "" {
		isa, err := cpu.ParseISA(c.ISA)
		if err != nil {
			return nil, err
		}
		if kern = cpu.KernelsFor(isa); kern == nil {
			return nil, fmt.Errorf("bench: this CPU or build cannot run the %s kernels", c.ISA)
		}
	}
	be := cpu.NewBackend(threads, kern)
	be.NoPack = c.NoPack
	return be, nil
}

// kvCombos returns the cache types of each -ctk × -ctv combination.
func (c *BenchCmd) kvCombos(cfg configs.Config) []model.KVTypes {
	var out []model.KVTypes
	for _, v := range c.variants(cfg) {
		out = append(out, kvTypes(&v.Pipeline))
	}
	return out
}

// weights plans the weights for a RAM budget that leaves room for the
// largest of the combinations' caches, and packs the resident ones now,
// not in the first timed run.
func (c *BenchCmd) weights(l *loaded, be *cpu.Backend, p configs.Pipeline, combos []model.KVTypes, fp stages.Footprint, log *zap.Logger) (*stages.WeightPath, error) {
	big, bigBytes := combos[0], 0
	for _, kv := range combos {
		n, err := model.KVBytesPerToken(&l.Model.Hyper, kv)
		if err != nil {
			return nil, err
		}
		if n > bigBytes {
			big, bigBytes = kv, n
		}
	}
	p.KVCache.TypeK, p.KVCache.TypeV = big.K.String(), big.V.String()
	return openWeights(l, be, &p, &c.WeightFlags, fp, log)
}

// startProfile starts --cpuprofile's CPU profile; the function returned
// stops it.
func (c *BenchCmd) startProfile() (func(), error) {
	if c.CPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(c.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// measure runs the tests of each KV combination in a context of its own,
// and returns them with each one's cache types and the contexts'
// micro-batch.
func (c *BenchCmd) measure(ctx context.Context, wp *stages.WeightPath, be *cpu.Backend, b *model.Bundle, combos []model.KVTypes, nCtx, maxBatch int, probe func() float64) ([]bench.Test, []model.KVTypes, int, error) {
	bos := int32(-1)
	if b.Tokenizer.AddBOS() {
		bos = b.Tokenizer.BOS()
	}
	ubatch := 0
	var tests []bench.Test
	var testKV []model.KVTypes
	for _, kv := range combos {
		mctx, err := b.Model.NewContextOf(be, kv, nCtx, 1, maxBatch)
		if err != nil {
			return nil, nil, 0, err
		}
		if err := printKVBytes(&b.Model.Hyper, kv, mctx, nCtx); err != nil {
			return nil, nil, 0, err
		}
		n0 := len(tests)
		if err := c.runTests(ctx, wp, mctx, bos, probe, &tests); err != nil {
			return nil, nil, 0, err
		}
		for range len(tests) - n0 {
			testKV = append(testKV, kv)
		}
		ubatch = mctx.MaxBatch
	}
	return tests, testKV, ubatch, nil
}

// results are the tests as llama-bench reports them.
func (c *BenchCmd) results(b *model.Bundle, path string, be *cpu.Backend, nBatch, ubatch int, tests []bench.Test, testKV []model.KVTypes) []bench.Result {
	info := bench.DescribeModel(c.Model, b.File)
	if info.Filename == "" {
		info.Filename = path
	}
	rs := make([]bench.Result, len(tests))
	for i, t := range tests {
		rs[i] = bench.Result{
			Model: info, Backend: "CPU", ISA: be.ISA().String(), Threads: be.Threads(),
			NBatch: nBatch, NUBatch: ubatch, TypeK: testKV[i].K.String(), TypeV: testKV[i].V.String(), Build: version, CPUInfo: bench.CPUName(), Test: t,
		}
	}
	return rs
}

// write prints the results as llama-bench's table or JSON on stdout, and
// its notes on stderr (so stdout stays llama-bench's).
func (c *BenchCmd) write(rs []bench.Result, combos []model.KVTypes) error {
	var err error
	if c.Output == "json" {
		err = bench.WriteJSON(os.Stdout, rs)
	} else {
		err = bench.WriteMarkdown(os.Stdout, rs)
	}
	if err != nil {
		return err
	}
	for _, kv := range combos {
		if kv.Protect > 0 || kv.Recent > 0 {
			fmt.Fprintf(os.Stderr, "kv cache: %s: the table's type_k/type_v are the quantized rows\n", kv)
		}
	}
	for _, r := range rs {
		if r.Load.Valid {
			fmt.Fprintf(os.Stderr, "machine: %s: %s\n", r.Name(), r.Load)
		}
	}
	return nil
}

// runTests runs the pp and tg tests at every depth on mctx, appending
// their results to tests: llama-bench's order, per depth the pp tests then
// the tg tests; the depth's cells are processed by the first test at it
// only.
func (c *BenchCmd) runTests(ctx context.Context, wp *stages.WeightPath, mctx *model.Context, bos int32, probe func() float64, tests *[]bench.Test) error {
	return wp.RunContext(ctx, nil, mctx, func(ctx context.Context) error {
		return c.testLoop(ctx, mctx, bos, probe, tests)
	})
}

// testLoop is runTests' loop over depths and tests, on mctx as it is.
func (c *BenchCmd) testLoop(ctx context.Context, mctx *model.Context, bos int32, probe func() float64, tests *[]bench.Test) error {
	for _, d := range c.NDepth {
		ready := false
		run := func(np, ng int) error {
			if np+ng == 0 {
				return nil
			}
			ts, err := bench.Throughput(ctx, mctx, bench.ThroughputConfig{
				NPrompt: np, NGen: ng, NDepth: d, DepthReady: ready, Reps: c.Reps, NoWarmup: c.NoWarmup, Seed: c.Seed, BOS: bos,
				Probe: probe,
			})
			*tests = append(*tests, ts...)
			ready = true
			return err
		}
		for _, np := range c.NPrompt {
			if err := run(np, 0); err != nil {
				return err
			}
		}
		for _, ng := range c.NGen {
			if err := run(0, ng); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxOf and minOf return a list's largest and smallest values (0 if empty).
func maxOf(x []int) int {
	m := 0
	for i, v := range x {
		if i == 0 || v > m {
			m = v
		}
	}
	return m
}

func minOf(x []int) int {
	m := 0
	for i, v := range x {
		if i == 0 || v < m {
			m = v
		}
	}
	return m
}

// printKVBytes prints on stderr the bytes the context's KV cache holds
// (KVCache.Bytes) and how they split between the layers that keep a row per
// position and the rings of the sliding-window layers (model.KVCacheBytes
// with no cells), the figure to set beside llama.cpp's llama_kv_cache and
// llama_kv_cache_iswa lines.
func printKVBytes(h *model.Hyper, kv model.KVTypes, mctx *model.Context, nCtx int) error {
	total := mctx.KV.Bytes()
	rings, err := model.KVCacheBytes(h, kv, 0, 1, nCtx, mctx.MaxBatch)
	if err != nil {
		return err
	}
	nSWA, ringRows := 0, 0
	for l := range h.NLayer {
		if r := model.SWARingRows(kv, h.LayerWindow(l), mctx.MaxBatch, nCtx); r > 0 {
			nSWA, ringRows = nSWA+1, r
		}
	}
	fmt.Fprintf(os.Stderr, "kv cache: %s: %s for %d positions: %d full layers %s, %d sliding-window layers' rings of %d rows %s\n",
		kv, byteCount(total), nCtx, h.NLayer-nSWA, byteCount(total-rings), nSWA, ringRows, byteCount(rings))
	return nil
}
