// Reference quantizers of the K-quants (Q2_K ... Q6_K): the same search for
// scales and mins as ggml's quantize_row_q*_K_ref (the path llama-quantize
// takes without an importance matrix), so that a model we generate from
// float32 weights is byte-identical to llama-quantize's output.
//
// Float arithmetic is written in ggml's evaluation order with every product
// that feeds an addition rounded explicitly (float32(a*b) + c): no FMA.

package quant

import "math"

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is
// below it quantizes to zeros.
const groupMaxEps = float32(1e-15)

// sqrt32 is a correctly rounded float32 square root (sqrtf).
func sqrt32(f float32) float32 { return float32(math.Sqrt(float64(f))) }

// makeQKX2 finds a scale and a min for asymmetric quantization of x to
// [0, nmax] minimizing the weighted error, trying nstep+1 scale candidates
// (ggml's make_qkx2_quants). It returns the scale and -min (the positive
// offset stored in the block), and writes the codes to l.
func makeQKX2(nmax int, x, weights []float32, l, laux []uint8, rmin, rdelta float32, nstep int, useMAD bool) (scale, theMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(l[:n])
		return 0, -lo
	}
	fnmax := float32(nmax)
	iscale := fnmax / (hi - lo)
	scale = 1 / iscale
	var bestErr float32
	for i := 0; i < n; i++ {
		q := min(max(nearestInt(iscale*(x[i]-lo)), 0), int32(nmax))
		l[i] = uint8(q)
		diff := float32(scale*float32(q)) + lo - x[i]
		if useMAD {
			diff = abs32(diff)
		} else {
			diff = diff * diff
		}
		bestErr += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -lo
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + fnmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			q := min(max(nearestInt(iscale*(x[i]-lo)), 0), int32(nmax))
			laux[i] = uint8(q)
			w := weights[i]
			fq := float32(q)
			sumL += float32(w * fq)
			sumL2 += float32(w * fq * fq)
			sumXL += float32(w * fq * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curErr float32
			for i := 0; i < n; i++ {
				diff := float32(thisScale*float32(laux[i])) + thisMin - x[i]
				if useMAD {
					diff = abs32(diff)
				} else {
					diff = diff * diff
				}
				curErr += float32(weights[i] * diff)
			}
			if curErr < bestErr {
				copy(l[:n], laux[:n])
				bestErr = curErr
				scale = thisScale
				lo = thisMin
			}
		}
	}
	return scale, -lo
}

// makeQX finds a symmetric scale for codes in [-nmax, nmax-1] (stored +nmax
// in l) with error weights x² (ggml's make_qx_quants with rmse_type 1 and no
// importance weights).
func makeQX(nmax int, x []float32, l []int8) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		clear(l[:len(x)])
		return 0
	}
	fnmax := float32(nmax)
	lo, hi := -int32(nmax), int32(nmax)-1
	iscale := float32(-nmax) / mx
	var sumLX, sumL2 float32
	for i, v := range x {
		q := min(max(nearestInt(iscale*v), lo), hi)
		l[i] = int8(q + int32(nmax))
		w := v * v
		fq := float32(q)
		sumLX += float32(w * v * fq)
		sumL2 += float32(w * fq * fq)
	}
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(float32(0.1)*float32(is))) / mx
		sumLX, sumL2 = 0, 0
		for _, v := range x {
			q := min(max(nearestInt(iscale*v), lo), hi)
			w := v * v
			fq := float32(q)
			sumLX += float32(w * v * fq)
			sumL2 += float32(w * fq * fq)
		}
		if sumL2 > 0 && float32(sumLX*sumLX) > float32(best*sumL2) {
			for i, v := range x {
				q := min(max(nearestInt(iscale*v), lo), hi)
				l[i] = int8(q + int32(nmax))
			}
			scale = sumLX / sumL2
			best = scale * sumLX
		}
	}
	return scale
}

// makeQ3 finds a symmetric scale for codes in [-nmax, nmax-1] (stored +nmax
// in l), refining codes one at a time (ggml's make_q3_quants with do_rmse).
func makeQ3(nmax int, x []float32, l []int8) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		clear(l[:len(x)])
		return 0
	}
	lo, hi := -int32(nmax), int32(nmax)-1
	iscale := float32(-nmax) / mx
	var sumLX, sumL2 float32
	for i, v := range x {
		q := min(max(nearestInt(iscale*v), lo), hi)
		l[i] = int8(q)
		w := v * v
		fq := float32(q)
		sumLX += float32(w * v * fq)
		sumL2 += float32(w * fq * fq)
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(l[i])
			slx := sumLX - float32(w*v*li)
			if slx > 0 {
				sl2 := sumL2 - float32(w*li*li)
				nl := min(max(nearestInt(v*sl2/slx), lo), hi)
				if nl != int32(l[i]) {
					fnl := float32(nl)
					slx += float32(w * v * fnl)
					sl2 += float32(w * fnl * fnl)
					if sl2 > 0 && float32(float32(slx*slx)*sumL2) > float32(float32(sumLX*sumLX)*sl2) {
						l[i] = int8(nl)
						sumLX, sumL2 = slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range x {
		l[i] += int8(nmax)
	}
	if sumL2 > 0 {
		return sumLX / sumL2
	}
	return 0
}

// QuantizeRowQ2_K quantizes to Q2_K as ggml's quantize_row_q2_K_ref.
func QuantizeRowQ2_K(src []float32, dst []byte) {
	const q4scale = 15
	var (
		L       [QK_K]uint8
		laux    [16]uint8
		weights [16]float32
		mins    [QK_K / 16]float32
		scales  [QK_K / 16]float32
	)
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeQ2_K : (i+1)*sizeQ2_K]
		var maxScale, maxMin float32
		for j := 0; j < QK_K/16; j++ {
			xs := x[16*j : 16*j+16]
			for k, v := range xs {
				weights[k] = abs32(v)
			}
			scales[j], mins[j] = makeQKX2(3, xs, weights[:], L[16*j:16*j+16], laux[:], -0.5, 0.1, 15, true)
			maxScale = max(maxScale, scales[j])
			maxMin = max(maxMin, mins[j])
		}
		sc := b[offQ2_KScales : offQ2_KScales+16]
		if maxScale > 0 {
			iscale := q4scale / maxScale
			for j := range sc {
				sc[j] = uint8(nearestInt(iscale * scales[j]))
			}
			put16(b[offQ2_KD:], FP32ToFP16(maxScale/q4scale))
		} else {
			clear(sc)
			put16(b[offQ2_KD:], FP32ToFP16(0))
		}
		if maxMin > 0 {
			iscale := q4scale / maxMin
			for j := range sc {
				sc[j] |= uint8(nearestInt(iscale*mins[j])) << 4
			}
			put16(b[offQ2_KDmin:], FP32ToFP16(maxMin/q4scale))
		} else {
			put16(b[offQ2_KDmin:], FP32ToFP16(0))
		}
		dAll, dmAll := fp16(b[offQ2_KD:]), fp16(b[offQ2_KDmin:])
		for j := 0; j < QK_K/16; j++ {
			d := dAll * float32(sc[j]&0xf)
			if d == 0 {
				continue
			}
			dm := dmAll * float32(sc[j]>>4)
			for k := 0; k < 16; k++ {
				L[16*j+k] = uint8(min(max(nearestInt((x[16*j+k]+dm)/d), 0), 3))
			}
		}
		qs := b[offQ2_KQs : offQ2_KQs+64]
		for j := 0; j < QK_K; j += 128 {
			for l := 0; l < 32; l++ {
				qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
			}
		}
	}
}

// QuantizeRowQ3_K quantizes to Q3_K as ggml's quantize_row_q3_K_ref.
func QuantizeRowQ3_K(src []float32, dst []byte) {
	var (
		L      [QK_K]int8
		scales [QK_K / 16]float32
	)
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeQ3_K : (i+1)*sizeQ3_K]
		var maxScale, amax float32
		for j := 0; j < QK_K/16; j++ {
			scales[j] = makeQ3(4, x[16*j:16*j+16], L[16*j:16*j+16])
			if a := abs32(scales[j]); a > amax {
				amax, maxScale = a, scales[j]
			}
		}
		sc := b[offQ3_KScales : offQ3_KScales+12]
		clear(sc)
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := 0; j < QK_K/16; j++ {
				l := int8(nearestInt(iscale * scales[j]))
				l = min(max(l, -32), 31) + 32
				if j < 8 {
					sc[j] = uint8(l) & 0xf
				} else {
					sc[j-8] |= (uint8(l) & 0xf) << 4
				}
				l >>= 4
				sc[j%4+8] |= uint8(l) << (2 * (j / 4))
			}
			put16(b[offQ3_KD:], FP32ToFP16(1/iscale))
		} else {
			put16(b[offQ3_KD:], FP32ToFP16(0))
		}
		dAll := fp16(b[offQ3_KD:])
		for j := 0; j < QK_K/16; j++ {
			var s int8
			if j < 8 {
				s = int8(sc[j] & 0xf)
			} else {
				s = int8(sc[j-8] >> 4)
			}
			s = (s | int8((sc[8+j%4]>>(2*(j/4)))&3)<<4) - 32
			d := dAll * float32(s)
			if d == 0 {
				continue
			}
			for k := 0; k < 16; k++ {
				L[16*j+k] = int8(min(max(nearestInt(x[16*j+k]/d), -4), 3) + 4)
			}
		}
		hmask := b[offQ3_KHmask : offQ3_KHmask+32]
		clear(hmask)
		m, hm := 0, uint8(1)
		for j := 0; j < QK_K; j++ {
			if L[j] > 3 {
				hmask[m] |= hm
				L[j] -= 4
			}
			if m++; m == QK_K/8 {
				m, hm = 0, hm<<1
			}
		}
		qs := b[offQ3_KQs : offQ3_KQs+64]
		for j := 0; j < QK_K; j += 128 {
			for l := 0; l < 32; l++ {
				qs[j/4+l] = uint8(L[j+l]) | uint8(L[j+l+32])<<2 | uint8(L[j+l+64])<<4 | uint8(L[j+l+96])<<6
			}
		}
	}
}

// packScalesK4 stores the 6-bit scale ls and min lm of sub-block j in the
// 12-byte scales field of a Q4_K or Q5_K block.
func packScalesK4(sc []byte, j int, ls, lm uint8) {
	if j < 4 {
		sc[j] = ls
		sc[j+4] = lm
		return
	}
	sc[j+4] = ls&0xf | (lm&0xf)<<4
	sc[j-4] |= (ls >> 4) << 6
	sc[j] |= (lm >> 4) << 6
}

// quantizeK4Scales runs the per-sub-block search of Q4_K/Q5_K (32 weights
// per sub-block, weights av_x + |x|) and writes d, dmin and the packed
// scales into b (header layout shared by both types). L receives the codes
// to use where a sub-block's scale quantizes to zero.
func quantizeK4Scales(x []float32, b []byte, offScales int, L []uint8, nmax int, rmin float32, nstep int) {
	var (
		laux    [32]uint8
		weights [32]float32
		mins    [QK_K / 32]float32
		scales  [QK_K / 32]float32
	)
	var maxScale, maxMin float32
	for j := 0; j < QK_K/32; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrt32(sumX2 / 32)
		for k, v := range xs {
			weights[k] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQKX2(nmax, xs, weights[:], L[32*j:32*j+32], laux[:], rmin, 0.1, nstep, false)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := b[offScales : offScales+12]
	for j := 0; j < QK_K/32; j++ {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		packScalesK4(sc, j, ls, lm)
	}
	put16(b, FP32ToFP16(maxScale/63))
	put16(b[2:], FP32ToFP16(maxMin/63))
}

// QuantizeRowQ4_K quantizes to Q4_K as ggml's quantize_row_q4_K_ref.
func QuantizeRowQ4_K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeQ4_K : (i+1)*sizeQ4_K]
		quantizeK4Scales(x, b, offQ4_KScales, L[:], 15, -1, 20)
		scales := b[offQ4_KScales : offQ4_KScales+12]
		dAll, dmAll := fp16(b), fp16(b[offQ4_KDmin:])
		for j := 0; j < QK_K/32; j++ {
			sc, m := scaleMinK4(j, scales)
			d := dAll * float32(sc)
			if d == 0 {
				continue
			}
			dm := dmAll * float32(m)
			for k := 0; k < 32; k++ {
				L[32*j+k] = uint8(min(max(nearestInt((x[32*j+k]+dm)/d), 0), 15))
			}
		}
		qs := b[offQ4_KQs : offQ4_KQs+128]
		for j := 0; j < QK_K/64; j++ {
			for l := 0; l < 32; l++ {
				qs[32*j+l] = L[64*j+l] | L[64*j+l+32]<<4
			}
		}
	}
}

// QuantizeRowQ5_K quantizes to Q5_K as ggml's quantize_row_q5_K_ref.
func QuantizeRowQ5_K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeQ5_K : (i+1)*sizeQ5_K]
		quantizeK4Scales(x, b, offQ5_KScales, L[:], 31, -0.5, 15)
		scales := b[offQ5_KScales : offQ5_KScales+12]
		dAll, dmAll := fp16(b), fp16(b[offQ5_KDmin:])
		for j := 0; j < QK_K/32; j++ {
			sc, m := scaleMinK4(j, scales)
			d := dAll * float32(sc)
			if d == 0 {
				continue
			}
			dm := dmAll * float32(m)
			for k := 0; k < 32; k++ {
				L[32*j+k] = uint8(min(max(nearestInt((x[32*j+k]+dm)/d), 0), 31))
			}
		}
		qh := b[offQ5_KQh : offQ5_KQh+32]
		ql := b[offQ5_KQs : offQ5_KQs+128]
		clear(qh)
		m1, m2 := uint8(1), uint8(2)
		for n := 0; n < QK_K; n += 64 {
			for j := 0; j < 32; j++ {
				l1, l2 := L[n+j], L[n+j+32]
				if l1 > 15 {
					l1 -= 16
					qh[j] |= m1
				}
				if l2 > 15 {
					l2 -= 16
					qh[j] |= m2
				}
				ql[n/2+j] = l1 | l2<<4
			}
			m1 <<= 2
			m2 <<= 2
		}
	}
}

// QuantizeRowQ6_K quantizes to Q6_K as ggml's quantize_row_q6_K_ref.
func QuantizeRowQ6_K(src []float32, dst []byte) {
	var (
		L      [QK_K]int8
		scales [QK_K / 16]float32
	)
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*sizeQ6_K : (i+1)*sizeQ6_K]
		var maxScale, maxAbsScale float32
		for ib := 0; ib < QK_K/16; ib++ {
			s := makeQX(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
			scales[ib] = s
			if a := abs32(s); a > maxAbsScale {
				maxAbsScale, maxScale = a, s
			}
		}
		if maxAbsScale < groupMaxEps {
			clear(b)
			continue
		}
		iscale := -128 / maxScale
		put16(b[offQ6_KD:], FP32ToFP16(1/iscale))
		sc := b[offQ6_KScales : offQ6_KScales+16]
		for ib := range sc {
			sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
		}
		dAll := fp16(b[offQ6_KD:])
		for j := 0; j < QK_K/16; j++ {
			d := dAll * float32(int8(sc[j]))
			if d == 0 {
				continue
			}
			for k := 0; k < 16; k++ {
				L[16*j+k] = int8(min(max(nearestInt(x[16*j+k]/d), -32), 31) + 32)
			}
		}
		ql := b[offQ6_KQl : offQ6_KQl+128]
		qh := b[offQ6_KQh : offQ6_KQh+64]
		for j := 0; j < QK_K; j += 128 {
			for l := 0; l < 32; l++ {
				q1, q2 := uint8(L[j+l])&0xf, uint8(L[j+l+32])&0xf
				q3, q4 := uint8(L[j+l+64])&0xf, uint8(L[j+l+96])&0xf
				ql[j/2+l] = q1 | q3<<4
				ql[j/2+l+32] = q2 | q4<<4
				qh[j/4+l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
			}
		}
	}
}
