package cpu_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// benchModels are the golden files the step benchmarks run: the largest
// synthetic llama in the main weight types.
var benchModels = []string{
	"models/synth-llama-Q4_K_M.gguf",
	"models/synth-llama-Q6_K.gguf",
	"models/synth-llama-Q8_0.gguf",
	"models/synth-llama-F32.gguf",
}

// BenchmarkDecodeStep measures one single-token decode step at positions
// 0..255 (cycling), reporting tok/s, on each kernel path and thread count.
func BenchmarkDecodeStep(b *testing.B) {
	for _, file := range benchModels {
		m := openModel(b, file)
		for _, isa := range cpu.Available() {
			for _, threads := range []int{1, 2} {
				name := fmt.Sprintf("model=%s/isa=%s/threads=%d", trimGGUF(file), isa, threads)
				b.Run(name, func(b *testing.B) {
					be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
					defer be.Close()
					ctx, err := m.NewContext(be, 256, 1, 1)
					if err != nil {
						b.Fatal(err)
					}
					batch := &model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{0}}
					for b.Loop() {
						if _, err := ctx.Decode(batch); err != nil {
							b.Fatal(err)
						}
						batch.Pos[0] = (batch.Pos[0] + 1) % 256
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
				})
			}
		}
	}
}

// BenchmarkPrefill measures one batch of 128 prompt tokens (logits for the
// last one), reporting tok/s.
func BenchmarkPrefill(b *testing.B) {
	const n = 128
	for _, file := range benchModels[:3] {
		m := openModel(b, file)
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("model=%s/threads=%d", trimGGUF(file), threads), func(b *testing.B) {
				be := cpu.NewBackend(threads, nil)
				defer be.Close()
				ctx, err := m.NewContext(be, n, 1, n)
				if err != nil {
					b.Fatal(err)
				}
				batch := &model.Batch{Tokens: make([]int32, n), Pos: make([]int32, n), Seq: make([]int32, n), Logits: make([]bool, n)}
				for i := range n {
					batch.Tokens[i] = int32(1 + i*37%(m.NVocab-1))
					batch.Pos[i] = int32(i)
				}
				batch.Logits[n-1] = true
				c0 := cpuTime()
				for b.Loop() {
					if _, err := ctx.Decode(batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
				reportCPU(b, c0)
			})
		}
	}
}

// BenchmarkMatMul measures one product of a 8192×2048 weight by one and by
// 64 activation rows, reporting weight GB/s (n=1) or GFLOP/s (n=64).
func BenchmarkMatMul(b *testing.B) {
	const rows, cols = 8192, 2048 // an FFN up matrix of the 1B preset (weights beyond L2)
	for _, wt := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0} {
		rb, _ := quant.RowBytes(wt, cols)
		w := &model.Weight{Name: "w", Type: wt, Cols: cols, Rows: rows, RowBytes: rb, Data: randomWeights(wt, rows, cols)}
		for _, n := range []int{1, 64} {
			for _, threads := range []int{1, 2} {
				for _, pack := range []bool{true, false} {
					b.Run(fmt.Sprintf("type=%s/n=%d/threads=%d/pack=%v", wt, n, threads, pack), func(b *testing.B) {
						be := cpu.NewBackend(threads, nil)
						defer be.Close()
						be.NoPack = !pack
						x := randomF32(n*cols, 1)
						out := make([]float32, n*rows)
						be.MatMul(out, w, x, n) // packs w: load time, not a product's
						for b.Loop() {
							be.MatMul(out, w, x, n)
						}
						sec := b.Elapsed().Seconds() / float64(b.N)
						if n == 1 {
							b.ReportMetric(float64(len(w.Data))/sec/1e9, "GB/s")
						} else {
							b.ReportMetric(2*float64(rows*cols*n)/sec/1e9, "GFLOP/s")
						}
					})
				}
			}
		}
	}
}

// BenchmarkMatMulCold measures matrix-vector products (decode) on weights
// that come from memory, not cache: 32 different 8192×2048 matrices (300 MB
// in the file layout, as much again packed) used in turn, reporting the
// weight GB/s. This is what a decode step is made of, and where the
// workers' time in cgo meets the Go scheduler (procs.go): compare
// GOMAXPROCS=2 (the environment setting disables the spare P) with the
// default.
func BenchmarkMatMulCold(b *testing.B) {
	const rows, cols, copies = 8192, 2048, 32
	for _, wt := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0} {
		rb, _ := quant.RowBytes(wt, cols)
		data := randomWeights(wt, rows, cols)
		ws := make([]*model.Weight, copies)
		for i := range ws {
			ws[i] = &model.Weight{Name: fmt.Sprint("w", i), Type: wt, Cols: cols, Rows: rows, RowBytes: rb, Data: append([]byte(nil), data...)}
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("type=%s/threads=%d", wt, threads), func(b *testing.B) {
				be := cpu.NewBackend(threads, nil)
				defer be.Close()
				x := randomF32(cols, 1)
				out := make([]float32, rows)
				for _, w := range ws { // pack outside the timing
					be.MatMul(out, w, x, 1)
				}
				i := 0
				cs0 := contextSwitches(b)
				for b.Loop() {
					be.MatMul(out, ws[i%copies], x, 1)
					i++
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(len(data))/sec/1e9, "GB/s")
				b.ReportMetric(float64(contextSwitches(b)-cs0)/float64(b.N), "ctxsw/op")
			})
		}
	}
}

func trimGGUF(file string) string {
	s := filepath.Base(file)
	return s[:len(s)-len(filepath.Ext(s))]
}

// BenchmarkAttention measures Attention with the llama-1b preset's heads
// (32 query heads, 8 KV heads of 64): a prefill of 512 rows from position
// 0, and one decode row at position 511.
func BenchmarkAttention(b *testing.B) {
	h := model.Hyper{NHead: 32, NHeadKV: 8, HeadDimK: 64, HeadDimV: 64, NLayer: 1}
	const nCtx = 512
	kv := model.NewKVCache(&h, nCtx, 1)
	fillKV(kv, nCtx)
	for _, rows := range []int{512, 1} {
		seq, pos := make([]int32, rows), make([]int32, rows)
		for i := range pos {
			pos[i] = int32(nCtx - rows + i)
		}
		q := randomF32(rows*h.NHead*h.HeadDimK, 3)
		out := make([]float32, rows*h.NHead*h.HeadDimV)
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("rows=%d/threads=%d", rows, threads), func(b *testing.B) {
				be := cpu.NewBackend(threads, nil)
				defer be.Close()
				c0 := cpuTime()
				for b.Loop() {
					be.Attention(out, q, kv, 0, seq, pos, &h, model.Attn{Scale: 0.125})
				}
				reportCPU(b, c0)
				var macs float64
				for _, p := range pos {
					macs += float64(p+1) * float64(h.NHead*(h.HeadDimK+h.HeadDimV))
				}
				b.ReportMetric(2*macs/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkAttentionPrefill measures the attention of a whole causal
// prefill with the llama-1b preset's heads (32 query heads, 8 KV heads of
// 64): n positions in chunks of 2048 rows (bench's default batch), each
// chunk attending to the cache so far, per kernel path and thread count,
// with an f32 cache and (at 8192) the default f16 one.
// GFLOP/s counts 2·(dk+dv) flops per (query head, row, visible position):
// the figure issue 20 quotes (8,466 positions: ~4.7 TFLOP in 16 layers).
func BenchmarkAttentionPrefill(b *testing.B) {
	h := model.Hyper{NHead: 32, NHeadKV: 8, HeadDimK: 64, HeadDimV: 64, NLayer: 1}
	const chunk = 2048
	for _, c := range []struct {
		n int
		t model.KVType
	}{{2048, model.KVF32}, {8192, model.KVF32}, {8192, model.KVF16}} {
		n := c.n
		kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: c.t, V: c.t}, n, 1)
		if err != nil {
			b.Fatal(err)
		}
		fillKV(kv, n)
		q := randomF32(chunk*h.NHead*h.HeadDimK, 3)
		out := make([]float32, chunk*h.NHead*h.HeadDimV)
		seq, pos := make([]int32, chunk), make([]int32, chunk)
		var macs float64
		for p := range n {
			macs += float64(p+1) * float64(h.NHead*(h.HeadDimK+h.HeadDimV))
		}
		for _, isa := range cpu.Available() {
			for _, threads := range []int{1, 2} {
				if isa == cpu.ISAScalarGo && (n > 2048 || threads > 1) {
					continue
				}
				if c.t != model.KVF32 && isa == cpu.ISAScalarGo {
					continue
				}
				b.Run(fmt.Sprintf("n=%d/kv=%s/isa=%s/threads=%d", n, c.t, isa, threads), func(b *testing.B) {
					be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
					defer be.Close()
					c0 := cpuTime()
					for b.Loop() {
						for p0 := 0; p0 < n; p0 += chunk {
							k := min(chunk, n-p0)
							for i := range k {
								pos[i] = int32(p0 + i)
							}
							be.Attention(out, q, kv, 0, seq[:k], pos[:k], &h, model.Attn{Scale: 0.125})
						}
					}
					cpu := cpuTime() - c0
					reportCPU(b, c0)
					b.ReportMetric(2*macs/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
					// per CPU-second: steadier on a shared machine
					b.ReportMetric(2*macs*float64(b.N)/cpu.Seconds()/1e9, "GFLOP/cpu-s")
				})
			}
		}
	}
}

// cpuTime returns the process's user+system CPU time: on a machine shared
// with other work, CPU time per operation is steadier than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU milliseconds per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
}

// contextSwitches returns the process's context switches so far, voluntary
// and involuntary (getrusage).
func contextSwitches(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Nvcsw + ru.Nivcsw
}

// BenchmarkNormRope measures RMSNorm and RoPE (both pair layouts, with and
// without YaRN) on rows of
// the llama-1b preset (32 heads of 64), one decode row and a 512-row
// prefill, on one thread, reporting Gelem/s.
func BenchmarkNormRope(b *testing.B) {
	const nHead, headDim = 32, 64
	const dim = nHead * headDim
	for _, isa := range cpu.Available() {
		for _, rows := range []int{1, 512} {
			x := randomF32(rows*dim, 1)
			w := randomF32(dim, 2)
			out := make([]float32, len(x))
			pos := make([]int32, rows)
			for i := range pos {
				pos[i] = int32(i + 7)
			}
			be := cpu.NewBackend(1, cpu.KernelsFor(isa))
			report := func(b *testing.B) {
				b.ReportMetric(float64(rows*dim)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
			}
			b.Run(fmt.Sprintf("op=rmsnorm/isa=%s/rows=%d", isa, rows), func(b *testing.B) {
				for b.Loop() {
					be.RMSNorm(out, x, w, rows, dim, 1e-5)
				}
				report(b)
			})
			for _, typ := range []model.RopeType{model.RopeNorm, model.RopeNeox} {
				for _, yarn := range []bool{false, true} {
					rp := model.Rope{Type: typ, Dim: headDim, Base: 500000, Scale: 1}
					name := fmt.Sprintf("op=rope%d/isa=%s/rows=%d", typ, isa, rows)
					if yarn { // Llama-3-style YaRN 4 over 8192
						rp.Scale, rp.ExtFactor, rp.Corr = 0.25, 1, model.YarnCorrDims(headDim, 8192, 500000, 32, 1)
						name = fmt.Sprintf("op=rope%d-yarn/isa=%s/rows=%d", typ, isa, rows)
					}
					b.Run(name, func(b *testing.B) {
						for b.Loop() {
							be.Rope(out, pos, rows, nHead, headDim, &rp)
						}
						report(b)
					})
				}
			}
			be.Close()
		}
	}
}

// BenchmarkFMAPeak measures the F32 FMA peak per kernel path, on one
// thread and on two (one loop per thread, concurrently): GFLOP/s of
// Kernels.FMAPeak, the ceiling for BenchmarkAttentionPrefill's figures.
func BenchmarkFMAPeak(b *testing.B) {
	peakBench(b, "GFLOP", func(k *cpu.Kernels, steps int) float64 { return k.FMAPeak(steps) })
}

// BenchmarkMAddPeak measures the int16 multiply-add peak of the integer
// decode K scores and V sums per kernel path (Kernels.MAddPeak), as
// BenchmarkFMAPeak: G operations per second, 2 per multiply-add.
func BenchmarkMAddPeak(b *testing.B) {
	for _, v := range []bool{false, true} {
		b.Run(fmt.Sprintf("sums=%v", v), func(b *testing.B) {
			peakBench(b, "GOP", func(k *cpu.Kernels, steps int) float64 { return k.MAddPeak(steps, v) })
		})
	}
}

// peakBench times run (steps of a peak loop, returning its operations) per
// kernel path that has the loop, on one thread and on two at once, and
// reports unit/s and unit/cpu-s.
func peakBench(b *testing.B, unit string, run func(k *cpu.Kernels, steps int) float64) {
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		if run(k, 1) == 0 {
			continue
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("isa=%s/threads=%d", isa, threads), func(b *testing.B) {
				const steps = 1 << 22
				var ops float64
				done := make([]float64, threads)
				c0 := cpuTime()
				for b.Loop() {
					var wg sync.WaitGroup
					for i := range threads {
						wg.Go(func() { done[i] = run(k, steps) })
					}
					wg.Wait()
					for _, f := range done {
						ops += f
					}
				}
				b.ReportMetric(ops/b.Elapsed().Seconds()/1e9, unit+"/s")
				b.ReportMetric(ops/(cpuTime()-c0).Seconds()/1e9, unit+"/cpu-s")
			})
		}
	}
}

// BenchmarkFlashTile measures one FlashTile call (llama-1b's head
// dimensions, 128 query rows, unmasked) per kernel path, GFLOP/s counting
// 2·(dk+dv) flops per query row and position.
func BenchmarkFlashTile(b *testing.B) {
	const rp, dk, dv = 128, 64, 64
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, L := range []int{64, 128} {
			b.Run(fmt.Sprintf("isa=%s/L=%d", isa, L), func(b *testing.B) {
				qt := randomF32(rp*dk, 1)
				kp, vp := randomF32(L*dk, 2), randomF32(L*dv, 3)
				pos := make([]int32, rp)
				for i := range pos {
					pos[i] = 1 << 20
				}
				m, l, acc := make([]float32, rp), make([]float64, rp), make([]float32, rp*dv)
				scratch := make([]float32, cpu.FlashScratch(rp, L))
				for i := range m {
					m[i] = float32(math.Inf(-1))
				}
				c0 := cpuTime()
				for b.Loop() {
					k.FlashTile(qt, rp, rp, dk, dv, kp, vp, L, L, 0, pos, false, 0, m, l, acc, scratch)
				}
				flops := 2 * float64(rp*L*(dk+dv)) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(cpuTime()-c0).Seconds()/1e9, "GFLOP/cpu-s")
			})
		}
	}
}

// fillKV fills positions [0, n) of sequence 0, layer 0, with random rows.
func fillKV(kv *model.KVCache, n int) {
	k, v := randomF32(n*kv.KDim, 1), randomF32(n*kv.VDim, 2)
	for p := range n {
		kv.SetK(0, 0, p, k[p*kv.KDim:(p+1)*kv.KDim])
		kv.SetV(0, 0, p, v[p*kv.VDim:(p+1)*kv.VDim])
	}
}

// BenchmarkAttentionDecodeDRAM is BenchmarkAttentionDecode over 16 layers
// of cache (the llama-1b preset's), a layer per call in turn, so the rows
// come from memory as in a decode step (one layer's 16.8 MB of f16 K and V
// would sit partly in this machine's 32 MB L3), with the Backend's threads
// (2 here; THREADS=n sets them).
func BenchmarkAttentionDecodeDRAM(b *testing.B) {
	const depth, layers = 8192, 16
	h := model.Hyper{NHead: 32, NHeadKV: 8, HeadDimK: 64, HeadDimV: 64, NLayer: layers}
	for _, types := range []model.KVTypes{{K: model.KVF16, V: model.KVF16}, {K: model.KVQ8_0, V: model.KVQ8_0},
		{K: model.KVQ4_0, V: model.KVQ4_0}, {K: model.KVTQ4, V: model.KVTQ3}} {
		b.Run(fmt.Sprintf("kv=%s", types), func(b *testing.B) {
			kv, err := model.NewKVCacheOf(&h, types, depth, 1)
			if err != nil {
				b.Fatal(err)
			}
			k, v := randomF32(depth*kv.KDim, 1), randomF32(depth*kv.VDim, 2)
			for l := range layers {
				for p := range depth {
					kv.SetK(l, 0, p, k[p*kv.KDim:(p+1)*kv.KDim])
					kv.SetV(l, 0, p, v[p*kv.VDim:(p+1)*kv.VDim])
				}
			}
			q := randomF32(h.NHead*h.HeadDimK, 3)
			out := make([]float32, h.NHead*h.HeadDimV)
			seq, pos := []int32{0}, []int32{depth - 1}
			threads := 2
			if s := os.Getenv("THREADS"); s != "" {
				threads, _ = strconv.Atoi(s)
			}
			be := cpu.NewBackend(threads, nil)
			defer be.Close()
			l := 0
			for b.Loop() {
				be.Attention(out, q, kv, l, seq, pos, &h, model.Attn{Scale: 0.125})
				l = (l + 1) % layers
			}
			b.ReportMetric(float64(kv.Bytes())/layers*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*layers/1e6, "ms/token")
		})
	}
}

// BenchmarkAttentionDecode measures one decode row's attention at depth
// 8192 with the llama-1b preset's heads (32 query heads, 8 KV heads of
// 64), per KV cache type: the part of a decode step that grows with the
// context. GB/s counts the cache bytes the row reads (K and V of 8192
// positions), so it compares with the machine's read bandwidth.
func BenchmarkAttentionDecode(b *testing.B) {
	h := model.Hyper{NHead: 32, NHeadKV: 8, HeadDimK: 64, HeadDimV: 64, NLayer: 1}
	const depth = 8192
	for _, types := range []model.KVTypes{{K: model.KVF32, V: model.KVF32}, {K: model.KVF16, V: model.KVF16}, {K: model.KVQ8_0, V: model.KVQ8_0},
		{K: model.KVQ4_0, V: model.KVQ4_0}, {K: model.KVQ8_0, V: model.KVTQ3}, {K: model.KVTQ4, V: model.KVTQ3}} {
		kv, err := model.NewKVCacheOf(&h, types, depth, 1)
		if err != nil {
			b.Fatal(err)
		}
		fillKV(kv, depth)
		q := randomF32(h.NHead*h.HeadDimK, 3)
		out := make([]float32, h.NHead*h.HeadDimV)
		seq, pos := []int32{0}, []int32{depth - 1}
		bytes := float64(kv.Bytes())
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("kv=%s/threads=%d", types, threads), func(b *testing.B) {
				be := cpu.NewBackend(threads, nil)
				defer be.Close()
				scale := float32(0.125)
				for b.Loop() {
					be.Attention(out, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
				}
				b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkAttentionDecodeWindow measures one decode row's attention (and
// a prefill chunk's of 128 rows) with a sliding window of 1024 (Gemma 3's)
// at depth 8192, against full attention at depth 1024, with Gemma-3-4B's heads (8 query heads, 4 KV
// heads of 256), f16 KV: the window's row reads only the 1024 positions
// it sees, so both should cost about the same. "ring" keeps the window
// layer in its ring (model.KVCache.Ring: 1535 rows for steps of 512), "full"
// in a cache of every position; "depth=1024" is full attention at 1024.
func BenchmarkAttentionDecodeWindow(b *testing.B) {
	h := model.Hyper{NHead: 8, NHeadKV: 4, HeadDimK: 256, HeadDimV: 256, NLayer: 1}
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	fill := func(kv *model.KVCache, n int) { // positions [0, n), in order
		k, v := randomF32(kv.KDim, 1), randomF32(kv.VDim, 2)
		for p := range n {
			k[0], v[0] = float32(p%7), float32(p%5)
			kv.SetK(0, 0, p, k)
			kv.SetV(0, 0, p, v)
		}
	}
	type tc struct {
		name   string
		depth  int
		window int
		ring   bool
	}
	for _, c := range []tc{{"depth=1024", 1024, 0, false}, {"depth=8192/window=1024/full", 8192, 1024, false}, {"depth=8192/window=1024/ring", 8192, 1024, true}} {
		hc := h
		if c.ring {
			hc.Window = []int{c.window}
		}
		kv, err := model.NewKVCacheOf(&hc, f16, c.depth, 1)
		if err != nil {
			b.Fatal(err)
		}
		kv.ReserveSWA(512)
		if c.ring != (kv.Ring(0) > 0) {
			b.Fatalf("%s: ring %d", c.name, kv.Ring(0))
		}
		fill(kv, c.depth)
		// one decode row at the last position, and a prefill chunk of the
		// last 128 positions
		const chunk = 128
		q := randomF32(chunk*h.NHead*h.HeadDimK, 3)
		out := make([]float32, chunk*h.NHead*h.HeadDimV)
		seq, pos := make([]int32, chunk), make([]int32, chunk)
		for i := range pos {
			pos[i] = int32(c.depth - chunk + i)
		}
		for _, rows := range []int{1, chunk} {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/rows=%d/threads=%d", c.name, rows, threads), func(b *testing.B) {
					be := cpu.NewBackend(threads, nil)
					defer be.Close()
					for b.Loop() {
						be.Attention(out, q, kv, 0, seq[chunk-rows:], pos[chunk-rows:], &hc, model.Attn{Scale: 0.0625, Window: c.window})
					}
				})
			}
		}
	}
}
