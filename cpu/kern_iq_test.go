package cpu_test

// The products of the 4-bit table types (IQ4_NL and MXFP4 against Q8_0,
// IQ4_XS against Q8_K; kern_avx2_iq.c row by row, kern_avx2_iqpk.c and
// kern_avx512_iq.c packed)
// against quant's Go reference (quant.DotIQ4_NL, DotMXFP4, DotIQ4_XS), on
// every path: rows of 1, 3, 8 and 17 blocks, row counts that are not a
// multiple of the packed group of 8, every activation count up to and past
// the packed GEMM's threshold (cpu.RepackMinActs).
//
// Tolerance, as for the other quantized types (dotTypes): |got-want| ≤
// 1e-6·S, S = Σ|w_i|·|a_i| (these types have no offset part). The integer
// sum of each block is exact on every path; what differs is the float
// rounding around it. quant adds one rounded float32 term per block (per
// 32-element sub-block for IQ4_XS) in order; the kernels add the same
// block terms (IQ4_XS: one per super-block, from the exact int32 sum of
// its 8 scaled sub-blocks, converted with one rounding past 2^24) with FMA
// into 8 float32 lanes, then add the lanes. Each rounding is within 2^-24
// of a partial sum no larger than S; with at most 17 blocks, that is some
// 40 roundings between the two results, whose errors add as a random walk:
// ~√40·6e-8·S ≈ 4e-7·S expected at worst. Measured worst: logged by the
// test (2.5e-7 on AVX2 here, 2.1e-7 on AVX-512).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

var iqTypes = []struct {
	typ quant.Type
	ref func(n int, w, a []byte) float32
}{
	{quant.IQ4_NL, quant.DotIQ4_NL}, {quant.MXFP4, quant.DotMXFP4}, {quant.IQ4_XS, quant.DotIQ4_XS},
}

// setMXFP4Exponents gives some blocks of an MXFP4 matrix the extreme
// scales quantization rarely makes: e = 0 and 1 (subnormal 2^-128 and
// 2^-127), 2 (the smallest normal) and 180; no overflow to Inf.
func setMXFP4Exponents(m *testMatrix, rows, cols int) {
	es := []byte{0, 1, 2, 180}
	for r := range rows {
		for b := r % 3; b < cols/32; b += 3 {
			m.w[r*m.rowBytes+17*b] = es[(r+b)%len(es)]
		}
		if err := quant.DequantizeRow(quant.MXFP4, m.w[r*m.rowBytes:], m.wf[r]); err != nil {
			panic(err)
		}
	}
}

// iqCheck compares out[act*stride + r] for r in [r0, r1) with ref, within
// 1e-6·S, and returns the largest |diff|/S.
func iqCheck(t *testing.T, ref func(int, []byte, []byte) float32, m *testMatrix, cols, r0, r1, nAct int, out []float32, stride int) float64 {
	t.Helper()
	var worst float64
	for act := range nAct {
		for r := r0; r < r1; r++ {
			want := ref(cols, m.w[r*m.rowBytes:], m.a[act*m.arb:])
			got := out[act*stride+r]
			var s float64
			for i, w := range m.wf[r] {
				s += math.Abs(float64(w)) * math.Abs(float64(m.af[act][i]))
			}
			d := math.Abs(float64(got) - float64(want))
			if math.IsNaN(float64(got)) || math.IsInf(float64(got), 0) || d > 1e-6*s {
				t.Fatalf("row %d act %d: got %v, want %v (|diff| %.3g, S %.3g)", r, act, got, want, d, s)
			}
			if s > 0 {
				worst = max(worst, d/s)
			}
		}
	}
	return worst
}

func TestIQ4Kernels(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, k := range testISAs(t) {
		for _, it := range iqTypes {
			var worst float64
			bs := it.typ.BlockSize()
			for _, nb := range []int{1, 3, 8, 17} {
				cols := nb * bs
				for _, rows := range []int{1, 3, 8, 13, 21} {
					const most = 17
					name := fmt.Sprintf("isa=%s/type=%s/blocks=%d/rows=%d", k.ISA(), it.typ, nb, rows)
					t.Run(name, func(t *testing.T) {
						m := newTestMatrix(t, r, it.typ, rows, cols, most, 3)
						if it.typ == quant.MXFP4 {
							setMXFP4Exponents(m, rows, cols)
						}
						stride := rows + 2
						// file layout: every activation count, a range that
						// starts mid-matrix
						for _, n := range []int{1, 2, 3, 4, 5, 8, 9, most} {
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
						if !k.CanPack(it.typ, rows, cols) {
							if k.ISA() != cpu.ISAScalarGo {
								t.Fatalf("%s cannot pack %d×%d %s", k.ISA(), rows, cols, it.typ)
							}
							return
						}
						p, err := k.Pack(it.typ, m.w, m.rowBytes, rows, cols)
						if err != nil {
							t.Fatal(err)
						}
						// decode, row by row: the reference bits of every batch
						solo := make([]float32, most*stride)
						for act := range most {
							k.DotRowsPacked(p, 0, rows, m.a[act*m.arb:(act+1)*m.arb], solo[act*stride:act*stride+rows])
						}
						worst = max(worst, iqCheck(t, it.ref, m, cols, 0, rows, most, solo, stride))
						ranges := [][2]int{{0, rows}}
						if body := rows / cpu.PackRows * cpu.PackRows; body > 0 && body < rows {
							ranges = append(ranges, [2]int{0, body}, [2]int{body, rows})
						}
						for _, n := range []int{2, 3, 4, 5, 8, 9, most} {
							for _, rr := range ranges {
								out := make([]float32, n*stride)
								for i := range out {
									out[i] = math.Float32frombits(guardBits)
								}
								k.GemmRowsPacked(p, rr[0], rr[1], m.a, n, out, stride)
								for i, v := range out {
									c := i % stride
									if c < rr[0] || c >= rr[1] {
										if math.Float32bits(v) != guardBits {
											t.Fatalf("packed, %d acts, rows [%d, %d): out[%d] written", n, rr[0], rr[1], i)
										}
									} else if math.Float32bits(v) != math.Float32bits(solo[i]) {
										t.Fatalf("packed, %d acts, rows [%d, %d): row %d act %d: %v, alone %v", n, rr[0], rr[1], c, i/stride, v, solo[i])
									}
								}
							}
						}
					})
				}
			}
			t.Logf("isa=%s type=%s: worst |diff|/S = %.2g (tolerance 1e-6)", k.ISA(), it.typ, worst)
		}
	}
}

// TestIQ4PackedLayout: a packed IQ4 matrix is the file's size per row
// (IQ4_NL 18, MXFP4 17 bytes per block) or 2 bytes more per super-block
// (IQ4_XS: 8 one-byte scales instead of 6 bytes of packed bits), and the
// tail rows past the last group of 8 are the file's rows.
func TestIQ4PackedLayout(t *testing.T) {
	for _, k := range testISAs(t) {
		if k.ISA() == cpu.ISAScalarGo {
			continue
		}
		for _, c := range []struct {
			typ        quant.Type
			rows, cols int
			want       int
		}{
			{quant.IQ4_NL, 16, 64, 16 * 2 * 18},
			{quant.MXFP4, 16, 64, 16 * 2 * 17},
			{quant.IQ4_XS, 16, 512, 16 * 2 * 138},
			{quant.IQ4_XS, 13, 256, 8*138 + 5*136},
			{quant.IQ4_NL, 5, 32, 5 * 18},
		} {
			if got := k.PackedSize(c.typ, c.rows, c.cols); got != c.want {
				t.Errorf("%s: PackedSize(%s, %d, %d) = %d, want %d", k.ISA(), c.typ, c.rows, c.cols, got, c.want)
			}
		}
	}
}
