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
// Names are benchstat-friendly: isa=avx2/type=q4_K/rows=2048/mem=warm.

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

var benchTypes = []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0}

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

func BenchmarkDotRows(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, typ := range benchTypes {
			a := benchActs(b, r, typ, 1)
			for _, rows := range []int{2048, 8192} {
				w, rb := benchWeights(b, r, typ, rows)
				for _, mem := range []string{"warm", "cold"} {
					mats := [][]byte{w}
					if mem == "cold" {
						if isa == cpu.ISAScalarGo || rows != 8192 {
							continue // scalar Go is compute-bound either way
						}
						for n := len(w); n < 100<<20; n += len(w) {
							mats = append(mats, append([]byte(nil), w...))
						}
					}
					out := make([]float32, rows)
					b.Run(fmt.Sprintf("isa=%s/type=%s/rows=%d/mem=%s", isa, typ, rows, mem), func(b *testing.B) {
						i := 0
						for b.Loop() {
							k.DotRows(typ, mats[i%len(mats)], rb, benchCols, 0, rows, a, out)
							i++
						}
						b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					})
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
			b.Run(fmt.Sprintf("isa=%s/type=%s/rows=%d/acts=%d", isa, typ, rows, acts), func(b *testing.B) {
				for b.Loop() {
					k.GemmRows(typ, w, rb, benchCols, 0, rows, a, acts, out, rows)
				}
				ops := 2 * float64(rows) * benchCols * acts * float64(b.N)
				b.ReportMetric(ops/b.Elapsed().Seconds()/1e9, "GOP/s")
			})
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
					for b.Loop() {
						k.QuantizeRows(typ, src, nRows, benchCols, dst)
					}
					b.ReportMetric(4*float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}
