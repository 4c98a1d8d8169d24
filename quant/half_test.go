package quant

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestFP16ToFP32(t *testing.T) {
	cases := []struct {
		h    uint16
		want float32
	}{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x3555, 0.333251953125},
		{0x7bff, 65504},
		{0x0400, 1.0 / (1 << 14)},    // smallest normal
		{0x0001, 1.0 / (1 << 24)},    // smallest subnormal
		{0x03ff, 1023.0 / (1 << 24)}, // largest subnormal
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
	}
	for _, c := range cases {
		if got := FP16ToFP32(c.h); got != c.want {
			t.Errorf("FP16ToFP32(%#04x) = %g, want %g", c.h, got, c.want)
		}
	}
	if got := math.Float32bits(FP16ToFP32(0x8000)); got != 0x80000000 {
		t.Errorf("-0 became %#08x", got)
	}
	if got := math.Float32bits(FP16ToFP32(0x7e00)); got != 0x7fc00000 {
		t.Errorf("NaN 0x7e00 became %#08x, want 0x7fc00000", got)
	}
	if got := math.Float32bits(FP16ToFP32(0xfc01)); got != 0xffc02000 {
		t.Errorf("signalling NaN 0xfc01 became %#08x, want quiet 0xffc02000", got)
	}
	// Every finite half: exact value h = (-1)^s * m * 2^e, and back again.
	for h := 0; h < 1<<16; h++ {
		exp, mant := h>>10&0x1f, h&0x3ff
		if exp == 0x1f {
			continue
		}
		want := float64(mant) * math.Pow(2, -24)
		if exp != 0 {
			want = float64(mant|0x400) * math.Pow(2, float64(exp-25))
		}
		if h&0x8000 != 0 {
			want = -want
		}
		got := FP16ToFP32(uint16(h))
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("FP16ToFP32(%#04x) = %g, want %g", h, got, want)
		}
		if back := FP32ToFP16(got); back != uint16(h) {
			t.Fatalf("FP32ToFP16(FP16ToFP32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestFP32ToFP16(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3c00},
		{-1, 0xbc00},
		{65504, 0x7bff},
		{65519.996, 0x7bff}, // just below the overflow threshold
		{65520, 0x7c00},     // tie between 65504 and 65536: odd mantissa rounds up to Inf
		{1e10, 0x7c00},
		{-1e10, 0xfc00},
		{1 + 1.0/2048, 0x3c00},             // tie: round to even (down)
		{1 + 3.0/2048, 0x3c02},             // tie: round to even (up)
		{1 + 1.0/2048 + 1.0/65536, 0x3c01}, // above the tie
		{1.0 / (1 << 24), 0x0001},          // smallest subnormal
		{1.0 / (1 << 25), 0x0000},          // tie with zero: even is zero
		{1.5 / (1 << 25), 0x0001},
		{3.0 / (1 << 25), 0x0002}, // tie between 1 and 2 subnormal units: even
		{1.0 / (1 << 14), 0x0400},
		{1023.5 / (1 << 24), 0x0400}, // subnormal rounds up into the smallest normal
		{1e-30, 0x0000},
		{float32(math.Inf(1)), 0x7c00},
		{float32(math.NaN()), 0x7e00},
		{float32(math.Copysign(math.NaN(), -1)), 0xfe00},
	}
	for _, c := range cases {
		if got := FP32ToFP16(c.f); got != c.want {
			t.Errorf("FP32ToFP16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if got := FP32ToFP16(float32(math.Copysign(0, -1))); got != 0x8000 {
		t.Errorf("-0 became %#04x", got)
	}
}

// TestFP32ToFP16Oracle compares with a search for the nearest half over all
// positive finite halves, on every float32 whose 19 high bits take each
// value combined with low bits around the rounding boundary.
func TestFP32ToFP16Oracle(t *testing.T) {
	// Positive finite halves are increasing in their bit patterns.
	vals := make([]float64, 0x7c00)
	for h := range vals {
		vals[h] = float64(FP16ToFP32(uint16(h)))
	}
	oracle := func(f float32) uint16 {
		a := math.Abs(float64(f))
		var h uint16
		switch {
		case a >= 65520:
			h = 0x7c00
		default:
			i := sort.SearchFloat64s(vals, a) // first index with vals[i] >= a
			switch {
			case i == len(vals):
				h = 0x7bff
			case vals[i] == a || i == 0:
				h = uint16(i)
			default:
				lo, hi := a-vals[i-1], vals[i]-a
				switch {
				case lo < hi:
					h = uint16(i - 1)
				case hi < lo:
					h = uint16(i)
				case i%2 == 0: // tie: the even mantissa
					h = uint16(i)
				default:
					h = uint16(i - 1)
				}
			}
		}
		if math.Signbit(float64(f)) {
			h |= 0x8000
		}
		return h
	}
	lows := []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x0abc, 0x17ff}
	for hi := uint32(0); hi < 1<<19; hi++ {
		if hi>>10&0xff == 0xff {
			continue // Inf and NaN: covered above
		}
		for _, lo := range lows {
			f := math.Float32frombits(hi<<13 | lo)
			if got, want := FP32ToFP16(f), oracle(f); got != want {
				t.Fatalf("FP32ToFP16(%g = %#08x) = %#04x, want %#04x", f, hi<<13|lo, got, want)
			}
		}
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie: even (down)
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie: even (up)
		{math.Float32frombits(0x3f808001), 0x3f81},
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // max float rounds to Inf
		{math.Float32frombits(0x00000001), 0x0000}, // subnormals are rounded, not flushed
		{math.Float32frombits(0x00018000), 0x0002},
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // signalling NaN: quiet
		{math.Float32frombits(0xffc12345), 0xffc1},
	}
	for _, c := range cases {
		if got := FP32ToBF16(c.f); got != c.want {
			t.Errorf("FP32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(c.f), got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 1 << 18 {
		b := r.Uint32()
		if b&0x7fffffff >= 0x7f800000 {
			continue
		}
		f := math.Float32frombits(b)
		got := FP32ToBF16(f)
		// Oracle: the nearer of truncation and truncation+1, ties to even.
		lo := uint16(b >> 16)
		next := float64(BF16ToFP32(lo + 1))
		if math.IsInf(next, 0) {
			next = math.Copysign(0x1p128, next) // rounding treats Inf as 2^128
		}
		dl := math.Abs(float64(f) - float64(BF16ToFP32(lo)))
		dh := math.Abs(next - float64(f))
		want := lo
		if dh < dl || (dh == dl && lo&1 == 1) {
			want = lo + 1
		}
		if got != want {
			t.Fatalf("FP32ToBF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
		if BF16ToFP32(got) != math.Float32frombits(uint32(got)<<16) {
			t.Fatal("BF16ToFP32 is not a shift")
		}
	}
}
