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

// randVec returns n values N(0, std²) from r.
func randVec(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// TestDeltaNetOps: the Backend's model.DeltaNet ops give the Ref's results
// on random inputs of odd and aligned sizes, on 1 and 2 workers. The
// Backend runs the Ref's arithmetic split by channels, heads or rows
// (no sum is split), so the tolerance is exact equality; outputs are
// checked for NaN/Inf and guarded against writes past their end.
func TestDeltaNetOps(t *testing.T) {
	ref := cpu.NewRef()
	for _, threads := range []int{1, 2} {
		be := cpu.NewBackend(threads, nil)
		defer be.Close()
		for _, sz := range []struct{ n, hk, hv, d, k int }{
			{1, 1, 1, 5, 2}, {7, 2, 4, 13, 4}, {3, 1, 3, 32, 3}, {17, 2, 2, 64, 4}, {1, 4, 8, 128, 4}, {33, 2, 6, 11, 5},
		} {
			name := fmt.Sprintf("threads=%d/n=%d/hk=%d/hv=%d/d=%d/k=%d", threads, sz.n, sz.hk, sz.hv, sz.d, sz.k)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(sz.n*1000+sz.d), uint64(sz.hv)))
				cd := (2*sz.hk + sz.hv) * sz.d
				vd := sz.hv * sz.d
				// convolution + SiLU, with its state
				x, w := randVec(r, sz.n*cd, 1), randVec(r, cd*sz.k, 0.3)
				st0 := randVec(r, cd*(sz.k-1), 1)
				stRef, stBe := slices.Clone(st0), slices.Clone(st0)
				outRef := make([]float32, sz.n*cd)
				outBe, check := guarded(sz.n * cd)
				ref.ConvSiLU(outRef, x, stRef, w, sz.n, cd, sz.k)
				be.ConvSiLU(outBe, x, stBe, w, sz.n, cd, sz.k)
				check(t)
				same(t, "conv", outBe, outRef)
				same(t, "conv state", stBe, stRef)
				// the convolution by hand for one channel and the last token
				c, tl := cd-1, sz.n-1
				var want float32
				for i := range sz.k {
					j := tl + i // index in state ++ inputs
					var in float32
					if j < sz.k-1 {
						in = st0[c*(sz.k-1)+j]
					} else {
						in = x[(j-(sz.k-1))*cd+c]
					}
					want += in * w[c*sz.k+i]
				}
				want = want / (1 + float32(math.Exp(float64(-want))))
				if d := math.Abs(float64(outRef[tl*cd+c] - want)); d > 1e-5 {
					t.Errorf("conv: channel %d token %d: %g, by hand %g", c, tl, outRef[tl*cd+c], want)
				}
				// L2 norm of the q and k heads
				qRef, qBe := slices.Clone(outRef), slices.Clone(outRef)
				for row := range sz.n {
					ref.L2Norm(qRef[row*cd:row*cd+2*sz.hk*sz.d], 2*sz.hk, sz.d, 1e-6)
					be.L2Norm(qBe[row*cd:row*cd+2*sz.hk*sz.d], 2*sz.hk, sz.d, 1e-6)
				}
				same(t, "l2", qBe, qRef)
				var norm float64
				for _, v := range qRef[:sz.d] {
					norm += float64(v) * float64(v)
				}
				if math.Abs(norm-1) > 1e-5 {
					t.Errorf("l2: row norm² %g, want 1", norm)
				}
				// gated delta rule
				g, beta := randVec(r, sz.n*sz.hv, 0.5), randVec(r, sz.n*sz.hv, 1)
				for i := range g {
					g[i] = -float32(math.Abs(float64(g[i])))
					beta[i] = 1 / (1 + float32(math.Exp(float64(-beta[i]))))
				}
				s0 := randVec(r, sz.hv*sz.d*sz.d, 0.1)
				sRef, sBe := slices.Clone(s0), slices.Clone(s0)
				oRef := make([]float32, sz.n*vd)
				oBe, check2 := guarded(sz.n * vd)
				ref.GatedDeltaNet(oRef, qRef, g, beta, sRef, sz.n, sz.hk, sz.hv, sz.d)
				be.GatedDeltaNet(oBe, qRef, g, beta, sBe, sz.n, sz.hk, sz.hv, sz.d)
				check2(t)
				same(t, "delta out", oBe, oRef)
				same(t, "delta state", sBe, sRef)
				// token by token equals all at once
				sStep := slices.Clone(s0)
				oStep := make([]float32, sz.n*vd)
				for tk := range sz.n {
					ref.GatedDeltaNet(oStep[tk*vd:(tk+1)*vd], qRef[tk*cd:(tk+1)*cd], g[tk*sz.hv:(tk+1)*sz.hv], beta[tk*sz.hv:(tk+1)*sz.hv], sStep, 1, sz.hk, sz.hv, sz.d)
				}
				same(t, "delta token by token", oStep, oRef)
				checkDeltaByHand(t, s0, qRef, g, beta, oRef, sz.n, sz.hk, sz.hv, sz.d)
				// gated RMS norm and the sigmoid gate
				z, nw := randVec(r, sz.n*vd, 1), randVec(r, sz.d, 0.1)
				nRef, nBe := make([]float32, sz.n*vd), make([]float32, sz.n*vd)
				ref.GatedRMSNorm(nRef, oRef, z, model.Vector(nw), sz.n*sz.hv, sz.d, 1e-6)
				be.GatedRMSNorm(nBe, oRef, z, model.Vector(nw), sz.n*sz.hv, sz.d, 1e-6)
				same(t, "gated norm", nBe, nRef)
				aRef, aBe := slices.Clone(z), slices.Clone(z)
				ref.SigmoidMul(aRef, nw[:min(len(nw), len(aRef))])
				be.SigmoidMul(aBe, nw[:min(len(nw), len(aBe))])
				same(t, "sigmoid mul", aBe, aRef)
			})
		}
	}
}

// checkDeltaByHand recomputes the delta rule in float64 from its formula
// (untransposed state S[i][j]) and compares within 1e-4 relative.
func checkDeltaByHand(t *testing.T, s0, qkv, g, beta, out []float32, n, hk, hv, d int) {
	t.Helper()
	cd := (2*hk + hv) * d
	for h := range hv {
		S := make([]float64, d*d) // S[i*d+j]
		for j := range d {
			for i := range d {
				S[i*d+j] = float64(s0[h*d*d+j*d+i])
			}
		}
		kh := h % hk
		for tk := range n {
			row := qkv[tk*cd:]
			q, k, v := row[kh*d:], row[(hk+kh)*d:], row[(2*hk+h)*d:]
			e := math.Exp(float64(g[tk*hv+h]))
			for i := range S {
				S[i] *= e
			}
			for j := range d {
				var sk float64
				for i := range d {
					sk += S[i*d+j] * float64(k[i])
				}
				dj := (float64(v[j]) - sk) * float64(beta[tk*hv+h])
				for i := range d {
					S[i*d+j] += float64(k[i]) * dj
				}
			}
			for j := range d {
				var o float64
				for i := range d {
					o += S[i*d+j] * float64(q[i])
				}
				o /= math.Sqrt(float64(d))
				got := float64(out[tk*hv*d+h*d+j])
				if math.IsNaN(got) || math.Abs(got-o) > 1e-4*(1+math.Abs(o)) {
					t.Fatalf("head %d token %d out[%d] = %g, formula %g", h, tk, j, got, o)
				}
			}
		}
	}
}

func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) || got[i] != want[i] {
			t.Fatalf("%s[%d] = %g, Ref %g", what, i, got[i], want[i])
		}
	}
}
