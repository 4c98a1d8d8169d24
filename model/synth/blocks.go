// blocks.go: random tensor data written directly in each ggml type's block
// layout, without generating float32 weights and quantizing them.
//
// Quantizing with llama-quantize's reference quantizers costs 150-450 ns
// per weight for the K-quants (minutes for a 1B model); drawing the codes
// and scales of each block at random costs about a nanosecond. The result
// is a valid block whose dequantized weights have mean 0 and the requested
// standard deviation, with a bell-shaped code distribution:
//
//   - each random byte becomes one code through a 256-entry table of the
//     quantiles of trunc((S - E[S]) / 4), S the sum of four uniform b-bit
//     integers (Irwin-Hall), symmetric about the type's zero (Q4: 8, Q5: 16,
//     Q6: 32, Q8: 0), so every type dequantizes to exactly zero mean;
//   - each block picks its scale d from 8 values spread over ±20 % of the
//     base, and K-quant sub-blocks pick 6-bit scales in [32, 63] (Q6_K:
//     ±[32, 63]) and mins that differ from their scale by ±1 or ±2, so
//     kernels that mix up blocks, sub-blocks, scales and mins give wrong
//     answers on these files too;
//   - float types (F32, F16, BF16) map 16 random bits to one of 65536 fixed
//     Irwin-Hall samples (half of them the negation of the other half),
//     scaled to the standard deviation and encoded once.
//
// The tables come from integer arithmetic and splitmix64, and the few float
// expressions round explicitly so no fused multiply-add can change them: a
// seed gives the same bytes on every platform.
//
// IQ4_NL, IQ4_XS, MXFP4 and the lattice types IQ3_XXS, IQ3_S, IQ2_XXS,
// IQ2_XS, IQ2_S, IQ1_S, IQ1_M are the exception: their codes index
// non-linear tables or grids, so random codes would not give a calibrated
// distribution; their blocks are quantized (quant.QuantizeRefFunc,
// llama-quantize's quantizer without an importance matrix; an importance
// matrix of all ones for IQ2_XXS, IQ2_XS and IQ1_S, which ggml refuses to
// quantize without one) from random float32 values drawn as for F32. That costs the quantizer's time per weight, and the dequantized
// standard deviation is the requested one less the quantization error's
// share (a few per cent).
//
// It does not reproduce what llama-quantize would make of a float model:
// files of different types from one seed hold different weights.

package synth

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/flowinfer/flowinfer/quant"
)

// codeTable maps a random byte to a symmetric b-bit code distributed as
// trunc((S - E[S]) / 4), S the sum of four uniform b-bit integers: byte j
// takes the code at cumulative probability (j + 1/2) / 256 (integer
// arithmetic on the exact distribution), and byte 255-j its negation, so the
// mean is exactly zero. It returns the table and E[c²] over the 256 entries.
func codeTable(b int) (*[256]int8, float64) {
	n := 1 << b
	dist := []uint64{1} // counts of S
	for range 4 {
		next := make([]uint64, len(dist)+n-1)
		for s, c := range dist {
			for v := range n {
				next[s+v] += c
			}
		}
		dist = next
	}
	lo := -(n - 1) / 2 // the smallest code
	counts := make([]uint64, n)
	var total uint64
	for s, c := range dist {
		counts[(s-2*(n-1))/4-lo] += c
		total += c
	}
	t := new([256]int8)
	var sq int
	c, cum := 0, counts[0]
	for j := range 128 {
		// the smallest code whose cumulative count exceeds (j + 1/2) / 256
		for 512*cum <= uint64(2*j+1)*total {
			c++
			cum += counts[c]
		}
		t[j], t[255-j] = int8(c+lo), -int8(c+lo)
		sq += 2 * (c + lo) * (c + lo)
	}
	return t, float64(sq) / 256
}

// floatTable returns 65536 samples of S - E[S], S the sum of four uniform
// 16-bit integers drawn by splitmix64 from a fixed seed, the second half
// the negation of the first (mean exactly zero), and their mean square.
func floatTable() (*[65536]float32, float64) {
	t := new([65536]float32)
	var sq float64
	for i := range 32768 {
		v := float32(offFloat(splitmix(uint64(i))))
		t[i], t[i+32768] = v, -v
		sq += 2 * float64(v*v)
	}
	return t, sq / 65536
}

// Block-scale multipliers (12+k)/16, k = 0..7, and K-quant sub-block
// scales 32..63: their mean squares, exact rationals.
func meanSquareBlockScale() float64 {
	var s int
	for k := range 8 {
		s += (12 + k) * (12 + k)
	}
	return float64(s) / (8 * 256)
}

func meanSquareSubScale() float64 {
	var s int
	for v := 32; v < 64; v++ {
		s += v * v
	}
	return float64(s) / 32
}

// blockGen writes random blocks of one type with one standard deviation.
// It is read-only once built, shared by the goroutines of a Write.
type blockGen struct {
	typ  quant.Type
	d    [8]uint16      // fp16 block scales
	m    [8]uint16      // fp16 mins (Q4_1, Q5_1: -center·d; Q4_K, Q5_K: center·d)
	code *[256]int8     // random byte -> symmetric code
	nib  *[65536]byte   // 4-bit types: random 16 bits -> two codes 8+c, packed (Q2_K: four 2-bit codes)
	q8   *[65536]uint16 // Q8_0: random 16 bits -> two int8 codes
	f16  *[65536]uint16 // F16/BF16: random 16 bits -> value
	f32  *[65536]uint32 // F32 (and the float types quantized from it): random 16 bits -> value
	// quantize: the types written by quantizing random float32 values
	quantize func(src []float32, dst []byte)
	fill     func(g *blockGen, r *rand.PCG, dst []byte)
}

// gens builds and caches the generators of one Write.
type gens struct {
	codes   map[int]*[256]int8
	codeMS  map[int]float64
	floats  *[65536]float32
	floatMS float64
	byKey   map[genKey]*blockGen
}

type genKey struct {
	t   quant.Type
	std float64
}

func newGens() *gens {
	return &gens{codes: map[int]*[256]int8{}, codeMS: map[int]float64{}, byKey: map[genKey]*blockGen{}}
}

// get returns the generator of type t whose dequantized values have
// standard deviation std.
func (c *gens) get(t quant.Type, std float64) (*blockGen, error) {
	if g, ok := c.byKey[genKey{t, std}]; ok {
		return g, nil
	}
	g := &blockGen{typ: t}
	bits, center, subScaled := 0, 0, false
	switch t {
	case quant.F32:
		g.fill = fillF32
	case quant.F16:
		g.fill = fillF16
	case quant.BF16:
		g.fill = fillF16 // the table holds bf16 values
	case quant.Q8_0:
		bits, g.fill = 8, fillQ8_0
	case quant.Q4_0:
		bits, center, g.fill = 4, 8, fillQ4_0
	case quant.Q4_1:
		bits, center, g.fill = 4, 8, fillQ4_1
	case quant.Q5_0:
		bits, center, g.fill = 5, 16, fillQ5_0
	case quant.Q5_1:
		bits, center, g.fill = 5, 16, fillQ5_1
	case quant.Q4_K:
		bits, center, subScaled, g.fill = 4, 8, true, fillQ4_K
	case quant.Q5_K:
		bits, center, subScaled, g.fill = 5, 16, true, fillQ5_K
	case quant.Q6_K:
		bits, center, subScaled, g.fill = 6, 32, true, fillQ6_K
	case quant.Q2_K, quant.Q3_K: // lowk.go
		g.fill = fillQ2_K
		if t == quant.Q3_K {
			g.fill = fillQ3_K
		}
		c.lowK(g, std)
		c.byKey[genKey{t, std}] = g
		return g, nil
	case quant.IQ4_NL, quant.IQ4_XS, quant.MXFP4,
		quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ1_S, quant.IQ1_M:
		g.quantize, g.fill = quant.QuantizeRefFunc(t), fillQuantized
	default:
		return nil, fmt.Errorf("synth: cannot write tensors of type %s (supported: %s)", t, supportedTypes)
	}
	if bits == 0 {
		if c.floats == nil {
			c.floats, c.floatMS = floatTable()
		}
		k := float32(std / math.Sqrt(c.floatMS))
		if t == quant.F32 || g.quantize != nil {
			g.f32 = new([65536]uint32)
		} else {
			g.f16 = new([65536]uint16)
		}
		for i, v := range c.floats {
			x := v * k
			switch {
			case g.f32 != nil:
				g.f32[i] = math.Float32bits(x)
			case t == quant.F16:
				g.f16[i] = quant.FP32ToFP16(x)
			case t == quant.BF16:
				g.f16[i] = quant.FP32ToBF16(x)
			}
		}
		c.byKey[genKey{t, std}] = g
		return g, nil
	}
	if c.codes[bits] == nil {
		c.codes[bits], c.codeMS[bits] = codeTable(bits)
	}
	g.code = c.codes[bits]
	switch bits {
	case 4:
		g.nib = new([65536]byte)
		for i := range g.nib {
			g.nib[i] = byte(8+g.code[i&255]) | byte(8+g.code[i>>8])<<4
		}
	case 8:
		g.q8 = new([65536]uint16)
		for i := range g.q8 {
			g.q8[i] = uint16(uint8(g.code[i&255])) | uint16(uint8(g.code[i>>8]))<<8
		}
	}
	ms := meanSquareBlockScale() * c.codeMS[bits]
	if subScaled {
		ms *= meanSquareSubScale()
	}
	base := std / math.Sqrt(ms)
	for k := range g.d {
		g.d[k] = quant.FP32ToFP16(float32(base * float64(12+k) / 16))
		d := quant.FP16ToFP32(g.d[k])
		switch t {
		case quant.Q4_1, quant.Q5_1:
			g.m[k] = quant.FP32ToFP16(-float32(center) * d)
		case quant.Q4_K, quant.Q5_K:
			g.m[k] = quant.FP32ToFP16(float32(center) * d)
		}
	}
	c.byKey[genKey{t, std}] = g
	return g, nil
}

// fillBlocks fills dst (whole blocks, or float elements) from r.
func (g *blockGen) fillBlocks(r *rand.PCG, dst []byte) { g.fill(g, r, dst) }

func put16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

// offFloat is S - E[S] over four 16-bit fields of x.
func offFloat(x uint64) int {
	return int(x&0xffff+x>>16&0xffff+x>>32&0xffff+x>>48) - 2*0xffff
}

func fillF32(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= 16; dst = dst[16:] {
		x := r.Uint64()
		binary.LittleEndian.PutUint32(dst, g.f32[x&0xffff])
		binary.LittleEndian.PutUint32(dst[4:], g.f32[x>>16&0xffff])
		binary.LittleEndian.PutUint32(dst[8:], g.f32[x>>32&0xffff])
		binary.LittleEndian.PutUint32(dst[12:], g.f32[x>>48])
	}
	for x := r.Uint64(); len(dst) >= 4; dst, x = dst[4:], x>>16 {
		binary.LittleEndian.PutUint32(dst, g.f32[x&0xffff])
	}
}

// supportedTypes lists the types Write can produce, for error messages.
const supportedTypes = "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4, iq3_xxs, iq3_s, iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m"

// fillQuantized writes whole blocks of g.typ quantized from random float32
// values (the F32 table), one block at a time.
func fillQuantized(g *blockGen, r *rand.PCG, dst []byte) {
	var x [quant.QK_K]float32
	bs, bb := g.typ.BlockSize(), g.typ.BlockBytes()
	xs := x[:bs]
	for ; len(dst) >= bb; dst = dst[bb:] {
		for i := 0; i < bs; i += 4 {
			v := r.Uint64()
			xs[i] = math.Float32frombits(g.f32[v&0xffff])
			xs[i+1] = math.Float32frombits(g.f32[v>>16&0xffff])
			xs[i+2] = math.Float32frombits(g.f32[v>>32&0xffff])
			xs[i+3] = math.Float32frombits(g.f32[v>>48])
		}
		g.quantize(xs, dst[:bb])
	}
}

// fillF16 writes F16 or BF16 values (the table holds the encoding).
func fillF16(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= 8; dst = dst[8:] {
		x := r.Uint64()
		v := uint64(g.f16[x&0xffff]) | uint64(g.f16[x>>16&0xffff])<<16 |
			uint64(g.f16[x>>32&0xffff])<<32 | uint64(g.f16[x>>48])<<48
		binary.LittleEndian.PutUint64(dst, v)
	}
	for x := r.Uint64(); len(dst) >= 2; dst, x = dst[2:], x>>16 {
		put16(dst, g.f16[x&0xffff])
	}
}

const (
	bytesQ8_0 = 34
	bytesQ4_0 = 18
	bytesQ4_1 = 20
	bytesQ5_0 = 22
	bytesQ5_1 = 24
	bytesQ4_K = 144
	bytesQ5_K = 176
	bytesQ6_K = 210
)

// codes8 sets c[0:8] to the codes of the 8 bytes of x, plus center.
func (g *blockGen) codes8(c []int, x uint64, center int) {
	_ = c[7]
	for i := range 8 {
		c[i] = center + int(g.code[x>>(8*i)&255])
	}
}

// Q8_0: d (fp16), 32 int8 codes; x = d·q.
func fillQ8_0(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ8_0; dst = dst[bytesQ8_0:] {
		put16(dst, g.d[r.Uint64()&7])
		for qs := dst[2:bytesQ8_0]; len(qs) >= 8; qs = qs[8:] {
			x := r.Uint64()
			v := uint64(g.q8[x&0xffff]) | uint64(g.q8[x>>16&0xffff])<<16 |
				uint64(g.q8[x>>32&0xffff])<<32 | uint64(g.q8[x>>48])<<48
			binary.LittleEndian.PutUint64(qs, v)
		}
	}
}

// fillNibbles fills qs with pairs of 4-bit codes 8+c (i.i.d., so which
// element of the block a nibble belongs to does not matter).
func (g *blockGen) fillNibbles(r *rand.PCG, qs []byte) {
	for ; len(qs) >= 4; qs = qs[4:] {
		x := r.Uint64()
		v := uint32(g.nib[x&0xffff]) | uint32(g.nib[x>>16&0xffff])<<8 |
			uint32(g.nib[x>>32&0xffff])<<16 | uint32(g.nib[x>>48])<<24
		binary.LittleEndian.PutUint32(qs, v)
	}
}

// Q4_0: d, 16 bytes of nibbles; x = d·(q-8).
func fillQ4_0(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ4_0; dst = dst[bytesQ4_0:] {
		put16(dst, g.d[r.Uint64()&7])
		g.fillNibbles(r, dst[2:bytesQ4_0])
	}
}

// Q4_1: d, m, 16 bytes of nibbles; x = d·q + m, m = -8d.
func fillQ4_1(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ4_1; dst = dst[bytesQ4_1:] {
		k := r.Uint64() & 7
		put16(dst, g.d[k])
		put16(dst[2:], g.m[k])
		g.fillNibbles(r, dst[4:bytesQ4_1])
	}
}

// fillQ5 fills the 32 five-bit codes 16+c of a Q5_0/Q5_1 block: the low
// nibbles in qs (element j low, j+16 high) and the fifth bits in qh.
func (g *blockGen) fillQ5(r *rand.PCG, qh, qs []byte) {
	var c [32]int
	for j := 0; j < 32; j += 8 {
		g.codes8(c[j:], r.Uint64(), 16)
	}
	var h uint32
	for j := range 16 {
		lo, hi := c[j], c[j+16]
		qs[j] = byte(lo&15) | byte(hi&15)<<4
		h |= uint32(lo>>4)<<j | uint32(hi>>4)<<(j+16)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

// Q5_0: d, qh, qs; x = d·(q-16).
func fillQ5_0(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ5_0; dst = dst[bytesQ5_0:] {
		put16(dst, g.d[r.Uint64()&7])
		g.fillQ5(r, dst[2:6], dst[6:bytesQ5_0])
	}
}

// Q5_1: d, m, qh, qs; x = d·q + m, m = -16d.
func fillQ5_1(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ5_1; dst = dst[bytesQ5_1:] {
		k := r.Uint64() & 7
		put16(dst, g.d[k])
		put16(dst[2:], g.m[k])
		g.fillQ5(r, dst[4:8], dst[8:bytesQ5_1])
	}
}

// kScales writes the 12-byte packed 6-bit scales and mins of a Q4_K/Q5_K
// super-block from h (7 bits per sub-block): scale 32..63, min = scale
// ±1 or ±2 (never above 63), so the sub-block mean stays near zero.
func kScales(sc []byte, h uint64) {
	clear(sc[:12])
	for j := range 8 {
		v := h >> (7 * j)
		ls := 32 + uint8(v&31)
		delta := [4]int{-2, -1, 1, 2}[v>>5&3]
		lm := int(ls) + delta
		if lm > 63 {
			lm = int(ls) - delta
		}
		packScale(sc, j, ls, uint8(lm))
	}
}

// packScale stores sub-block j's 6-bit scale and min (ggml's get_scale_min_k4
// layout: sub-blocks 0-3 in the low 6 bits of bytes 0-7, 4-7 split across
// bytes 8-11 and the top bits of bytes 0-7).
func packScale(sc []byte, j int, ls, lm uint8) {
	if j < 4 {
		sc[j] = ls
		sc[j+4] = lm
		return
	}
	sc[j+4] = ls&15 | (lm&15)<<4
	sc[j-4] |= (ls >> 4) << 6
	sc[j] |= (lm >> 4) << 6
}

// Q4_K: d, dmin, scales, 128 bytes of nibbles; x = d·sc·q - dmin·m with
// dmin = 8d.
func fillQ4_K(g *blockGen, r *rand.PCG, dst []byte) {
	for ; len(dst) >= bytesQ4_K; dst = dst[bytesQ4_K:] {
		h := r.Uint64()
		k := h >> 61
		put16(dst, g.d[k])
		put16(dst[2:], g.m[k])
		kScales(dst[4:16], h)
		g.fillNibbles(r, dst[16:bytesQ4_K])
	}
}

// Q5_K: d, dmin, scales, qh (32), ql (128); x = d·sc·q - dmin·m with
// dmin = 16d. Sub-block pair p (elements 64p..64p+63) keeps its low
// nibbles in ql[32p:32p+32] and its fifth bits in bits 2p, 2p+1 of qh.
func fillQ5_K(g *blockGen, r *rand.PCG, dst []byte) {
	var c [quant.QK_K]int
	for ; len(dst) >= bytesQ5_K; dst = dst[bytesQ5_K:] {
		h := r.Uint64()
		k := h >> 61
		put16(dst, g.d[k])
		put16(dst[2:], g.m[k])
		kScales(dst[4:16], h)
		qh, ql := dst[16:48], dst[48:bytesQ5_K]
		clear(qh)
		for i := 0; i < len(c); i += 8 {
			g.codes8(c[i:], r.Uint64(), 16)
		}
		for p := range 4 {
			for j := range 32 {
				c1, c2 := c[64*p+j], c[64*p+j+32]
				ql[32*p+j] = byte(c1&15) | byte(c2&15)<<4
				qh[j] |= byte(c1>>4)<<(2*p) | byte(c2>>4)<<(2*p+1)
			}
		}
	}
}

// Q6_K: ql (128), qh (64), 16 int8 scales, d; x = d·sc·(q-32). Half n of
// the super-block uses ql[64n:64n+64] and qh[32n:32n+32]: for l < 32 the
// four codes of ql[l], ql[l+32] (low and high nibbles) take their top two
// bits from qh[l] at shifts 0, 2, 4, 6.
func fillQ6_K(g *blockGen, r *rand.PCG, dst []byte) {
	var c [8]int
	for ; len(dst) >= bytesQ6_K; dst = dst[bytesQ6_K:] {
		h := r.Uint64()
		put16(dst[208:], g.d[h>>61])
		h2 := r.Uint64()
		sc := dst[192:208]
		for j := range 16 {
			v := h >> (6 * j) // 60 bits for sub-blocks 0-9
			if j >= 10 {
				v = h2 >> (6 * (j - 10))
			}
			s := int8(32 + v&31)
			if v&32 != 0 {
				s = -s
			}
			sc[j] = byte(s)
		}
		for half := range 2 {
			ql := dst[64*half : 64*half+64]
			qh := dst[128+32*half : 128+32*half+32]
			for l := 0; l < 32; l += 2 {
				g.codes8(c[:], r.Uint64(), 32)
				for i := range 2 {
					c1, c2, c3, c4 := c[4*i], c[4*i+1], c[4*i+2], c[4*i+3]
					ql[l+i] = byte(c1&15) | byte(c3&15)<<4
					ql[l+i+32] = byte(c2&15) | byte(c4&15)<<4
					qh[l+i] = byte(c1>>4) | byte(c2>>4)<<2 | byte(c3>>4)<<4 | byte(c4>>4)<<6
				}
			}
		}
	}
}
