package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"testing"
)

// testdata/iq_grids.bin holds test vectors written by ggml's own code
// (llama.cpp commit d32676d77426540327835040d5d3279728f0b4c8): a throwaway
// C program, kept outside the repository, linked against that commit's
// libggml-base (its tables from ggml-common.h, dequantize_row_iq*,
// quantize_iq{3_xxs,3_s,2_xxs,2_xs,2_s,1_s,1_m} after ggml_quantize_init,
// quantize_row_q8_K_ref) and ggml-cpu/quants.c compiled with gcc -std=c11
// -O2 for the generic dot products (ggml_vec_dot_iq*_q8_K_generic).
//
// Layout, little-endian: the magic "FIQGRD01"; ggml's tables: uint8[8]
// kmask_iq2xs, uint8[128] ksigns_iq2xs, uint64[256] iq2xxs_grid,
// uint64[512] iq2xs_grid, uint64[1024] iq2s_grid, uint32[256]
// iq3xxs_grid, uint32[512] iq3s_grid, uint64[2048] iq1s_grid, float32
// IQ1S_DELTA and IQ1M_DELTA; a uint32 case count; per case: uint32 ggml
// type, uint32 n, uint64 seed, uint32 mode (low byte, the importance
// matrix: 0 none, 1 all ones, 2 random; bit 8: the weights truncated to
// multiples of 1/4, so sub-blocks hold many equal values), the row ggml's quantizer made of the
// seed's weights xw with that importance matrix, a row of random blocks
// (random bytes, then a random finite fp16 scale), float32[n] ggml's
// dequantization of the random row, the seed's activations xa quantized to
// Q8_K, and float32 the dot product of each weight row with it.
//
// The float inputs are not stored: iqInputs regenerates them from the seed
// with the same splitmix64 sequence and exact float arithmetic as the C
// program. Rows are 1, 3, 8, 2 and 2 blocks per type; in the 8-block rows
// block 5 is all zeros and block 6 is scaled by 2^-70 (below every
// GROUP_MAX_EPS). Modes: 0, 2, 0, 1, 0x102 for the types whose importance
// matrix is optional, 1, 2, 1, 2, 0x102 for IQ2_XXS, IQ2_XS and IQ1_S,
// which require one.
type iqVectors struct {
	kmask                [8]byte
	ksigns               [128]byte
	iq2xxs, iq2xs, iq2s  []uint64
	iq3xxs, iq3s         []uint32
	iq1s                 []uint64
	iq1sDelta, iq1mDelta float32
	cases                []iqCase
}

type iqCase struct {
	typ        Type
	n          int
	seed       uint64
	mode       int
	wq, wr     []byte
	dr         []float32
	a          []byte
	dotq, dotr float32
}

func loadIQVectors(t testing.TB) *iqVectors {
	t.Helper()
	b, err := os.ReadFile("testdata/iq_grids.bin")
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != "FIQGRD01" {
		t.Fatalf("bad magic %q", b[:8])
	}
	b = b[8:]
	take := func(n int) []byte {
		if len(b) < n {
			t.Fatalf("test vector file truncated")
		}
		v := b[:n:n]
		b = b[n:]
		return v
	}
	u32 := func() uint32 { return binary.LittleEndian.Uint32(take(4)) }
	u64s := func(n int) []uint64 {
		v := make([]uint64, n)
		for i := range v {
			v[i] = binary.LittleEndian.Uint64(take(8))
		}
		return v
	}
	u32s := func(n int) []uint32 {
		v := make([]uint32, n)
		for i := range v {
			v[i] = u32()
		}
		return v
	}
	v := &iqVectors{}
	copy(v.kmask[:], take(8))
	copy(v.ksigns[:], take(128))
	v.iq2xxs, v.iq2xs, v.iq2s = u64s(256), u64s(512), u64s(1024)
	v.iq3xxs, v.iq3s = u32s(256), u32s(512)
	v.iq1s = u64s(2048)
	v.iq1sDelta, v.iq1mDelta = math.Float32frombits(u32()), math.Float32frombits(u32())
	nc := int(u32())
	for range nc {
		c := iqCase{typ: Type(u32()), n: int(u32())}
		c.seed = binary.LittleEndian.Uint64(take(8))
		c.mode = int(u32())
		rb, err := RowBytes(c.typ, c.n)
		if err != nil {
			t.Fatal(err)
		}
		c.wq, c.wr = take(rb), take(rb)
		c.dr = make([]float32, c.n)
		for i := range c.dr {
			c.dr[i] = math.Float32frombits(u32())
		}
		c.a = take(c.n / QK_K * sizeQ8_K)
		c.dotq, c.dotr = math.Float32frombits(u32()), math.Float32frombits(u32())
		v.cases = append(v.cases, c)
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left over", len(b))
	}
	return v
}

// splitmix64 is the generator of the C program.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// unif maps a draw to [-1, 1) exactly: a 24-bit integer times 2^-23.
func unif(u uint64) float32 { return float32(int32(u>>40)-1<<23) * 0x1p-23 }

// iqInputs regenerates a case's weights xw, importance matrix qw (nil for
// mode 0) and activations xa from its seed, as the C program made them.
func iqInputs(seed uint64, n, mode int) (xw, qw, xa []float32) {
	s := splitmix64(seed)
	nb := n / QK_K
	xw, qw, xa = make([]float32, n), make([]float32, n), make([]float32, n)
	for b := range nb {
		k := int(s.next()%7) - 3
		sc := float32(math.Ldexp(1, k))
		for j := range QK_K {
			u := s.next()
			v := unif(u) * sc
			if u&31 == 0 {
				v *= 8
			}
			if nb == 8 && b == 5 {
				v = 0
			}
			if nb == 8 && b == 6 {
				v *= 0x1p-70
			}
			if mode&0x100 != 0 {
				v = float32(int32(v*4)) / 4 // C's (int) truncates toward zero
			}
			xw[b*QK_K+j] = v
		}
	}
	for j := range qw {
		u := s.next()
		qw[j] = 1
		if mode&0xff == 2 {
			qw[j] = float32(u>>40+1) * 0x1p-22
		}
	}
	for j := range xa {
		xa[j] = unif(s.next())
	}
	if mode&0xff == 0 {
		qw = nil
	}
	return xw, qw, xa
}

// TestIQGrids checks every entry of the grids and sign tables we derive
// (iq_grids.go's compact points through the level tables, the parity rule
// of ksignsIQ2XS) against ggml's own tables, and the IQ1 shifts.
func TestIQGrids(t *testing.T) {
	v := loadIQVectors(t)
	for j := range 8 {
		if v.kmask[j] != 1<<j {
			t.Errorf("ggml's kmask_iq2xs[%d] = %d, we test bit %d", j, v.kmask[j], j)
		}
	}
	for s := range 256 {
		for j := range 8 {
			if want := int8(1 - 2*(s>>j&1)); signMul[s][j] != want {
				t.Errorf("signMul[%d][%d] = %d, want %d", s, j, signMul[s][j], want)
			}
		}
	}
	for i := range 128 {
		if got := ksignsIQ2XS(uint32(i)); got != v.ksigns[i] {
			t.Errorf("ksignsIQ2XS(%d) = %d, ggml's ksigns_iq2xs %d", i, got, v.ksigns[i])
		}
	}
	if got := SignsIQ2XS(); !bytes.Equal(got, v.ksigns[:]) {
		t.Errorf("SignsIQ2XS() = %v, ggml's ksigns_iq2xs %v", got, v.ksigns)
	}
	grids8 := []struct {
		name string
		ours [][8]int8
		ggml []uint64
	}{{"iq2xxs_grid", gridIQ2XXS, v.iq2xxs}, {"iq2xs_grid", gridIQ2XS, v.iq2xs}, {"iq2s_grid", gridIQ2S, v.iq2s}, {"iq1s_grid", gridIQ1S, v.iq1s}}
	for _, g := range grids8 {
		if len(g.ours) != len(g.ggml) {
			t.Fatalf("%s: %d entries, ggml %d", g.name, len(g.ours), len(g.ggml))
		}
		for k, p := range g.ggml {
			for i := range 8 {
				if g.ours[k][i] != int8(p>>(8*i)) {
					t.Errorf("%s[%d][%d] = %d, ggml %d", g.name, k, i, g.ours[k][i], int8(p>>(8*i)))
				}
			}
		}
	}
	grids4 := []struct {
		name string
		ours [][4]int8
		ggml []uint32
	}{{"iq3xxs_grid", gridIQ3XXS, v.iq3xxs}, {"iq3s_grid", gridIQ3S, v.iq3s}}
	for _, g := range grids4 {
		if len(g.ours) != len(g.ggml) {
			t.Fatalf("%s: %d entries, ggml %d", g.name, len(g.ours), len(g.ggml))
		}
		for k, p := range g.ggml {
			for i := range 4 {
				if g.ours[k][i] != int8(p>>(8*i)) {
					t.Errorf("%s[%d][%d] = %d, ggml %d", g.name, k, i, g.ours[k][i], int8(p>>(8*i)))
				}
			}
		}
	}
	if iq1Delta != v.iq1sDelta || iq1Delta != v.iq1mDelta {
		t.Errorf("iq1Delta = %g, ggml IQ1S_DELTA %g, IQ1M_DELTA %g", iq1Delta, v.iq1sDelta, v.iq1mDelta)
	}
}

// iqTypes are the lattice types of iq.go.
var iqTypes = []Type{IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M}

// TestIQAgainstGGML compares dequantization and dot products of the seven
// lattice types with ggml's, bit for bit, on rows of 1, 2, 3 and 8
// blocks: random blocks and the blocks ggml's quantizer made; and the
// Q8_K activations with ggml's quantize_row_q8_K_ref.
func TestIQAgainstGGML(t *testing.T) {
	v := loadIQVectors(t)
	seen := map[Type]int{}
	for i, c := range v.cases {
		seen[c.typ]++
		t.Run(c.typ.String(), func(t *testing.T) {
			got := make([]float32, c.n)
			if err := DequantizeRow(c.typ, c.wr, got); err != nil {
				t.Fatal(err)
			}
			bad := 0
			for j := range got {
				if !sameBits(got[j], c.dr[j]) {
					if bad++; bad <= 3 {
						t.Errorf("case %d n=%d: dequantized[%d] = %g, ggml %g", i, c.n, j, got[j], c.dr[j])
					}
				}
			}
			for _, r := range []struct {
				name string
				w    []byte
				dot  float32
			}{{"quantized", c.wq, c.dotq}, {"random", c.wr, c.dotr}} {
				d, err := VecDot(c.typ, c.n, r.w, c.a)
				if err != nil {
					t.Fatal(err)
				}
				if !sameBits(d, r.dot) {
					t.Errorf("case %d n=%d %s row: dot = %g (%#x), ggml %g (%#x)", i, c.n, r.name, d, math.Float32bits(d), r.dot, math.Float32bits(r.dot))
				}
			}
			_, _, xa := iqInputs(c.seed, c.n, c.mode)
			a := make([]byte, len(c.a))
			QuantizeRowQ8_K(xa, a)
			if string(a) != string(c.a) {
				t.Errorf("case %d: activations quantize differently from ggml's q8_K ref (or iqInputs differs from the C generator)", i)
			}
		})
	}
	for _, typ := range iqTypes {
		if seen[typ] == 0 {
			t.Errorf("no %s cases", typ)
		}
	}
}

// iqRandomRow returns n elements of typ as random bytes (every bit pattern
// is a valid block).
func iqRandomRow(t testing.TB, typ Type, n int, seed uint64) []byte {
	w := rowBytes(t, typ, n)
	s := splitmix64(seed)
	for i := range w {
		w[i] = byte(s.next())
	}
	return w
}

// TestIQNoAlloc: the dequantizers and dots of the lattice types do not
// allocate.
func TestIQNoAlloc(t *testing.T) {
	const n = 1024
	xa, _, _ := iqInputs(1, n, 0)
	a := rowBytes(t, Q8_K, n)
	QuantizeRowQ8_K(xa, a)
	y := make([]float32, n)
	for _, typ := range iqTypes {
		w := iqRandomRow(t, typ, n, 2)
		dot, deq := DotFunc(typ), DequantizeFunc(typ)
		if allocs := testing.AllocsPerRun(10, func() { dot(n, w, a); deq(w, y) }); allocs != 0 {
			t.Errorf("%s: %g allocations per dot and dequantization", typ, allocs)
		}
	}
}

// BenchmarkIQDot times the reference dot products per 256-value block
// (random blocks, n = 4096).
func BenchmarkIQDot(b *testing.B) {
	for _, typ := range iqTypes {
		b.Run("type="+typ.String()+"/n=4096", func(b *testing.B) {
			w := iqRandomRow(b, typ, benchN, 3)
			xa, _, _ := iqInputs(4, benchN, 0)
			a := rowBytes(b, Q8_K, benchN)
			QuantizeRowQ8_K(xa, a)
			dot := DotFunc(typ)
			var sink float32
			for b.Loop() {
				sink += dot(benchN, w, a)
			}
			_ = sink
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(benchN/QK_K), "ns/block")
		})
	}
}

// TestIQQuantizeAgainstGGML compares our quantizers with ggml's
// quantize_iq* on the seed's weights and importance matrix (none, all
// ones, random), block by block, including weights with many equal values
// (the IQ1 quantizers sort them).
func TestIQQuantizeAgainstGGML(t *testing.T) {
	v := loadIQVectors(t)
	for i, c := range v.cases {
		q := iqQuantizeFunc(c.typ)
		if q == nil {
			t.Errorf("no quantizer for %s", c.typ)
			continue
		}
		t.Run(c.typ.String(), func(t *testing.T) {
			xw, qw, _ := iqInputs(c.seed, c.n, c.mode)
			got := make([]byte, len(c.wq))
			for j := range got {
				got[j] = 0xa5 // every byte must be written
			}
			q(xw, got, qw)
			bb := c.typ.BlockBytes()
			for b := 0; b < c.n/QK_K; b++ {
				if string(got[b*bb:(b+1)*bb]) != string(c.wq[b*bb:(b+1)*bb]) {
					t.Errorf("case %d n=%d mode %#x: block %d = %x, ggml %x", i, c.n, c.mode, b, got[b*bb:(b+1)*bb], c.wq[b*bb:(b+1)*bb])
				}
			}
		})
	}
}
