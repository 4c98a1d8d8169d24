package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

// TestPacked checks products on packed weights against quant, like
// TestGemmRows, for every type a path can pack, on whole row ranges and
// parts, with row counts that leave a tail (rows past the last multiple
// of PackRows, kept in the file's layout) or are all tail.
func TestPacked(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	packed := 0
	for _, k := range testISAs(t) {
		for _, dt := range dotTypes {
			// 70 super-blocks: longer than the activation a Q6_K product
			// reorders at a time (64)
			for _, cols := range append(colsFor(dt.typ), 70*256) {
				for _, shape := range [][2]int{{8, 1}, {16, 3}, {64, 1}, {64, 8}, {40, 13}, {64, 37}, {5, 1}, {5, 9}, {21, 1}, {45, 13}} {
					rows, nAct := shape[0], shape[1]
					if !k.CanPack(dt.typ, rows, cols) {
						continue
					}
					packed++
					name := fmt.Sprintf("isa=%s/type=%s/cols=%d/rows=%d/acts=%d", k.ISA(), dt.typ, cols, rows, nAct)
					t.Run(name, func(t *testing.T) {
						m := newTestMatrix(t, r, dt.typ, rows, cols, nAct, 5)
						p, err := k.Pack(dt.typ, m.w, m.rowBytes, rows, cols)
						if err != nil {
							t.Fatal(err)
						}
						if p.Rows() != rows || p.Cols() != cols || p.Type() != dt.typ || p.Bytes() != k.PackedSize(dt.typ, rows, cols) {
							t.Fatalf("packed %d×%d %s (%d bytes, PackedSize %d)", p.Rows(), p.Cols(), p.Type(), p.Bytes(), k.PackedSize(dt.typ, rows, cols))
						}
						// PackInto gives the same products and writes no byte past
						// PackedSize
						buf := make([]byte, p.Bytes()+64)
						for i := range buf {
							buf[i] = 0xa5
						}
						pi, err := k.PackInto(buf, dt.typ, m.w, m.rowBytes, rows, cols)
						if err != nil {
							t.Fatal(err)
						}
						for i, b := range buf[p.Bytes():] {
							if b != 0xa5 {
								t.Fatalf("PackInto wrote byte %d past its %d", i, p.Bytes())
							}
						}
						o1, o2 := make([]float32, nAct*rows), make([]float32, nAct*rows)
						k.GemmRowsPacked(p, 0, rows, m.a, nAct, o1, rows)
						k.GemmRowsPacked(pi, 0, rows, m.a, nAct, o2, rows)
						for i := range o1 {
							if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
								t.Fatalf("output %d: Pack %v, PackInto %v", i, o1[i], o2[i])
							}
						}
						c := &outputChecker{t: t, typ: dt.typ, tol: dt.tol, cols: cols}
						stride := rows + 3
						ranges := [][2]int{{0, rows}}
						if rows >= 16 {
							ranges = append(ranges, [2]int{8, rows}, [2]int{0, 8})
						}
						if body := rows / cpu.PackRows * cpu.PackRows; body > 0 && body < rows {
							ranges = append(ranges, [2]int{body, rows}, [2]int{0, body})
						}
						for _, rr := range ranges {
							out := make([]float32, nAct*stride)
							for i := range out {
								out[i] = math.Float32frombits(guardBits)
							}
							if nAct == 1 {
								k.DotRowsPacked(p, rr[0], rr[1], m.a, out[:stride])
							} else {
								k.GemmRowsPacked(p, rr[0], rr[1], m.a, nAct, out, stride)
							}
							for act := range nAct {
								for i := range stride {
									v := out[act*stride+i]
									if i < rr[0] || i >= rr[1] {
										if math.Float32bits(v) != guardBits {
											t.Fatalf("rows [%d, %d) act %d: out[%d] written (%v)", rr[0], rr[1], act, i, v)
										}
										continue
									}
									c.check(m, i, act, v)
								}
							}
						}
						c.done()
					})
				}
			}
		}
	}
	if packed == 0 {
		t.Log("no path here packs weights")
	}
}

func TestPackErrors(t *testing.T) {
	w := make([]byte, 16*144)
	for _, k := range testISAs(t) {
		t.Run("isa="+k.ISA().String(), func(t *testing.T) {
			if k.ISA() == cpu.ISAScalarGo {
				if k.CanPack(quant.Q4_K, 16, 256) {
					t.Fatal("scalar Go path claims to pack")
				}
				return
			}
			if !k.CanPack(quant.Q4_K, 16, 256) || !k.CanPack(quant.Q8_0, 16, 256) {
				t.Fatal("cannot pack Q4_K/Q8_0")
			}
			for _, c := range []struct {
				typ        quant.Type
				rows, cols int
			}{{quant.Q4_K, 16, 200}, {quant.Q4_1, 16, 256}, {quant.Q4_K, 0, 256}} {
				if k.CanPack(c.typ, c.rows, c.cols) {
					t.Errorf("CanPack(%s, %d, %d)", c.typ, c.rows, c.cols)
				}
				if _, err := k.Pack(c.typ, w, 144, c.rows, c.cols); err == nil {
					t.Errorf("Pack(%s, %d, %d) did not fail", c.typ, c.rows, c.cols)
				}
			}
			if _, err := k.Pack(quant.Q4_K, w[:15*144+100], 144, 16, 256); err == nil || !strings.Contains(err.Error(), "need") {
				t.Errorf("short weights: %v", err)
			}
			// badRanges: each range of a rows-row packed matrix panics
			badRanges := func(rows int, ranges [][2]int) {
				p, err := k.Pack(quant.Q4_K, w, 144, rows, 256)
				if err != nil {
					t.Fatal(err)
				}
				for _, rr := range ranges {
					func() {
						defer func() {
							if s := fmt.Sprint(recover()); !strings.Contains(s, "row range") {
								t.Errorf("%d rows [%d, %d): panic %q", rows, rr[0], rr[1], s)
							}
						}()
						k.DotRowsPacked(p, rr[0], rr[1], make([]byte, 292), make([]float32, 24))
					}()
				}
			}
			badRanges(16, [][2]int{{4, 16}, {0, 12}, {8, 24}})
			// 12 rows: 8 packed and a tail of 4 in the file's layout
			badRanges(12, [][2]int{{4, 12}, {0, 10}, {8, 16}})
			if want := k.PackedSize(quant.Q4_K, 8, 256) + 4*144; k.PackedSize(quant.Q4_K, 12, 256) != want {
				t.Errorf("12 rows: PackedSize %d, want %d", k.PackedSize(quant.Q4_K, 12, 256), want)
			}
		})
	}
}

// TestPackedPathsAgree: the SIMD paths' packed products compute the same
// integer sums and the same float operations in the same order, so they
// must agree bit for bit (AVX-512 against AVX2 here; under the fi_simde
// tag on a machine without AVX-512).
// Rows of 257 super-blocks (2056 blocks of 32) take the matrix-vector
// kernels past the activation prep they hold at a time (kern_avx2_iqpk.c:
// 512 blocks of |y|; kern_avx512_iq.c: 2048 block sums, 256 super-blocks).
func TestPackedPathsAgree(t *testing.T) {
	var ks []*cpu.Kernels
	for _, isa := range cpu.Available() {
		if isa != cpu.ISAScalarGo {
			ks = append(ks, cpu.KernelsFor(isa))
		}
	}
	if len(ks) < 2 {
		t.Skipf("one SIMD path here (%v); go test -tags fi_simde runs AVX-512 under emulation", cpu.Available())
	}
	r := rand.New(rand.NewPCG(15, 16))
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.IQ4_NL, quant.IQ4_XS, quant.MXFP4} {
		for _, shape := range [][3]int{{24, 512, 1}, {40, 70 * 256, 1}, {40, 2048, 3}, {56, 1024, 9}, {16, 256, 40}, {24, 257 * 256, 1}, {8, 257 * 256, 5}} {
			rows, cols, nAct := shape[0], shape[1], shape[2]
			t.Run(fmt.Sprintf("type=%s/rows=%d/cols=%d/acts=%d", typ, rows, cols, nAct), func(t *testing.T) {
				m := newTestMatrix(t, r, typ, rows, cols, nAct, 0)
				var want []float32
				for i, k := range ks {
					p, err := k.Pack(typ, m.w, m.rowBytes, rows, cols)
					if err != nil {
						t.Fatal(err)
					}
					out := make([]float32, nAct*rows)
					k.GemmRowsPacked(p, 8, rows, m.a, nAct, out, rows)
					k.GemmRowsPacked(p, 0, 8, m.a, nAct, out, rows)
					if i == 0 {
						want = out
						continue
					}
					for j := range out {
						if math.Float32bits(out[j]) != math.Float32bits(want[j]) {
							t.Fatalf("%s: act %d row %d: %v, %s gives %v", k.ISA(), j/rows, j%rows, out[j], ks[0].ISA(), want[j])
						}
					}
				}
			})
		}
	}
}
