// This file is bench --roofline: the read bandwidth probed around each tg
// repetition, the peaks of attention's instructions, and each test's
// decode ceiling (bytes per token over bandwidth; with the peaks, products
// and attention taking turns).

package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// roofline is --roofline's setup: the probe and what it reads.
type roofline struct {
	probe           func() float64 // the read bandwidth, before and after each tg repetition; nil without --roofline
	probed, scanned int            // weight bytes and all bytes the probe reads
	streamed        int            // layers streamed from disk
}

// roofline makes the probe over the resident weights (with --roofline).
func (c *BenchCmd) roofline(be *cpu.Backend, m *model.Model, wp *stages.WeightPath) roofline {
	var rl roofline
	for il := range m.Layers {
		if wp.StreamsLayer(il) {
			rl.streamed++
		}
	}
	if !c.Roofline {
		return rl
	}
	rs := weightRegions(be, m, wp.StreamsLayer)
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
	p := bench.ProbeRegions(rs, be.Threads())
	rl.probed, rl.scanned = n, p.Size()
	rl.probe = func() float64 { return p.Measure(probePasses) }
	return rl
}

// print measures the peaks attention's arithmetic is held to, once, after
// the tests (they do not move with the host like bandwidth), and prints
// each combination's ceilings.
func (rl roofline) print(be *cpu.Backend, m *model.Model, combos, testKV []model.KVTypes, rs []bench.Result) {
	var peak peaks
	if k := cpu.KernelsFor(be.ISA()); k != nil {
		rate := func(run func() float64) float64 { return bench.ComputePeak(run, be.Threads(), probePasses) }
		peak.fma = rate(func() float64 { return k.FMAPeak(fmaPeakSteps) })
		peak.maddK = rate(func() float64 { return k.MAddPeak(maddPeakSteps, false) })
		peak.maddV = peak.maddK
		if be.ISA() != cpu.ISAAVX2 { // AVX-512's scores and sums use different instructions
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
		printRoofline(m, kv, be.Threads(), rl.probed, rl.scanned, rl.streamed, peak, sel)
	}
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
