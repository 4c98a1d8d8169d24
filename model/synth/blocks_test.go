// Tests of the random block writers: dequantized with package quant's
// reference dequantizers, every type has mean 0 and the requested standard
// deviation; the code tables are symmetric and sorted;
// chunked generation does not depend on the number of workers.

package synth

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

func TestCodeTable(t *testing.T) {
	for _, b := range []int{4, 5, 6, 8} {
		tab, ms := codeTable(b)
		var sq int
		for j, c := range tab {
			if int(c) < -(1<<(b-1)-1) || int(c) > 1<<(b-1)-1 {
				t.Fatalf("bits %d: code %d out of range", b, c)
			}
			if j > 0 && c < tab[j-1] {
				t.Fatalf("bits %d: table not sorted at %d", b, j)
			}
			if tab[255-j] != -c {
				t.Fatalf("bits %d: not symmetric at %d", b, j)
			}
			sq += int(c) * int(c)
		}
		if float64(sq)/256 != ms {
			t.Errorf("bits %d: mean square %v, table %v", b, ms, float64(sq)/256)
		}
		t.Logf("bits %d: codes %d..%d, rms %.3f", b, tab[0], tab[255], math.Sqrt(ms))
	}
	ft, ms := floatTable()
	var sum float64
	for _, v := range ft {
		sum += float64(v)
	}
	if sum != 0 || ms <= 0 {
		t.Errorf("float table: sum %g, mean square %g", sum, ms)
	}
}

func TestBlockStats(t *testing.T) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1,
		quant.Q5_0, quant.Q5_1, quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K}
	const n = 1 << 17
	for _, typ := range types {
		for _, std := range []float64{0.02, 0.08} {
			t.Run(typ.String(), func(t *testing.T) {
				g, err := newGens().get(typ, std)
				if err != nil {
					t.Fatal(err)
				}
				rb, _ := quant.RowBytes(typ, n)
				data := make([]byte, rb)
				g.fillBlocks(rand.NewPCG(1, 2), data)
				x := make([]float32, n)
				if err := quant.DequantizeRow(typ, data, x); err != nil {
					t.Fatal(err)
				}
				var sum, sumSq float64
				distinct := map[float32]bool{}
				for i, v := range x {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("element %d is %g", i, v)
					}
					sum += float64(v)
					sumSq += float64(v) * float64(v)
					if len(distinct) < 1000 {
						distinct[v] = true
					}
				}
				mean := sum / n
				sd := math.Sqrt(sumSq/n - mean*mean)
				if math.Abs(mean) > 0.02*std || math.Abs(sd/std-1) > 0.03 {
					t.Errorf("std %g: mean %.3g, std %.4g", std, mean, sd)
				}
				if len(distinct) < 50 {
					t.Errorf("only %d distinct values", len(distinct))
				}
			})
		}
	}
}

// TestKScales: Q4_K/Q5_K sub-block scales lie in [32, 63] and every min
// differs from its scale; Q6_K scales are ±[32, 63] with both signs.
func TestKScales(t *testing.T) {
	r := rand.NewPCG(3, 4)
	var sc [12]byte
	for range 100 {
		kScales(sc[:], r.Uint64())
		for j := range 8 {
			var s, m byte
			if j < 4 {
				s, m = sc[j]&63, sc[j+4]&63
			} else {
				s, m = sc[j+4]&15|(sc[j-4]>>6)<<4, sc[j+4]>>4|(sc[j]>>6)<<4
			}
			if s < 32 || s > 63 || m == s || int(m) < int(s)-2 || int(m) > int(s)+2 {
				t.Fatalf("sub-block %d: scale %d, min %d", j, s, m)
			}
		}
	}
	g, _ := newGens().get(quant.Q6_K, 0.02)
	data := make([]byte, 64*bytesQ6_K)
	g.fillBlocks(r, data)
	var neg, pos int
	for b := 0; b < len(data); b += bytesQ6_K {
		for _, s := range data[b+192 : b+208] {
			v := int8(s)
			switch {
			case v <= -32 && v >= -63:
				neg++
			case v >= 32 && v <= 63:
				pos++
			default:
				t.Fatalf("Q6_K scale %d", v)
			}
		}
	}
	if neg == 0 || pos == 0 {
		t.Errorf("Q6_K scales: %d negative, %d positive", neg, pos)
	}
}

func TestStreamWorkers(t *testing.T) {
	g, _ := newGens().get(quant.Q4_K, 0.02)
	size := func(i int) int { return bytesQ4_K * (5 + i%3) }
	gen := func(i int, dst []byte) { g.fillBlocks(chunkRand(9, "x", i), dst) }
	var want []byte
	for _, workers := range []int{1, 2, 3, 7, 40} {
		var buf bytes.Buffer
		if err := stream(&buf, 23, workers, size, gen); err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = buf.Bytes()
			continue
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%d workers: different bytes", workers)
		}
	}
	for _, workers := range []int{1, 3} {
		w := &limitWriter{n: 3}
		if err := stream(w, 23, workers, size, gen); !errors.Is(err, errLimit) {
			t.Errorf("%d workers: error %v", workers, err)
		}
	}
}

var errLimit = errors.New("limit")

type limitWriter struct{ n int }

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errLimit
	}
	w.n--
	return len(p), nil
}
