package cpu_test

// Tests of the Mamba-2 kernels (kern_ssm.go) on every ISA path against the
// Ref's Go loops and a float64 evaluation of the formulas.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
)

// ssmShape is one Mamba-2 mixer shape: n tokens, nh heads of hd, ng
// groups, state ds, k taps.
type ssmShape struct{ n, nh, hd, ng, ds, k int }

func (s ssmShape) String() string {
	return fmt.Sprintf("n=%d/heads=%d/hd=%d/groups=%d/ds=%d/k=%d", s.n, s.nh, s.hd, s.ng, s.ds, s.k)
}

// ssmInputs are random inputs of a shape: the convolution's (x, w, bias,
// its state) and the scan's (dt with softplus's linear branch at token 0
// of head 0, a < 0, d, its state).
type ssmInputs struct {
	x, w, bias, cst    []float32
	dt, a, d, sst      []float32
	inner, cd          int
	convOut, convState []float32 // the Ref's results
}

func newSSMInputs(r *rand.Rand, s ssmShape) *ssmInputs {
	in := &ssmInputs{inner: s.nh * s.hd}
	in.cd = in.inner + 2*s.ng*s.ds
	in.x, in.w, in.bias = randVec(r, s.n*in.cd, 1), randVec(r, in.cd*s.k, 0.3), randVec(r, in.cd, 0.2)
	in.cst = randVec(r, in.cd*(s.k-1), 1)
	in.dt, in.a, in.d = randVec(r, s.n*s.nh, 1), randVec(r, s.nh, 1), randVec(r, s.nh, 1)
	for i := range in.a {
		in.a[i] = -float32(math.Abs(float64(in.a[i]))) - 0.1 // ssm_a = -exp(A_log) < 0
	}
	in.dt[0] = 25
	in.sst = randVec(r, in.inner*s.ds, 0.5)
	return in
}

// ssmShapes: odd and aligned sizes around the vector widths (8, 16) and
// chunk sizes (64 and 128 floats of state, 16 tokens), and Nemotron 3
// Nano 30B-A3B's mixer (64 heads of 64, state 128, 8 groups, 4 taps).
var ssmShapes = []ssmShape{
	{1, 1, 1, 1, 1, 2}, {2, 3, 4, 1, 5, 5}, {7, 4, 5, 2, 3, 4}, {3, 6, 8, 3, 16, 3}, {17, 8, 16, 1, 32, 4},
	{33, 3, 11, 3, 7, 5}, {5, 2, 3, 1, 63, 4}, {9, 2, 5, 2, 65, 4}, {18, 4, 3, 2, 127, 16}, {4, 2, 2, 1, 129, 2},
	{3, 2, 4, 2, 200, 4}, {20, 4, 16, 2, 128, 4}, {3, nano.nh, nano.hd, nano.ng, nano.ds, nano.k},
}

// ulpDiff is how many float32 steps apart a and b are.
func ulpDiff(a, b float32) int64 {
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if ia < 0x80000000 != (ib < 0x80000000) {
		return int64(math.Float32bits(float32(math.Abs(float64(a))))) + int64(math.Float32bits(float32(math.Abs(float64(b)))))
	}
	d := ia - ib
	if d < 0 {
		d = -d
	}
	return d
}

// Tolerances of the SIMD paths. The convolution's sums are the Go loop's
// bits and its SiLU's exp is within 2 ulp: outputs within convULP ulps
// of the Ref's, state exact. The scan fuses its multiply-adds and sums
// in vector lanes: an output may differ from the exact value (float64)
// by scanTol·S, S = Σ_j m_j·|C_j| + |x·d|, where m_j is the state's
// magnitude (m ← m·dA + |B_j·x·Δ| from |state|), and a state value by
// scanTol·m_j; the Ref meets the same bound. Measured worst: conv 2 ulps;
// scan outputs 1.9e-7·S, state 5.7e-7·m (AVX2, AVX-512 and the Ref alike;
// 203 tokens of Nano's shape in TestSSMPrefillDecode).
const (
	convULP = 4
	scanTol = 2e-6
)

// TestSSMKernels: on every path the Mamba-2 convolution and scan give the
// Ref's results within the tolerances above on odd and aligned shapes,
// write only their outputs (guard values around them, heads and channels
// outside the range untouched), and one call on n tokens equals n calls
// on one.
func TestSSMKernels(t *testing.T) {
	ref := cpu.NewRef()
	for _, k := range testISAs(t) {
		for _, s := range ssmShapes {
			t.Run(fmt.Sprintf("isa=%s/%s", k.ISA(), s), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(s.n*1000+s.hd), uint64(s.ds)))
				in := newSSMInputs(r, s)
				inner, cd := in.inner, in.cd
				// convolution
				want, wantSt := make([]float32, s.n*cd), slices.Clone(in.cst)
				ref.SSMConv(want, in.x, wantSt, in.w, in.bias, s.n, cd, s.k)
				got, check := guarded(s.n * cd)
				st := slices.Clone(in.cst)
				k.SSMConv(got, in.x, st, in.w, in.bias, s.n, cd, s.k, 0, cd)
				check(t)
				var worst int64
				for i := range want {
					if d := ulpDiff(got[i], want[i]); d > worst {
						worst = d
					}
				}
				t.Logf("conv: %d ulps from the Ref's at most", worst)
				if worst > convULP {
					t.Fatalf("conv: %d ulps from the Ref's (tolerance %d)", worst, convULP)
				}
				same(t, "conv state", st, wantSt)
				// without a bias, and channels [1, cd-1) only
				if cd > 2 {
					outB, stB := make([]float32, s.n*cd), slices.Clone(in.cst)
					ref.SSMConv(outB, in.x, stB, in.w, nil, s.n, cd, s.k)
					gotB, stG := make([]float32, s.n*cd), slices.Clone(in.cst)
					k.SSMConv(gotB, in.x, stG, in.w, nil, s.n, cd, s.k, 1, cd-1)
					for tk := range s.n {
						for c := range cd {
							g, w := gotB[tk*cd+c], outB[tk*cd+c]
							if c == 0 || c == cd-1 {
								w = 0
							}
							if ulpDiff(g, w) > convULP {
								t.Fatalf("conv without bias, channels [1, %d): token %d channel %d: %g, want %g", cd-1, tk, c, g, w)
							}
						}
					}
					for c := range cd {
						for j := range s.k - 1 {
							i, w := c*(s.k-1)+j, stB[c*(s.k-1)+j]
							if c == 0 || c == cd-1 {
								w = in.cst[i]
							}
							if stG[i] != w {
								t.Fatalf("conv state without bias, channels [1, %d): channel %d: %g, want %g", cd-1, c, stG[i], w)
							}
						}
					}
				}
				// scan on the Ref's convolution output
				conv := want
				yRef, sRef := make([]float32, s.n*inner), slices.Clone(in.sst)
				ref.SSMScan(yRef, conv, in.dt, in.a, in.d, sRef, s.n, s.nh, s.hd, s.ng, s.ds)
				y, checkY := guarded(s.n * inner)
				ss := slices.Clone(in.sst)
				k.SSMScan(y, conv, in.dt, in.a, in.d, ss, s.n, s.nh, s.hd, s.ng, s.ds, 0, s.nh)
				checkY(t)
				ey, es := scanErrors(s, in, conv, y, ss)
				ry, rs := scanErrors(s, in, conv, yRef, sRef)
				t.Logf("scan error / S: outputs %.2g (Ref %.2g), state %.2g (Ref %.2g)", ey, ry, es, rs)
				if ey > scanTol || es > scanTol || ry > scanTol || rs > scanTol {
					t.Fatalf("scan error / S above %g: outputs %g (Ref %g), state %g (Ref %g)", scanTol, ey, ry, es, rs)
				}
				// heads [1, nh-1) only: the others keep their sentinel output and state
				if s.nh > 2 {
					y2, s2 := make([]float32, s.n*inner), slices.Clone(in.sst)
					for i := range y2 {
						y2[i] = -7
					}
					k.SSMScan(y2, conv, in.dt, in.a, in.d, s2, s.n, s.nh, s.hd, s.ng, s.ds, 1, s.nh-1)
					for tk := range s.n {
						for h := range s.nh {
							for i := range s.hd {
								j := tk*inner + h*s.hd + i
								if w := y[j]; h == 0 || h == s.nh-1 {
									if y2[j] != -7 {
										t.Fatalf("scan of heads [1, %d) wrote head %d", s.nh-1, h)
									}
								} else if y2[j] != w {
									t.Fatalf("scan of heads [1, %d): token %d head %d row %d: %g, all heads %g", s.nh-1, tk, h, i, y2[j], w)
								}
							}
						}
					}
					for h := range s.nh {
						hs := s.hd * s.ds
						w := ss[h*hs : (h+1)*hs]
						if h == 0 || h == s.nh-1 {
							w = in.sst[h*hs : (h+1)*hs]
						}
						same(t, fmt.Sprintf("state of head %d, heads [1, %d) scanned", h, s.nh-1), s2[h*hs:(h+1)*hs], w)
					}
				}
				// one call on n tokens is n calls on one
				y1, s1, c1, cs1 := make([]float32, s.n*inner), slices.Clone(in.sst), make([]float32, s.n*cd), slices.Clone(in.cst)
				for tk := range s.n {
					k.SSMConv(c1[tk*cd:(tk+1)*cd], in.x[tk*cd:(tk+1)*cd], cs1, in.w, in.bias, 1, cd, s.k, 0, cd)
					k.SSMScan(y1[tk*inner:(tk+1)*inner], conv[tk*cd:(tk+1)*cd], in.dt[tk*s.nh:(tk+1)*s.nh], in.a, in.d, s1, 1, s.nh, s.hd, s.ng, s.ds, 0, s.nh)
				}
				sameBits(t, "conv token by token", c1, got)
				sameBits(t, "conv state token by token", cs1, st)
				sameBits(t, "scan token by token", y1, y)
				sameBits(t, "scan state token by token", s1, ss)
			})
		}
	}
}

// scanErrors returns the largest error of the scan's outputs y and final
// state st against the formulas in float64, each over its bound's S (the
// tolerance's comment).
func scanErrors(s ssmShape, in *ssmInputs, conv, y, st []float32) (ey, es float64) {
	inner, cd := in.inner, in.cd
	hs := s.hd * s.ds
	s64, m := make([]float64, hs), make([]float64, hs)
	for h := range s.nh {
		g := h / (s.nh / s.ng)
		for i := range hs {
			s64[i] = float64(in.sst[h*hs+i])
			m[i] = math.Abs(s64[i])
		}
		for tk := range s.n {
			row := conv[tk*cd : (tk+1)*cd]
			v := float64(in.dt[tk*s.nh+h])
			delta := v
			if v <= 20 {
				delta = math.Log1p(math.Exp(v))
			}
			dA := math.Exp(delta * float64(in.a[h]))
			for i := range s.hd {
				xi := float64(row[h*s.hd+i])
				var sum, bound float64
				for j := range s.ds {
					bj, cj := float64(row[inner+g*s.ds+j]), float64(row[inner+(s.ng+g)*s.ds+j])
					q := i*s.ds + j
					s64[q] = s64[q]*dA + bj*xi*delta
					m[q] = m[q]*dA + math.Abs(bj*xi*delta)
					sum += s64[q] * cj
					bound += m[q] * math.Abs(cj)
				}
				want := sum + xi*float64(in.d[h])
				bound += math.Abs(xi * float64(in.d[h]))
				ey = max(ey, math.Abs(float64(y[tk*inner+h*s.hd+i])-want)/bound)
			}
		}
		for q := range hs {
			es = max(es, math.Abs(float64(st[h*hs+q])-s64[q])/m[q])
		}
	}
	return ey, es
}

// TestSSMPrefillDecode: through the Backend (2 workers) on every path, on
// Nemotron 3 Nano's mixer shape, a prefill of n tokens (n = 1, 7, 63, 64,
// 65, 200: around the kernels' 16-token blocks and a 64-token chunk)
// gives the bits of n single-token decode steps, outputs and state, and a
// prefill followed by decode steps the bits of one longer prefill; the
// outputs and state are within scanTol of the exact values.
func TestSSMPrefillDecode(t *testing.T) {
	const extra = 3 // decode steps after the prefill
	for _, k := range testISAs(t) {
		be := cpu.NewBackend(2, k)
		defer be.Close()
		for _, n := range []int{1, 7, 63, 64, 65, 200} {
			s := ssmShape{n + extra, nano.nh, nano.hd, nano.ng, nano.ds, nano.k}
			t.Run(fmt.Sprintf("isa=%s/n=%d", k.ISA(), n), func(t *testing.T) {
				in := newSSMInputs(rand.New(rand.NewPCG(uint64(n), 44)), s)
				inner, cd, N := in.inner, in.cd, s.n
				step := func(tk0, tk1 int, conv, y, cst, sst []float32) {
					m := tk1 - tk0
					be.SSMConv(conv[tk0*cd:tk1*cd], in.x[tk0*cd:tk1*cd], cst, in.w, in.bias, m, cd, s.k)
					be.SSMScan(y[tk0*inner:tk1*inner], conv[tk0*cd:tk1*cd], in.dt[tk0*s.nh:tk1*s.nh], in.a, in.d, sst, m, s.nh, s.hd, s.ng, s.ds)
				}
				// all n+extra tokens at once
				convA, yA, cA, sA := make([]float32, N*cd), make([]float32, N*inner), slices.Clone(in.cst), slices.Clone(in.sst)
				step(0, N, convA, yA, cA, sA)
				// prefill n, then decode extra
				convP, yP, cP, sP := make([]float32, N*cd), make([]float32, N*inner), slices.Clone(in.cst), slices.Clone(in.sst)
				step(0, n, convP, yP, cP, sP)
				for tk := n; tk < N; tk++ {
					step(tk, tk+1, convP, yP, cP, sP)
				}
				// token by token
				convT, yT, cT, sT := make([]float32, N*cd), make([]float32, N*inner), slices.Clone(in.cst), slices.Clone(in.sst)
				for tk := range N {
					step(tk, tk+1, convT, yT, cT, sT)
				}
				for _, c := range []struct {
					what            string
					conv, y, cs, ss []float32
				}{{"prefill then decode", convP, yP, cP, sP}, {"token by token", convT, yT, cT, sT}} {
					sameBits(t, c.what+": conv", c.conv, convA)
					sameBits(t, c.what+": conv state", c.cs, cA)
					sameBits(t, c.what+": scan", c.y, yA)
					sameBits(t, c.what+": scan state", c.ss, sA)
				}
				ey, es := scanErrors(s, in, convA, yA, sA)
				t.Logf("scan error / S: outputs %.2g, state %.2g", ey, es)
				if ey > scanTol || es > scanTol {
					t.Fatalf("scan error / S above %g: outputs %g, state %g", scanTol, ey, es)
				}
			})
		}
	}
}

// TestMambaDecodeAllocs: a decode step of the Mamba ops (n = 1, Nano's
// shape, 2 workers) allocates nothing on any path.
func TestMambaDecodeAllocs(t *testing.T) {
	for _, k := range testISAs(t) {
		be := cpu.NewBackend(2, k)
		defer be.Close()
		s := ssmShape{1, nano.nh, nano.hd, nano.ng, nano.ds, nano.k}
		in := newSSMInputs(rand.New(rand.NewPCG(1, 1)), s)
		conv, y, nw := make([]float32, in.cd), make([]float32, in.inner), randVec(rand.New(rand.NewPCG(2, 2)), in.inner, 1)
		step := func() {
			be.SSMConv(conv, in.x, in.cst, in.w, in.bias, 1, in.cd, s.k)
			be.SSMScan(y, conv, in.dt, in.a, in.d, in.sst, 1, s.nh, s.hd, s.ng, s.ds)
			be.GroupRMSNorm(y, y, nw, 1, in.inner, s.ng, 1e-5)
		}
		step()
		if a := testing.AllocsPerRun(50, step); a != 0 {
			t.Errorf("isa=%s: %g allocations per decode step", k.ISA(), a)
		}
	}
}
