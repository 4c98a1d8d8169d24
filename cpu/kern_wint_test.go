package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// wintCase is rows of one integer V kind for TestAttnSumQ.
type wintCase struct {
	name string
	t    quant.Type
	tq   *quant.Turbo
	dim  int // values per row (TurboQuant: Padded)
}

func wintCases(t *testing.T) []wintCase {
	var cs []wintCase
	for _, t := range []quant.Type{quant.Q4_0, quant.Q8_0} {
		for _, dim := range []int{32, 64, 96, 128} {
			cs = append(cs, wintCase{fmt.Sprintf("%s/dim=%d", t, dim), t, nil, dim})
		}
	}
	for _, bits := range []int{3, 4} {
		for _, dim := range []int{48, 64, 128, 256} {
			tq, err := quant.NewTurbo(dim, bits, uint64(dim+bits))
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, wintCase{fmt.Sprintf("tq%d/dim=%d", bits, dim), 0, tq, tq.Padded()})
		}
	}
	return cs
}

// rows returns n random rows of c, their bytes and their float32 values.
func (c wintCase) rows(t *testing.T, rng *rand.Rand, n int) (src []byte, vals [][]float32, rb int) {
	if c.tq != nil {
		rb = c.tq.RowBytes()
	} else {
		rb, _ = quant.RowBytes(c.t, c.dim)
	}
	src = make([]byte, n*rb)
	for r := range n {
		x := make([]float32, c.dim)
		sc := float32(math.Exp(rng.NormFloat64())) // rows of different norms
		for d := range x {
			x[d] = sc * float32(rng.NormFloat64())
		}
		row := src[r*rb : (r+1)*rb]
		if c.tq != nil {
			if err := c.tq.Encode(row, x[:c.tq.Dim()], make([]float32, c.tq.Padded())); err != nil {
				t.Fatal(err)
			}
		} else if err := quant.QuantizeRow(c.t, x, row); err != nil {
			t.Fatal(err)
		}
		v := make([]float32, c.dim)
		kvRowF32(c.t, c.tq, row, v)
		vals = append(vals, v)
	}
	return src, vals, rb
}

// wintRun sums rows src (n of rb bytes) with weights w (G heads, stride
// lw) on k, chunk by chunk as decode does, each chunk's rows in runs of the
// given lengths (a chunk in one run: AttnSumChunk, as decode); ok is
// RoundWeights' answer, steps each chunk's m/32767 per group.
func wintRun(k *Kernels, c wintCase, src []byte, rb, n, G int, w []float32, lw int, runs []int) (acc []float32, steps [][]float64, ok bool) {
	acc, steps, _, ok = wintRunF(k, c, src, rb, n, G, w, lw, runs)
	return acc, steps, ok
}

// wintRunF is wintRun, also returning the float64 sums before Finish.
func wintRunF(k *Kernels, c wintCase, src []byte, rb, n, G int, w []float32, lw int, runs []int) (acc []float32, steps [][]float64, F []float64, ok bool) {
	x := &WInt{}
	x.Begin(c.t, c.tq, G, c.dim)
	for c0 := 0; c0 < n; c0 += WIntChunk {
		c1 := min(c0+WIntChunk, n)
		if runs[0] >= c1-c0 {
			var next []byte // as decode: the next chunk's rows, prefetched (results unchanged)
			if c1 < n {
				next = src[c1*rb : min(c1+WIntChunk, n)*rb]
			}
			if !k.AttnSumChunk(x, src[c0*rb:], rb, c1-c0, w[c0:], lw, next) {
				return nil, nil, nil, false
			}
		} else if !wintPieces(k, x, src[c0*rb:], rb, c1-c0, w[c0:], lw, runs) {
			return nil, nil, nil, false
		}
		st := make([]float64, len(x.m))
		for i, m := range x.m {
			st[i] = float64(m) / qintMax
		}
		steps = append(steps, st)
	}
	acc = make([]float32, G*c.dim)
	x.Finish(acc)
	return acc, steps, slices.Clone(x.F), true
}

// wintPieces sums a chunk of n rows through WInt's separate kernels, the
// rows in runs of the given lengths.
func wintPieces(k *Kernels, x *WInt, src []byte, rb, n int, w []float32, lw int, runs []int) bool {
	x.Chunk(n)
	for j, i := 0, 0; j < n; i++ {
		l := min(runs[i%len(runs)], n-j)
		k.AttnSumScales(x, src[j*rb:], rb, j, l, w, lw)
		j += l
	}
	if !k.RoundWeights(x, w, lw) {
		return false
	}
	for j, i := 0, 0; j < n; i++ {
		l := min(runs[i%len(runs)], n-j)
		k.AttnSumQ(x, src[j*rb:], rb, j, l)
		j += l
	}
	x.Fold()
	return true
}

// rowScale returns the f16 scale of group b of row (q4_0, q8_0: block
// b's; TurboQuant: the row's).
func (c wintCase) rowScale(row []byte, b int) float64 {
	o := 0
	if c.tq == nil {
		rb, _ := quant.RowBytes(c.t, 32)
		o = rb * b
	}
	return float64(quant.FP16ToFP32(uint16(row[o]) | uint16(row[o+1])<<8))
}

// TestAttnSumQ checks the integer V sums: every path, and every way of
// cutting the rows into runs, gives the Go path's result bit for bit (the
// sums are exact integers), and the Go path is within the bound the
// rounding of the weights allows of the float64 sum of the rows' float32
// values: per value Σ_r 0.51·step·|v_r|/s_r·... (below) plus 2^-21 of
// Σ_r |w_r·v_r| and 2^-23 of the sum.
func TestAttnSumQ(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	ref := KernelsFor(ISAScalarGo)
	for _, c := range wintCases(t) {
		for _, n := range []int{1, 2, 7, 255, 256, 257, 600, 2500} {
			for _, G := range []int{1, 3, 4, 5} {
				if n == 2500 && G != 4 {
					continue
				}
				if G == 5 && n == 257 {
					G = 11 // more heads than the C kernels keep in registers
				}
				src, vals, rb := c.rows(t, rng, n)
				lw := n + 3
				w := make([]float32, G*lw)
				for g := range G {
					for r := range n {
						switch rng.IntN(8) {
						case 0:
							w[g*lw+r] = 0
						case 1:
							w[g*lw+r] = float32(rng.Float64() * 1e-6)
						default:
							w[g*lw+r] = float32(rng.Float64())
						}
					}
					w[g*lw+rng.IntN(n)] = 1 // a peak, as after a softmax
					// chunks the softmax all but ignores: products below
					// 2^-64 (tinyMin), down to subnormal ones
					for ci, e := range []int{0, -90, 0, -135} {
						if e != 0 && (g+ci)%2 == 1 {
							for r := ci * WIntChunk; r < min(n, (ci+1)*WIntChunk); r++ {
								w[g*lw+r] = float32(math.Ldexp(float64(w[g*lw+r]), e))
							}
						}
					}
				}
				want, steps, wantF, ok := wintRunF(ref, c, src, rb, n, G, w, lw, []int{n})
				if !ok {
					t.Fatalf("%s n=%d G=%d: RoundWeights refused finite weights", c.name, n, G)
				}
				// against float64
				var worst float64
				for g := range G {
					for d := range c.dim {
						var exact, mag, bound float64
						nb := 1
						if c.tq == nil {
							nb = c.dim / 32
						}
						b := d * nb / c.dim
						for r := range n {
							p := float64(w[g*lw+r]) * float64(vals[r][d])
							exact += p
							mag += math.Abs(p)
							step := steps[r/WIntChunk][g*nb+b]
							// |v|/s: the row's value in steps of the weight's scale
							s := c.rowScale(src[r*rb:], b)
							if s != 0 {
								bound += 0.51 * step * math.Abs(float64(vals[r][d])/s)
							}
						}
						bound += 0x1p-21*mag + 0x1p-23*math.Abs(exact) + 1e-30
						e := math.Abs(float64(want[g*c.dim+d]) - exact)
						if e > bound {
							t.Fatalf("%s n=%d G=%d: head %d value %d: %g, float64 %g: error %g > bound %g", c.name, n, G, g, d, want[g*c.dim+d], exact, e, bound)
						}
						worst = max(worst, e/bound)
					}
				}
				// every path, in runs of several lengths
				for _, isa := range Available() {
					k := KernelsFor(isa)
					for _, runs := range [][]int{{n}, {1}, {3, 16, 255}, {256}, {17}, {1000}} {
						got, _, F, ok := wintRunF(k, c, src, rb, n, G, w, lw, runs)
						if !ok {
							t.Fatalf("%s %s n=%d G=%d runs %v: RoundWeights refused", isa, c.name, n, G, runs)
						}
						for i := range wantF { // the float64 sums too, not only their float32 roundings
							if math.Float64bits(F[i]) != math.Float64bits(wantF[i]) {
								t.Fatalf("%s %s n=%d G=%d runs %v: float64 sum %d: %g, Go path %g", isa, c.name, n, G, runs, i, F[i], wantF[i])
							}
						}
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s %s n=%d G=%d runs %v: value %d: %g, Go path %g", isa, c.name, n, G, runs, i, got[i], want[i])
							}
						}
					}
				}
				if n == 2500 {
					t.Logf("%s: largest error / bound %.3f", c.name, worst)
				}
			}
		}
	}
}

// TestRoundWeightsRefuses checks that every path refuses the same weights
// (a NaN, an infinity) and takes a head whose products are below 2^-64,
// and that a head whose weights are all 0 takes none of the rows (its sums
// are exactly 0) while the other head's match the Go path's.
func TestRoundWeightsRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, c := range wintCases(t)[:5] {
		const n, G = 40, 2
		src, _, rb := c.rows(t, rng, n)
		for name, set := range map[string]func(w []float32){
			"NaN":   func(w []float32) { w[n+17] = float32(math.NaN()) },
			"zeros": func(w []float32) { clear(w[n:]) },
			"tiny":  func(w []float32) { clear(w[n:]); w[n+3] = 0x1p-100 },
			"inf":   func(w []float32) { w[n+39] = float32(math.Inf(1)) },
		} {
			var want []float32
			for _, isa := range append([]ISA{ISAScalarGo}, Available()...) {
				w := make([]float32, G*n)
				r := rand.New(rand.NewPCG(9, 9)) // the same weights on every path
				for i := range w {
					w[i] = float32(r.Float64())
				}
				set(w)
				got, _, ok := wintRun(KernelsFor(isa), c, src, rb, n, G, w, n, []int{n})
				if name == "tiny" {
					if !ok {
						t.Errorf("%s %s: tiny weights: RoundWeights refused them", isa, c.name)
					}
					continue
				}
				if name != "zeros" {
					if ok {
						t.Errorf("%s %s: %s weights: RoundWeights took them", isa, c.name, name)
					}
					continue
				}
				if !ok {
					t.Fatalf("%s %s: head 1's weights all 0: RoundWeights refused", isa, c.name)
				}
				for i, v := range got[c.dim:] {
					if v != 0 {
						t.Fatalf("%s %s: head 1's weights all 0: value %d is %g", isa, c.name, i, v)
					}
				}
				if want == nil {
					want = got
				} else if !slices.Equal(got, want) {
					t.Fatalf("%s %s: head 1's weights all 0: head 0 differs from the Go path", isa, c.name)
				}
			}
		}
	}
}

// TestAttnSumQTiny checks the groups whose products are below 2^-64
// (tinyScale): scaling a head's weights by a power of two, to either side
// of that bound, scales its sums by exactly that power on every path, and
// leaves the other head's alone.
func TestAttnSumQTiny(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 3))
	for _, c := range wintCases(t) {
		const n, G = 600, 2
		src, _, rb := c.rows(t, rng, n)
		w := make([]float32, G*n)
		for i := range w {
			w[i] = float32(rng.Float64())
		}
		w[n+rng.IntN(n)] = 1
		for _, isa := range append([]ISA{ISAScalarGo}, Available()...) {
			k := KernelsFor(isa)
			base, _, ok := wintRun(k, c, src, rb, n, G, w, n, []int{n})
			if !ok {
				t.Fatalf("%s %s: RoundWeights refused", isa, c.name)
			}
			for _, e := range []int{-40, -70, -90} {
				ws := slices.Clone(w)
				for i := n; i < 2*n; i++ {
					ws[i] = float32(math.Ldexp(float64(ws[i]), e))
				}
				got, _, ok := wintRun(k, c, src, rb, n, G, ws, n, []int{n})
				if !ok {
					t.Fatalf("%s %s: head 1's weights times 2^%d: RoundWeights refused", isa, c.name, e)
				}
				for i, v := range got {
					want := base[i]
					if i >= c.dim {
						want = float32(math.Ldexp(float64(want), e))
					}
					if math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%s %s: head 1's weights times 2^%d: value %d is %g, want %g", isa, c.name, e, i, v, want)
					}
				}
			}
		}
	}
}

// TestIntegerKV: IntegerKV, which bench --roofline uses to hold attention's
// arithmetic to the right peak, names the rows qintKind and wintKind send
// to the integer kernels, for every KV type.
func TestIntegerKV(t *testing.T) {
	for kt := model.KVF32; kt <= model.KVTQ3; kt++ {
		qt, _ := kt.Quant()
		var tq *quant.Turbo
		if b := kt.Turbo(); b > 0 {
			var err error
			if tq, err = quant.NewTurbo(64, b, 1); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := IntegerKV(kt, false), qintKind(qt, tq); got != want {
			t.Errorf("IntegerKV(%s, K) = %v, qintKind %v", kt, got, want)
		}
		if got, want := IntegerKV(kt, true), wintKind(qt, tq); got != want {
			t.Errorf("IntegerKV(%s, V) = %v, wintKind %v", kt, got, want)
		}
	}
}

// TestMAddPeak: each C path's peak loop reports its operations (2 per
// int16 multiply-add: 12 chains of 16 on AVX2, 24 of 32 in AVX-512's
// scores), Go's none.
func TestMAddPeak(t *testing.T) {
	for _, isa := range Available() {
		k := KernelsFor(isa)
		for _, v := range []bool{false, true} {
			want := 0.0
			switch {
			case isa == ISAAVX2 || isa == ISAAVX512 && v:
				want = 384 * 10
			case isa == ISAAVX512 && k.FMAPeak(1) != 0: // not in the SIMDe build
				want = 1536 * 10
			}
			if got := k.MAddPeak(10, v); got != want {
				t.Errorf("%s: MAddPeak(10, %v) = %g, want %g", isa, v, got, want)
			}
		}
	}
}
