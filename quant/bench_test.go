package quant

import (
	"math/rand/v2"
	"testing"
)

// Benchmarks of the scalar reference kernels at n = 4096 (one row of a
// 4096-wide matrix). GB/s counts the weight row's bytes: the figure that
// bounds decode speed.

var benchTypes = []Type{Q4_K, Q8_0, Q6_K}

const benchN = 4096

func benchRow(b *testing.B, typ Type) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	w := rowBytes(b, typ, benchN)
	QuantizeRowRef(typ, randRow(r, benchN, false), w)
	return w
}

func BenchmarkDequantizeRow(b *testing.B) {
	for _, typ := range benchTypes {
		b.Run("type="+typ.String()+"/n=4096", func(b *testing.B) {
			w := benchRow(b, typ)
			y := make([]float32, benchN)
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				if err := DequantizeRow(typ, w, y); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

func BenchmarkVecDot(b *testing.B) {
	for _, typ := range benchTypes {
		b.Run("type="+typ.String()+"/n=4096", func(b *testing.B) {
			w := benchRow(b, typ)
			r := rand.New(rand.NewPCG(3, 4))
			a := rowBytes(b, VecDotType(typ), benchN)
			QuantizeRow(VecDotType(typ), randRow(r, benchN, false), a)
			b.SetBytes(int64(len(w)))
			var sink float32
			for b.Loop() {
				s, err := VecDot(typ, benchN, w, a)
				if err != nil {
					b.Fatal(err)
				}
				sink += s
			}
			_ = sink
			b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkQuantizeActivations measures the activation conversion that
// precedes every dot product (float32 bytes read per second).
func BenchmarkQuantizeActivations(b *testing.B) {
	for _, typ := range []Type{Q8_0, Q8_K} {
		b.Run("type="+typ.String()+"/n=4096", func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			x := randRow(r, benchN, false)
			a := rowBytes(b, typ, benchN)
			b.SetBytes(4 * benchN)
			for b.Loop() {
				if err := QuantizeRow(typ, x, a); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(4*benchN*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
