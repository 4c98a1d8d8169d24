// lowk.go: random Q2_K and Q3_K blocks, written directly in their layouts
// as blocks.go writes the other K-quants (the Q2_K and Q3_K mixtures of
// plan.go put most weights in these types, so a 122B file has to be
// written at the speed of the others, not quantized weight by weight).
//
//   - Q2_K (x = d·sc·q - dmin·m, 2-bit q, 4-bit sc and m): codes are i.i.d.
//     with P(q) = 3/16, 5/16, 5/16, 3/16 (a bell over the four levels,
//     E[q] = 3/2, E[(q-3/2)²] = 1), so where a code sits in the block does
//     not matter; sc is 7..14, dmin = 3/2·d (exact in fp16) and m = sc ± 1
//     (6..15, either sign equally likely), so x = d·sc·(q-3/2) ∓ 3/2·d:
//     each sub-block's mean is ∓3/2·d and the tensor's mean is zero.
//   - Q3_K (x = d·(sc-32)·(q-4), 3-bit q, 6-bit sc): codes c = q-4 from the
//     3-bit table of blocks.go (-3..3, symmetric), each code's low two bits
//     in qs and high bit in hmask at its element's place; signed scales
//     sc-32 = ±(16..31), both signs.
//
// As in blocks.go, each block picks d from 8 values over ±20 % of the base
// that gives the requested standard deviation.

package synth

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/flowinfer/flowinfer/quant"
)

const (
	bytesQ2_K = 84
	bytesQ3_K = 110
)

// q2Table maps 16 random bits to a byte of four 2-bit codes, one per
// nibble: 0-2 -> 0, 3-7 -> 1, 8-12 -> 2, 13-15 -> 3.
func q2Table() *[65536]byte {
	t := new([65536]byte)
	for x := range t {
		var b byte
		for k := range 4 {
			v := x >> (4 * k) & 15
			q := byte(0)
			switch {
			case v >= 13:
				q = 3
			case v >= 8:
				q = 2
			case v >= 3:
				q = 1
			}
			b |= q << (2 * k)
		}
		t[x] = b
	}
	return t
}

// lowK sets up g (type Q2_K or Q3_K) for standard deviation std.
func (c *gens) lowK(g *blockGen, std float64) {
	var ms float64 // E[x²] / d² over blocks with d = base
	switch g.typ {
	case quant.Q2_K:
		g.nib = q2Table()
		// sc 7..14: E[sc²] = 924/8; E[(q-3/2)²] = 1; the sub-block offset
		// 3/2·d·(sc-m) = ±3/2·d adds 9/4
		ms = 924.0/8 + 9.0/4
	case quant.Q3_K:
		if c.codes[3] == nil {
			c.codes[3], c.codeMS[3] = codeTable(3)
		}
		g.code = c.codes[3]
		var s int // |sc-32| in 16..31
		for v := 16; v < 32; v++ {
			s += v * v
		}
		ms = float64(s) / 16 * c.codeMS[3]
	}
	base := std / math.Sqrt(ms*meanSquareBlockScale())
	for k := range g.d {
		h := quant.FP32ToFP16(float32(base * float64(12+k) / 16))
		if g.typ == quant.Q2_K {
			// clear the two low mantissa bits so dmin = 3/2·d is exact in fp16
			h &^= 3
			g.m[k] = quant.FP32ToFP16(1.5 * quant.FP16ToFP32(h))
		}
		g.d[k] = h
	}
}

// Q2_K: scales (16: sc low nibble, m high), qs (64), d, dmin.
func fillQ2_K(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ2_K; dst = dst[bytesQ2_K:] {
		h := r.Uint64() // 4 bits per sub-block: sc-7 (3), the sign of m-sc (1)
		for j := range 16 {
			v := h >> (4 * j)
			sc := 7 + byte(v&7)
			m := sc + 1
			if v&8 != 0 {
				m = sc - 1
			}
			dst[j] = sc | m<<4
		}
		for qs := dst[16:80]; len(qs) >= 4; qs = qs[4:] {
			x := r.Uint64()
			v := uint32(g.nib[x&0xffff]) | uint32(g.nib[x>>16&0xffff])<<8 |
				uint32(g.nib[x>>32&0xffff])<<16 | uint32(g.nib[x>>48])<<24
			binary.LittleEndian.PutUint32(qs, v)
		}
		k := r.Uint64() & 7
		put16(dst[80:], g.d[k])
		put16(dst[82:], g.m[k])
	}
}

// Q3_K: hmask (32), qs (64), scales (12), d. Element e = 128h + 32j + l
// (h half, j shift group, l < 32) keeps its low two bits in qs[32h+l] at
// bit 2j and its high bit in hmask[l] at bit 4h+j; its scale is number
// 8h + 2j + l/16.
func fillQ3_K(g *blockGen, r *rand.PCG, dst []byte) {
	var c [quant.QK_K]int
	for ; len(dst) >= bytesQ3_K; dst = dst[bytesQ3_K:] {
		hm, qs, sc := dst[0:32], dst[32:96], dst[96:108]
		clear(dst[:108])
		h, h2 := r.Uint64(), r.Uint64() // 5 bits per scale: |sc-32|-16 (4), sign (1)
		for j := range 16 {
			v := h >> (5 * j) // 60 bits for scales 0-11
			if j >= 12 {
				v = h2 >> (5 * (j - 12))
			}
			s := 16 + int(v&15)
			if v&16 != 0 {
				s = -s
			}
			packScale3(sc, j, uint8(32+s))
		}
		put16(dst[108:], g.d[h2>>61])
		for i := 0; i < len(c); i += 8 {
			g.codes8(c[i:], r.Uint64(), 4)
		}
		for e, q := range c {
			half, j, l := e/128, e%128/32, e%32
			qs[32*half+l] |= byte(q&3) << (2 * j)
			hm[l] |= byte(q>>2) << (4*half + j)
		}
	}
}

// packScale3 stores Q3_K scale j (6 bits, 32 + the signed scale): its low
// four bits in byte j%8 (low nibble for j < 8, high for j >= 8), its high
// two in byte 8 + j%4 at bit 2·(j/4) (ggml's dequantize_row_q3_K unpacking).
func packScale3(sc []byte, j int, v uint8) {
	sc[j%8] |= (v & 15) << (4 * (j / 8))
	sc[8+j%4] |= (v >> 4) << (2 * (j / 4))
}
