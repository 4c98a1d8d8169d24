package cpu

// kern_fa.go: the tile of prefill attention (flash attention) that
// backend_attn_flash.go's block runs for each run of cached positions: the
// C kernel (kern_avx2_fa.c, on the AVX2 and AVX-512 paths) or flashTileGo.

import (
	"fmt"
	"math"
)

// FlashRowBlock is the number of query rows FlashTile's packed query
// layout groups together (rp must be a multiple of it).
const FlashRowBlock = 16

// FlashScratch returns the floats of scratch FlashTile needs for rp query
// rows (padded) and a tile of L positions.
func FlashScratch(rp, L int) int { return L*(rp+16) + rp }

// FlashPackV writes V rows j0... (n of them, row j at v[j*vs:][:dv]) into
// dst, one head's V in FlashTile's layout for positions [0, rows): column
// blocks of FlashRowBlock columns (the last one dv%16 wide if narrower),
// each rows × width floats; columns [c, c+w) at dst[c*rows:], row j of
// them at dst[c*rows+j*w:][:w]. Every V row a tile reads stays in one
// stream per block, whatever the cache's row stride.
func FlashPackV(dst []float32, rows, j0 int, v []float32, vs, dv, n int) {
	if j0 < 0 || n < 0 || j0+n > rows || len(dst) < rows*dv || n > 0 && len(v) < (n-1)*vs+dv {
		panic(fmt.Sprintf("cpu: FlashPackV: %d rows of %d from %d (stride %d, %d floats) into %d of %d floats",
			n, dv, j0, vs, len(v), rows, len(dst)))
	}
	for c := 0; c < dv; c += FlashRowBlock {
		w := min(FlashRowBlock, dv-c)
		blk := dst[c*rows+j0*w:]
		for j := range n {
			copy(blk[j*w:(j+1)*w], v[j*vs+c:j*vs+c+w])
		}
	}
}

// FlashTile runs one tile of prefill attention with the online softmax
// (the flash-attention recurrence) for query rows r < R:
//
//   - S[r][j] = q_r · K_j for the L positions j0+j, K row j at
//     kp[j*dk:][:dk]; q_r, already multiplied by the softmax scale, is
//     qt[(r/16*dk + d)*16 + r%16] (rp/16 blocks of dk × 16 floats, rp a
//     multiple of FlashRowBlock, R ≤ rp, padding rows zero);
//   - with mask, positions j0+j > pos[r] are left out (causal diagonal),
//     and with win > 0 also positions j0+j ≤ pos[r]-win (a sliding
//     window, model.Attn.Window);
//   - m[r] becomes max(m[r], max_j S[r][j]), c = exp(m_old - m_new),
//     l[r] = l[r]·c + Σ_j exp(S[r][j] - m_new), and
//     acc[r*dv:][:dv] = acc·c + Σ_j exp(S[r][j] - m_new)·V_j, V row j0+j
//     read from vp, the head's V for positions [0, vn) as FlashPackV
//     writes it.
//
// m starts at -Inf and l, acc at zero; after the last tile, row r of the
// attention is acc_r / l[r]. A row none of whose positions has been
// unmasked yet keeps m = -Inf and l = 0 (a window may hide a row's first
// tiles). m and l of padding rows
// (R ≤ r < rp) are unspecified. Scratch holds FlashScratch(rp, L) floats.
// The SIMD paths use a float32 exp within 2 ulp and float32 sums of each
// tile; the Go path float64 exp rounded to float32. Every path differs from
// the plain softmax only in rounding.
func (k *Kernels) FlashTile(qt []float32, rp, R, dk, dv int, kp, vp []float32, vn, L, j0 int, pos []int32, mask bool, win int,
	m []float32, l []float64, acc, scratch []float32) {
	const op = "FlashTile"
	switch {
	case rp <= 0 || rp%FlashRowBlock != 0 || R <= 0 || R > rp || dk <= 0 || dv <= 0 || L < 0 || j0 < 0 || j0+L > vn:
		panic(fmt.Sprintf("cpu: %s: %d rows (%d padded), dims %d/%d, %d positions from %d of %d", op, R, rp, dk, dv, L, j0, vn))
	case L == 0:
		return
	case len(qt) < rp*dk || len(pos) < rp || len(m) < rp || len(l) < rp || len(acc) < R*dv:
		panic(fmt.Sprintf("cpu: %s: %d rows of %d/%d need %d queries, %d positions, maxima and sums and %d accumulators, have %d, %d, %d, %d, %d",
			op, rp, dk, dv, rp*dk, rp, R*dv, len(qt), len(pos), len(m), len(l), len(acc)))
	case len(kp) < L*dk || len(vp) < vn*dv:
		panic(fmt.Sprintf("cpu: %s: %d K rows of %d in %d floats, %d V rows of %d in %d", op, L, dk, len(kp), vn, dv, len(vp)))
	case len(scratch) < FlashScratch(rp, L):
		panic(fmt.Sprintf("cpu: %s: scratch needs %d floats, has %d", op, FlashScratch(rp, L), len(scratch)))
	}
	if k.isa != ISAScalarGo && flashTileC(k.isa, qt, rp, R, dk, dv, kp, vp, vn, L, j0, pos, mask, max(win, 0), m, l, acc, scratch) {
		return
	}
	flashTileGo(qt, R, dk, dv, kp, vp, vn, L, j0, pos, mask, max(win, 0), m, l, acc, scratch)
}

// flashTileGo is FlashTile in Go, one query row at a time.
func flashTileGo(qt []float32, R, dk, dv int, kp, vp []float32, vn, L, j0 int, pos []int32, mask bool, win int,
	m []float32, l []float64, acc, s []float32) {
	s = s[:L]
	ninf := float32(math.Inf(-1))
	for r := range R {
		qb, i := qt[r/FlashRowBlock*dk*FlashRowBlock:], r%FlashRowBlock
		mx := m[r]
		for j := range L {
			var d float32
			if p := int(pos[r]); !mask || j0+j <= p && (win == 0 || j0+j > p-win) {
				for e, x := range kp[j*dk : (j+1)*dk] {
					d += x * qb[e*FlashRowBlock+i]
				}
			} else {
				d = ninf
			}
			s[j] = d
			mx = max(mx, d)
		}
		mxe := mx // the exponents' origin: 0 while nothing is unmasked
		if mx == ninf {
			mxe = 0
		}
		c := expf(m[r] - mxe)
		var sum float32
		for j, x := range s {
			p := expf(x - mxe)
			s[j] = p
			sum += p
		}
		m[r], l[r] = mx, l[r]*float64(c)+float64(sum)
		a := acc[r*dv : (r+1)*dv]
		scaleVec(a, c)
		for c0 := 0; c0 < dv; c0 += FlashRowBlock {
			w := min(FlashRowBlock, dv-c0)
			blk, ac := vp[c0*vn+j0*w:], a[c0:c0+w]
			for j, p := range s {
				axpy(ac, p, blk[j*w:(j+1)*w])
			}
		}
	}
}

// FMAPeak runs a loop of independent vector FMAs (no memory operands) of
// path isa for n steps and returns the flops it did (0: the path has no
// such loop: ScalarGo, or AVX-512 in the fi_simde test build). Timed, it
// gives one core's F32 FMA peak, the ceiling of the products' FLOP/s.
func (k *Kernels) FMAPeak(n int) float64 { return fmaPeakC(k.isa, max(n, 0)) }

// MAddPeak runs a loop of independent int16 multiply-adds (no memory
// operands) in the instructions of path isa's integer decode K scores (v
// false) or V sums (v true) for n steps, and returns the operations it did,
// 2 per multiply-add (0: the path has no such loop). Timed, it gives one
// core's ceiling for those kernels (IntegerKV says which rows they take),
// as FMAPeak does for the float32 ones.
func (k *Kernels) MAddPeak(n int, v bool) float64 { return maddPeakC(k.isa, max(n, 0), v) }
