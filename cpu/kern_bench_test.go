package cpu_test

// Benchmarks of the kernels on one goroutine, every available ISA path:
//
//   - DotRows (decode): one activation row against a rows×2048 matrix; GB/s
//     counts weight bytes read. mem=warm repeats one matrix (it fits in
//     the 32 MiB L3 here); mem=cold cycles through copies totalling more
//     than 3× L3, so the figure is DRAM-bound, the case of real decode.
//   - GemmRows (prefill): 512 activation rows; GOP/s counts 2·rows·cols·acts.
//   - QuantizeRows: GB/s of float32 input.
//
// layout=file multiplies the weights as stored in GGUF files; layout=packed
// the copy Kernels.Pack makes (Q4_K, Q6_K, Q8_0 and the IQ4 types on AVX2).
//
// Each also reports the rate per second of the benchmark thread's CPU time
// (GB/s-cpu, GOP/s-cpu): on a shared machine this is the figure that holds
// still, as it leaves out time the thread waited for a core (it still
// includes cache and memory contention).
//
// Names are benchstat-friendly: isa=avx2/layout=file/type=q4_K/rows=2048/mem=warm.

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

// cpuClock measures the CPU time of the calling goroutine's thread, which
// it locks for the benchmark (cgo calls run on the same thread).
type cpuClock struct{ t0 time.Duration }

func threadCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD (Linux)
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU(b *testing.B) *cpuClock {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	return &cpuClock{threadCPU(b)}
}

// report adds metric unit (per wall second) and unit-cpu (per CPU second)
// for amount units per iteration.
func (c *cpuClock) report(b *testing.B, amount float64, unit string) {
	cpu := (threadCPU(b) - c.t0).Seconds()
	total := amount * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), unit)
	if cpu > 0 {
		b.ReportMetric(total/cpu, unit+"-cpu")
	}
}

var benchTypes = []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.IQ4_XS, quant.IQ4_NL, quant.MXFP4, quant.IQ2_XXS, quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XS, quant.IQ2_S, quant.IQ1_S, quant.IQ1_M}

const benchCols = 2048

// benchWeights returns a rows×benchCols matrix of typ from random floats.
func benchWeights(b *testing.B, r *rand.Rand, typ quant.Type, rows int) ([]byte, int) {
	b.Helper()
	rb, err := quant.RowBytes(typ, benchCols)
	if err != nil {
		b.Fatal(err)
	}
	w := make([]byte, rows*rb)
	// quantize a few distinct rows and tile them: random enough for a
	// benchmark, and fast to build.
	const distinct = 64
	for i := range min(rows, distinct) {
		if err := quant.QuantizeRowRef(typ, randRow(r, benchCols, normal), w[i*rb:(i+1)*rb]); err != nil {
			b.Fatal(err)
		}
	}
	for i := distinct; i < rows; i++ {
		copy(w[i*rb:(i+1)*rb], w[(i%distinct)*rb:])
	}
	return w, rb
}

// benchActs returns n activation rows of the vec-dot type of typ.
func benchActs(b *testing.B, r *rand.Rand, typ quant.Type, n int) []byte {
	b.Helper()
	vt := quant.VecDotType(typ)
	arb, err := quant.RowBytes(vt, benchCols)
	if err != nil {
		b.Fatal(err)
	}
	a := make([]byte, n*arb)
	for i := range n {
		if err := quant.QuantizeRow(vt, randRow(r, benchCols, normal), a[i*arb:(i+1)*arb]); err != nil {
			b.Fatal(err)
		}
	}
	return a
}

// product is one way to run a matrix product in a benchmark.
type product struct {
	layout string
	run    func(a []byte, nAct int, out []float32)
}

// products returns the file-layout product of w and, if k packs typ, the
// packed one.
func products(b *testing.B, k *cpu.Kernels, typ quant.Type, w []byte, rb, rows int) []product {
	b.Helper()
	ps := []product{{"file", func(a []byte, nAct int, out []float32) {
		k.GemmRows(typ, w, rb, benchCols, 0, rows, a, nAct, out, rows)
	}}}
	if k.CanPack(typ, rows, benchCols) {
		p, err := k.Pack(typ, w, rb, rows, benchCols)
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, product{"packed", func(a []byte, nAct int, out []float32) {
			k.GemmRowsPacked(p, 0, rows, a, nAct, out, rows)
		}})
	}
	return ps
}

func BenchmarkDotRows(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, typ := range benchTypes {
			a := benchActs(b, r, typ, 1)
			for _, rows := range []int{2048, 8192} {
				for _, mem := range []string{"warm", "cold"} {
					if mem == "cold" && (isa == cpu.ISAScalarGo || rows != 8192) {
						continue // scalar Go is compute-bound either way
					}
					// cold: copies totalling 100 MB, > 3x the L3, used in turn
					var sets [][]product
					w, rb := benchWeights(b, r, typ, rows)
					for n := 0; n == 0 || (mem == "cold" && n < 100<<20); n += len(w) {
						sets = append(sets, products(b, k, typ, append([]byte(nil), w...), rb, rows))
					}
					out := make([]float32, rows)
					for li, pr := range sets[0] {
						b.Run(fmt.Sprintf("isa=%s/layout=%s/type=%s/rows=%d/mem=%s", isa, pr.layout, typ, rows, mem), func(b *testing.B) {
							clk := startCPU(b)
							i := 0
							for b.Loop() {
								sets[i%len(sets)][li].run(a, 1, out)
								i++
							}
							clk.report(b, float64(len(w))/1e9, "GB/s")
						})
					}
				}
			}
		}
	}
}

func BenchmarkGemmRows(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, acts = 2048, 512
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, typ := range benchTypes {
			w, rb := benchWeights(b, r, typ, rows)
			a := benchActs(b, r, typ, acts)
			out := make([]float32, acts*rows)
			for _, pr := range products(b, k, typ, w, rb, rows) {
				b.Run(fmt.Sprintf("isa=%s/layout=%s/type=%s/rows=%d/acts=%d", isa, pr.layout, typ, rows, acts), func(b *testing.B) {
					clk := startCPU(b)
					for b.Loop() {
						pr.run(a, acts, out)
					}
					clk.report(b, 2*float64(rows)*benchCols*acts/1e9, "GOP/s")
				})
			}
		}
	}
}

func BenchmarkQuantizeRows(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, typ := range []quant.Type{quant.Q8_K, quant.Q8_0, quant.F16} {
			for _, nRows := range []int{1, 512} {
				src := make([]float32, 0, nRows*benchCols)
				for range nRows {
					src = append(src, randRow(r, benchCols, normal)...)
				}
				rb, err := quant.RowBytes(typ, benchCols)
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]byte, nRows*rb)
				b.Run(fmt.Sprintf("isa=%s/type=%s/rows=%d", isa, typ, nRows), func(b *testing.B) {
					clk := startCPU(b)
					for b.Loop() {
						k.QuantizeRows(typ, src, nRows, benchCols, dst)
					}
					clk.report(b, 4*float64(len(src))/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkGemmFloat measures the float products on one thread: attention's
// two products in a prefill tile (F32: 256 cached positions × 64 against 128
// query rows, then 64 transposed V rows × 256 against 128 probability rows)
// and a F16 weight matrix against 64 activation rows, reporting GFLOP/s.
func BenchmarkGemmFloat(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, sh := range []struct {
			name             string
			typ              quant.Type
			rows, cols, acts int
		}{
			{"qk", quant.F32, 256, 64, 128},
			{"pv", quant.F32, 64, 256, 128},
			{"f16", quant.F16, 2048, 2048, 64},
		} {
			rb, _ := quant.RowBytes(sh.typ, sh.cols)
			w := make([]byte, sh.rows*rb)
			for i := range sh.rows {
				if err := quant.QuantizeRow(sh.typ, randRow(r, sh.cols, normal), w[i*rb:(i+1)*rb]); err != nil {
					b.Fatal(err)
				}
			}
			a := make([]byte, sh.acts*rb)
			for i := range sh.acts {
				if err := quant.QuantizeRow(sh.typ, randRow(r, sh.cols, normal), a[i*rb:(i+1)*rb]); err != nil {
					b.Fatal(err)
				}
			}
			out := make([]float32, sh.rows*sh.acts)
			b.Run(fmt.Sprintf("isa=%s/op=%s/rows=%d/cols=%d/acts=%d", isa, sh.name, sh.rows, sh.cols, sh.acts), func(b *testing.B) {
				clk := startCPU(b)
				for b.Loop() {
					k.GemmRows(sh.typ, w, rb, sh.cols, 0, sh.rows, a, sh.acts, out, sh.rows)
				}
				clk.report(b, 2*float64(sh.rows*sh.cols*sh.acts)/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkAttnRows measures AttnScores and AttnSum on one goroutine over
// 8192 cached rows of one KV head of 64 (128 for TurboQuant's tq4: the
// codec pads nothing at 64), a group of 4 query heads (llama-1b's GQA):
// the decode row's per-head work (op=tiles: the scores against the rows
// stored in transposed tiles, as the cache stores K). GB/s counts the
// rows' bytes.
func BenchmarkAttnRows(b *testing.B) {
	const n, dim, G = 8192, 64, 4
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, name := range []string{"f32", "f16", "q8_0", "q4_0", "tq4", "tq3"} {
			var wt quant.Type
			var tq *quant.Turbo
			var rb int
			switch name {
			case "tq4", "tq3":
				var err error
				if tq, err = quant.NewTurbo(dim, int(name[2]-'0'), 1); err != nil {
					b.Fatal(err)
				}
				rb = tq.RowBytes()
			default:
				wt, _ = quant.TypeByName(name)
				rb, _ = quant.RowBytes(wt, dim)
			}
			src := make([]byte, n*rb)
			for j := range n {
				row := src[j*rb:][:rb]
				x := randomF32(dim, uint64(j))
				if tq != nil {
					if err := tq.Encode(row, x, make([]float32, tq.Padded())); err != nil {
						b.Fatal(err)
					}
				} else if err := quant.QuantizeRow(wt, x, row); err != nil {
					b.Fatal(err)
				}
			}
			d := dim
			if tq != nil {
				d = tq.Padded()
			}
			q, s, acc := randomF32(G*d, 1), make([]float32, G*n), make([]float32, G*d)
			b.Run(fmt.Sprintf("isa=%s/kv=%s/op=scores", isa, name), func(b *testing.B) {
				for b.Loop() {
					k.AttnScores(wt, tq, src, rb, n, d, q, G, s, n)
				}
				b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
			// the same rows in transposed tiles, as the KV cache stores K
			u := 1
			if tq == nil {
				u = quant.TileUnit(wt)
			}
			tiles := make([]byte, len(src))
			for j := range n {
				quant.PutTileRow(tiles[j/quant.TileRows*quant.TileRows*rb:], j%quant.TileRows, u, src[j*rb:][:rb])
			}
			b.Run(fmt.Sprintf("isa=%s/kv=%s/op=tiles", isa, name), func(b *testing.B) {
				for b.Loop() {
					k.AttnScoresTiles(wt, tq, tiles, u, 0, n, d, q, G, s, n)
				}
				b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
			b.Run(fmt.Sprintf("isa=%s/kv=%s/op=sum", isa, name), func(b *testing.B) {
				for b.Loop() {
					k.AttnSum(wt, tq, src, rb, n, d, s, n, G, acc)
				}
				b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
			if name == "q4_0" || name == "q8_0" || name == "tq3" || name == "tq4" {
				// the integer V sums, chunk by chunk as decode: scales,
				// rounding, sums, conversion
				for j := range s {
					s[j] = float32(j%97+1) / 97
				}
				var x cpu.WInt
				b.Run(fmt.Sprintf("isa=%s/kv=%s/op=sumq", isa, name), func(b *testing.B) {
					for b.Loop() {
						x.Begin(wt, tq, G, d)
						for c0 := 0; c0 < n; c0 += cpu.WIntChunk {
							c1 := min(c0+cpu.WIntChunk, n)
							x.Chunk(c1 - c0)
							k.AttnSumScales(&x, src[c0*rb:], rb, 0, c1-c0, s[c0:], n)
							if !k.RoundWeights(&x, s[c0:], n) {
								b.Fatal("RoundWeights refused")
							}
							k.AttnSumQ(&x, src[c0*rb:], rb, 0, c1-c0)
							x.Fold()
						}
						x.Finish(acc)
					}
					b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
				// the same, a chunk per call, as decode runs a chunk that
				// sits in one run of the cache
				b.Run(fmt.Sprintf("isa=%s/kv=%s/op=sumchunk", isa, name), func(b *testing.B) {
					for b.Loop() {
						x.Begin(wt, tq, G, d)
						for c0 := 0; c0 < n; c0 += cpu.WIntChunk {
							c1 := min(c0+cpu.WIntChunk, n)
							var next []byte
							if c1 < n {
								next = src[c1*rb : min(c1+cpu.WIntChunk, n)*rb]
							}
							if !k.AttnSumChunk(&x, src[c0*rb:], rb, c1-c0, s[c0:], n, next) {
								b.Fatal("RoundWeights refused")
							}
						}
						x.Finish(acc)
					}
					b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkAttnRowsDRAM is BenchmarkAttnRows' tiled scores and V sums for
// the f16 and q8_0 types with the rows read from memory, not the caches:
// each call reads the next of 64 copies (64 MiB of f16 rows, twice the L3
// of the machines this runs on), as decode at depth reads a cache far
// larger than the L3. Compare with BenchmarkAttnRows' cache-resident
// figures, on one thread; the bandwidth of a bare read stream is the ceiling
// (bench --roofline's probe).
func BenchmarkAttnRowsDRAM(b *testing.B) {
	const n, dim, G, copies = 8192, 64, 4, 64
	for _, name := range []string{"f16", "q8_0"} {
		wt, _ := quant.TypeByName(name)
		rb, _ := quant.RowBytes(wt, dim)
		u := quant.TileUnit(wt)
		rows, tiles := make([][]byte, copies), make([][]byte, copies)
		for c := range copies {
			rows[c], tiles[c] = make([]byte, n*rb), make([]byte, n*rb)
			for j := range n {
				row := rows[c][j*rb:][:rb]
				if err := quant.QuantizeRow(wt, randomF32(dim, uint64(c*n+j)), row); err != nil {
					b.Fatal(err)
				}
				quant.PutTileRow(tiles[c][j/quant.TileRows*quant.TileRows*rb:], j%quant.TileRows, u, row)
			}
		}
		q, s, acc := randomF32(G*dim, 1), make([]float32, G*n), make([]float32, G*dim)
		for i := range s {
			s[i] = 1.0 / n
		}
		for _, isa := range cpu.Available() {
			k := cpu.KernelsFor(isa)
			b.Run(fmt.Sprintf("isa=%s/kv=%s/op=tiles", isa, name), func(b *testing.B) {
				i := 0
				for b.Loop() {
					k.AttnScoresTiles(wt, nil, tiles[i%copies], u, 0, n, dim, q, G, s, n)
					i++
				}
				b.ReportMetric(float64(n*rb)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
			b.Run(fmt.Sprintf("isa=%s/kv=%s/op=sum", isa, name), func(b *testing.B) {
				i := 0
				for b.Loop() {
					k.AttnSum(wt, nil, rows[i%copies], rb, n, dim, s, n, G, acc)
					i++
				}
				b.ReportMetric(float64(n*rb)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkSoftmax: decode attention's softmax of one head's scores at
// depth 8192 (the scale, the max, the exps and their float64 sum, the
// normalisation), per path.
func BenchmarkSoftmax(b *testing.B) {
	const n = 8192
	x := randomF32(n, 1)
	row := make([]float32, n)
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		b.Run(fmt.Sprintf("isa=%s/n=%d", isa, n), func(b *testing.B) {
			for b.Loop() {
				copy(row, x)
				k.Softmax(row, 0.125)
			}
		})
	}
}
