package cpu

// backend_math.go: a float32 exp for the Backend's softmax and SwiGLU
// loops. Ref computes float32(math.Exp(float64(x))); expf evaluates a
// polynomial in float64 whose error (below 1e-9 relative) is far under
// float32's rounding step, so its result is the correctly rounded float32
// in all but rare half-way cases (then one ulp away); limits, NaN and
// results that are float32 subnormals go to expfSlow. expf is over the
// compiler's inlining budget (cost 151 of 80, go build -gcflags=-m), so
// its common case is expPoly, under it (cost 75): the two hot loops,
// expSub (softmax) and swiglu, test the range and call expPoly as expf
// does, and a test keeps the three in agreement.

import "math"

const (
	log2e     = 1.4426950408889634
	ln2       = 0.6931471805599453
	roundBias = 0x1.8p52 // adding and subtracting it rounds to an integer
)

// expf returns e^x rounded to float32.
func expf(x float32) float32 {
	if !(x > -87 && x < 88) { // also NaN
		return expfSlow(x)
	}
	return float32(expPoly(float64(x)))
}

// expPoly returns e^f for f in (-87, 88), in float64: expf's common case.
// Keep it under the inlining budget: the hot loops call it once per
// element.
func expPoly(f float64) float64 {
	k := f*log2e + roundBias - roundBias
	r := f - k*ln2 // |r| ≤ ln2/2
	// e^r by its Taylor series to r^7/7! (truncation error < 4e-9 for
	// |r| ≤ 0.35).
	r2 := r * r // Estrin's scheme: shorter dependency chains than Horner's
	p := (1 + r) + r2*(1.0/2+r*(1.0/6)) + r2*r2*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040)))
	return p * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// expfSlow is expf outside (-87, 88): overflow, subnormal results, NaN.
func expfSlow(x float32) float32 {
	switch {
	case x != x:
		return x
	case x >= 88.8:
		return float32(math.Inf(1))
	case x < -104:
		return 0
	}
	return float32(math.Exp(float64(x)))
}

// expSub sets row[i] = expf(row[i] - mx) and returns the sum of the
// results in float64 (softmax's numerator and denominator; expf's body
// with expPoly inlined: this loop runs once per attention score).
func expSub(row []float32, mx float32) float64 {
	var sum float64
	for i, v := range row {
		x := v - mx
		var e float32
		if x > -87 && x < 88 {
			e = float32(expPoly(float64(x)))
		} else {
			e = expfSlow(x)
		}
		row[i] = e
		sum += float64(e)
	}
	return sum
}
