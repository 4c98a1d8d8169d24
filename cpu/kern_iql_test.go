package cpu_test

// The products of the lattice types against Q8_K (kern_avx2_iql.c, row by
// row; no packed layout) against quant's Go reference, on every path: rows
// of 1, 3, 8 and 17 super-blocks, row counts that are not a multiple of
// the tile or the row group, activation counts up to and past the tile of
// 4 and the prefill threshold (cpu.RepackMinActs), ranges that start
// mid-matrix, and no write outside the rows asked for.
//
// Tolerance 1e-6·S (S = Σ|w_i|·|a_i|), as for the other quantized types.
// What is exact: every pmaddubsw/pmaddwd sum, so each super-block's integer
// sum Σ_ib (2ls+1)·Σ g·s·y (quant's bsum) is the same int32 on every path
// (kern_avx2_iql.c bounds it below 2^31), split over 8 lanes. What differs
// is the float rounding around it: quant adds float32(d·dy·float32(bsum))
// per super-block in order; the kernels convert each lane's exact sum (no
// rounding below 2^24) and add d·dy·lane with FMA into 8 float lanes, then
// add the lanes; the final 1/8 or 1/4 is exact. With at most 17
// super-blocks that is some 30 roundings of 2^-24 of partial sums no
// larger than S between the two results: a random walk of ~√30·6e-8·S ≈
// 3.3e-7·S expected at worst. Measured worst: logged by the test.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

var iqlTypes = []iqType{
	{quant.IQ2_XXS, quant.DotIQ2_XXS}, {quant.IQ3_XXS, quant.DotIQ3_XXS}, {quant.IQ3_S, quant.DotIQ3_S},
	{quant.IQ2_XS, quant.DotIQ2_XS}, {quant.IQ2_S, quant.DotIQ2_S},
}

func TestIQLatticeKernels(t *testing.T) { checkLatticeKernels(t, 31, iqlTypes) }

// iqType is a lattice type and quant's Go product of it (the reference).
type iqType struct {
	typ quant.Type
	ref func(n int, w, a []byte) float32
}

// checkLatticeKernels runs every path's GemmRows for each of types on the
// shapes above, from a generator seeded with seed, against the type's
// reference within 1e-6·S (iqCheck), and checks that no row outside the
// range asked for is written.
func checkLatticeKernels(t *testing.T, seed uint64, types []iqType) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	for _, k := range testISAs(t) {
		for _, it := range types {
			var worst float64
			for _, nb := range []int{1, 3, 8, 17} {
				cols := nb * quant.QK_K
				for _, rows := range []int{1, 3, 13} {
					const most = 9
					name := fmt.Sprintf("isa=%s/type=%s/blocks=%d/rows=%d", k.ISA(), it.typ, nb, rows)
					t.Run(name, func(t *testing.T) {
						m := newTestMatrix(t, r, it.typ, rows, cols, most, 3)
						stride := rows + 2
						for _, n := range []int{1, 2, 3, 4, 5, most} {
							for _, rr := range [][2]int{{0, rows}, {rows / 2, rows}} {
								out := make([]float32, n*stride)
								for i := range out {
									out[i] = math.Float32frombits(guardBits)
								}
								k.GemmRows(it.typ, m.w, m.rowBytes, cols, rr[0], rr[1], m.a, n, out, stride)
								for i, v := range out {
									if c := i % stride; (c < rr[0] || c >= rr[1]) && math.Float32bits(v) != guardBits {
										t.Fatalf("%d acts, rows [%d, %d): out[%d] written", n, rr[0], rr[1], i)
									}
								}
								worst = max(worst, iqCheck(t, it.ref, m, cols, rr[0], rr[1], n, out, stride))
							}
						}
					})
				}
			}
			t.Logf("isa=%s type=%s: worst |diff|/S = %.2g (tolerance 1e-6)", k.ISA(), it.typ, worst)
		}
	}
}
