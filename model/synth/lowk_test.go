package synth

import (
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

// TestLowKBlocks: random Q2_K blocks have sub-block scales 7..14 with
// mins one above or below (both), dmin = 3/2·d exactly, and all four
// codes; random Q3_K blocks dequantize, sub-block by sub-block, to the
// signed scale ±(16..31) times codes in -3..3 (never -4: each code's low
// bits and high bit were stored at the same element), with every code
// and both scale signs present.
func TestLowKBlocks(t *testing.T) {
	r := rand.NewPCG(5, 6)
	const nb = 64
	g2, err := newGens().get(quant.Q2_K, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, nb*bytesQ2_K)
	g2.fillBlocks(r, data)
	var codes [4]int
	minus, plus := 0, 0
	for b := 0; b < len(data); b += bytesQ2_K {
		blk := data[b : b+bytesQ2_K]
		for _, s := range blk[:16] {
			sc, m := int(s&15), int(s>>4)
			switch {
			case sc < 7 || sc > 14:
				t.Fatalf("Q2_K scale %d", sc)
			case m == sc-1:
				minus++
			case m == sc+1:
				plus++
			default:
				t.Fatalf("Q2_K scale %d, min %d", sc, m)
			}
		}
		for _, q := range blk[16:80] {
			for k := range 4 {
				codes[q>>(2*k)&3]++
			}
		}
		d := quant.FP16ToFP32(uint16(blk[80]) | uint16(blk[81])<<8)
		dmin := quant.FP16ToFP32(uint16(blk[82]) | uint16(blk[83])<<8)
		if dmin != 1.5*d || d <= 0 {
			t.Fatalf("Q2_K d %g, dmin %g", d, dmin)
		}
	}
	if minus == 0 || plus == 0 || codes[0] == 0 || codes[3] == 0 || codes[1] < codes[0] || codes[2] < codes[3] {
		t.Errorf("Q2_K: mins below/above %d/%d, codes %v", minus, plus, codes)
	}

	g3, err := newGens().get(quant.Q3_K, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	data = make([]byte, nb*bytesQ3_K)
	g3.fillBlocks(r, data)
	x := make([]float32, nb*quant.QK_K)
	if err := quant.DequantizeRow(quant.Q3_K, data, x); err != nil {
		t.Fatal(err)
	}
	var hist [7]int
	neg, pos := 0, 0
	for b := range nb {
		blk := data[b*bytesQ3_K : (b+1)*bytesQ3_K]
		d := quant.FP16ToFP32(uint16(blk[108]) | uint16(blk[109])<<8)
		for j := range 16 {
			// scale j from the packed bytes, as packScale3 stores it
			v := int(blk[96+j%8]>>(4*(j/8))&15) | int(blk[104+j%4]>>(2*(j/4))&3)<<4
			s := v - 32
			switch {
			case s >= 16 && s <= 31:
				pos++
			case s <= -16 && s >= -31:
				neg++
			default:
				t.Fatalf("Q3_K block %d scale %d: %d", b, j, s)
			}
			for l := range 16 {
				y := x[b*quant.QK_K+16*j+l]
				c := y / (d * float32(s))
				ci := int(c+3.5) - 3 // round to the nearest code, c in [-3.5, 3.5)
				if c < -3.5 || c >= 3.5 || float32(ci) != c {
					t.Fatalf("Q3_K block %d element %d: %g = %g·%d·%g, not a code in -3..3", b, 16*j+l, y, d, s, c)
				}
				hist[ci+3]++
			}
		}
	}
	for c, n := range hist {
		if n == 0 {
			t.Errorf("Q3_K: code %d never drawn: %v", c-3, hist)
		}
	}
	if neg == 0 || pos == 0 {
		t.Errorf("Q3_K scales: %d negative, %d positive", neg, pos)
	}
}
