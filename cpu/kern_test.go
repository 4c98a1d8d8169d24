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
	// the 4-bit table types (kern_iq_test.go states their bound): measured
	// worst on AVX2 2.5e-7 (IQ4_XS), 1.9e-7 (IQ4_NL), 1.7e-7 (MXFP4)
	{quant.IQ4_NL, 1e-6}, {quant.IQ4_XS, 1e-6}, {quant.MXFP4, 1e-6},
	{quant.IQ3_XXS, 1e-6}, {quant.IQ3_S, 1e-6}, {quant.IQ2_XXS, 1e-6}, {quant.IQ2_XS, 1e-6},
	{quant.IQ2_S, 1e-6}, {quant.IQ1_S, 1e-6}, {quant.IQ1_M, 1e-6},
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
		{"unsupported", "not supported", func(k *cpu.Kernels) { k.DotRows(quant.TQ1_0, w, 144, 256, 0, 4, a, out) }},
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
		for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.F32, quant.IQ4_NL, quant.IQ4_XS, quant.MXFP4, quant.IQ2_XXS, quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XS, quant.IQ2_S, quant.IQ1_S, quant.IQ1_M} {
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
