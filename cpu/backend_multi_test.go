package cpu_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// TestMatMulsEqualsMatMul: the fused products give bit for bit what
// separate MatMul calls give, packed and unpacked, for decode (n=1) and
// batches, on 1 and 2 threads; weights that take different activations
// (Q8_0 with Q4_K) fall back to separate products.
func TestMatMulsEqualsMatMul(t *testing.T) {
	const cols = 512
	mk := func(wt quant.Type, rows int) *model.Weight {
		rb, _ := quant.RowBytes(wt, cols)
		return &model.Weight{Name: fmt.Sprint(wt, rows), Type: wt, Cols: cols, Rows: rows, RowBytes: rb, Data: randomWeights(wt, rows, cols)}
	}
	sets := map[string][]*model.Weight{
		"q4k-qkv":   {mk(quant.Q4_K, 512), mk(quant.Q4_K, 128), mk(quant.Q6_K, 128)},
		"q8_0-pair": {mk(quant.Q8_0, 1024), mk(quant.Q8_0, 1024)},
		"odd-rows":  {mk(quant.Q5_K, 72), mk(quant.Q4_K, 40)},
		"mixed-act": {mk(quant.Q8_0, 256), mk(quant.Q4_K, 256)},
		"f16":       {mk(quant.F16, 96), mk(quant.F16, 200)},
	}
	for name, ws := range sets {
		for _, n := range []int{1, 3, 70} {
			for _, threads := range []int{1, 2} {
				for _, pack := range []bool{true, false} {
					be := cpu.NewBackend(threads, nil)
					be.NoPack = !pack
					x := randomF32(n*cols, uint64(n))
					var want, got [][]float32
					for _, w := range ws {
						o := make([]float32, n*w.Rows)
						be.MatMul(o, w, x, n)
						want = append(want, o)
						got = append(got, make([]float32, n*w.Rows))
					}
					be.MatMuls(got, ws, x, n)
					be.MatMuls(nil, nil, x, n) // nothing to do
					be.Close()
					for i := range ws {
						for j := range want[i] {
							if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
								t.Fatalf("%s n=%d threads=%d pack=%v: weight %d element %d: fused %g, separate %g",
									name, n, threads, pack, i, j, got[i][j], want[i][j])
							}
						}
					}
				}
			}
		}
	}
}
