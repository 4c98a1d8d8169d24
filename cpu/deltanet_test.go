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

// dnTol is kern_dn.go's bound on the SIMD delta rule against the Go loop
// (and the Go loop's against float64 arithmetic), relative to the
// magnitudes deltaByHand returns.
const dnTol = 2e-6

// TestDeltaNetOps: the Backend's model.DeltaNet ops give the Ref's results
// on random inputs of odd and aligned sizes (the real ones among them:
// Qwen3.5's 16 key and 32 value heads of 128, 4 taps), on every ISA of
// this machine and 1 and 2 workers. With ISAScalarGo the Backend runs the
// Ref's arithmetic split by channels, heads or rows, so the tolerance is
// exact equality. The SIMD paths: the convolution and the gated norm
// within 4 ulps (SiLU's exp, kern_dn.go), the L2 norm exactly, the delta
// rule within dnTol of the Ref, relative to the float64 magnitudes of
// deltaByHand, which the Ref itself must meet too. Outputs and states are
// checked for NaN/Inf and guarded against writes past their end, and n
// tokens at once equal n calls of one token bit for bit on every path.
func TestDeltaNetOps(t *testing.T) {
	ref := cpu.NewRef()
	for _, isa := range cpu.Available() {
		for _, threads := range []int{1, 2} {
			be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
			defer be.Close()
			for _, sz := range []struct{ n, hk, hv, d, k int }{
				{1, 1, 1, 5, 2}, {7, 2, 4, 13, 4}, {3, 1, 3, 32, 3}, {17, 2, 2, 64, 4}, {1, 4, 8, 128, 4}, {33, 2, 6, 11, 5},
				{1, 16, 32, 128, 4}, {20, 16, 32, 128, 4}, {9, 3, 6, 24, 4}, {200, 2, 4, 64, 4}, {65, 1, 2, 128, 4},
			} {
				name := fmt.Sprintf("isa=%s/threads=%d/n=%d/hk=%d/hv=%d/d=%d/k=%d", isa, threads, sz.n, sz.hk, sz.hv, sz.d, sz.k)
				t.Run(name, func(t *testing.T) {
					checkDeltaNetOps(t, ref, be, isa == cpu.ISAScalarGo, sz.n, sz.hk, sz.hv, sz.d, sz.k)
				})
			}
		}
	}
}

// TestDeltaNetDecodeAllocs: one decode step of the DeltaNet ops (one
// token of Qwen3.5's layer shape) allocates nothing on the Backend, on
// every ISA and 1 and 2 workers.
func TestDeltaNetDecodeAllocs(t *testing.T) {
	const hk, hv, d, kw = 16, 32, 128, 4
	cd, vd := (2*hk+hv)*d, hv*d
	r := rand.New(rand.NewPCG(3, 4))
	x, w, st := randVec(r, cd, 1), randVec(r, cd*kw, 0.3), randVec(r, cd*(kw-1), 1)
	conv, g, beta := make([]float32, cd), make([]float32, hv), make([]float32, hv)
	for i := range g {
		g[i], beta[i] = -0.1, 0.5
	}
	s, out, z := randVec(r, hv*d*d, 0.1), make([]float32, vd), randVec(r, vd, 1)
	nw := model.Vector(randVec(r, d, 0.1))
	for _, isa := range cpu.Available() {
		for _, threads := range []int{1, 2} {
			be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
			step := func() {
				be.ConvSiLU(conv, x, st, w, 1, cd, kw)
				be.L2Norm(conv[:2*hk*d], 2*hk, d, 1e-6)
				be.GatedDeltaNet(out, conv, g, beta, s, 1, hk, hv, d)
				be.GatedRMSNorm(out, out, z, nw, hv, d, 1e-6)
			}
			step() // the first call sizes the scratch
			if a := testing.AllocsPerRun(20, step); a != 0 {
				t.Errorf("isa=%s threads=%d: %v allocations per decode step, want 0", isa, threads, a)
			}
			be.Close()
		}
	}
}

func checkDeltaNetOps(t *testing.T, ref *cpu.Ref, be *cpu.Backend, exact bool, n, hk, hv, d, kw int) {
	r := rand.New(rand.NewPCG(uint64(n*1000+d), uint64(hv)))
	cd := (2*hk + hv) * d
	vd := hv * d
	// convolution + SiLU, with its state
	x, w := randVec(r, n*cd, 1), randVec(r, cd*kw, 0.3)
	st0 := randVec(r, cd*(kw-1), 1)
	stRef := slices.Clone(st0)
	stBe, checkSt := guarded(len(st0))
	copy(stBe, st0)
	outRef := make([]float32, n*cd)
	outBe, check := guarded(n * cd)
	ref.ConvSiLU(outRef, x, stRef, w, n, cd, kw)
	be.ConvSiLU(outBe, x, stBe, w, n, cd, kw)
	check(t)
	checkSt(t)
	ulps(t, "conv", outBe, outRef, exact)
	same(t, "conv state", stBe, stRef)
	// the convolution by hand for one channel and the last token
	c, tl := cd-1, n-1
	var want float32
	for i := range kw {
		j := tl + i // index in state ++ inputs
		var in float32
		if j < kw-1 {
			in = st0[c*(kw-1)+j]
		} else {
			in = x[(j-(kw-1))*cd+c]
		}
		want += in * w[c*kw+i]
	}
	want = want / (1 + float32(math.Exp(float64(-want))))
	if d := math.Abs(float64(outRef[tl*cd+c] - want)); d > 1e-5 {
		t.Errorf("conv: channel %d token %d: %g, by hand %g", c, tl, outRef[tl*cd+c], want)
	}
	// L2 norm of the q and k heads
	qRef, qBe := slices.Clone(outRef), slices.Clone(outRef)
	for row := range n {
		ref.L2Norm(qRef[row*cd:row*cd+2*hk*d], 2*hk, d, 1e-6)
		be.L2Norm(qBe[row*cd:row*cd+2*hk*d], 2*hk, d, 1e-6)
	}
	same(t, "l2", qBe, qRef)
	var norm float64
	for _, v := range qRef[:d] {
		norm += float64(v) * float64(v)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("l2: row norm² %g, want 1", norm)
	}
	// gated delta rule
	g, beta := randVec(r, n*hv, 0.5), randVec(r, n*hv, 1)
	for i := range g {
		g[i] = -float32(math.Abs(float64(g[i])))
		beta[i] = 1 / (1 + float32(math.Exp(float64(-beta[i]))))
	}
	s0 := randVec(r, hv*d*d, 0.1)
	sRef := slices.Clone(s0)
	sBe, checkS := guarded(len(s0))
	copy(sBe, s0)
	oRef := make([]float32, n*vd)
	oBe, check2 := guarded(n * vd)
	ref.GatedDeltaNet(oRef, qRef, g, beta, sRef, n, hk, hv, d)
	be.GatedDeltaNet(oBe, qRef, g, beta, sBe, n, hk, hv, d)
	check2(t)
	checkS(t)
	oMag, sMag := deltaByHand(t, s0, qRef, g, beta, oRef, sRef, n, hk, hv, d)
	if exact {
		same(t, "delta out", oBe, oRef)
		same(t, "delta state", sBe, sRef)
	} else {
		within(t, "delta out", oBe, oRef, oMag, dnTol)
		within(t, "delta state", sBe, sRef, sMag, dnTol)
	}
	// token by token equals all at once, on the Ref and the Backend
	for _, p := range []struct {
		name string
		dn   model.DeltaNet
		o, s []float32
	}{{"Ref", ref, oRef, sRef}, {"Backend", be, oBe, sBe}} {
		sStep := slices.Clone(s0)
		oStep := make([]float32, n*vd)
		for tk := range n {
			p.dn.GatedDeltaNet(oStep[tk*vd:(tk+1)*vd], qRef[tk*cd:(tk+1)*cd], g[tk*hv:(tk+1)*hv], beta[tk*hv:(tk+1)*hv], sStep, 1, hk, hv, d)
		}
		same(t, p.name+" delta token by token", oStep, p.o)
		same(t, p.name+" delta state token by token", sStep, p.s)
	}
	// gated RMS norm and the sigmoid gate
	z, nw := randVec(r, n*vd, 1), randVec(r, d, 0.1)
	nRef, nBe := make([]float32, n*vd), make([]float32, n*vd)
	ref.GatedRMSNorm(nRef, oRef, z, model.Vector(nw), n*hv, d, 1e-6)
	be.GatedRMSNorm(nBe, oRef, z, model.Vector(nw), n*hv, d, 1e-6)
	ulps(t, "gated norm", nBe, nRef, exact)
	inPlace := slices.Clone(oRef)
	be.GatedRMSNorm(inPlace, inPlace, z, model.Vector(nw), n*hv, d, 1e-6)
	same(t, "gated norm in place", inPlace, nBe)
	aRef, aBe := slices.Clone(z), slices.Clone(z)
	ref.SigmoidMul(aRef, nw[:min(len(nw), len(aRef))])
	be.SigmoidMul(aBe, nw[:min(len(nw), len(aBe))])
	same(t, "sigmoid mul", aBe, aRef)
}

// deltaByHand recomputes the delta rule in float64 from its formula
// (untransposed state S[i][j]), checks the Ref's outputs and final state
// against it within dnTol, and returns the magnitudes the bound is
// relative to: per output Σ_i |S_ij·q_i| / √d, per state element
// |S_ij| + ‖S_·j‖/√d (+1e-30, so zeros compare).
func deltaByHand(t *testing.T, s0, qkv, g, beta, out, sOut []float32, n, hk, hv, d int) (oMag, sMag []float32) {
	t.Helper()
	cd := (2*hk + hv) * d
	oMag, sMag = make([]float32, n*hv*d), make([]float32, hv*d*d)
	S := make([]float64, d*d) // S[i*d+j]
	for h := range hv {
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
				var o, m float64
				for i := range d {
					o += S[i*d+j] * float64(q[i])
					m += math.Abs(S[i*d+j] * float64(q[i]))
				}
				o /= math.Sqrt(float64(d))
				m = m/math.Sqrt(float64(d)) + 1e-30
				oMag[tk*hv*d+h*d+j] = float32(m)
				got := float64(out[tk*hv*d+h*d+j])
				if math.IsNaN(got) || math.Abs(got-o) > dnTol*m {
					t.Fatalf("head %d token %d out[%d] = %g, formula %g (magnitude %g)", h, tk, j, got, o, m)
				}
			}
		}
		for j := range d {
			var col float64
			for i := range d {
				col += S[i*d+j] * S[i*d+j]
			}
			col = math.Sqrt(col / float64(d))
			for i := range d {
				m := math.Abs(S[i*d+j]) + col + 1e-30
				sMag[h*d*d+j*d+i] = float32(m)
				if got := float64(sOut[h*d*d+j*d+i]); math.Abs(got-S[i*d+j]) > dnTol*m {
					t.Fatalf("head %d state S[%d][%d] = %g, formula %g (magnitude %g)", h, i, j, got, S[i*d+j], m)
				}
			}
		}
	}
	return oMag, sMag
}

// within fails unless |got[i]-want[i]| ≤ tol·mag[i] for every i (and got
// is finite), reporting the largest error relative to mag.
func within(t *testing.T, what string, got, want, mag []float32, tol float64) {
	t.Helper()
	worst, at := 0.0, 0
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			t.Fatalf("%s[%d] = %g", what, i, got[i])
		}
		if e := math.Abs(float64(got[i])-float64(want[i])) / float64(mag[i]); e > worst {
			worst, at = e, i
		}
	}
	if worst > tol {
		t.Fatalf("%s[%d] = %g, Ref %g: error %.3g of magnitude %g, over %g", what, at, got[at], want[at], worst, mag[at], tol)
	}
	t.Logf("%s: largest error %.3g of the magnitude (bound %g)", what, worst, tol)
}

// ulps fails unless got equals want (exact) or each is within maxULP
// float32 steps of it, finite; it logs the largest distance.
func ulps(t *testing.T, what string, got, want []float32, exact bool) {
	t.Helper()
	if exact {
		same(t, what, got, want)
		return
	}
	const maxULP = 4
	worst := 0
	for i := range want {
		a, b := got[i], want[i]
		if math.IsNaN(float64(a)) || math.IsInf(float64(a), 0) {
			t.Fatalf("%s[%d] = %g", what, i, a)
		}
		d := int(ordered(a) - ordered(b))
		d = max(d, -d)
		if d > maxULP {
			t.Fatalf("%s[%d] = %g, Ref %g: %d ulps apart, over %d", what, i, a, b, d, maxULP)
		}
		worst = max(worst, d)
	}
	t.Logf("%s: at most %d ulps from the Ref (bound %d)", what, worst, maxULP)
}

// ordered maps float32 bits to integers in the order of the values, so
// that their difference counts representable steps.
func ordered(f float32) int64 {
	b := int64(math.Float32bits(f))
	if b&(1<<31) != 0 {
		return -(b &^ (1 << 31))
	}
	return b
}

func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) || got[i] != want[i] {
			t.Fatalf("%s[%d] = %g, Ref %g", what, i, got[i], want[i])
		}
	}
}

// BenchmarkDeltaNetLayer times the recurrent part of one gated delta net
// layer of Qwen3.5-35B-A3B's shape (model/synth preset "qwen3.5-35b-a3b":
// 16 key heads and 32 value heads of 128, 4-tap convolution): ConvSiLU,
// the q/k L2 norms, GatedDeltaNet and GatedRMSNorm for one decode token
// and for a 512-token prefill, on the Backend's default kernels with 1
// and 2 workers, without the layer's matrix products. tok/s is tokens per
// second through these ops of one layer; cpu-ms/op is the process's CPU
// time (user and system, all threads) per op, the steadier figure on a
// shared machine, where wall time includes waiting for a core.
func BenchmarkDeltaNetLayer(b *testing.B) {
	for _, threads := range []int{1, 2} {
		be := cpu.NewBackend(threads, nil)
		benchDeltaNetLayer(b, be)
		be.Close()
	}
}

func benchDeltaNetLayer(b *testing.B, be *cpu.Backend) {
	const hk, hv, d, kw = 16, 32, 128, 4
	cd, vd := (2*hk+hv)*d, hv*d
	for _, n := range []int{1, 512} {
		b.Run(fmt.Sprintf("isa=%s/threads=%d/tokens=%d", be.ISA(), be.Threads(), n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			x, w := randVec(r, n*cd, 1), randVec(r, cd*kw, 0.3)
			conv, st := make([]float32, n*cd), randVec(r, cd*(kw-1), 1)
			g, beta := randVec(r, n*hv, 0.5), randVec(r, n*hv, 1)
			for i := range g {
				g[i] = -float32(math.Abs(float64(g[i])))
				beta[i] = 1 / (1 + float32(math.Exp(float64(-beta[i]))))
			}
			s := randVec(r, hv*d*d, 0.1)
			out, z, nw := make([]float32, n*vd), randVec(r, n*vd, 1), model.Vector(randVec(r, d, 0.1))
			cpu0 := cpuTime()
			for b.Loop() {
				be.ConvSiLU(conv, x, st, w, n, cd, kw)
				for t := range n {
					be.L2Norm(conv[t*cd:t*cd+2*hk*d], 2*hk, d, 1e-6)
				}
				be.GatedDeltaNet(out, conv, g, beta, s, n, hk, hv, d)
				be.GatedRMSNorm(out, out, z, nw, n*hv, d, 1e-6)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			reportCPU(b, cpu0)
		})
	}
}

// BenchmarkGatedDeltaNet times GatedDeltaNet alone at Qwen3.5-35B-A3B's
// shape (32 value heads of 128) on one worker, for 1 and 512 tokens.
// lane-ops/s counts the recurrence's 4·d² multiplies and multiply-adds
// per token and head (decay, s·k, update, s·q), the figure to hold a
// chunked form's 3·d² + 6·C·d + C²/3 multiply-adds (chunk C) against.
func BenchmarkGatedDeltaNet(b *testing.B) {
	const hk, hv, d = 16, 32, 128
	cd, vd := (2*hk+hv)*d, hv*d
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	for _, n := range []int{1, 512} {
		b.Run(fmt.Sprintf("isa=%s/tokens=%d", be.ISA(), n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			qkv := randVec(r, n*cd, 0.09) // rows of about unit norm, as after L2Norm
			g, beta := make([]float32, n*hv), make([]float32, n*hv)
			for i := range g {
				g[i], beta[i] = -0.05, 0.5
			}
			s, out := randVec(r, hv*d*d, 0.1), make([]float32, n*vd)
			cpu0 := cpuTime()
			for b.Loop() {
				be.GatedDeltaNet(out, qkv, g, beta, s, n, hk, hv, d)
			}
			reportCPU(b, cpu0)
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(4*d*d*hv*float64(n)*float64(b.N)/(float64(cpuTime()-cpu0)/1e9), "lane-ops/s")
		})
	}
}
