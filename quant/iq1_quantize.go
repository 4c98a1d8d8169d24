// Quantizers of IQ1_S and IQ1_M, ports of ggml's quantize_iq1_s and
// quantize_iq1_m that reproduce its bytes for the same input and
// importance weights.
//
// Each sub-block (32 weights in IQ1_S, 16 in IQ1_M) takes values from
// {-1, 0, +1} shifted by ±1/8. With three levels the weighted
// least-squares problem is solved exactly: sort the weights, and for every
// pair of split points (i1, i2) into three runs score the fit of the
// shifted levels from prefix sums (IQ1_S: one shift per 32; IQ1_M: one per
// 8, four combinations per 16). Groups of 8 whose levels are not on the
// 2048-point grid take the neighbour of least weighted error, and the
// scale is refit.
//
// ggml sorts with C qsort, which leaves the order of equal values
// unspecified; sort.SliceStable keeps them in index order, as glibc's merge
// sort does for arrays this small. The order matters only where the best
// split falls between equal values (see NUMERICS.md).

package quant

import (
	"math"
	"sort"
)

// groupMaxEpsIQ1S and groupMaxEpsIQ1M are ggml's GROUP_MAX_EPS_IQ1_S and
// GROUP_MAX_EPS_IQ1_M.
const (
	groupMaxEpsIQ1S = float32(1e-12)
	groupMaxEpsIQ1M = float32(1e-7)
)

// The shifted levels: x_p = level + 1/8, x_m = level - 1/8.
var (
	iq1XP = [3]float32{-1 + iq1Delta, iq1Delta, 1 + iq1Delta}
	iq1XM = [3]float32{-1 - iq1Delta, -iq1Delta, 1 - iq1Delta}
)

// iq1Sorted writes the indices of xb in ascending order of value (equal
// values in index order) to idx.
func iq1Sorted(xb []float32, idx []int) {
	for j := range xb {
		idx[j] = j
	}
	sort.SliceStable(idx[:len(xb)], func(a, b int) bool { return xb[idx[a]] < xb[idx[b]] })
}

// iq1BestNeighbour returns the neighbour of an off-grid key whose levels
// mapped through xx and times scale are nearest xb in the weighted squared
// error (ggml's iq1_find_best_neighbour2; the first on a tie, the first
// neighbour if none is below FLT_MAX).
func iq1BestNeighbour(lat *iqLattice, key int, xb, weight []float32, scale float32, xx *[3]float32) int {
	nb := lat.neighboursOf(key)
	best, bestD2 := int(nb[0]), float32(math.MaxFloat32)
	for _, j := range nb {
		var d2 float32
		for i, c := range lat.q[8*int(j) : 8*int(j)+8] {
			diff := float32(scale*xx[(c-1)/2]) - xb[i]
			d2 += float32(float32(weight[i]*diff) * diff)
		}
		if d2 < bestD2 {
			best, bestD2 = int(j), d2
		}
	}
	return best
}

// iq1Fit accumulates Σw·q·x and Σw·q² of 8 weights on grid point gi with
// levels mapped through xx (times mul).
func iq1Fit(lat *iqLattice, gi int, xb, weight []float32, xx *[3]float32, mul float32, sumqx, sumq2 *float32) {
	for j, c := range lat.q[8*gi : 8*gi+8] {
		w := weight[j]
		q := xx[(c-1)/2]
		if mul != 1 {
			q *= mul
		}
		*sumqx += float32(float32(w*q) * xb[j])
		*sumq2 += float32(float32(w*q) * q)
	}
}

// iq1Key packs 8 levels (0..2) into a lattice key.
func iq1Key(l []int8) int {
	k := 0
	for j, v := range l[:8] {
		k |= int(v) << (2 * j)
	}
	return k
}

// QuantizeIQ1_S quantizes to IQ1_S as ggml's quantize_iq1_s. ggml requires
// importance weights; qw nil stands for all ones.
func QuantizeIQ1_S(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ1_S", qw, len(src))
	lat := latticeIQ1S()
	const bs = 32
	var weight [bs]float32
	var sumx, sumw [bs + 1]float32
	var idx [bs]int
	var L [bs]int8
	var index [bs / 8]int
	var scales [QK_K / bs]float32
	var shifts [QK_K / bs]int8
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ1_S : (ibl+1)*sizeIQ1_S]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		clear(b)
		sigma2 := float32(2*sumSquares(xbl)) / QK_K
		var maxScale float32
		for ib := range QK_K / bs {
			xb := xbl[bs*ib : bs*ib+bs]
			for i, x := range xb {
				weight[i] = sqrt32(sigma2 + float32(x*x))
				if qw != nil {
					weight[i] *= qw[ibl*QK_K+bs*ib+i]
				}
			}
			mx := abs32(xb[0])
			for _, x := range xb[1:] {
				mx = max32(mx, abs32(x))
			}
			if mx < groupMaxEpsIQ1S {
				scales[ib], shifts[ib] = 0, 1
				continue
			}
			iq1Sorted(xb, idx[:])
			for j := range bs {
				i := idx[j]
				sumx[j+1] = sumx[j] + float32(weight[i]*xb[i])
				sumw[j+1] = sumw[j] + weight[i]
			}
			bestScore, scale := float32(-math.MaxFloat32), mx
			besti1, besti2, bestShift := -1, -1, 0
			for i1 := 0; i1 <= bs; i1++ {
				for i2 := i1; i2 <= bs; i2++ {
					a, m, c := sumx[i1]-sumx[0], sumx[i2]-sumx[i1], sumx[bs]-sumx[i2]
					wa, wm, wc := sumw[i1]-sumw[0], sumw[i2]-sumw[i1], sumw[bs]-sumw[i2]
					for _, shift := range [2]int{1, -1} {
						xx := &iq1XP
						if shift < 0 {
							xx = &iq1XM
						}
						sumqx := float32(float32(float32(a*xx[0])+float32(m*xx[1])) + float32(c*xx[2]))
						sumq2 := float32(float32(float32(float32(wa*xx[0])*xx[0])+float32(float32(wm*xx[1])*xx[1])) + float32(float32(wc*xx[2])*xx[2]))
						if sumq2 > 0 && sumqx*sumqx > bestScore*sumq2 {
							scale = sumqx / sumq2
							bestScore = scale * sumqx
							besti1, besti2, bestShift = i1, i2, shift
						}
					}
				}
			}
			if besti1 < 0 || besti2 < 0 || bestShift == 0 {
				scales[ib], shifts[ib] = 0, 1
				continue
			}
			for j := range bs {
				switch {
				case j < besti1:
					L[idx[j]] = 0
				case j < besti2:
					L[idx[j]] = 1
				default:
					L[idx[j]] = 2
				}
			}
			if scale < 0 {
				for j := range L {
					L[j] = 2 - L[j]
				}
				scale, bestShift = -scale, -bestShift
			}
			xx := &iq1XP
			if bestShift != 1 {
				xx = &iq1XM
			}
			allOnGrid := true
			for k := range bs / 8 {
				key := iq1Key(L[8*k:])
				gi := int(lat.kmap[key])
				if gi < 0 {
					allOnGrid = false
					gi = iq1BestNeighbour(lat, key, xb[8*k:], weight[8*k:], scale, xx)
				}
				index[k] = gi
			}
			if !allOnGrid {
				var sumqx, sumq2 float32
				for k := range bs / 8 {
					iq1Fit(lat, index[k], xb[8*k:], weight[8*k:], xx, 1, &sumqx, &sumq2)
				}
				if sumqx > 0 && sumq2 > 0 {
					scale = sumqx / sumq2
				}
			}
			var h uint16
			for k := range bs / 8 {
				b[offIQ1_SQs+(bs/8)*ib+k] = byte(index[k])
				h |= uint16(index[k]>>8) << (3 * k)
			}
			put16(b[offIQ1_SQh+2*ib:], h)
			scales[ib], shifts[ib] = scale, int8(bestShift)
			maxScale = max32(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 15
		put16(b, FP32ToFP16(d*1.125))
		id := 1 / d
		for ib := range QK_K / bs {
			l := max(0, min(7, nearestInt(0.5*(float32(id*scales[ib])-1))))
			if shifts[ib] == -1 {
				l |= 8
			}
			q := b[offIQ1_SQh+2*ib:]
			put16(q, le16(q)|uint16(l)<<12)
		}
	}
}

// QuantizeIQ1_M quantizes to IQ1_M as ggml's quantize_iq1_m. Without qw
// the error weights are x².
func QuantizeIQ1_M(src []float32, dst []byte, qw []float32) {
	checkImportance("IQ1_M", qw, len(src))
	lat := latticeIQ1S()
	const bs = 16
	masks := [4]byte{0x00, 0x80, 0x08, 0x88}
	var weight [bs]float32
	var idx [bs]int
	var L [bs]int8
	var index [bs / 8]int
	var scales [QK_K / bs]float32
	var shifts [QK_K / bs]int
	// shift combination k: group 0 uses x_p for k < 2, group 1 for even k
	xxOf := func(k, g int) *[3]float32 {
		if (g == 0 && k < 2) || (g == 1 && k%2 == 0) {
			return &iq1XP
		}
		return &iq1XM
	}
	setWeights := func(xb []float32, ibl, ib int, sigma2 float32) {
		for i, x := range xb {
			if qw != nil {
				weight[i] = qw[ibl*QK_K+bs*ib+i] * sqrt32(sigma2+float32(x*x))
			} else {
				weight[i] = x * x
			}
		}
	}
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		b := dst[ibl*sizeIQ1_M : (ibl+1)*sizeIQ1_M]
		xbl := src[ibl*QK_K : (ibl+1)*QK_K]
		clear(b)
		sigma2 := float32(2*sumSquares(xbl)) / QK_K
		var maxScale float32
		for ib := range QK_K / bs {
			xb := xbl[bs*ib : bs*ib+bs]
			setWeights(xb, ibl, ib, sigma2)
			mx := abs32(xb[0])
			for _, x := range xb[1:] {
				mx = max32(mx, abs32(x))
			}
			if mx < groupMaxEpsIQ1M {
				scales[ib], shifts[ib] = 0, 0
				continue
			}
			iq1Sorted(xb, idx[:])
			// The terms each sorted weight j adds at level lv to the sums of
			// the four shift combinations k (0: +,+; 1: +,-; 2: -,+; 3: -,-
			// for the first and second 8).
			var tx, t2 [3][bs][4]float32
			for j := range bs {
				i := idx[j]
				w, x := weight[i], xb[i]
				for lv := range 3 {
					p, m := iq1XP[lv], iq1XM[lv]
					wpx, wmx := float32(float32(w*p)*x), float32(float32(w*m)*x)
					wpp, wmm := float32(float32(w*p)*p), float32(float32(w*m)*m)
					if i < bs/2 {
						tx[lv][j], t2[lv][j] = [4]float32{wpx, wpx, wmx, wmx}, [4]float32{wpp, wpp, wmm, wmm}
					} else {
						tx[lv][j], t2[lv][j] = [4]float32{wpx, wmx, wpx, wmx}, [4]float32{wpp, wmm, wpp, wmm}
					}
				}
			}
			// ggml sums, for every split (i1, i2), the terms of j = 0..bs-1
			// in order from zero; the sums of j < i1 (level 0) and of
			// i1 <= j < i2 (level 1) are running prefixes of that same
			// sequence, so only the level-2 tail is summed per split: the
			// same additions in the same order.
			bestScore, scale := float32(-math.MaxFloat32), mx
			besti1, besti2, bestK := -1, -1, -1
			var p0x, p0q [4]float32
			for i1 := 0; i1 <= bs; i1++ {
				if i1 > 0 {
					for k := range 4 {
						p0x[k] += tx[0][i1-1][k]
						p0q[k] += t2[0][i1-1][k]
					}
				}
				s1x, s1q := p0x, p0q
				for i2 := i1; i2 <= bs; i2++ {
					if i2 > i1 {
						for k := range 4 {
							s1x[k] += tx[1][i2-1][k]
							s1q[k] += t2[1][i2-1][k]
						}
					}
					sumqx, sumq2 := s1x, s1q
					for j := i2; j < bs; j++ {
						for k := range 4 {
							sumqx[k] += tx[2][j][k]
							sumq2[k] += t2[2][j][k]
						}
					}
					for k := range 4 {
						if sumq2[k] > 0 && sumqx[k]*sumqx[k] > bestScore*sumq2[k] {
							scale = sumqx[k] / sumq2[k]
							bestScore = scale * sumqx[k]
							besti1, besti2, bestK = i1, i2, k
						}
					}
				}
			}
			if besti1 < 0 || besti2 < 0 || bestK < 0 {
				scales[ib], shifts[ib] = 0, 0
				continue
			}
			for j := range bs {
				switch {
				case j < besti1:
					L[idx[j]] = 0
				case j < besti2:
					L[idx[j]] = 1
				default:
					L[idx[j]] = 2
				}
			}
			if scale < 0 {
				for j := range L {
					L[j] = 2 - L[j]
				}
				scale, bestK = -scale, 3-bestK
			}
			allOnGrid := true
			for k := range bs / 8 {
				key := iq1Key(L[8*k:])
				gi := int(lat.kmap[key])
				if gi < 0 {
					allOnGrid = false
					gi = iq1BestNeighbour(lat, key, xb[8*k:], weight[8*k:], scale, xxOf(bestK, k))
				}
				index[k] = gi
			}
			if !allOnGrid {
				var sumqx, sumq2 float32
				for k := range bs / 8 {
					iq1Fit(lat, index[k], xb[8*k:], weight[8*k:], xxOf(bestK, k), 1, &sumqx, &sumq2)
				}
				if sumqx > 0 && sumq2 > 0 {
					scale = sumqx / sumq2
				}
			}
			b[2*ib] = byte(index[0])
			b[2*ib+1] = byte(index[1])
			b[offIQ1_MQh+ib] = byte(index[0]>>8) | byte(index[1]>>8)<<4
			scales[ib], shifts[ib] = scale, bestK
			maxScale = max32(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		sc := b[offIQ1_MScales : offIQ1_MScales+8]
		d := maxScale / 15
		id := 1 / d
		var sumqx, sumq2 float32
		for ib := range QK_K / bs {
			l := max(0, min(7, nearestInt(0.5*(float32(id*scales[ib])-1))))
			put16(sc[2*(ib/4):], le16(sc[2*(ib/4):])|uint16(l)<<(3*(ib%4)))
			b[offIQ1_MQh+ib] |= masks[shifts[ib]]
			xb := xbl[bs*ib : bs*ib+bs]
			setWeights(xb, ibl, ib, sigma2)
			qh := int(b[offIQ1_MQh+ib])
			for k := range bs / 8 {
				gi := int(b[2*ib+k]) + (qh<<(8-4*k))&0x700
				iq1Fit(lat, gi, xb[8*k:], weight[8*k:], xxOf(shifts[ib], k), float32(2*l+1), &sumqx, &sumq2)
			}
		}
		if sumq2 > 0 {
			d = sumqx / sumq2
		}
		s := FP32ToFP16(d * 1.1125)
		for j := range 4 {
			put16(sc[2*j:], le16(sc[2*j:])|(s>>(4*j)&0xf)<<12)
		}
	}
}
