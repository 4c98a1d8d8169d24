// The 4-bit non-linear types IQ4_NL and IQ4_XS and the microscaling type
// MXFP4: block layouts, code tables, dequantization, reference quantizers
// and dot products, each reproducing ggml's C (ggml-quants.c for the first
// three, ggml-cpu/quants.c's generic vec_dot for the products) bit for bit.
// As in the other files, every product that feeds an addition is rounded to
// float32 explicitly so no FMA can change the result.
//
// All three store a 4-bit index into a table of 16 signed integer levels
// per element, with a per-block scale:
//   - IQ4_NL: 32 weights, fp16 scale d: x = d * kvaluesIQ4NL[q].
//   - IQ4_XS: 256 weights in 8 sub-blocks of 32, fp16 super-block scale d
//     and a 6-bit sub-block scale ls: x = d * (ls-32) * kvaluesIQ4NL[q].
//   - MXFP4 (OCP microscaling FP4): 32 weights, an E8M0 scale e (a power
//     of two, 2^(e-127)) and FP4 E2M1 codes. ggml stores the E2M1 levels
//     doubled (integers) and halves the scale: x = 2^(e-128) * kvaluesMXFP4[q].
//
// IQ4_NL and MXFP4 weights multiply Q8_0 activations, IQ4_XS weights Q8_K
// (VecDotType).

package quant

import (
	"math"
	"unsafe"
)

// blockIQ4_NL holds 32 weights as 4-bit indices into kvaluesIQ4NL with one
// fp16 scale. 18 bytes per 32 weights: 4.5 bits per weight. qs[j] holds
// element j in its low nibble and element j+16 in its high nibble.
type blockIQ4_NL struct {
	d  uint16   // fp16 scale
	qs [16]byte // nibbles
}

// blockIQ4_XS is a super-block of 256 weights in 8 sub-blocks of 32, each
// with a 6-bit scale ls (stored +32: low 4 bits in scalesL, nibble ib%2 of
// byte ib/2; high 2 bits in scalesH, bits 2ib and 2ib+1). 136 bytes per 256
// weights: 4.25 bits per weight. Sub-block ib's nibbles are qs[16ib:16ib+16],
// laid out as in blockIQ4_NL.
type blockIQ4_XS struct {
	d       uint16    // fp16 super-block scale
	scalesH uint16    // high 2 bits of the 8 sub-block scales
	scalesL [4]byte   // low 4 bits of the 8 sub-block scales
	qs      [128]byte // nibbles
}

// blockMXFP4 holds 32 weights as FP4 E2M1 codes with one E8M0 scale byte.
// 17 bytes per 32 weights: 4.25 bits per weight. Nibbles as in blockIQ4_NL.
type blockMXFP4 struct {
	e  byte     // E8M0 scale exponent
	qs [16]byte // nibbles
}

const (
	offIQ4_NLQs = int(unsafe.Offsetof(blockIQ4_NL{}.qs))

	offIQ4_XSScalesH = int(unsafe.Offsetof(blockIQ4_XS{}.scalesH))
	offIQ4_XSScalesL = int(unsafe.Offsetof(blockIQ4_XS{}.scalesL))
	offIQ4_XSQs      = int(unsafe.Offsetof(blockIQ4_XS{}.qs))

	offMXFP4Qs = int(unsafe.Offsetof(blockMXFP4{}.qs))

	sizeIQ4_NL = int(unsafe.Sizeof(blockIQ4_NL{}))
	sizeIQ4_XS = int(unsafe.Sizeof(blockIQ4_XS{}))
	sizeMXFP4  = int(unsafe.Sizeof(blockMXFP4{}))
)

// kvaluesIQ4NL are the 16 levels of IQ4_NL and IQ4_XS (ggml's
// kvalues_iq4nl): a fitted non-uniform grid, denser near zero. There is no
// formula for them; the test checks them against ggml's dequantizer.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// kvaluesMXFP4 are the FP4 E2M1 values of codes 0..15, doubled so they are
// integers (ggml's kvalues_mxfp4): sign bit 3, two exponent bits, one
// mantissa bit; 0 0.5 1 1.5 2 3 4 6 and their negatives, times 2.
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half returns half the value of an E8M0 scale, 2^(e-128) (ggml's
// GGML_E8M0_TO_FP32_HALF), halved to undo the doubling of kvaluesMXFP4.
// e = 0 and 1 give the subnormals 2^-128 and 2^-127; e = 255, which E8M0
// reserves for NaN, gives 2^127 as in ggml (which does not handle NaN).
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// lutRow writes the 32 values of 16 bytes of 4-bit codes (low nibbles
// first, then high) as d * kv[code].
func lutRow(qs []byte, y []float32, d float32, kv *[16]int8) {
	for j, q := range qs {
		y[j] = d * float32(kv[q&0xf])
		y[j+16] = d * float32(kv[q>>4])
	}
}

// lutDot is the integer dot product of 16 bytes of 4-bit codes (low
// nibbles against y[0:16], high against y[16:32]) mapped through kv with
// 32 int8 activations, summed as ggml's generic C sums it.
func lutDot(qs, y []byte, kv *[16]int8) int32 {
	var s1, s2 int32
	for j, q := range qs {
		s1 += int32(int8(y[j])) * int32(kv[q&0xf])
		s2 += int32(int8(y[j+16])) * int32(kv[q>>4])
	}
	return s1 + s2
}

// DequantizeRowIQ4_NL converts IQ4_NL blocks: x = d * kvaluesIQ4NL[q].
func DequantizeRowIQ4_NL(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeIQ4_NL : (i+1)*sizeIQ4_NL]
		d := fp16(b)
		lutRow(b[offIQ4_NLQs:offIQ4_NLQs+16], dst[i*qk:(i+1)*qk], d, &kvaluesIQ4NL)
	}
}

// iq4XSScale returns the 6-bit scale of sub-block ib of an IQ4_XS block,
// still offset by 32.
func iq4XSScale(b []byte, ib int) int32 {
	lo := (b[offIQ4_XSScalesL+ib/2] >> (4 * (ib % 2))) & 0xf
	hi := (le16(b[offIQ4_XSScalesH:]) >> (2 * ib)) & 3
	return int32(lo) | int32(hi)<<4
}

// DequantizeRowIQ4_XS converts IQ4_XS super-blocks: x = d*(ls-32)*kvaluesIQ4NL[q].
func DequantizeRowIQ4_XS(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*sizeIQ4_XS : (i+1)*sizeIQ4_XS]
		d := fp16(b)
		for ib := 0; ib < QK_K/32; ib++ {
			dl := d * float32(iq4XSScale(b, ib)-32)
			lutRow(b[offIQ4_XSQs+16*ib:offIQ4_XSQs+16*ib+16], dst[i*QK_K+32*ib:i*QK_K+32*ib+32], dl, &kvaluesIQ4NL)
		}
	}
}

// DequantizeRowMXFP4 converts MXFP4 blocks: x = 2^(e-128) * kvaluesMXFP4[q]
// (exact: a small integer times a power of two; e = 255 and large codes
// overflow to ±Inf as in ggml).
func DequantizeRowMXFP4(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*sizeMXFP4 : (i+1)*sizeMXFP4]
		d := e8m0Half(b[0])
		lutRow(b[offMXFP4Qs:offMXFP4Qs+16], dst[i*qk:(i+1)*qk], d, &kvaluesMXFP4)
	}
}

// DotIQ4_NL is ggml_vec_dot_iq4_nl_q8_0 (the generic C form).
func DotIQ4_NL(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeIQ4_NL : (i+1)*sizeIQ4_NL]
		y := a[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		d := fp16(y) * fp16(x)
		sum += float32(d * float32(lutDot(x[offIQ4_NLQs:offIQ4_NLQs+16], y[offQ8_0Qs:offQ8_0Qs+qk], &kvaluesIQ4NL)))
	}
	return sum
}

// DotIQ4_XS is ggml_vec_dot_iq4_xs_q8_K (the generic C form): one float
// term per 32-element sub-block, added in order.
func DotIQ4_XS(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/QK_K; i++ {
		x := w[i*sizeIQ4_XS : (i+1)*sizeIQ4_XS]
		dy, q8, _ := q8KBlock(a, i)
		d4d8 := fp16(x) * dy
		for ib := 0; ib < QK_K/32; ib++ {
			dl := d4d8 * float32(iq4XSScale(x, ib)-32)
			sum += float32(dl * float32(lutDot(x[offIQ4_XSQs+16*ib:offIQ4_XSQs+16*ib+16], q8[32*ib:32*ib+32], &kvaluesIQ4NL)))
		}
	}
	return sum
}

// DotMXFP4 is ggml_vec_dot_mxfp4_q8_0 (the generic C form).
func DotMXFP4(n int, w, a []byte) float32 {
	var sum float32
	for i := 0; i < n/qk; i++ {
		x := w[i*sizeMXFP4 : (i+1)*sizeMXFP4]
		y := a[i*sizeQ8_0 : (i+1)*sizeQ8_0]
		d := fp16(y) * e8m0Half(x[0])
		sum += float32(d * float32(lutDot(x[offMXFP4Qs:offMXFP4Qs+16], y[offQ8_0Qs:offQ8_0Qs+qk], &kvaluesMXFP4)))
	}
	return sum
}

// QuantizeRowMXFP4 quantizes to MXFP4 as ggml's quantize_row_mxfp4_ref
// (which llama-quantize also uses; MXFP4 takes no importance matrix): the
// scale exponent is e = floor(log2(amax)) - 2 + 127, so the block's largest
// magnitude lands in [4, 8) times 2^(e-127), near the top E2M1 level 6, and
// each element takes the level of least |error| (the first on a tie).
//
// log2 is rounded to float32 before the floor, as C's log2f: an amax just
// below a power of two can round up to it. The float-to-uint8 conversion
// wraps as x86 does (amax below 2^-125 gives a wrapped exponent in ggml;
// this reproduces it rather than inventing a different answer).
func QuantizeRowMXFP4(src []float32, dst []byte) {
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
		qs := b[offMXFP4Qs : offMXFP4Qs+16]
		if nearestMXFP4(x, e, amax, qs) {
			continue
		}
		for j := range qs {
			qs[j] = bestIndexMXFP4(x[j], d) | bestIndexMXFP4(x[j+16], d)<<4
		}
	}
}

// mxfp4Floor maps floor(|x|/d), 0..32, to the largest code 0..7 whose
// level (0 1 2 3 4 6 8 12) is at most |x|/d.
var mxfp4Floor = [33]byte{0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}

// nearestMXFP4 writes the codes of one block as bestIndexMXFP4 chooses
// them, without trying all 16 levels: the level below |x| and the one above
// it are the only candidates, and the sign of x picks the half of the
// table. It reports false, writing nothing reliable, where that shortcut is
// not exact, and the caller then runs bestIndexMXFP4.
//
// Why it gives the same code: with d a normal power of two (2 <= e <= 250)
// and every |x| <= amax <= 32d (the exponent rule puts amax below 16d),
// |x|/d and the levels k·d are exact, and any two levels differ by at least
// d, far more than a rounding step of values below 64d; so every level
// beyond the two around |x| has a strictly larger rounded error, and of the
// two the lower code wins a tie, as in bestIndexMXFP4's scan. For x >= 0 a
// negative level -k·d has error x + k·d, never below |x - k·d| (the positive
// code, lower, wins a tie); for x < 0 the positive levels lose the same way
// to the negative codes 9..15, and a tie of a mirrored pair can only be
// above the error |x| of code 0. NaN (never a candidate in the scan, which
// then answers 0) takes the caller's path.
func nearestMXFP4(x []float32, e byte, amax float32, qs []byte) bool {
	if e < 2 || e > 250 {
		return false
	}
	d := e8m0Half(e)
	if !(amax <= 32*d) {
		return false
	}
	inv := 1 / d
	var lv [8]float32
	for m := range 8 {
		lv[m] = float32(float32(kvaluesMXFP4[m]) * d)
	}
	for j, v := range x {
		a := abs32(v)
		if a != a {
			return false
		}
		m := mxfp4Floor[min(int(float32(a*inv)), 32)]
		if m < 7 && lv[m+1]-a < a-lv[m] {
			m++
		}
		if v < 0 && m > 0 {
			m += 8
		}
		if j < 16 {
			qs[j] = m
		} else {
			qs[j-16] |= m << 4
		}
	}
	return true
}

// cvttss2si converts to int32 truncating toward zero as x86's cvttss2si
// (what C's float-to-integer casts compile to there): NaN and values out of
// int32's range give math.MinInt32.
func cvttss2si(f float32) int32 {
	if f != f || f >= 1<<31 || f < -(1<<31) {
		return math.MinInt32
	}
	return int32(f)
}

// bestIndexMXFP4 returns the code whose level times d is nearest x, the
// lowest code on a tie (ggml's best_index_mxfp4).
func bestIndexMXFP4(x, d float32) byte {
	best := byte(0)
	bestErr := abs32(float32(float32(kvaluesMXFP4[0])*d) - x)
	for i := 1; i < 16; i++ {
		if err := abs32(float32(float32(kvaluesMXFP4[i])*d) - x); err < bestErr {
			best, bestErr = byte(i), err
		}
	}
	return best
}

// bestIndexIQ4 returns the index of the level of kvaluesIQ4NL nearest x,
// the upper one on a tie (ggml's best_index_int8).
func bestIndexIQ4(x float32) uint8 {
	v := &kvaluesIQ4NL
	if x <= float32(v[0]) {
		return 0
	}
	if x >= float32(v[15]) {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(v[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(v[mu-1]) < float32(v[mu])-x {
		return uint8(mu - 1)
	}
	return uint8(mu)
}

// iq4NLTries is the number of scale candidates on each side that ggml's
// quantize_iq4_nl and quantize_iq4_xs try (ntry = 7).
const iq4NLTries = 7

// iq4BlockScale finds the scale of one 32-element block of IQ4 levels the
// way ggml's quantize_row_iq4_nl_impl does without an importance matrix
// (weights x²): start from d = max/127 (max: the first element of largest
// magnitude), refit d by least squares on the chosen levels, then try the
// 2·ntry+1 scales (itry-127)/max, keeping the one with the best weighted
// fit. The codes it leaves in l are those of the first fit. It returns the
// scale and whether the block is not all below GROUP_MAX_EPS (else the
// scale is 0 and l is untouched).
func iq4BlockScale(xb []float32, l []uint8, ntry int) (float32, bool) {
	var weight [32]float32
	var amax, max float32
	for j, v := range xb {
		weight[j] = v * v
		if a := abs32(v); a > amax {
			amax, max = a, v
		}
	}
	if amax < groupMaxEps {
		return 0, false
	}
	v0 := float32(kvaluesIQ4NL[0])
	var d float32
	if ntry > 0 {
		d = -max / v0
	} else {
		d = max / v0
	}
	id := 1 / d
	var sumqx, sumq2 float32
	for j, v := range xb {
		k := bestIndexIQ4(float32(id * v))
		l[j] = k
		q := float32(kvaluesIQ4NL[k])
		wq := weight[j] * q
		sumqx += float32(wq * v)
		sumq2 += float32(wq * q)
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := -ntry; itry <= ntry; itry++ {
		id = float32(int32(itry)+int32(kvaluesIQ4NL[0])) / max
		sumqx, sumq2 = 0, 0
		for j, v := range xb {
			q := float32(kvaluesIQ4NL[bestIndexIQ4(float32(id*v))])
			wq := weight[j] * q
			sumqx += float32(wq * v)
			sumq2 += float32(wq * q)
		}
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d, true
}

// packIQ4 packs 32 level indices per block into nibbles: element j of a
// block in the low nibble of byte j, element j+16 in the high nibble.
func packIQ4(l []uint8, qs []byte) {
	for i := 0; i < len(l)/32; i++ {
		for j := 0; j < 16; j++ {
			qs[16*i+j] = l[32*i+j] | l[32*i+16+j]<<4
		}
	}
}

// QuantizeRowIQ4_NL quantizes to IQ4_NL as llama-quantize does without an
// importance matrix: ggml's quantize_iq4_nl with quant_weights NULL
// (ntry = 7; weights x²), then every element is re-coded with 1/d. ggml's
// quantize_row_iq4_nl_ref (ntry = -1, no scale search) is a different,
// cruder quantizer that no file writer uses; it is not reproduced.
func QuantizeRowIQ4_NL(src []float32, dst []byte) {
	var l [32]uint8
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : (i+1)*qk]
		b := dst[i*sizeIQ4_NL : (i+1)*sizeIQ4_NL]
		d, _ := iq4BlockScale(x, l[:], iq4NLTries)
		put16(b, FP32ToFP16(d))
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for j, v := range x {
			l[j] = bestIndexIQ4(float32(id * v))
		}
		packIQ4(l[:], b[offIQ4_NLQs:offIQ4_NLQs+16])
	}
}

// QuantizeRowIQ4_XS quantizes to IQ4_XS as ggml's quantize_row_iq4_xs_ref
// (= quantize_iq4_xs without an importance matrix, what llama-quantize
// writes): each sub-block's scale as in QuantizeRowIQ4_NL, then the
// super-block scale d = -max_scale/32 (max_scale: the first sub-block scale
// of largest magnitude), each sub-block scale rounded to a 6-bit multiple
// of d and every element re-coded with it.
func QuantizeRowIQ4_XS(src []float32, dst []byte) {
	var l [QK_K]uint8
	var scales [QK_K / 32]float32
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeIQ4_XS : (i+1)*sizeIQ4_XS]
		var maxScale, amaxScale float32
		for ib := range scales {
			d, _ := iq4BlockScale(x[32*ib:32*ib+32], l[32*ib:32*ib+32], iq4NLTries)
			scales[ib] = d
			if a := abs32(d); a > amaxScale {
				amaxScale, maxScale = a, d
			}
		}
		d := -maxScale / 32
		put16(b, FP32ToFP16(d))
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var scalesH uint16
		scalesL := b[offIQ4_XSScalesL : offIQ4_XSScalesL+4]
		for ib, s := range scales {
			ls := min(31, max(-32, nearestInt(float32(id*s))))
			dl := d * float32(ls)
			var idl float32
			if dl != 0 {
				idl = 1 / dl
			}
			for j, v := range x[32*ib : 32*ib+32] {
				l[32*ib+j] = bestIndexIQ4(float32(idl * v))
			}
			ls += 32
			if ib%2 == 0 {
				scalesL[ib/2] = byte(ls & 0xf)
			} else {
				scalesL[ib/2] |= byte(ls&0xf) << 4
			}
			scalesH |= uint16(ls>>4) << (2 * ib)
		}
		put16(b[offIQ4_XSScalesH:], scalesH)
		packIQ4(l[:], b[offIQ4_XSQs:offIQ4_XSQs+128])
	}
}
