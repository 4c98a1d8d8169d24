package cpu_test

// Tests of the kernels on the KV cache's rows (kern_attn.go) on every ISA
// path this machine runs: widening (DequantRows, TurboDecode) and
// untransposing (Untile) bit for bit, attention's scores (AttnScores,
// AttnScoresTiles, whose integer kinds are kern_qint.go's) and weighted
// sums (AddWeighted, AttnSum) against float64 sums, with guard values
// around the outputs. The integer V sums are kern_wint_test.go's.

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

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
