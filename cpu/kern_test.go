package cpu_test

// Tests of the SIMD kernels against quant's scalar reference, on every ISA
// path this machine runs (FLOWINFER_ISA=go|avx2|avx512 restricts them to one;
// go test -tags fi_simde adds AVX-512 under emulation):
// activation quantization must be byte-identical; dot products must agree
// within a per-type tolerance, write exactly the requested outputs and
// leave guard values around them untouched.

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

// testISAs returns the kernels to test: every available path, or the one
// FLOWINFER_ISA names.
func testISAs(t *testing.T) []*cpu.Kernels {
	t.Helper()
	if s := os.Getenv("FLOWINFER_ISA"); s != "" {
		isa, err := cpu.ParseISA(s)
		if err != nil {
			t.Fatal(err)
		}
		k := cpu.KernelsFor(isa)
		if k == nil {
			t.Fatalf("FLOWINFER_ISA=%s: not available on this machine (have %v)", s, cpu.Available())
		}
		return []*cpu.Kernels{k}
	}
	var ks []*cpu.Kernels
	for _, isa := range cpu.Available() {
		ks = append(ks, cpu.KernelsFor(isa))
	}
	return ks
}

// Every weight type with a dot product, and its tolerance: a result may
// differ from quant.DotFunc's by at most tol·S, S = Σ(|w_i| + |o_i|)·|a_i|
// over the dequantized values, where o_i is the offset part of weight i
// (what the block dequantizes to with its codes zeroed: -8d of Q4_0, the
// min of Q4_1, -dmin·m of Q4_K, -32·d·sc of Q6_K, ...). Kernels may form
// the offset term separately (from bsums or s), so their partial sums reach
// that size. Integer sums are exact on every path; the difference is float32
// rounding of the per-block terms' sum (order, FMA), which grows with the
// number of blocks: up to 16 super-blocks or 128 blocks of 32 here, and up
// to 4096 elements of the float types. Measured worst on AVX2: 1.6e-7
// (Q8_0), under 1e-7 for the K-quants, 3.4e-7 (F32).
var dotTypes = []struct {
	typ quant.Type
	tol float64
}{
	{quant.Q4_K, 1e-6}, {quant.Q6_K, 1e-6}, {quant.Q8_0, 1e-6},
	{quant.Q5_K, 1e-6}, {quant.Q4_0, 1e-6}, {quant.Q2_K, 1e-6}, {quant.Q3_K, 1e-6},
	{quant.Q5_0, 1e-6}, {quant.Q4_1, 1e-6}, {quant.Q5_1, 1e-6},
	{quant.F16, 2e-6}, {quant.BF16, 2e-6}, {quant.F32, 2e-6},
}

// maxNMSE bounds Σ(got-want)²/Σwant² over a whole output matrix of at
// least nmseMinOutputs values. With fewer, the NMSE is the relative error
// of one or two sums, which cancellation makes as large as it likes
// whatever the kernel (seen: a lone Q4_1 dot of 33 with S = 12300 and
// |diff|/S = 1.5e-8 gave NMSE 3.3e-11); the per-value bound tol·S holds
// for every output regardless.
const (
	maxNMSE        = 1e-11
	nmseMinOutputs = 16
)

// inputKind selects how a test row is drawn.
type inputKind int

const (
	normal   inputKind = iota // N(0,1)
	heavy                     // N(0,1), 1 in 16 scaled by 50
	shifted                   // N(0.5,1): asymmetric, exercises mins
	ties                      // halves with amax 127: x·127/amax lands on .5
	tiny                      // subnormal magnitudes
	specials                  // N(0,1) with NaN, ±Inf, ±0, subnormals mixed in
	zeros                     // all zero
)

var allKinds = []inputKind{normal, heavy, shifted, ties, tiny, specials, zeros}

func (k inputKind) String() string {
	return [...]string{"normal", "heavy", "shifted", "ties", "tiny", "specials", "zeros"}[k]
}

// randRow draws n floats of a kind; blocks of 32 get different scales so
// per-block quantization sees a range of magnitudes.
func randRow(r *rand.Rand, n int, kind inputKind) []float32 {
	x := make([]float32, n)
	for i := range x {
		scale := float32(math.Exp2(float64(i/32%7 - 3)))
		v := float32(r.NormFloat64())
		switch kind {
		case normal:
			x[i] = v * scale
		case heavy:
			x[i] = v * scale
			if r.IntN(16) == 0 {
				x[i] *= 50
			}
		case shifted:
			x[i] = (v + 0.5) * scale
		case ties:
			x[i] = float32(r.IntN(255)-127) + 0.5*float32(r.IntN(2))
			if i%32 == 0 {
				x[i] = 127 // amax 127: id = 1, the halves are exact ties
			}
		case tiny:
			x[i] = v * 1e-40
		case specials:
			x[i] = v
			switch r.IntN(24) {
			case 0:
				x[i] = float32(math.NaN())
			case 1:
				x[i] = float32(math.Inf(1))
			case 2:
				x[i] = float32(math.Inf(-1))
			case 3:
				x[i] = float32(math.Copysign(0, -1))
			case 4:
				x[i] = math.Float32frombits(uint32(r.IntN(1 << 23)))
			case 5:
				x[i] = float32(math.NaN()) * -1
			}
		}
	}
	return x
}

func blockSize(t quant.Type) int {
	return max(t.BlockSize(), quant.VecDotType(t).BlockSize())
}

// colsFor returns row lengths for a type: 1, 3, 7, 8, 16 blocks, and for
// the float types also lengths that leave SIMD tails.
func colsFor(t quant.Type) []int {
	bs := blockSize(t)
	if bs == 1 {
		return []int{1, 7, 13, 32, 100, 256, 1000, 4096}
	}
	var c []int
	for _, nb := range []int{1, 3, 7, 8, 16} {
		c = append(c, nb*bs)
	}
	return c
}

func TestQuantizeRows(t *testing.T) {
	types := []quant.Type{quant.Q8_0, quant.Q8_1, quant.Q8_K, quant.F16, quant.BF16, quant.F32, quant.Q4_K}
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range testISAs(t) {
		for _, typ := range types {
			for _, cols := range colsFor(typ) {
				for _, nRows := range []int{1, 5, 13} {
					name := fmt.Sprintf("isa=%s/type=%s/cols=%d/rows=%d", k.ISA(), typ, cols, nRows)
					t.Run(name, func(t *testing.T) {
						src := make([]float32, 0, nRows*cols)
						for i := range nRows {
							src = append(src, randRow(r, cols, allKinds[i%len(allKinds)])...)
						}
						rb, err := quant.RowBytes(typ, cols)
						if err != nil {
							t.Fatal(err)
						}
						want := make([]byte, nRows*rb)
						for i := range nRows {
							if err := quant.QuantizeRow(typ, src[i*cols:(i+1)*cols], want[i*rb:(i+1)*rb]); err != nil {
								t.Fatal(err)
							}
						}
						const guard = 64
						buf := make([]byte, nRows*rb+guard)
						for i := range buf {
							buf[i] = 0xa5
						}
						k.QuantizeRows(typ, src, nRows, cols, buf[:nRows*rb])
						for i := range nRows {
							got, w := buf[i*rb:(i+1)*rb], want[i*rb:(i+1)*rb]
							if !bytes.Equal(got, w) {
								j := 0
								for got[j] == w[j] {
									j++
								}
								t.Fatalf("row %d (%s): first difference at byte %d: got %#x, want %#x", i, allKinds[i%len(allKinds)], j, got[j], w[j])
							}
						}
						for i, b := range buf[nRows*rb:] {
							if b != 0xa5 {
								t.Fatalf("guard byte %d after the output overwritten", i)
							}
						}
					})
				}
			}
		}
	}
}

// testMatrix is a random weight matrix and activation rows for one type.
type testMatrix struct {
	w        []byte // rows × rowBytes (rowBytes may exceed the row's bytes)
	rowBytes int
	a        []byte // nAct rows of the vec-dot type
	arb      int
	wf, af   [][]float32 // dequantized rows, for the tolerance's S
	of       [][]float32 // offset parts of the weights (codes zeroed)
}

// codeBytes gives, per weight type, the block size and the byte ranges
// holding quantization codes (not scales): zeroing them leaves each weight's
// offset part.
var codeBytes = map[quant.Type]struct{ size, from, to int }{
	quant.Q4_0: {18, 2, 18}, quant.Q4_1: {20, 4, 20}, quant.Q5_0: {22, 2, 22}, quant.Q5_1: {24, 4, 24},
	quant.Q8_0: {34, 2, 34}, quant.Q2_K: {84, 16, 80}, quant.Q3_K: {110, 0, 96}, quant.Q4_K: {144, 16, 144},
	quant.Q5_K: {176, 16, 176}, quant.Q6_K: {210, 0, 192},
}

// offsets returns the offset parts of a dequantized row (zero for floats).
func offsets(t *testing.T, typ quant.Type, row []byte, cols int) []float32 {
	t.Helper()
	of := make([]float32, cols)
	cb, ok := codeBytes[typ]
	if !ok {
		return of
	}
	z := append([]byte(nil), row...)
	for b := 0; b < len(z); b += cb.size {
		clear(z[b+cb.from : b+cb.to])
	}
	if err := quant.DequantizeRow(typ, z, of); err != nil {
		t.Fatal(err)
	}
	return of
}

func newTestMatrix(t *testing.T, r *rand.Rand, typ quant.Type, rows, cols, nAct, pad int) *testMatrix {
	t.Helper()
	wrb, err := quant.RowBytes(typ, cols)
	if err != nil {
		t.Fatal(err)
	}
	vt := quant.VecDotType(typ)
	arb, err := quant.RowBytes(vt, cols)
	if err != nil {
		t.Fatal(err)
	}
	m := &testMatrix{rowBytes: wrb + pad, arb: arb, w: make([]byte, rows*(wrb+pad)), a: make([]byte, nAct*arb)}
	weightKinds := []inputKind{normal, heavy, shifted, ties}
	for i := range rows {
		row := m.w[i*m.rowBytes : i*m.rowBytes+wrb]
		if err := quant.QuantizeRowRef(typ, randRow(r, cols, weightKinds[i%len(weightKinds)]), row); err != nil {
			t.Fatal(err)
		}
		for j := wrb; j < m.rowBytes; j++ {
			m.w[i*m.rowBytes+j] = 0xff // padding between rows must not be read as data
		}
		wf := make([]float32, cols)
		if err := quant.DequantizeRow(typ, row, wf); err != nil {
			t.Fatal(err)
		}
		m.wf = append(m.wf, wf)
		m.of = append(m.of, offsets(t, typ, row, cols))
	}
	actKinds := []inputKind{normal, heavy, shifted, ties, zeros}
	for i := range nAct {
		row := m.a[i*arb : (i+1)*arb]
		if err := quant.QuantizeRow(vt, randRow(r, cols, actKinds[i%len(actKinds)]), row); err != nil {
			t.Fatal(err)
		}
		af := make([]float32, cols)
		if err := quant.DequantizeRow(vt, row, af); err != nil {
			t.Fatal(err)
		}
		m.af = append(m.af, af)
	}
	return m
}

// guardBits marks output slots that must not be written (a NaN payload no
// kernel produces).
const guardBits = 0x7fa5a5a5

// outputChecker compares a kernel's outputs with quant's scalar dot.
type outputChecker struct {
	t              *testing.T
	typ            quant.Type
	tol            float64
	cols           int
	worst          float64 // largest |got-want|/S seen
	sumErr, sumRef float64
	n              int // outputs checked
}

func (c *outputChecker) check(m *testMatrix, row, act int, got float32) {
	t := c.t
	t.Helper()
	want := quant.DotFunc(c.typ)(c.cols, m.w[row*m.rowBytes:], m.a[act*m.arb:])
	var mag float64
	for i, w := range m.wf[row] {
		mag += (math.Abs(float64(w)) + math.Abs(float64(m.of[row][i]))) * math.Abs(float64(m.af[act][i]))
	}
	if math.IsNaN(float64(got)) || math.IsInf(float64(got), 0) {
		t.Fatalf("row %d act %d: got %v, want %v", row, act, got, want)
	}
	d := math.Abs(float64(got) - float64(want))
	if d > c.tol*mag {
		t.Fatalf("row %d act %d: got %v, want %v: |diff| %.3g > %.3g·S (S = %.3g)", row, act, got, want, d, c.tol, mag)
	}
	if mag > 0 {
		c.worst = max(c.worst, d/mag)
	}
	c.sumErr += d * d
	c.sumRef += float64(want) * float64(want)
	c.n++
}

func (c *outputChecker) done() {
	c.t.Helper()
	if c.n >= nmseMinOutputs && c.sumRef > 0 && c.sumErr/c.sumRef > maxNMSE {
		c.t.Errorf("NMSE %.3g > %.3g", c.sumErr/c.sumRef, maxNMSE)
	}
}

func TestDotRows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range testISAs(t) {
		for _, dt := range dotTypes {
			var worst float64
			for _, cols := range colsFor(dt.typ) {
				for _, rows := range []int{1, 5, 13, 64} {
					name := fmt.Sprintf("isa=%s/type=%s/cols=%d/rows=%d", k.ISA(), dt.typ, cols, rows)
					t.Run(name, func(t *testing.T) {
						m := newTestMatrix(t, r, dt.typ, rows, cols, 3, 0)
						c := &outputChecker{t: t, typ: dt.typ, tol: dt.tol, cols: cols}
						// every row range shape: whole, a tail, one row
						for _, rr := range [][2]int{{0, rows}, {rows / 3, rows}, {rows - 1, rows}, {rows / 2, rows / 2}} {
							for act := range 3 {
								out := make([]float32, rows+8)
								for i := range out {
									out[i] = math.Float32frombits(guardBits)
								}
								k.DotRows(dt.typ, m.w, m.rowBytes, cols, rr[0], rr[1], m.a[act*m.arb:(act+1)*m.arb], out[:rows])
								for i, v := range out {
									if i >= rr[0] && i < rr[1] {
										c.check(m, i, act, v)
									} else if math.Float32bits(v) != guardBits {
										t.Fatalf("rows [%d, %d): out[%d] written (%v)", rr[0], rr[1], i, v)
									}
								}
							}
						}
						c.done()
						worst = max(worst, c.worst)
					})
				}
			}
			t.Logf("isa=%s type=%s: worst |diff|/S = %.2g (tolerance %.0g)", k.ISA(), dt.typ, worst, dt.tol)
		}
	}
}

// TestGemmRows checks the prefill kernel against quant, with row counts
// that leave partial groups of 8 rows and partial tiles of activation rows.
// (Its results may differ from DotRows's in the last bits: for many
// activation rows it sums in another order, as llama.cpp's prefill does.)
func TestGemmRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range testISAs(t) {
		for _, dt := range dotTypes {
			cs := colsFor(dt.typ)
			colsList := []int{cs[0], cs[2], cs[len(cs)-1]}
			if k.ISA() == cpu.ISAScalarGo {
				colsList = cs[:1] // the scalar path is the reference loop itself
			}
			for _, cols := range colsList {
				for _, shape := range [][2]int{{1, 1}, {5, 2}, {13, 4}, {64, 5}, {64, 11}, {13, 8}, {37, 9}, {64, 21}, {64, 37}} {
					rows, nAct := shape[0], shape[1]
					name := fmt.Sprintf("isa=%s/type=%s/cols=%d/rows=%d/acts=%d", k.ISA(), dt.typ, cols, rows, nAct)
					t.Run(name, func(t *testing.T) {
						m := newTestMatrix(t, r, dt.typ, rows, cols, nAct, 3)
						c := &outputChecker{t: t, typ: dt.typ, tol: dt.tol, cols: cols}
						stride := rows + 3
						r0, r1 := rows/4, rows
						out := make([]float32, nAct*stride)
						for i := range out {
							out[i] = math.Float32frombits(guardBits)
						}
						k.GemmRows(dt.typ, m.w, m.rowBytes, cols, r0, r1, m.a, nAct, out, stride)
						for act := range nAct {
							for i := range stride {
								v := out[act*stride+i]
								if i < r0 || i >= r1 {
									if math.Float32bits(v) != guardBits {
										t.Fatalf("act %d: out[%d] outside rows [%d, %d) written (%v)", act, i, r0, r1, v)
									}
									continue
								}
								c.check(m, i, act, v)
							}
						}
						c.done()
					})
				}
			}
		}
	}
}

// TestKernelPanics checks that shape errors are refused before any C code
// runs, with a message naming the problem.
func TestKernelPanics(t *testing.T) {
	w := make([]byte, 4*144)
	a := make([]byte, 292)
	out := make([]float32, 4)
	x := make([]float32, 256)
	cases := []struct {
		name, want string
		f          func(k *cpu.Kernels)
	}{
		{"short weights", "need", func(k *cpu.Kernels) { k.DotRows(quant.Q4_K, w[:3*144], 144, 256, 0, 4, a, out) }},
		{"short activations", "activation", func(k *cpu.Kernels) { k.DotRows(quant.Q4_K, w, 144, 256, 0, 4, a[:291], out) }},
		{"short output", "output", func(k *cpu.Kernels) { k.DotRows(quant.Q4_K, w, 144, 256, 0, 4, a, out[:3]) }},
		{"small stride", "stride", func(k *cpu.Kernels) { k.DotRows(quant.Q4_K, w, 100, 256, 0, 4, a, out) }},
		{"bad range", "range", func(k *cpu.Kernels) { k.DotRows(quant.Q4_K, w, 144, 256, 3, 2, a, out) }},
		{"partial block", "whole number", func(k *cpu.Kernels) { k.DotRows(quant.Q4_K, w, 144, 200, 0, 4, a, out) }},
		{"unsupported", "not supported", func(k *cpu.Kernels) { k.DotRows(quant.IQ4_NL, w, 144, 256, 0, 4, a, out) }},
		{"gemm stride", "stride", func(k *cpu.Kernels) {
			k.GemmRows(quant.Q4_K, w, 144, 256, 0, 4, make([]byte, 2*292), 2, make([]float32, 8), 3)
		}},
		{"quantize short dst", "need", func(k *cpu.Kernels) { k.QuantizeRows(quant.Q8_K, x, 1, 256, a[:291]) }},
		{"quantize short src", "need", func(k *cpu.Kernels) { k.QuantizeRows(quant.Q8_0, x, 2, 256, make([]byte, 1000)) }},
	}
	for _, k := range testISAs(t) {
		for _, c := range cases {
			t.Run(fmt.Sprintf("isa=%s/%s", k.ISA(), c.name), func(t *testing.T) {
				defer func() {
					p := recover()
					if p == nil {
						t.Fatal("no panic")
					}
					if s := fmt.Sprint(p); !strings.Contains(s, c.want) {
						t.Fatalf("panic %q does not mention %q", s, c.want)
					}
				}()
				c.f(k)
			})
		}
	}
}

func TestISAs(t *testing.T) {
	av := cpu.Available()
	if av[len(av)-1] != cpu.ISAScalarGo {
		t.Fatalf("Available() = %v: scalar Go must be last", av)
	}
	if got := cpu.Best().ISA(); got != av[0] {
		t.Errorf("Best() = %s, want %s", got, av[0])
	}
	for _, isa := range []cpu.ISA{cpu.ISAScalarGo, cpu.ISAAVX2, cpu.ISAAVX512} {
		p, err := cpu.ParseISA(isa.String())
		if err != nil || p != isa {
			t.Errorf("ParseISA(%q) = %v, %v", isa.String(), p, err)
		}
		k := cpu.KernelsFor(isa)
		has := false
		for _, a := range av {
			has = has || a == isa
		}
		if (k != nil) != has {
			t.Errorf("KernelsFor(%s) = %v, available %v", isa, k, av)
		}
	}
	if _, err := cpu.ParseISA("avx9000"); err == nil {
		t.Error("ParseISA accepted an unknown name")
	}
	t.Logf("available: %v", av)
}

// TestKernelsNoAlloc checks that the kernels allocate nothing in Go (the
// decode step must not): prefill's scratch lives in C.
func TestKernelsNoAlloc(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	const rows, cols, nAct = 69, 512, 9 // packed: a tail of 5 rows
	for _, k := range testISAs(t) {
		for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.F32} {
			t.Run(fmt.Sprintf("isa=%s/type=%s", k.ISA(), typ), func(t *testing.T) {
				m := newTestMatrix(t, r, typ, rows, cols, nAct, 0)
				x := randRow(r, nAct*cols, normal)
				out := make([]float32, nAct*rows)
				vt := quant.VecDotType(typ)
				fs := map[string]func(){
					"QuantizeRows": func() { k.QuantizeRows(vt, x, nAct, cols, m.a) },
					"DotRows":      func() { k.DotRows(typ, m.w, m.rowBytes, cols, 0, rows, m.a, out) },
					"GemmRows":     func() { k.GemmRows(typ, m.w, m.rowBytes, cols, 0, rows, m.a, nAct, out, rows) },
				}
				if k.CanPack(typ, rows, cols) {
					p, err := k.Pack(typ, m.w, m.rowBytes, rows, cols)
					if err != nil {
						t.Fatal(err)
					}
					fs["DotRowsPacked"] = func() { k.DotRowsPacked(p, 0, rows, m.a, out) }
					fs["GemmRowsPacked"] = func() { k.GemmRowsPacked(p, 0, rows, m.a, nAct, out, rows) }
				}
				for name, f := range fs {
					if n := testing.AllocsPerRun(10, f); n != 0 {
						t.Errorf("%s: %v allocations per call", name, n)
					}
				}
			})
		}
	}
}

// TestAddWeighted checks the weighted row sum of every path against a
// float64 sum, with guard values after the output rows.
func TestAddWeighted(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, k := range testISAs(t) {
		for _, nOut := range []int{1, 3, 4, 5, 8} {
			for _, dim := range []int{1, 7, 16, 64, 100, 128} {
				for _, n := range []int{1, 5, 130} {
					ws, vs := n+3, dim+5
					w := make([]float32, nOut*ws)
					v := make([]float32, n*vs)
					for i := range w {
						w[i] = r.Float32()
					}
					for i := range v {
						v[i] = float32(r.NormFloat64())
					}
					out := make([]float32, nOut*dim+8)
					for i := range out {
						out[i] = float32(r.NormFloat64())
						if i >= nOut*dim {
							out[i] = math.Float32frombits(guardBits)
						}
					}
					want := make([]float64, nOut*dim)
					mag := make([]float64, nOut*dim) // sum of |terms|: the error scale
					for g := range nOut {
						for c := range dim {
							s, m := float64(out[g*dim+c]), math.Abs(float64(out[g*dim+c]))
							for j := range n {
								p := float64(w[g*ws+j]) * float64(v[j*vs+c])
								s, m = s+p, m+math.Abs(p)
							}
							want[g*dim+c], mag[g*dim+c] = s, m
						}
					}
					k.AddWeighted(out, nOut, dim, w, ws, v, vs, n)
					for i, x := range out {
						if i >= nOut*dim {
							if math.Float32bits(x) != guardBits {
								t.Fatalf("%s nOut=%d dim=%d n=%d: guard out[%d] written", k.ISA(), nOut, dim, n, i)
							}
							continue
						}
						// float32 accumulation of n+1 terms: n ulps of the magnitude
						if d := math.Abs(float64(x) - want[i]); d > float64(n+1)*0x1p-24*mag[i] {
							t.Fatalf("%s nOut=%d dim=%d n=%d: out[%d] = %v, want %v (|terms| %v)", k.ISA(), nOut, dim, n, i, x, want[i], mag[i])
						}
					}
				}
			}
		}
	}
}

// TestDequantRows: every path converts strided rows of each KV block and
// float type bit for bit as quant's Go dequantizers do, for odd row counts
// and head widths, without writing past the rows it was given.
func TestDequantRows(t *testing.T) {
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, wt := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0} {
			for _, cols := range []int{32, 64, 96, 128} {
				rb, _ := quant.RowBytes(wt, cols)
				const rows = 7
				stride := rb + 3*rb/2 // several heads per row: skip the others
				src := make([]byte, (rows-1)*stride+rb)
				for r := range rows {
					if err := quant.QuantizeRow(wt, randomF32(cols, uint64(r+cols)), src[r*stride:][:rb]); err != nil {
						t.Fatal(err)
					}
				}
				dstride := cols + 5
				got := make([]float32, rows*dstride)
				for i := range got {
					got[i] = -7
				}
				k.DequantRows(wt, src, stride, rows, cols, got, dstride)
				want := make([]float32, cols)
				for r := range rows {
					if err := quant.DequantizeRow(wt, src[r*stride:][:rb], want); err != nil {
						t.Fatal(err)
					}
					for i := range dstride {
						g := got[r*dstride+i]
						if i >= cols {
							if g != -7 {
								t.Fatalf("%s %s cols=%d: row %d wrote past its end", isa, wt, cols, r)
							}
							continue
						}
						if math.Float32bits(g) != math.Float32bits(want[i]) {
							t.Fatalf("%s %s cols=%d: row %d [%d] = %v, want %v", isa, wt, cols, r, i, g, want[i])
						}
					}
				}
			}
		}
	}
}

// TestTurboDecode: every path decodes TurboQuant rows into the rotated
// domain bit for bit as quant.Turbo.DecodeRotated does.
func TestTurboDecode(t *testing.T) {
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, bits := range []int{2, 3, 4} {
			for _, dim := range []int{8, 40, 64, 128} {
				tq, err := quant.NewTurbo(dim, bits, uint64(dim*bits))
				if err != nil {
					t.Fatal(err)
				}
				n, rb := tq.Padded(), tq.RowBytes()
				const rows = 5
				stride := 2*rb + 1
				src := make([]byte, (rows-1)*stride+rb)
				scratch := make([]float32, n)
				for r := range rows {
					if err := tq.Encode(src[r*stride:][:rb], randomF32(dim, uint64(r)), scratch); err != nil {
						t.Fatal(err)
					}
				}
				got := make([]float32, rows*(n+3))
				k.TurboDecode(tq, src, stride, rows, got, n+3)
				want := make([]float32, n)
				for r := range rows {
					tq.DecodeRotated(want, src[r*stride:][:rb])
					for i := range n {
						if math.Float32bits(got[r*(n+3)+i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %d bits dim %d: row %d [%d] = %v, want %v", isa, bits, dim, r, i, got[r*(n+3)+i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestSoftmax: every path's softmax is the Go loop's (in-order float64
// sum) to a relative 1e-6 per weight (the SIMD paths sum in 16 lanes),
// for odd and aligned lengths, with scores spanning the exp's range.
func TestSoftmax(t *testing.T) {
	goK := cpu.KernelsFor(cpu.ISAScalarGo)
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, n := range []int{1, 7, 8, 9, 63, 300, 8192} {
			x := randomF32(n, uint64(n))
			for i := range x {
				x[i] *= 40 // some weights underflow to 0
			}
			want, got := slices.Clone(x), slices.Clone(x)
			goK.Softmax(want, 0.7)
			k.Softmax(got, 0.7)
			var sum float64
			for i := range got {
				sum += float64(got[i])
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*math.Abs(float64(want[i]))+1e-30 {
					t.Fatalf("%s n=%d: [%d] = %v, want %v", isa, n, i, got[i], want[i])
				}
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Errorf("%s n=%d: weights sum to %v", isa, n, sum)
			}
		}
	}
}

// attnRowsCase is a run of cached rows for TestAttnScoresSum: n rows of
// dim values of type wt (or TurboQuant codes, tq non-nil) at stride, and
// their float32 values as the cache's readers see them.
type attnRowsCase struct {
	name   string
	wt     quant.Type
	tq     *quant.Turbo
	src    []byte
	stride int
	dim    int
	x      [][]float32
}

func attnRowsCases(t *testing.T, n int) []attnRowsCase {
	t.Helper()
	var cs []attnRowsCase
	for _, wt := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0} {
		for _, dim := range []int{20, 32, 64, 96, 128, 256, 544} { // 544: wider than the C paths and the Go stack buffer take
			if dim%wt.BlockSize() != 0 {
				continue
			}
			rb, _ := quant.RowBytes(wt, dim)
			c := attnRowsCase{name: fmt.Sprintf("%s/dim=%d", wt, dim), wt: wt, stride: rb + 3*rb/2, dim: dim}
			c.src = make([]byte, (n-1)*c.stride+rb)
			for j := range n {
				row := c.src[j*c.stride:][:rb]
				if err := quant.QuantizeRow(wt, randomF32(dim, uint64(j*dim+7)), row); err != nil {
					t.Fatal(err)
				}
				x := make([]float32, dim)
				if err := quant.DequantizeRow(wt, row, x); err != nil {
					t.Fatal(err)
				}
				c.x = append(c.x, x)
			}
			cs = append(cs, c)
		}
	}
	for _, bits := range []int{2, 3, 4} {
		for _, dim := range []int{8, 40, 64, 128} {
			tq, err := quant.NewTurbo(dim, bits, uint64(dim*bits))
			if err != nil {
				t.Fatal(err)
			}
			rb := tq.RowBytes()
			c := attnRowsCase{name: fmt.Sprintf("tq%d/dim=%d", bits, dim), tq: tq, stride: 2*rb + 1, dim: tq.Padded()}
			c.src = make([]byte, (n-1)*c.stride+rb)
			scratch := make([]float32, tq.Padded())
			for j := range n {
				row := c.src[j*c.stride:][:rb]
				if err := tq.Encode(row, randomF32(dim, uint64(j+dim)), scratch); err != nil {
					t.Fatal(err)
				}
				x := make([]float32, tq.Padded())
				tq.DecodeRotated(x, row)
				c.x = append(c.x, x)
			}
			cs = append(cs, c)
		}
	}
	return cs
}

// TestAttnScoresSum: AttnScores and AttnSum on every path against float64
// sums of the rows as DequantRows and TurboDecode widen them, for every KV
// type, widths that are and are not multiples of the SIMD width, run
// lengths across the kernels' tiles and group sizes of GQA models. The
// bound is float32 rounding of the sums: 2e-6 of Σ|q_d·x_d| (scores) and
// of Σ|w_j·x_j[d]| (sums); nothing outside the outputs is written.
func TestAttnScoresSum(t *testing.T) {
	const nMax = 77
	cases := attnRowsCases(t, nMax)
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, c := range cases {
			for _, n := range []int{1, 7, 8, 31, 33, nMax} {
				for _, G := range []int{1, 3, 4, 5, 8} {
					q := randomF32(G*c.dim, uint64(n*G))
					ls := n + 3
					s := make([]float32, G*ls)
					for i := range s {
						s[i] = -7
					}
					k.AttnScores(c.wt, c.tq, c.src, c.stride, n, c.dim, q, G, s, ls)
					w := randomF32(G*ls, uint64(n+G))
					acc := randomF32(G*c.dim, 5)
					want := make([]float64, G*c.dim)
					bound := make([]float64, G*c.dim)
					for i, v := range acc {
						want[i], bound[i] = float64(v), math.Abs(float64(v))
					}
					k.AttnSum(c.wt, c.tq, c.src, c.stride, n, c.dim, w, ls, G, acc)
					for g := range G {
						for j := range ls {
							got := s[g*ls+j]
							if j >= n {
								if got != -7 {
									t.Fatalf("%s %s n=%d G=%d: score [%d][%d] written past the rows", isa, c.name, n, G, g, j)
								}
								continue
							}
							var sum, abs float64
							for d, v := range c.x[j] {
								p := float64(q[g*c.dim+d]) * float64(v)
								sum, abs = sum+p, abs+math.Abs(p)
							}
							if math.Abs(float64(got)-sum) > 2e-6*abs+1e-30 {
								t.Fatalf("%s %s n=%d G=%d: score [%d][%d] = %v, want %v (Σ|·| %v)", isa, c.name, n, G, g, j, got, sum, abs)
							}
							for d, v := range c.x[j] {
								p := float64(w[g*ls+j]) * float64(v)
								want[g*c.dim+d] += p
								bound[g*c.dim+d] += math.Abs(p)
							}
						}
					}
					for i, v := range acc {
						if math.Abs(float64(v)-want[i]) > 2e-6*bound[i]+1e-30 {
							t.Fatalf("%s %s n=%d G=%d: sum [%d] = %v, want %v (Σ|·| %v)", isa, c.name, n, G, i, v, want[i], bound[i])
						}
					}
				}
			}
		}
	}
}

// TestAttnSumPathsAgree: the AVX-512 V sums run in AVX2's order, so the
// two paths give the same bits (kern.h says so).
func TestAttnSumPathsAgree(t *testing.T) {
	avail := cpu.Available()
	if !slices.Contains(avail, cpu.ISAAVX512) || !slices.Contains(avail, cpu.ISAAVX2) {
		t.Skipf("needs the AVX-512 and AVX2 paths (have %v; go test -tags fi_simde emulates AVX-512)", avail)
	}
	const n, G = 77, 5
	for _, c := range attnRowsCases(t, n) {
		if c.dim%16 != 0 {
			continue
		}
		w := randomF32(G*n, 9)
		var got [2][]float32
		for i, isa := range []cpu.ISA{cpu.ISAAVX2, cpu.ISAAVX512} {
			got[i] = randomF32(G*c.dim, 5)
			cpu.KernelsFor(isa).AttnSum(c.wt, c.tq, c.src, c.stride, n, c.dim, w, n, G, got[i])
		}
		for i := range got[0] {
			if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
				t.Fatalf("%s: sum [%d]: avx2 %v, avx512 %v", c.name, i, got[0][i], got[1][i])
			}
		}
	}
}

// TestAttnScoresTiles: AttnScoresTiles on every path against float64
// sums of the rows (attnRowsCases), the rows stored in transposed tiles
// from a row within the first tile; nothing outside the scores written.
// Float32 kinds: the bound of TestAttnScoresSum (2e-6 of Σ|q_d·x_d|).
// The integer kinds (q4_0, 4-bit TurboQuant: kern_qint.go) give
// the Go path's scores bit for bit on every path, and those are within
// the same bound plus what the query's rounding to int16 makes of the
// sum: half a step qs = max|q|/32767 per value, qs/2·Σ|x_d|.
func TestAttnScoresTiles(t *testing.T) {
	const nMax = 77
	cases := attnRowsCases(t, nMax+quant.TileRows)
	goK := cpu.KernelsFor(cpu.ISAScalarGo)
	for _, c := range cases {
		rb, u := 0, 1
		if c.tq != nil {
			rb = c.tq.RowBytes()
		} else {
			rb, _ = quant.RowBytes(c.wt, c.dim)
			u = quant.TileUnit(c.wt)
		}
		integer := c.tq != nil && c.tq.Bits() == 4 || c.tq == nil && c.wt == quant.Q4_0
		src := make([]byte, (nMax+2*quant.TileRows)/quant.TileRows*quant.TileRows*rb)
		for j := range nMax + quant.TileRows {
			quant.PutTileRow(src[j/quant.TileRows*quant.TileRows*rb:], j%quant.TileRows, u, c.src[j*c.stride:][:rb])
		}
		for _, r0 := range []int{0, 5, 15} {
			for _, n := range []int{1, 7, 11, 16, 33, nMax} {
				for _, G := range []int{1, 3, 4, 5, 8} {
					q := randomF32(G*c.dim, uint64(n*G+r0))
					ls := n + 3
					ref := make([]float32, G*ls)
					goK.AttnScoresTiles(c.wt, c.tq, src, u, r0, n, c.dim, q, G, ref, ls)
					for _, isa := range cpu.Available() {
						s := make([]float32, G*ls)
						for i := range s {
							s[i] = -7
						}
						cpu.KernelsFor(isa).AttnScoresTiles(c.wt, c.tq, src, u, r0, n, c.dim, q, G, s, ls)
						for g := range G {
							var m float64 // max|q|
							for _, v := range q[g*c.dim : (g+1)*c.dim] {
								m = max(m, math.Abs(float64(v)))
							}
							qs := m / 32767
							for j := range ls {
								got := s[g*ls+j]
								if j >= n {
									if got != -7 {
										t.Fatalf("%s %s r0=%d n=%d G=%d: score [%d][%d] written past the rows", isa, c.name, r0, n, G, g, j)
									}
									continue
								}
								if integer && math.Float32bits(got) != math.Float32bits(ref[g*ls+j]) {
									var ex float64
									for d, v := range c.x[r0+j] {
										ex += float64(q[g*c.dim+d]) * float64(v)
									}
									t.Fatalf("%s %s r0=%d n=%d G=%d: score [%d][%d] = %v, Go's %v exact %v", isa, c.name, r0, n, G, g, j, got, ref[g*ls+j], ex)
								}
								var sum, abs, xabs float64
								for d, v := range c.x[r0+j] {
									p := float64(q[g*c.dim+d]) * float64(v)
									sum, abs, xabs = sum+p, abs+math.Abs(p), xabs+math.Abs(float64(v))
								}
								bound := 2e-6*abs + 1e-30
								if integer {
									bound += 1.001 * qs / 2 * xabs
								}
								if !(math.Abs(float64(got)-sum) <= bound) { // NaN fails
									t.Fatalf("%s %s r0=%d n=%d G=%d: score [%d][%d] = %v, want %v ± %v (Σ|·| %v)", isa, c.name, r0, n, G, g, j, got, sum, bound, abs)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestUntile: Untile on every path gives back the rows PutTileRow stored,
// from any row of the first tile, for every unit; nothing past them is
// written.
func TestUntile(t *testing.T) {
	const rows = 50
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		for _, u := range []int{1, 2, 4} {
			rb := 12 * u
			want := make([]byte, rows*rb)
			for i := range want {
				want[i] = byte(i*7 + i/rb)
			}
			tiles := make([]byte, (rows+quant.TileRows-1)/quant.TileRows*quant.TileRows*rb)
			for r := range rows {
				quant.PutTileRow(tiles[r/quant.TileRows*quant.TileRows*rb:], r%quant.TileRows, u, want[r*rb:(r+1)*rb])
			}
			for _, r0 := range []int{0, 3, 15} {
				for _, n := range []int{1, 13, 16, 17, rows - 15} {
					got := make([]byte, (n+1)*rb)
					for i := range got {
						got[i] = 0xee
					}
					k.Untile(tiles, rb, u, r0, n, got)
					if !bytes.Equal(got[:n*rb], want[r0*rb:(r0+n)*rb]) {
						t.Fatalf("%s u=%d r0=%d n=%d: rows differ", isa, u, r0, n)
					}
					for _, b := range got[n*rb:] {
						if b != 0xee {
							t.Fatalf("%s u=%d r0=%d n=%d: written past the rows", isa, u, r0, n)
						}
					}
				}
			}
		}
	}
}

// TestAttnScoresTilesFloatHeads: a call whose queries include a head the
// integer kinds cannot round (all zeros, a NaN, or largest |value| below
// 2^-64) is scored in float32 on every path, as AttnScores scores it: the
// zero head's scores are 0, the NaN head's NaN, and a tiny head's within
// float32 rounding (2e-6 of Σ|q_d·x_d|, which the int16 rounding of the
// query does not meet).
func TestAttnScoresTilesFloatHeads(t *testing.T) {
	const n = 40
	for _, c := range attnRowsCases(t, n) {
		if !(c.tq != nil && c.tq.Bits() == 4 || c.tq == nil && c.wt == quant.Q4_0) || c.dim != 64 {
			continue
		}
		rb, u := 0, 1
		if c.tq != nil {
			rb = c.tq.RowBytes()
		} else {
			rb, _ = quant.RowBytes(c.wt, c.dim)
		}
		src := make([]byte, (n+quant.TileRows-1)/quant.TileRows*quant.TileRows*rb)
		for j := range n {
			quant.PutTileRow(src[j/quant.TileRows*quant.TileRows*rb:], j%quant.TileRows, u, c.src[j*c.stride:][:rb])
		}
		for _, odd := range []string{"zero", "nan", "tiny"} {
			q := randomF32(2*c.dim, 3)
			h := q[c.dim:]
			for d := range h {
				switch odd {
				case "zero":
					h[d] = 0
				case "nan":
					if d == 9 {
						h[d] = float32(math.NaN())
					}
				case "tiny":
					h[d] *= 0x1p-70
					q[d] *= 0x1p-70
				}
			}
			for _, isa := range cpu.Available() {
				s := make([]float32, 2*n)
				cpu.KernelsFor(isa).AttnScoresTiles(c.wt, c.tq, src, u, 0, n, c.dim, q, 2, s, n)
				for g := range 2 {
					for j := range n {
						got := s[g*n+j]
						var sum, abs float64
						for d, v := range c.x[j] {
							p := float64(q[g*c.dim+d]) * float64(v)
							sum, abs = sum+p, abs+math.Abs(p)
						}
						switch {
						case g == 1 && odd == "zero":
							if got != 0 {
								t.Fatalf("%s %s %s: score [%d][%d] = %v, want 0", isa, c.name, odd, g, j, got)
							}
						case g == 1 && odd == "nan":
							if got == got {
								t.Fatalf("%s %s %s: score [%d][%d] = %v, want NaN", isa, c.name, odd, g, j, got)
							}
						case !(math.Abs(float64(got)-sum) <= 2e-6*abs+1e-60):
							t.Fatalf("%s %s %s: score [%d][%d] = %v, want %v (Σ|·| %v)", isa, c.name, odd, g, j, got, sum, abs)
						}
					}
				}
			}
		}
	}
}

// repackedTypes are the types GemmRows repacks on the fly for
// cpu.RepackMinActs activation rows or more (kern_avx2_rp.c, on every SIMD
// ISA): each block's exact integer sum is then scaled and added in another
// float order than the dot kernels', so those rows may differ from their
// products alone in the last bits. The Backend multiplies by packed copies
// (their products are batch invariant, TestMatMulBatchInvariant); only
// unpacked matrices of these types meet the repacking GEMM.
var repackedTypes = map[quant.Type]bool{quant.Q4_0: true, quant.Q4_K: true, quant.Q6_K: true, quant.Q8_0: true}

// TestGemmRowsBatchInvariant: a weight row times an activation row gives
// the same bits whatever the other rows of the call (the number of
// activation rows, the weight row range), so a sequence decodes the same
// tokens batched with others as alone (stages' TestParallelKVRecent);
// repackedTypes are held to it below cpu.RepackMinActs rows.
func TestGemmRowsBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, k := range testISAs(t) {
		for _, dt := range dotTypes {
			cs := colsFor(dt.typ)
			for _, cols := range []int{cs[0], cs[1], cs[len(cs)-1]} {
				const rows, nAct = 13, 37
				name := fmt.Sprintf("isa=%s/type=%s/cols=%d", k.ISA(), dt.typ, cols)
				t.Run(name, func(t *testing.T) {
					m := newTestMatrix(t, r, dt.typ, rows, cols, nAct, 3)
					// alone: one weight row by one activation row
					solo := make([]float32, rows*nAct)
					for a := range nAct {
						for i := range rows {
							k.DotRows(dt.typ, m.w, m.rowBytes, cols, i, i+1, m.a[a*m.arb:(a+1)*m.arb], solo[a*rows:(a+1)*rows])
						}
					}
					for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 37} {
						if n >= cpu.RepackMinActs && repackedTypes[dt.typ] && k.ISA() != cpu.ISAScalarGo {
							continue
						}
						for _, rr := range [][2]int{{0, rows}, {1, rows}, {5, 8}} {
							out := make([]float32, n*rows)
							k.GemmRows(dt.typ, m.w, m.rowBytes, cols, rr[0], rr[1], m.a, n, out, rows)
							for a := range n {
								for i := rr[0]; i < rr[1]; i++ {
									if g, w := math.Float32bits(out[a*rows+i]), math.Float32bits(solo[a*rows+i]); g != w {
										t.Fatalf("%d activation rows, weight rows [%d, %d): row %d by activation %d: %#x (%g), alone %#x (%g)",
											n, rr[0], rr[1], i, a, g, out[a*rows+i], w, solo[a*rows+i])
									}
								}
							}
						}
					}
				})
			}
		}
	}
}
