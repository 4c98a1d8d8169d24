package cpu_test

// The IQ1_S and IQ1_M products against Q8_K (kern_avx2_iq1.c, row by row;
// no packed layout) against quant's Go reference (quant.DotIQ1_S,
// DotIQ1_M), on every path, with the shapes of TestIQLatticeKernels: rows
// of 1, 3, 8 and 17 super-blocks, row counts that are not a multiple of
// the tile, activation counts up to and past the tile of 4 and the prefill
// threshold (cpu.RepackMinActs), ranges that start mid-matrix, and no
// write outside the rows asked for.
//
// Tolerance 1e-6·S (S = Σ|w_i|·|a_i|), as for the other lattice types.
// What is exact: each super-block's integer Σ_ib ls·Σ (8g+δ)·y, which is
// 8·sumi + sumi1 of quant's two integer sums, on every path (below 2^24 per
// lane, kern_avx2_iq1.c). What differs is the float rounding around it:
// quant rounds float32(sumi) + float32(sumi1/8) and float32(d·dy)·that per
// super-block, then adds in order; the kernels convert each lane's exact
// sum, add d·dy·lane with FMA into 8 float lanes, then the lanes, then
// scale by 1/8 (exact). With at most 17 super-blocks that is some 40
// roundings of 2^-24 of partial sums no larger than S: ~√40·6e-8·S ≈
// 4e-7·S expected at worst. Measured worst: logged by the test.

import (
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

var iq1Types = []iqType{{quant.IQ1_S, quant.DotIQ1_S}, {quant.IQ1_M, quant.DotIQ1_M}}

func TestIQ1Kernels(t *testing.T) { checkLatticeKernels(t, 41, iq1Types) }
