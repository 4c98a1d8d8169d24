package main

// bench.go: `flowinfer bench`, throughput as llama-bench measures it (the
// harness is bench.Throughput), printed as llama-bench's markdown table or
// JSON, so the two engines' figures on one file compare line by line.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/bench"
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

func (c *BenchCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	maxP, maxN, maxD := maxOf(c.NPrompt), maxOf(c.NGen), maxOf(c.NDepth)
	if c.Reps <= 0 || minOf(c.NPrompt) < 0 || minOf(c.NGen) < 0 || minOf(c.NDepth) < 0 || maxP+maxN <= 0 || c.BatchSize <= 0 {
		return fmt.Errorf("bench: need -r > 0, -b > 0, -p, -n and -d ≥ 0 and some -p or -n positive")
	}
	kern := cpu.Best()
	if c.ISA != "" {
		isa, err := cpu.ParseISA(c.ISA)
		if err != nil {
			return err
		}
		if kern = cpu.KernelsFor(isa); kern == nil {
			return fmt.Errorf("bench: this CPU or build cannot run the %s kernels", c.ISA)
		}
	}
	backend := cpu.NewBackend(c.Threads, kern)
	defer backend.Close()
	backend.NoPack = c.NoPack

	path, _, err := c.resolve(ctx, g.Log)
	if err != nil {
		return err
	}
	b, err := model.Open(path, backend.Supports, g.Log)
	if err != nil {
		return err
	}
	defer b.Close()
	nCtx := maxD + max(maxP, maxN, 1)
	maxBatch := max(1, min(max(maxP, maxD), c.BatchSize))
	// plan the weights and pack the resident ones now, not in the first
	// timed run
	l := &loaded{Bundle: b, path: path}
	// -ctk/-ctv lists (llama-bench's): every K type with every V type,
	// K outer; the weights' RAM budget leaves room for the largest cache
	combos := c.kvCombos()
	big, bigBytes := combos[0], 0
	for _, kv := range combos {
		n, err := model.KVBytesPerToken(&b.Model.Hyper, kv)
		if err != nil {
			return err
		}
		if n > bigBytes {
			big, bigBytes = kv, n
		}
	}
	c.CacheTypeK, c.CacheTypeV = big.K.String(), big.V.String()
	wp, err := openWeights(&c.WeightFlags, l, backend, weightSetup{nCtx: nCtx, nSeq: 1, maxBatch: maxBatch, blockSize: -1}, g.Log)
	if errors.Is(err, errDryRun) {
		return nil
	}
	if err != nil {
		return err
	}
	defer wp.Close()
	bos := int32(-1)
	if b.Tokenizer.AddBOS() {
		bos = b.Tokenizer.BOS()
	}
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var probe func() float64          // --roofline: the bandwidth before and after each tg repetition
	var probed, scanned, streamed int // weight bytes and all bytes the probe reads; streamed layers
	for il := range b.Model.Layers {
		if wp.StreamsLayer(il) {
			streamed++
		}
	}
	if c.Roofline {
		rs := weightRegions(backend, b.Model, wp.StreamsLayer)
		n := 0
		for _, r := range rs {
			n += len(r)
		}
		if n < probeMin { // a few matrices would be read from the caches
			pad := make([]byte, probeMin-n)
			for i := 0; i < len(pad); i += 4096 {
				pad[i] = 1 // a page of its own: untouched, all would read the zero page
			}
			rs = append(rs, pad)
		}
		p := bench.ProbeRegions(rs, backend.Threads())
		probed, scanned = n, p.Size()
		probe = func() float64 { return p.Measure(probePasses) }
	}
	ubatch := 0
	var tests []bench.Test
	var testKV []model.KVTypes // each test's cache types
	for _, kv := range combos {
		mctx, err := b.Model.NewContextOf(backend, kv, nCtx, 1, maxBatch)
		if err != nil {
			return err
		}
		n0 := len(tests)
		if err := c.runTests(ctx, wp, mctx, bos, probe, &tests); err != nil {
			return err
		}
		for range len(tests) - n0 {
			testKV = append(testKV, kv)
		}
		ubatch = mctx.MaxBatch
	}
	if p := wp.Plan(); p.Streaming() {
		printWeightStats(wp)
	}
	info := bench.DescribeModel(c.Model, b.File)
	if info.Filename == "" {
		info.Filename = path
	}
	rs := make([]bench.Result, len(tests))
	for i, t := range tests {
		rs[i] = bench.Result{
			Model: info, Backend: "CPU", ISA: backend.ISA().String(), Threads: backend.Threads(),
			NBatch: c.BatchSize, NUBatch: ubatch, TypeK: testKV[i].K.String(), TypeV: testKV[i].V.String(), Build: version, CPUInfo: bench.CPUName(), Test: t,
		}
	}
	if c.Output == "json" {
		err = bench.WriteJSON(os.Stdout, rs)
	} else {
		err = bench.WriteMarkdown(os.Stdout, rs)
	}
	if err != nil {
		return err
	}
	// on stderr, so stdout stays llama-bench's table or JSON
	for _, kv := range combos {
		if kv.Protect > 0 || kv.Recent > 0 {
			fmt.Fprintf(os.Stderr, "kv cache: %s: the table's type_k/type_v are the quantized rows\n", kv)
		}
	}
	for _, t := range tests {
		if t.Load.Valid {
			fmt.Fprintf(os.Stderr, "machine: %s: %s\n", t.Name(), t.Load)
		}
	}
	if c.Roofline {
		// the peaks attention's arithmetic is held to, once, after the
		// tests (they do not move with the host like bandwidth)
		var peak peaks
		if k := cpu.KernelsFor(backend.ISA()); k != nil {
			rate := func(run func() float64) float64 { return bench.ComputePeak(run, backend.Threads(), probePasses) }
			peak.fma = rate(func() float64 { return k.FMAPeak(fmaPeakSteps) })
			peak.maddK = rate(func() float64 { return k.MAddPeak(maddPeakSteps, false) })
			peak.maddV = peak.maddK
			if backend.ISA() != cpu.ISAAVX2 { // AVX-512's scores and sums use different instructions
				peak.maddV = rate(func() float64 { return k.MAddPeak(maddPeakSteps, true) })
			}
		}
		for _, kv := range combos {
			var sel []bench.Result
			for i := range rs {
				if testKV[i] == kv {
					sel = append(sel, rs[i])
				}
			}
			printRoofline(b.Model, kv, backend.Threads(), probed, scanned, streamed, peak, sel)
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
	})
}

// kvCombos returns the -ctk × -ctv combinations (each a comma-separated
// list, as llama-bench's), K outer; checkCompute has vetted every name.
func (c *BenchCmd) kvCombos() []model.KVTypes {
	var out []model.KVTypes
	for _, ks := range strings.Split(c.CacheTypeK, ",") {
		for _, vs := range strings.Split(c.CacheTypeV, ",") {
			k, _ := model.ParseKVType(strings.TrimSpace(ks))
			v, _ := model.ParseKVType(strings.TrimSpace(vs))
			out = append(out, model.KVTypes{K: k, V: v, Protect: c.KVProtect, Recent: model.KVRecentFor(k, v, c.KVRecent)})
		}
	}
	return out
}

// checkCompute is ComputeFlags' check (it shadows it for bench), with -ctk
// and -ctv comma-separated lists: every combination is checked, by name.
func (c *BenchCmd) checkCompute(log *zap.Logger) error {
	for i, ks := range strings.Split(c.CacheTypeK, ",") {
		for j, vs := range strings.Split(c.CacheTypeV, ",") {
			f := c.ComputeFlags
			f.CacheTypeK, f.CacheTypeV = strings.TrimSpace(ks), strings.TrimSpace(vs)
			l := log
			if i+j > 0 {
				l = zap.NewNop() // the backend's warnings once
			}
			if err := f.checkCompute(l); err != nil {
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

// probePasses and probeMin: the read-bandwidth probe before and after each
// tg repetition (bench --roofline) is the best of probePasses scans of the
// resident weights, with a buffer of its own added up to probeMin bytes
// (8 times the largest L3 of the machines we run on).
const (
	probePasses = 3
	probeMin    = 256 << 20
)

// fmaPeakSteps and maddPeakSteps are the lengths of one thread's FMA and
// int16 multiply-add peak loops (AVX-512: 3.2 GFLOP, about 30 ms on a Zen 4
// core; AVX2: 1.6 G operations, about 20 ms on a Zen 3 core).
const (
	fmaPeakSteps  = 1 << 22
	maddPeakSteps = 1 << 22
)

// peaks are the arithmetic rates on the bench's threads that decode
// attention is held to, in operations per second (2 per multiply-add): the
// float32 FMA's, and the int16 multiply-add's of the integer K scores and
// V sums (cpu.Kernels.MAddPeak). 0: not measured.
type peaks struct{ fma, maddK, maddV float64 }

// weightRegions returns the memory a decode step's products read: each
// matrix of the resident layers and the output matrix, as the backend
// holds it (its packed copy, or the mapping). Routed experts and streamed
// layers, which come from disk, are left out.
func weightRegions(be *cpu.Backend, m *model.Model, streamed func(il int) bool) [][]byte {
	var rs [][]byte
	if m.Output != nil {
		rs = append(rs, be.MatMulBytes(m.Output))
	}
	for il := range m.Layers {
		if streamed(il) {
			continue
		}
		L := &m.Layers[il]
		for _, w := range L.Matrices() {
			if *w != nil {
				rs = append(rs, be.MatMulBytes(*w))
			}
		}
	}
	return rs
}

// printRoofline prints each tg test's decode ceiling: the weight bytes
// and the K and V cache bytes (in the cache's types) read per token at the
// test's mean position, over the read bandwidth of the weights (probed
// bytes of them; scanned bytes in all) measured right before and right
// after each repetition with as many threads, the larger of the two. The
// fraction is the mean of the repetitions' own. With streamed layers
// (their count) the disk bounds the run, which it says.
//
// With the peaks measured, a second line per test counts attention's
// arithmetic too: a layer's products need its attention's output and the
// attention the products' (Q, K, V), so the two take turns, and attention
// takes at least the longer of its KV bytes over the bandwidth and its
// arithmetic at the peaks of the instructions that do it (float32 FMAs,
// int16 multiply-adds: bench.AttentionOps).
func printRoofline(m *model.Model, kv model.KVTypes, threads, probed, scanned, streamed int, peak peaks, rs []bench.Result) {
	kvTok, err := model.KVBytesPerToken(&m.Hyper, kv)
	if err != nil {
		kvTok = 0 // the context was made, so this cannot happen
	}
	w := bench.DecodeBytes(m, 0, -1)
	how := fmt.Sprintf("the %.1f MB of resident weight matrices", float64(probed)/1e6)
	if scanned > probed {
		how += fmt.Sprintf(" and %.1f MB of its own (a scan of fewer bytes would hit the caches)", float64(scanned-probed)/1e6)
	}
	fmt.Fprintf(os.Stderr, "roofline: %.1f MB of weights and %d bytes of %s KV cache per cached token read per token; read bandwidth: the best of %d scans of %s before and %d after each repetition, %d threads\n",
		float64(w)/1e6, kvTok, kv, probePasses, how, probePasses, threads)
	if streamed > 0 {
		fmt.Fprintf(os.Stderr, "roofline: %d of %d layers stream from disk each step: the disk, not memory, bounds these runs (the weight path's lines above); the ceilings below are memory's\n",
			streamed, len(m.Layers))
	}
	for i := range rs {
		r := &rs[i]
		if r.NGen == 0 || len(r.Probes) != len(r.SamplesNS) {
			continue
		}
		pos := r.NDepth + r.NGen/2
		perTok := bench.DecodeBytes(m, kvTok, pos)
		if x, err := model.KVRecentBytes(&m.Hyper, kv, pos); err == nil {
			perTok += x // --kv-recent's f16 rows
		}
		ts := r.TS()
		var bws, fracs []string
		var frac, lo, hi float64
		for j, p := range r.Probes {
			f := ts[j] * float64(perTok) / p
			frac += f
			bws, fracs = append(bws, fmt.Sprintf("%.1f", p/1e9)), append(fracs, fmt.Sprintf("%.0f%%", 100*f))
			c := p / float64(perTok)
			if j == 0 || c < lo {
				lo = c
			}
			hi = max(hi, c)
		}
		n := float64(len(r.Probes))
		fmt.Fprintf(os.Stderr, "roofline: %s: %.1f MB per token (KV %.1f MB); read bandwidth %s GB/s, ceilings %.1f-%.1f t/s; %.2f t/s = %.0f%% of them (%s; %.1f GB/s read)\n",
			r.Name(), float64(perTok)/1e6, float64(perTok-w)/1e6, strings.Join(bws, ", "), lo, hi, r.AvgTS(), 100*frac/n, strings.Join(fracs, ", "), r.AvgTS()*float64(perTok)/1e9)
		flt, intK, intV, err := bench.AttentionOps(&m.Hyper, kv, pos, cpu.IntegerKV)
		if err == nil && peak.fma > 0 && (intK == 0 || peak.maddK > 0) && (intV == 0 || peak.maddV > 0) {
			printComputeRoofline(os.Stderr, r, attnOps{flt, intK, intV}, peak, threads, float64(w), float64(perTok-w))
		}
	}
}

// attnOps is a decode step's attention arithmetic (bench.AttentionOps): in
// float32, and in int16 multiply-adds of the K scores and V sums.
type attnOps struct{ flt, intK, intV float64 }

// printComputeRoofline writes printRoofline's second line for r to w:
// attention's operations per token at the peaks, weights and kv bytes per
// token at each repetition's probed bandwidth.
func printComputeRoofline(w io.Writer, r *bench.Result, ops attnOps, pk peaks, threads int, weights, kv float64) {
	ts := r.TS()
	tA := ops.flt / pk.fma
	if ops.intK > 0 {
		tA += ops.intK / pk.maddK
	}
	if ops.intV > 0 {
		tA += ops.intV / pk.maddV
	}
	var fracs []string
	var frac, hi, kvHi float64
	lo, kvLo := math.Inf(1), math.Inf(1)
	for j, p := range r.Probes {
		tKV := kv / p
		c := 1 / (weights/p + max(tKV, tA))
		f := ts[j] / c
		frac += f
		fracs = append(fracs, fmt.Sprintf("%.0f%%", 100*f))
		lo, hi, kvLo, kvHi = min(lo, c), max(hi, c), min(kvLo, tKV), max(kvHi, tKV)
	}
	what := fmt.Sprintf("attention %.3g GFLOP per token, %.2f ms at the float32 FMA peak (%.0f GFLOP/s, %d threads)",
		ops.flt/1e9, 1e3*tA, pk.fma/1e9, threads)
	if in := ops.intK + ops.intV; in > 0 {
		var mp string
		switch {
		case ops.intK == 0:
			mp = fmt.Sprintf("%.0f", pk.maddV/1e9)
		case ops.intV == 0 || pk.maddK == pk.maddV:
			mp = fmt.Sprintf("%.0f", pk.maddK/1e9)
		default:
			mp = fmt.Sprintf("%.0f (scores), %.0f (sums)", pk.maddK/1e9, pk.maddV/1e9)
		}
		what = fmt.Sprintf("attention %.3g G operations per token (%.3g G in int16 multiply-adds), %.2f ms at the measured peaks (float32 FMA %.0f GFLOP/s, int16 multiply-add %s GOP/s, %d threads)",
			(ops.flt+in)/1e9, in/1e9, 1e3*tA, pk.fma/1e9, mp, threads)
	}
	fmt.Fprintf(w, "roofline: %s: %s against %.2f-%.2f ms for its KV bytes; products and attention in turn: ceilings %.1f-%.1f t/s; %.2f t/s = %.0f%% of them (%s)\n",
		r.Name(), what, 1e3*kvLo, 1e3*kvHi, lo, hi, r.AvgTS(), 100*frac/float64(len(r.Probes)), strings.Join(fracs, ", "))
}
