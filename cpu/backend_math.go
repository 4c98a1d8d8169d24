package cpu

// backend_math.go: a float32 exp for the Backend's softmax and SwiGLU
// loops. Ref computes float32(math.Exp(float64(x))); expf evaluates a
// polynomial in float64 whose error (below 1e-8 relative) is far under
// float32's rounding step, so its result is the correctly rounded float32
// in all but rare half-way cases (then one ulp away), at a fraction of the
// cost and without a call.

import "math"

// expf returns e^x rounded to float32.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.8:
		return float32(math.Inf(1))
	case x < -104:
		return 0
	}
	const (
		log2e = 1.4426950408889634
		ln2   = 0.6931471805599453
		round = 0x1.8p52 // adding and subtracting it rounds to an integer
	)
	f := float64(x)
	k := f*log2e + round
	k -= round
	r := f - k*ln2 // |r| ≤ ln2/2
	// e^r by its Taylor series to r^8/8! (truncation error < 6e-10 for
	// |r| ≤ 0.35), in Horner form.
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320))))))))
	return float32(p * math.Float64frombits(uint64(int64(k)+1023)<<52))
}
