package quant

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// quantizeRowMXFP4Scan is QuantizeRowMXFP4 with every code chosen by
// bestIndexMXFP4's scan of all 16 levels (ggml's loop), the reference
// nearestMXFP4's shortcut must reproduce byte for byte.
func quantizeRowMXFP4Scan(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeMXFP4 : (i+1)*sizeMXFP4]
		var amax float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax = a
			}
		}
		var e byte
		if amax > 0 {
			l2 := float32(math.Floor(float64(float32(math.Log2(float64(amax))))))
			e = byte(cvttss2si(float32(l2-2) + 127))
		}
		d := e8m0Half(e)
		b[0] = e
		for j := range 16 {
			b[offMXFP4Qs+j] = bestIndexMXFP4(x[j], d) | bestIndexMXFP4(x[j+16], d)<<4
		}
	}
}

// TestMXFP4NearestMatchesScan quantizes blocks at every binade the format
// has (and the wrapped exponents of tiny blocks), blocks of exact levels and
// exact midpoints between levels (the ties), both zeros, subnormals, NaN and
// infinities, and checks the bytes against the full scan.
func TestMXFP4NearestMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 45))
	levels := []float32{0, 1, 2, 3, 4, 6, 8, 12}
	var blocks [][]float32
	for exp := -150; exp <= 127; exp++ {
		scale := float32(math.Ldexp(1, exp))
		for kind := range 6 {
			x := make([]float32, qk)
			for j := range x {
				switch kind {
				case 0: // Gaussian
					x[j] = float32(r.NormFloat64()) * scale
				case 1: // uniform, amax just below a power of two
					x[j] = (float32(r.Float64())*2 - 1) * scale
				case 2: // levels times the block's d, with signs
					x[j] = levels[r.IntN(8)] * scale / 8
				case 3: // midpoints between neighbouring levels: ties
					m := r.IntN(7)
					x[j] = (levels[m] + levels[m+1]) / 2 * scale / 8
				case 4: // a few large values among tiny ones
					x[j] = float32(r.NormFloat64()) * scale * 1e-6
					if r.IntN(8) == 0 {
						x[j] = float32(r.NormFloat64()) * scale
					}
				case 5: // one ulp either side of levels and midpoints
					m := r.IntN(7)
					v := (levels[m] + levels[m+1]) / 2 * scale / 8
					if r.IntN(2) == 0 {
						v = levels[m] * scale / 8
					}
					x[j] = math.Float32frombits(math.Float32bits(v) + uint32(r.IntN(3)) - 1)
				}
				if r.IntN(2) == 0 {
					x[j] = -x[j]
				}
			}
			if kind == 2 || kind == 3 {
				x[0] = 15.5 * scale / 8 // sets amax, so d is scale/8
			}
			blocks = append(blocks, x)
		}
	}
	special := make([]float32, qk)
	special[0], special[1], special[2] = float32(math.Copysign(0, -1)), math.Float32frombits(1), -math.Float32frombits(1)
	blocks = append(blocks, special, make([]float32, qk))
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32} {
		x := make([]float32, qk)
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		x[5] = v
		blocks = append(blocks, x)
	}
	var got, want [sizeMXFP4]byte
	fast := 0
	for i, x := range blocks {
		QuantizeRowMXFP4(x, got[:])
		quantizeRowMXFP4Scan(x, want[:])
		if !bytes.Equal(got[:], want[:]) {
			t.Fatalf("block %d (%v): got % x, the scan gives % x", i, x, got, want)
		}
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		var scratch [16]byte
		if nearestMXFP4(x, got[0], amax, scratch[:]) {
			fast++
		}
	}
	// the shortcut must actually run on ordinary blocks, not fall back
	if fast < len(blocks)*3/4 {
		t.Errorf("shortcut taken on %d of %d blocks", fast, len(blocks))
	}
}

// TestMXFP4NearestRandomRows compares whole random rows, as model/synth
// quantizes them, over many seeds.
func TestMXFP4NearestRandomRows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 32 * 4096
	src := make([]float32, n)
	got, want := make([]byte, n/qk*sizeMXFP4), make([]byte, n/qk*sizeMXFP4)
	for round := range 8 {
		std := math.Ldexp(0.02, round*4-16)
		for j := range src {
			src[j] = float32(r.NormFloat64() * std)
		}
		QuantizeRowMXFP4(src, got)
		quantizeRowMXFP4Scan(src, want)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d (std %g): rows differ", round, std)
		}
	}
}

// BenchmarkQuantizeRowMXFP4 times a 4096-block row of N(0, 0.02²) values,
// the shortcut against the full scan.
func BenchmarkQuantizeRowMXFP4(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 32*4096)
	for j := range src {
		src[j] = float32(r.NormFloat64() * 0.02)
	}
	dst := make([]byte, len(src)/qk*sizeMXFP4)
	for _, c := range []struct {
		name string
		f    func([]float32, []byte)
	}{{"nearest", QuantizeRowMXFP4}, {"scan", quantizeRowMXFP4Scan}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for b.Loop() {
				c.f(src, dst)
			}
		})
	}
}
