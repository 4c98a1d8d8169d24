package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TestMambaOps: the Backend's model.Mamba ops on random inputs of odd and
// aligned sizes, on 1 and 2 workers and every kernel path, give exactly
// what one kernel call on every channel or head gives: on the Go path the
// Ref's results, on the SIMD paths the kernels' (TestSSMKernels checks
// those against the Ref within its tolerances). The Backend splits the
// work by channels, heads or rows and no sum is split, so the tolerance is
// exact equality. The Ref itself is checked
// against the formulas computed here in float64 (relative tolerance 1e-5:
// float32 rounding of sums of at most a few hundred terms), and a scan or
// convolution over a chunk equals the same over its two halves in turn
// (exactly: the state carries everything).
func TestMambaOps(t *testing.T) {
	ref := cpu.NewRef()
	for _, k := range testISAs(t) {
		for _, threads := range []int{1, 2} {
			testMambaOps(t, ref, k, threads)
		}
	}
}

func testMambaOps(t *testing.T, ref *cpu.Ref, k *cpu.Kernels, threads int) {
	be := cpu.NewBackend(threads, k)
	defer be.Close()
	for _, sz := range []struct{ n, nh, hd, ng, ds, k int }{
		{1, 1, 1, 1, 1, 2}, {2, 3, 4, 1, 5, 5}, {7, 4, 5, 2, 3, 4}, {3, 6, 8, 3, 16, 3}, {17, 8, 16, 1, 32, 4}, {1, 16, 64, 8, 128, 4}, {33, 3, 11, 3, 7, 5},
	} {
		name := fmt.Sprintf("isa=%s/threads=%d/n=%d/heads=%d/hd=%d/groups=%d/ds=%d/k=%d", k.ISA(), threads, sz.n, sz.nh, sz.hd, sz.ng, sz.ds, sz.k)
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(sz.n*1000+sz.hd), uint64(sz.ds)))
			inner := sz.nh * sz.hd
			cd := inner + 2*sz.ng*sz.ds
			// convolution + bias + SiLU, with its state
			x, w, bias := randVec(r, sz.n*cd, 1), randVec(r, cd*sz.k, 0.3), randVec(r, cd, 0.2)
			st0 := randVec(r, cd*(sz.k-1), 1)
			stRef, stBe := slices.Clone(st0), slices.Clone(st0)
			conv := make([]float32, sz.n*cd)
			convBe, check := guarded(sz.n * cd)
			ref.SSMConv(conv, x, stRef, w, bias, sz.n, cd, sz.k)
			be.SSMConv(convBe, x, stBe, w, bias, sz.n, cd, sz.k)
			check(t)
			convK, stK := make([]float32, sz.n*cd), slices.Clone(st0)
			k.SSMConv(convK, x, stK, w, bias, sz.n, cd, sz.k, 0, cd)
			same(t, "conv", convBe, convK)
			same(t, "conv state", stBe, stK)
			if k.ISA() == cpu.ISAScalarGo {
				same(t, "conv", convBe, conv)
				same(t, "conv state", stBe, stRef)
			}
			for _, c := range []int{0, cd - 1} {
				for tk := range sz.n {
					var s float64
					for i := range sz.k {
						j := tk + i
						var in float32
						if j < sz.k-1 {
							in = st0[c*(sz.k-1)+j]
						} else {
							in = x[(j-(sz.k-1))*cd+c]
						}
						s += float64(in) * float64(w[c*sz.k+i])
					}
					s += float64(bias[c])
					closeTo(t, "conv by hand", float64(conv[tk*cd+c]), s/(1+math.Exp(-s)), 1e-5)
				}
			}
			// the same convolution over two halves
			if sz.n > 1 {
				h := sz.n / 2
				st := slices.Clone(st0)
				two := make([]float32, sz.n*cd)
				ref.SSMConv(two[:h*cd], x[:h*cd], st, w, bias, h, cd, sz.k)
				ref.SSMConv(two[h*cd:], x[h*cd:], st, w, bias, sz.n-h, cd, sz.k)
				same(t, "conv in two chunks", two, conv)
				same(t, "conv state in two chunks", st, stRef)
			}
			// selective scan with the D skip
			dt, a, d := randVec(r, sz.n*sz.nh, 1), randVec(r, sz.nh, 1), randVec(r, sz.nh, 1)
			for i := range a {
				a[i] = -float32(math.Abs(float64(a[i]))) - 0.1 // ssm_a = -exp(A_log) < 0
			}
			dt[0] = 25 // softplus's linear branch
			ss0 := randVec(r, inner*sz.ds, 0.5)
			ssRef, ssBe := slices.Clone(ss0), slices.Clone(ss0)
			y := make([]float32, sz.n*inner)
			yBe, checkY := guarded(sz.n * inner)
			ref.SSMScan(y, conv, dt, a, d, ssRef, sz.n, sz.nh, sz.hd, sz.ng, sz.ds)
			be.SSMScan(yBe, conv, dt, a, d, ssBe, sz.n, sz.nh, sz.hd, sz.ng, sz.ds)
			checkY(t)
			yK, ssK := make([]float32, sz.n*inner), slices.Clone(ss0)
			k.SSMScan(yK, conv, dt, a, d, ssK, sz.n, sz.nh, sz.hd, sz.ng, sz.ds, 0, sz.nh)
			same(t, "scan", yBe, yK)
			same(t, "scan state", ssBe, ssK)
			if k.ISA() == cpu.ISAScalarGo {
				same(t, "scan", yBe, y)
				same(t, "scan state", ssBe, ssRef)
			}
			// by hand in float64: the last head, all tokens
			hh := sz.nh - 1
			g := hh / (sz.nh / sz.ng)
			s64 := make([]float64, sz.hd*sz.ds)
			for i := range s64 {
				s64[i] = float64(ss0[hh*sz.hd*sz.ds+i])
			}
			for tk := range sz.n {
				row := conv[tk*cd : (tk+1)*cd]
				v := float64(dt[tk*sz.nh+hh])
				delta := v
				if v <= 20 {
					delta = math.Log1p(math.Exp(v))
				}
				dA := math.Exp(delta * float64(a[hh]))
				for i := range sz.hd {
					xi := float64(row[hh*sz.hd+i])
					var sum float64
					for j := range sz.ds {
						bj, cj := float64(row[inner+g*sz.ds+j]), float64(row[inner+(sz.ng+g)*sz.ds+j])
						s64[i*sz.ds+j] = s64[i*sz.ds+j]*dA + bj*xi*delta
						sum += s64[i*sz.ds+j] * cj
					}
					closeTo(t, "scan by hand", float64(y[tk*inner+hh*sz.hd+i]), sum+xi*float64(d[hh]), 1e-4)
				}
			}
			if sz.n > 1 {
				h := sz.n / 2
				st := slices.Clone(ss0)
				two := make([]float32, sz.n*inner)
				ref.SSMScan(two[:h*inner], conv[:h*cd], dt[:h*sz.nh], a, d, st, h, sz.nh, sz.hd, sz.ng, sz.ds)
				ref.SSMScan(two[h*inner:], conv[h*cd:], dt[h*sz.nh:], a, d, st, sz.n-h, sz.nh, sz.hd, sz.ng, sz.ds)
				same(t, "scan in two chunks", two, y)
				same(t, "scan state in two chunks", st, ssRef)
			}
			// grouped RMS norm, in place as the model runs it
			nw := randVec(r, inner, 1)
			nRef, nBe := slices.Clone(y), slices.Clone(y)
			ref.GroupRMSNorm(nRef, nRef, nw, sz.n, inner, sz.ng, 1e-5)
			be.GroupRMSNorm(nBe, nBe, nw, sz.n, inner, sz.ng, 1e-5)
			same(t, "group norm", nBe, nRef)
			gd := inner / sz.ng
			for grp := range sz.ng {
				var ms float64
				for _, v := range y[grp*gd : (grp+1)*gd] {
					ms += float64(v) * float64(v)
				}
				sc := 1 / math.Sqrt(ms/float64(gd)+1e-5)
				for i := grp * gd; i < (grp+1)*gd; i++ {
					closeTo(t, "group norm by hand", float64(nRef[i]), float64(y[i])*sc*float64(nw[i]), 1e-5)
				}
			}
			// squared ReLU
			rRef, rBe := slices.Clone(x), slices.Clone(x)
			ref.ReluSqr(rRef)
			be.ReluSqr(rBe)
			same(t, "relu2", rBe, rRef)
			for i, v := range x {
				want := float32(0)
				if v > 0 {
					want = v * v
				}
				if rRef[i] != want {
					t.Fatalf("relu2(%g) = %g, want %g", v, rRef[i], want)
				}
			}
		})
	}
}

// closeTo fails unless got is within rel·max(1, |want|) of want.
func closeTo(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > rel*max(1, math.Abs(want)) {
		t.Fatalf("%s: %g, want %g", what, got, want)
	}
}

var _ model.Mamba = cpu.NewRef()

// nano is the Mamba-2 mixer of Nemotron 3 Nano 30B-A3B (the synth preset
// nemotron-3-nano-30b-a3b): 64 heads of 64, state 128, 8 groups, 4 taps.
var nano = struct{ nh, hd, ng, ds, k int }{64, 64, 8, 128, 4}

// BenchmarkMambaLayer measures the Mamba-2 ops of one layer of Nano's
// shape on the Backend (the convolution with its SiLU, the scan with the
// D skip, the gate and the grouped norm; not ssm_in's and ssm_out's
// matrix products): a decode step (n=1) and a 512-token prefill, on each
// path with 1 and 2 workers, reporting wall and process CPU milliseconds
// per layer call (the CPU time includes workers spinning between calls;
// on a machine shared with other processes it is the steadier figure).
func BenchmarkMambaLayer(b *testing.B) {
	for _, n := range []int{1, 512} {
		for _, isa := range cpu.Available() {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("n=%d/isa=%s/threads=%d", n, isa, threads), func(b *testing.B) {
					be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
					defer be.Close()
					r := rand.New(rand.NewPCG(1, 2))
					inner := nano.nh * nano.hd
					cd := inner + 2*nano.ng*nano.ds
					x, w, bias := randVec(r, n*cd, 1), randVec(r, cd*nano.k, 0.3), randVec(r, cd, 0.2)
					cst := randVec(r, cd*(nano.k-1), 1)
					dt, a, d := randVec(r, n*nano.nh, 1), randVec(r, nano.nh, 1), randVec(r, nano.nh, 1)
					for i := range a {
						a[i] = -float32(math.Abs(float64(a[i]))) - 0.1
					}
					sst := randVec(r, inner*nano.ds, 0.5)
					z, nw := randVec(r, n*inner, 1), randVec(r, inner, 1)
					conv, y := make([]float32, n*cd), make([]float32, n*inner)
					c0 := cpuTime()
					for b.Loop() {
						be.SSMConv(conv, x, cst, w, bias, n, cd, nano.k)
						be.SSMScan(y, conv, dt, a, d, sst, n, nano.nh, nano.hd, nano.ng, nano.ds)
						be.SwiGLU(y, z, y)
						be.GroupRMSNorm(y, y, nw, n, inner, nano.ng, 1e-5)
					}
					b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/layer")
					reportCPU(b, c0)
				})
			}
		}
	}
}
