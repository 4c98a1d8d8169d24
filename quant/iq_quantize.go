// Quantizers of the lattice types IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S
// (this file) and IQ1_S, IQ1_M (iq1_quantize.go), ports of ggml's
// quantize_iq* (ggml-quants.c) that reproduce its bytes for the same input
// and importance weights.
//
// Each sub-block of 16 or 32 weights is folded to magnitudes (signs stored
// apart; IQ2_XXS, IQ2_XS and IQ3_XXS flip the least important weight's
// sign when needed so every 8 have an even number of negatives), then a
// scale is searched: for each candidate scale every group of 8 (or 4)
// magnitudes is rounded to lattice levels and, if that point is not on the
// grid, replaced by its best grid neighbour; the candidate with the best
// weighted least-squares fit wins. Sub-block scales are then coded as 4
// bits against the super-block's largest.
//
// Importance weights qw (ggml's quant_weights, one per element of the
// row; nil for none) set the error weights to qw·sqrt(σ² + x²). IQ2_XXS
// and IQ2_XS require them (ggml asserts); the others fall back to a
// type-specific weighting of x². QuantizeRowRef uses nil where ggml allows
// it (what llama-quantize writes without an imatrix) and all ones where it
// does not (the dummy importance matrix of llama.cpp's test-backend-ops).

package quant

import "fmt"

// iqGridSearch holds the parameters of ggml's per-sub-block scale search,
// which IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S share.
type iqGridSearch struct {
	lat   *iqLattice
	kMaxQ int32   // levels per coordinate (3: IQ2, 8: IQ3)
	nis   int     // candidates is = -nis..nis
	step  float32 // candidate id = (2·kMaxQ-1 + is·step)/max
	// onGrid0 is the initial on-grid flag of every group (false for IQ3_S,
	// so its refit runs when no candidate fits at all).
	onGrid0 bool
	// refitAll refits every group (not only the off-grid ones) after the
	// search (IQ3_S, IQ2_XXS); refitAlways refits even when every group
	// was on the grid (IQ2_XXS).
	refitAll, refitAlways bool
}

// search finds the scale of one sub-block of magnitudes xval (weights
// weight, square-rooted waux) starting from scale, with candidates
// relative to max, and writes the chosen levels to L.
func (p *iqGridSearch) search(xval, weight, waux []float32, L []int8, scale, max float32) float32 {
	n, dim := len(xval), p.lat.dim
	var laux [32]int8
	var onGrid, onAux [8]bool
	ng := n / dim
	for k := range ng {
		onGrid[k] = p.onGrid0
	}
	clear(L[:n])
	var best float32
	for is := -p.nis; is <= p.nis; is++ {
		id := float32(float32(2*p.kMaxQ-1)+float32(float32(is)*p.step)) / max
		thisScale := 1 / id
		for k := range ng {
			onAux[k] = p.roundGroup(xval[dim*k:dim*k+dim], waux[dim*k:dim*k+dim], laux[dim*k:dim*k+dim], id, thisScale)
		}
		sumqx, sumq2 := iqFit(xval, weight, laux[:n])
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			scale = sumqx / sumq2
			best = scale * sumqx
			copy(L[:n], laux[:n])
			onGrid = onAux
		}
	}
	off := false
	for k := range ng {
		off = off || !onGrid[k]
	}
	if (off || p.refitAlways) && scale > 0 {
		id := 1 / scale
		for k := range ng {
			if !p.refitAll && onGrid[k] {
				continue
			}
			p.roundGroup(xval[dim*k:dim*k+dim], waux[dim*k:dim*k+dim], L[dim*k:dim*k+dim], id, scale)
		}
		if sumqx, sumq2 := iqFit(xval, weight, L[:n]); sumq2 > 0 {
			scale = sumqx / sumq2
		}
	}
	return scale
}

// roundGroup rounds one group of magnitudes at inverse scale id to lattice
// levels l = nearest((id·x - 1)/2) clamped to [0, kMaxQ-1], replacing an
// off-grid point by its best neighbour at scale. It reports whether the
// rounded point was on the grid.
func (p *iqGridSearch) roundGroup(xval, waux []float32, l []int8, id, scale float32) bool {
	for i, x := range xval {
		v := nearestInt(0.5 * (float32(id*x) - 1))
		l[i] = int8(max(0, min(p.kMaxQ-1, v)))
	}
	key := p.lat.key(l)
	if p.lat.kmap[key] >= 0 {
		return true
	}
	p.lat.bestNeighbour(key, xval, waux, scale, l)
	return false
}

// iqFit returns Σw·x·q and Σw·q² for levels L (q = 2L+1).
func iqFit(xval, weight []float32, L []int8) (sumqx, sumq2 float32) {
	for i, x := range xval {
		w, q := weight[i], float32(2*int32(L[i])+1)
		sumqx += float32(float32(w*x) * q)
		sumq2 += float32(float32(w*q) * q)
	}
	return sumqx, sumq2
}

// gridIndex returns the grid index of a point of levels that must be on
// the grid (ggml aborts otherwise; the search never leaves one off).
func (lat *iqLattice) gridIndex(l []int8) int {
	gi := lat.kmap[lat.key(l)]
	if gi < 0 {
		panic(fmt.Sprintf("quant: lattice point %v not on the grid", l[:lat.dim]))
	}
	return int(gi)
}

// sumSquares returns Σx² over a super-block, in order.
func sumSquares(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return s
}

// iqWeights sets weight[i] = qw[i]·sqrt(σ² + x²) and waux = sqrt(weight);
// qw nil stands for all ones (the same bits: the product by 1 is exact).
func iqWeights(xb, qw, weight, waux []float32, sigma2 float32) {
	for i, x := range xb {
		weight[i] = sqrt32(sigma2 + float32(x*x))
		if qw != nil {
			weight[i] *= qw[i]
		}
	}
	for i, w := range weight[:len(xb)] {
		waux[i] = sqrt32(w)
	}
}

// foldSigns writes |x| of 8 weights to xval and returns their sign bits.
// With evenParity, an odd count of negatives is made even by flipping the
// weight of least w·x² (the first on a tie): its xval becomes negative
// and its sign bit toggles; bit 7 is then implied and dropped.
func foldSigns(xb, weight, xval []float32, evenParity bool) uint8 {
	var s uint8
	nflip := 0
	for i, x := range xb[:8] {
		if x >= 0 {
			xval[i] = x
		} else {
			xval[i] = -x
			nflip++
			s |= 1 << i
		}
	}
	if !evenParity {
		return s
	}
	if nflip%2 != 0 {
		imin := 0
		mn := float32(float32(weight[0]*xb[0]) * xb[0])
		for i := 1; i < 8; i++ {
			if ax := float32(float32(weight[i]*xb[i]) * xb[i]); ax < mn {
				mn, imin = ax, i
			}
		}
		xval[imin] = -xval[imin]
		s ^= 1 << imin
	}
	return s & 127
}

// maxOf returns the largest of xs (as ggml's MAX loop: the first element,
// then every larger one).
func maxOf(xs []float32) float32 {
	m := xs[0]
	for _, v := range xs[1:] {
		m = max32(m, v)
	}
	return m
}

// max32 is ggml's MAX(a, b) = a > b ? a : b.
func max32(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// subScale4 codes a sub-block scale against d as nearest((s/d - 1)/2)
// clamped to [0, 15].
func subScale4(s, id float32) uint32 {
	l := nearestInt(0.5 * (float32(id*s) - 1))
	return uint32(max(0, min(15, l)))
}

// makeQP is ggml's make_qp_quants: a non-negative scale for n magnitudes
// quantized to [0, nmax], searched over 9 candidates around nmax/max and
// improved coordinate by coordinate. Only the scale is used (IQ2_XXS
// starts its search from it). ggml keeps the levels in uint8_t, so a
// negative level (from the one weight whose sign IQ2_XXS flipped) wraps
// to 256+l where it is stored and read back; l keeps the int value where
// ggml uses the int; both are reproduced.
func makeQP(nmax int32, x, w []float32) float32 {
	var L [32]uint8
	var mx float32
	for _, v := range x {
		mx = max32(mx, v)
	}
	if mx < groupMaxEps {
		return 0
	}
	iscale := float32(nmax) / mx
	for i, v := range x {
		L[i] = uint8(nearestInt(iscale * v))
	}
	scale := 1 / iscale
	var bestMSE float32
	for i, v := range x {
		diff := v - float32(scale*float32(L[i]))
		bestMSE += float32(float32(w[i]*diff) * diff)
	}
	for is := int32(-4); is <= 4; is++ {
		if is == 0 {
			continue
		}
		iscaleIs := float32(float32(0.1*float32(is))+float32(nmax)) / mx
		scaleIs := 1 / iscaleIs
		var mse float32
		for i, v := range x {
			l := min(nmax, nearestInt(iscaleIs*v))
			diff := v - float32(scaleIs*float32(l))
			mse += float32(float32(w[i]*diff) * diff)
		}
		if mse < bestMSE {
			bestMSE, iscale = mse, iscaleIs
		}
	}
	var sumlx, suml2 float32
	for i, v := range x {
		l := min(nmax, nearestInt(iscale*v))
		L[i] = uint8(l)
		fl := float32(l)
		sumlx += float32(float32(w[i]*v) * fl)
		suml2 += float32(float32(w[i]*fl) * fl)
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			wi, li := w[i], float32(L[i])
			slx := sumlx - float32(float32(wi*v)*li)
			sl2 := suml2 - float32(float32(wi*li)*li)
			if slx > 0 && sl2 > 0 {
				nl := min(nmax, nearestInt(float32(v*sl2)/slx))
				if nl != int32(L[i]) {
					fl := float32(nl)
					slx += float32(float32(wi*v) * fl)
					sl2 += float32(float32(wi*fl) * fl)
					if float32(slx*slx)*suml2 > float32(sumlx*sumlx)*sl2 {
						L[i], sumlx, suml2 = uint8(nl), slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// iqSub returns qw[i:], or nil for nil.
func iqSub(qw []float32, i int) []float32 {
	if qw == nil {
		return nil
	}
	return qw[i:]
}

// iqQuantizeFunc returns the quantizer of a lattice type, which takes
// importance weights (nil: none, or all ones where ggml requires them).
func iqQuantizeFunc(t Type) func(src []float32, dst []byte, qw []float32) {
	switch t {
	case IQ2_XXS:
		return QuantizeIQ2_XXS
	case IQ2_XS:
		return QuantizeIQ2_XS
	case IQ2_S:
		return QuantizeIQ2_S
	case IQ3_XXS:
		return QuantizeIQ3_XXS
	case IQ3_S:
		return QuantizeIQ3_S
	case IQ1_S:
		return QuantizeIQ1_S
	case IQ1_M:
		return QuantizeIQ1_M
	}
	return nil
}

// iqRefFunc is the QuantizeRowRef form of a lattice type: no importance
// weights (all ones for IQ2_XXS, IQ2_XS and IQ1_S).
func iqRefFunc(t Type) func(src []float32, dst []byte) {
	q := iqQuantizeFunc(t)
	return func(src []float32, dst []byte) { q(src, dst, nil) }
}

// checkImportance panics unless qw is nil or one weight per element.
func checkImportance(op string, qw []float32, n int) {
	if qw != nil && len(qw) < n {
		panic(fmt.Sprintf("quant: %s: %d importance weights for %d elements", op, len(qw), n))
	}
}

// QuantizeIQ2_XXS quantizes to IQ2_XXS as ggml's quantize_iq2_xxs. ggml
// requires importance weights; qw nil stands for all ones.
func QuantizeIQ2_XXS(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ2_XXS", qw, len(src))
	p := iqGridSearch{lat: latticeIQ2XXS(), kMaxQ: 3, nis: 6, step: 0.1, refitAll: true, refitAlways: true}
	var weight, waux, xval [32]float32
	var L [32]int8
	var scales [QK_K / 32]float32
	var q2 [2 * QK_K / 32]uint32
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ2_XXS : (ibl+1)*sizeIQ2_XXS]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		clear(q2[:])
		sigma2 := sumSquares(xbl) / QK_K
		var maxScale float32
		for ib := range QK_K / 32 {
			xb := xbl[32*ib : 32*ib+32]
			iqWeights(xb, iqSub(qw, ibl*QK_K+32*ib), weight[:], waux[:], sigma2)
			var signs [4]uint8
			for k := range 4 {
				signs[k] = foldSigns(xb[8*k:], weight[8*k:], xval[8*k:], true)
			}
			mx := maxOf(xval[:])
			if mx < groupMaxEps {
				scales[ib] = 0
				continue
			}
			scale := makeQP(p.kMaxQ+1, xval[:], weight[:])
			effMax := scale * float32(p.kMaxQ)
			if effMax <= 0 {
				scales[ib] = 0
				continue
			}
			scale = p.search(xval[:], weight[:], waux[:], L[:], scale, effMax)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k] & 127
				}
			}
			for k := range 4 {
				gi := p.lat.gridIndex(L[8*k:])
				q2[2*ib] |= uint32(gi) << (8 * k)
				q2[2*ib+1] |= uint32(signs[k]) << (7 * k)
			}
			scales[ib] = scale
			maxScale = max32(maxScale, scale)
		}
		qs := b[offIQ2_XXSQs:]
		if maxScale == 0 {
			put16(b, 0)
			clear(qs)
			continue
		}
		d := maxScale / 31
		put16(b, FP32ToFP16(d))
		id := 1 / d
		for ib := range QK_K / 32 {
			q2[2*ib+1] |= subScale4(scales[ib], id) << 28
		}
		for j, v := range q2 {
			put32(qs[4*j:], v)
		}
	}
}

// QuantizeIQ2_XS quantizes to IQ2_XS as ggml's quantize_iq2_xs (scales per
// 16 weights). ggml requires importance weights; qw nil stands for all
// ones.
func QuantizeIQ2_XS(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ2_XS", qw, len(src))
	p := iqGridSearch{lat: latticeIQ2XS(), kMaxQ: 3, nis: 9, step: 0.1, onGrid0: true}
	var weight, waux, xval [16]float32
	var L [16]int8
	var scales [QK_K / 16]float32
	var q2 [QK_K / 8]uint16
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ2_XS : (ibl+1)*sizeIQ2_XS]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		clear(q2[:])
		clear(b[offIQ2_XSScales : offIQ2_XSScales+QK_K/32])
		sigma2 := sumSquares(xbl) / QK_K
		var maxScale float32
		for ib := range QK_K / 16 {
			xb := xbl[16*ib : 16*ib+16]
			iqWeights(xb, iqSub(qw, ibl*QK_K+16*ib), weight[:], waux[:], sigma2)
			var signs [2]uint8
			for k := range 2 {
				signs[k] = foldSigns(xb[8*k:], weight[8*k:], xval[8*k:], true)
			}
			mx := maxOf(xval[:])
			if mx < groupMaxEps {
				scales[ib] = 0
				continue
			}
			scale := p.search(xval[:], weight[:], waux[:], L[:], mx/float32(2*p.kMaxQ-1), mx)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k] & 127
				}
			}
			for k := range 2 {
				q2[2*ib+k] = uint16(p.lat.gridIndex(L[8*k:])) | uint16(signs[k])<<9
			}
			scales[ib] = scale
			maxScale = max32(maxScale, scale)
		}
		qs := b[offIQ2_XSQs : offIQ2_XSQs+QK_K/4]
		if maxScale == 0 {
			put16(b, 0)
			clear(qs)
			continue
		}
		d := maxScale / 31
		put16(b, FP32ToFP16(d))
		id := 1 / d
		for ib := range QK_K / 16 {
			l := byte(subScale4(scales[ib], id))
			if ib%2 == 0 {
				b[offIQ2_XSScales+ib/2] = l
			} else {
				b[offIQ2_XSScales+ib/2] |= l << 4
			}
		}
		for j, v := range q2 {
			put16(qs[2*j:], v)
		}
	}
}

// groupMaxEpsIQ2S is ggml's GROUP_MAX_EPS_IQ2_S (also GROUP_MAX_EPS_IQ3_XXS).
const groupMaxEpsIQ2S = float32(1e-8)

// QuantizeIQ2_S quantizes to IQ2_S as ggml's quantize_iq2_s (scales per 16
// weights, plain sign bytes). Without qw the error weights are σ²/4 + x²
// with σ² = 2·mean(x²).
func QuantizeIQ2_S(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ2_S", qw, len(src))
	p := iqGridSearch{lat: latticeIQ2S(), kMaxQ: 3, nis: 9, step: 0.1, onGrid0: true}
	var weight, waux, xval [16]float32
	var L [16]int8
	var scales [QK_K / 16]float32
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ2_S : (ibl+1)*sizeIQ2_S]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		clear(b)
		sigma2 := float32(2*sumSquares(xbl)) / QK_K
		var maxScale float32
		for ib := range QK_K / 16 {
			xb := xbl[16*ib : 16*ib+16]
			if qw != nil {
				iqWeights(xb, qw[ibl*QK_K+16*ib:], weight[:], waux[:], sigma2)
			} else {
				for i, x := range xb {
					weight[i] = float32(0.25*sigma2) + float32(x*x)
					waux[i] = sqrt32(weight[i])
				}
			}
			var signs [2]uint8
			for k := range 2 {
				signs[k] = foldSigns(xb[8*k:], weight[8*k:], xval[8*k:], false)
			}
			mx := maxOf(xval[:])
			if mx < groupMaxEpsIQ2S {
				scales[ib] = 0
				continue
			}
			scale := p.search(xval[:], weight[:], waux[:], L[:], mx/float32(2*p.kMaxQ-1), mx)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k]
				}
			}
			for k := range 2 {
				gi := p.lat.gridIndex(L[8*k:])
				i8 := 2*ib + k
				b[offIQ2_SQs+i8] = byte(gi)
				b[offIQ2_SQh+i8/4] |= byte(gi>>8) << (2 * (i8 % 4))
				b[offIQ2_SQs+QK_K/8+i8] = signs[k]
			}
			scales[ib] = scale
			maxScale = max32(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 31
		put16(b, FP32ToFP16(d*0.9875))
		id := 1 / d
		for ib := range QK_K / 16 {
			l := byte(subScale4(scales[ib], id))
			if ib%2 == 0 {
				b[offIQ2_SScales+ib/2] = l
			} else {
				b[offIQ2_SScales+ib/2] |= l << 4
			}
		}
	}
}

// QuantizeIQ3_XXS quantizes to IQ3_XXS as ggml's quantize_iq3_xxs. Without
// qw the error weights are x².
func QuantizeIQ3_XXS(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ3_XXS", qw, len(src))
	p := iqGridSearch{lat: latticeIQ3XXS(), kMaxQ: 8, nis: 15, step: 0.2, onGrid0: true}
	var weight, waux, xval [32]float32
	var L [32]int8
	var scales [QK_K / 32]float32
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ3_XXS : (ibl+1)*sizeIQ3_XXS]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		qs := b[offIQ3_XXSQs : offIQ3_XXSQs+3*QK_K/8]
		clear(qs)
		sigma2 := float32(2*sumSquares(xbl)) / QK_K
		var maxScale float32
		for ib := range QK_K / 32 {
			xb := xbl[32*ib : 32*ib+32]
			if qw != nil {
				iqWeights(xb, qw[ibl*QK_K+32*ib:], weight[:], waux[:], sigma2)
			} else {
				for i, x := range xb {
					weight[i] = x * x
					waux[i] = sqrt32(weight[i])
				}
			}
			var signs [4]uint8
			for k := range 4 {
				signs[k] = foldSigns(xb[8*k:], weight[8*k:], xval[8*k:], true)
			}
			mx := maxOf(xval[:])
			if mx < groupMaxEpsIQ2S {
				scales[ib] = 0
				continue
			}
			scale := p.search(xval[:], weight[:], waux[:], L[:], mx/float32(2*p.kMaxQ-1), mx)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k] & 127
				}
			}
			for k := range 8 {
				qs[8*ib+k] = byte(p.lat.gridIndex(L[4*k:]))
			}
			put32(qs[QK_K/4+4*ib:], uint32(signs[0])|uint32(signs[1])<<7|uint32(signs[2])<<14|uint32(signs[3])<<21)
			scales[ib] = scale
			maxScale = max32(maxScale, scale)
		}
		if maxScale == 0 {
			put16(b, 0)
			clear(qs)
			continue
		}
		d := maxScale / 31
		put16(b, FP32ToFP16(d*1.0125))
		id := 1 / d
		for ib := range QK_K / 32 {
			ss := qs[QK_K/4+4*ib:]
			put32(ss, le32(ss)|subScale4(scales[ib], id)<<28)
		}
	}
}

// QuantizeIQ3_S quantizes to IQ3_S as ggml's quantize_iq3_s (scales per
// 32 weights, plain sign bits). Without qw the error weights are x².
func QuantizeIQ3_S(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ3_S", qw, len(src))
	p := iqGridSearch{lat: latticeIQ3S(), kMaxQ: 8, nis: 9, step: 0.2, refitAll: true}
	var weight, waux, xval [32]float32
	var L [32]int8
	var scales [QK_K / 32]float32
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ3_S : (ibl+1)*sizeIQ3_S]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		clear(b)
		sigma2 := float32(2*sumSquares(xbl)) / QK_K
		var maxScale float32
		for ib := range QK_K / 32 {
			xb := xbl[32*ib : 32*ib+32]
			if qw != nil {
				iqWeights(xb, qw[ibl*QK_K+32*ib:], weight[:], waux[:], sigma2)
			} else {
				for i, x := range xb {
					weight[i] = x * x
					waux[i] = sqrt32(weight[i])
				}
			}
			var signs [4]uint8
			for k := range 4 {
				signs[k] = foldSigns(xb[8*k:], weight[8*k:], xval[8*k:], false)
			}
			mx := maxOf(xval[:])
			if mx == 0 {
				scales[ib] = 0
				continue
			}
			scale := p.search(xval[:], weight[:], waux[:], L[:], mx/float32(2*p.kMaxQ-1), mx)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k]
				}
			}
			for k := range 8 {
				gi := p.lat.gridIndex(L[4*k:])
				b[offIQ3_SQs+8*ib+k] = byte(gi)
				b[offIQ3_SQh+ib] |= byte(gi>>8) << k
			}
			copy(b[offIQ3_SSigns+4*ib:], signs[:])
			scales[ib] = scale
			maxScale = max32(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 31
		put16(b, FP32ToFP16(d*1.033))
		id := 1 / d
		for ib := 0; ib < QK_K/32; ib += 2 {
			b[offIQ3_SScales+ib/2] = byte(subScale4(scales[ib], id) | subScale4(scales[ib+1], id)<<4)
		}
	}
}
