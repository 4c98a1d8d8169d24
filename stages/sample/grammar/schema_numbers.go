// schema_numbers.go: integer and number bounds of a JSON schema as exact
// GBNF digit ranges (as llama.cpp's _generate_min_max_int does).

package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
)

// bound reads a numeric keyword as an exact rational.
func bound(s *jobj, k, path string) (*big.Rat, error) {
	v, ok := s.get(k)
	if !ok {
		return nil, nil
	}
	n, isNum := v.(json.Number)
	r, ok2 := new(big.Rat).SetString(n.String())
	if !isNum || !ok2 {
		return nil, schemaErr(path+"/"+k, "%s must be a number", k)
	}
	return r, nil
}

// maxDigits is the longest integer the number rules produce (as llama.cpp's
// integral-part).
const maxDigits = 16

var intLimit = new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(maxDigits), nil), big.NewInt(1))

func (c *schemaConv) integer(s *jobj, name, path string) (string, error) {
	var lo, hi *big.Int
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		r, err := bound(s, k, path)
		if err != nil || r == nil {
			if err != nil {
				return "", err
			}
			continue
		}
		var v *big.Int
		switch k {
		case "minimum": // ceil
			v = ceil(r)
		case "exclusiveMinimum": // floor + 1
			v = new(big.Int).Add(floor(r), big.NewInt(1))
		case "maximum":
			v = floor(r)
		case "exclusiveMaximum": // ceil - 1
			v = new(big.Int).Sub(ceil(r), big.NewInt(1))
		}
		if strings.HasSuffix(k, "inimum") {
			if lo == nil || v.Cmp(lo) > 0 {
				lo = v
			}
		} else if hi == nil || v.Cmp(hi) < 0 {
			hi = v
		}
	}
	if lo == nil && hi == nil {
		return c.use("integer"), nil
	}
	for _, v := range []*big.Int{lo, hi} {
		if v != nil && new(big.Int).Abs(v).Cmp(intLimit) > 0 {
			return "", schemaErr(path, "integer bound %v has more than %d digits", v, maxDigits)
		}
	}
	if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
		return "", schemaErr(path, "no integer between the minimum and the maximum")
	}
	body := intRange(lo, hi)
	return c.rule(name, "("+body+") "+c.use("space")), nil
}

func (c *schemaConv) number(s *jobj, name, path string) (string, error) {
	lo, err := bound(s, "minimum", path)
	if err != nil {
		return "", err
	}
	hi, err := bound(s, "maximum", path)
	if err != nil {
		return "", err
	}
	if lo == nil && hi == nil {
		return c.use("number"), nil
	}
	if lo != nil && !lo.IsInt() || hi != nil && !hi.IsInt() {
		return "", schemaErr(path, "number minimum/maximum are supported only as integers (use integer bounds, or drop them)")
	}
	var l, h *big.Int
	if lo != nil {
		l = lo.Num()
	}
	if hi != nil {
		h = hi.Num()
	}
	for _, v := range []*big.Int{l, h} {
		if v != nil && new(big.Int).Abs(v).Cmp(intLimit) > 0 {
			return "", schemaErr(path, "number bound %v has more than %d digits", v, maxDigits)
		}
	}
	if l != nil && h != nil && l.Cmp(h) > 0 {
		return "", schemaErr(path, "minimum above maximum")
	}
	neg := func(v *big.Int) *big.Int { return new(big.Int).Neg(v) }
	var alts []string
	switch {
	case l != nil && l.Sign() >= 0: // [l, h]
		alts = append(alts, c.magnitude(l, h))
	case h != nil && h.Sign() <= 0: // -[|h|, |l|]
		var ml *big.Int
		if l != nil {
			ml = neg(l)
		}
		alts = append(alts, `"-" `+c.magnitude(neg(h), ml))
	default: // l < 0 (or none) < h (or none): -[0, |l|] or [0, h]
		var ml *big.Int
		if l != nil {
			ml = neg(l)
		}
		alts = append(alts, `"-" `+c.magnitude(big.NewInt(0), ml), c.magnitude(big.NewInt(0), h))
	}
	return c.rule(name, "("+strings.Join(alts, " | ")+") "+c.use("space")), nil
}

// magnitude matches the unsigned decimals (no exponent) in [a, b], a >= 0
// and b (nil: unbounded) integers: an integral part in [a, b-1] with any
// fraction, or b with a zero fraction.
func (c *schemaConv) magnitude(a, b *big.Int) string {
	frac := `("." ` + c.use("decimal-part") + `)?`
	if b == nil {
		return "(" + intRange(a, nil) + ") " + frac
	}
	top := gbnfLiteral(b.String()) + ` ("." "0"{1,16})?`
	if a.Cmp(b) == 0 {
		return "(" + top + ")"
	}
	return "((" + intRange(a, new(big.Int).Sub(b, big.NewInt(1))) + ") " + frac + " | " + top + ")"
}

func floor(r *big.Rat) *big.Int {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	_ = m
	return q // DivMod rounds toward -inf for positive divisors
}

func ceil(r *big.Rat) *big.Int {
	f := floor(r)
	if !r.IsInt() {
		f.Add(f, big.NewInt(1))
	}
	return f
}

// intRange returns GBNF alternatives matching exactly the decimal
// integers in [lo, hi] (nil: unbounded, up to maxDigits digits).
func intRange(lo, hi *big.Int) string {
	zero := big.NewInt(0)
	switch {
	case lo != nil && lo.Sign() >= 0:
		return nonNeg(lo, hi)
	case hi != nil && hi.Sign() < 0: // all negative: "-" |hi|..|lo|
		var nlo *big.Int
		if lo != nil {
			nlo = new(big.Int).Neg(lo)
		}
		return `"-" (` + nonNeg(new(big.Int).Neg(hi), nlo) + ")"
	default: // lo < 0 (or none) <= hi (or none)
		var nlo *big.Int
		if lo != nil {
			nlo = new(big.Int).Neg(lo)
		}
		return `"-" (` + nonNeg(big.NewInt(1), nlo) + ") | " + nonNeg(zero, hi)
	}
}

// nonNeg matches the integers in [lo, hi], 0 <= lo, hi nil = up to
// maxDigits digits, written without leading zeros.
func nonNeg(lo, hi *big.Int) string {
	if hi == nil {
		hi = intLimit
	}
	a, b := lo.String(), hi.String()
	var alts []string
	for d := len(a); d <= len(b); d++ {
		from, to := a, b
		if d > len(a) {
			from = "1" + strings.Repeat("0", d-1)
		}
		if d < len(b) {
			to = strings.Repeat("9", d)
		}
		alts = append(alts, sameLen(from, to)...)
	}
	return strings.Join(alts, " | ")
}

// sameLen matches the digit strings of one length between a and b.
func sameLen(a, b string) []string {
	if a == b {
		return []string{gbnfLiteral(a)}
	}
	if len(a) == 1 {
		return []string{"[" + a + "-" + b + "]"}
	}
	if a[0] == b[0] {
		var out []string
		for _, s := range sameLen(a[1:], b[1:]) {
			out = append(out, gbnfLiteral(a[:1])+" ("+s+")")
		}
		return []string{strings.Join(out, " | ")}
	}
	n := len(a) - 1
	allZero := strings.Trim(a[1:], "0") == ""
	allNine := strings.Trim(b[1:], "9") == ""
	var out []string
	lo, hi := a[0], b[0]
	if !allZero {
		out = append(out, gbnfLiteral(a[:1])+" ("+strings.Join(sameLen(a[1:], strings.Repeat("9", n)), " | ")+")")
		lo++
	}
	if !allNine {
		hi--
	}
	if lo <= hi {
		out = append(out, fmt.Sprintf("[%c-%c] [0-9]{%d}", lo, hi, n))
	}
	if !allNine {
		out = append(out, gbnfLiteral(b[:1])+" ("+strings.Join(sameLen(strings.Repeat("0", n), b[1:]), " | ")+")")
	}
	return out
}
