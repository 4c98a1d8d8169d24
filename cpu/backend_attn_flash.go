package cpu

// backend_attn_flash.go: the block form of the Backend's attention (runs
// of at least attnMinRun rows of one sequence, prefill): the packing of
// the sequence's K and V into FlashTile's layouts, once per call, then
// flash attention over a block of query rows of one KV head, tile by tile
// with an online softmax. It does not plan units or size scratch
// (backend_attn.go), and a tile's arithmetic is Kernels.FlashTile's
// (kern_fa.go).

import (
	"math"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// packPiece is the positions of one KV head a packing unit converts.
const packPiece = 1024

// packUnit is positions [j0, j1) of KV head kh of region reg, to pack.
type packUnit struct{ reg, kh, j0, j1 int32 }

// pack fills a piece of a region: the K and V rows of its sequence at
// positions [j0, j1) of one KV head (position j as the region's row
// j-base), as float32 in FlashTile's layouts
// (TurboQuant rows stay in the rotated domain: flash rotates the queries
// and rotates the outputs back). Pieces write disjoint parts of the
// region.
func (a *attnTask) pack(sc *attnScratch, u packUnit) {
	h, kv := a.h, a.kv
	dk, dv := a.dkp, a.dvp
	reg, kh := &a.regions[u.reg], int(u.kh)
	s, n, b := int(reg.s), reg.n, reg.base
	vp := a.packed[reg.v+kh*n*dv:][:n*dv]
	for j0, j1 := int(u.j0), int(u.j1); j0 < j1; {
		L := min(a.span(s, j0, j1-j0), kvChunk)
		kt, r0 := kv.KHeadTiles(a.layer, kh, s, j0, L)
		kr, vr := sc.krows[:L*a.lt.KHead], kv.VHeadRows(a.layer, kh, s, j0, L)
		a.k.Untile(kt, a.lt.KHead, a.lt.KUnit, r0, L, kr)
		kd := a.packed[reg.k+(kh*n+j0-b)*dk:][:L*dk]
		a.toF32(a.lt.K, kv.TurboK(a.layer, kh), kr, a.lt.KHead, L, h.HeadDimK, kd, dk)
		if a.lt.V == model.KVF32 {
			FlashPackV(vp, n, j0-b, bytesF32(vr), dv, dv, L)
		} else {
			a.toF32(a.lt.V, kv.TurboV(a.layer, kh), vr, a.lt.VHead, L, h.HeadDimV, sc.dec, dv)
			FlashPackV(vp, n, j0-b, sc.dec, dv, dv, L)
		}
		j0 += L
	}
	// --kv-recent's f16 rows of the piece's positions from rFrom on
	rn, dk0, dv0 := b+n-reg.rFrom, h.HeadDimK, h.HeadDimV
	for j0, j1 := max(int(u.j0), reg.rFrom), int(u.j1); j0 < j1; {
		L := min(kv.RecentRun(s, j0, j1-j0), kvChunk)
		if a.lt.RecentK {
			kd := a.packed[reg.rk+(kh*rn+j0-reg.rFrom)*dk0:][:L*dk0]
			a.k.DequantRows(quant.F16, kv.RecentKHeadRows(a.layer, kh, s, j0, L), 2*dk0, L, dk0, kd, dk0)
		}
		if a.lt.RecentV {
			a.k.DequantRows(quant.F16, kv.RecentVHeadRows(a.layer, kh, s, j0, L), 2*dv0, L, dv0, sc.dec, dv0)
			FlashPackV(a.packed[reg.rv+kh*rn*dv0:][:rn*dv0], rn, j0-reg.rFrom, sc.dec, dv0, dv0, L)
		}
		j0 += L
	}
}

// toF32 converts n cached heads of type t (row i at src[i*stride:], dim
// values; tq the codec of a TurboQuant type) to float32 rows at
// dst[i*dstride:]: TurboQuant rows into the rotated domain (Padded
// values).
func (a *attnTask) toF32(t model.KVType, tq *quant.Turbo, src []byte, stride, n, dim int, dst []float32, dstride int) {
	if tq != nil {
		a.k.TurboDecode(tq, src, stride, n, dst, dstride)
		return
	}
	a.k.DequantRows(quantOf(t), src, stride, n, dim, dst, dstride)
}

// flash computes KV head kh's query heads for batch rows [t0, t1) of one
// sequence, tile by tile over the cached positions the block's rows see
// (from the first row's window on, up to the last row: FlashTile), from
// the sequence's packed K and V (reg). Tiles that cross a row's diagonal or
// a row's window edge are masked; a sink (a.sinks) joins each row's
// maximum and sum at the end.
func (a *attnTask) flash(sc *attnScratch, t0, t1, kh int, reg *kvRegion) {
	h := a.h
	dk, dv, G := a.dkp, a.dvp, a.group
	tk, tv := a.kv.TurboK(a.layer, kh), a.kv.TurboV(a.layer, kh)
	R := (t1 - t0) * G // query rows: (row t, head g) at (t-t0)*G + g
	rp := (R + FlashRowBlock - 1) / FlashRowBlock * FlashRowBlock
	np, pmin, pmax := 0, int(a.pos[t0]), 0
	for t := t0; t < t1; t++ {
		np, pmin, pmax = max(np, int(a.pos[t])+1), min(pmin, int(a.pos[t])), max(pmax, int(a.pos[t]))
	}
	js, win, b := 0, a.win, reg.base // the first position a row sees; the region's first
	if win > 0 {
		js = max(0, pmin-win+1)
	}
	// masked: a tile [j0, j0+L) past some row's position or reaching below
	// some row's window
	masked := func(j0, L int) bool { return j0+L-1 > pmin || win > 0 && j0 <= pmax-win }
	// the block's query rows times the scale (so the scores come out
	// scaled), transposed into blocks of FlashRowBlock rows; padding rows
	// are zero and at position pmin. Positions are counted from the
	// region's first (b) for FlashTile.
	qt, ps := sc.q[:rp*dk], sc.pos[:rp]
	// --kv-recent: positions [e, np) are read from their f16 copies (e is
	// the same for every row of the block: Attention cuts blocks at
	// RecentAlign); a TurboQuant K's copies meet the queries unrotated (q2)
	e, dk0, dv0 := np, h.HeadDimK, h.HeadDimV
	if a.recent {
		e = a.kv.RecentFrom(pmin)
	}
	var q2 []float32
	if e < np && a.lt.RecentK && tk != nil {
		q2 = sc.q2[:rp*dk0]
	}
	const B = FlashRowBlock
	for r := range rp {
		qb, i := qt[r/B*dk*B:], r%B
		if r >= R {
			for d := range dk {
				qb[d*B+i] = 0
			}
			if q2 != nil {
				for d := range dk0 {
					q2[r/B*dk0*B+d*B+i] = 0
				}
			}
			ps[r] = int32(pmin - b)
			continue
		}
		t, g := t0+r/G, r%G
		ps[r] = a.pos[t] - int32(b)
		src := a.q[(t*h.NHead+kh*G+g)*h.HeadDimK:][:h.HeadDimK]
		if q2 != nil {
			for d, v := range src {
				q2[r/B*dk0*B+d*B+i] = v * a.scale
			}
		}
		if tk != nil { // K is stored rotated: rotate the query alike
			a.k.TurboRotate(tk, sc.qrot[:dk], src)
			src = sc.qrot[:dk]
		}
		for d, v := range src {
			qb[d*B+i] = v * a.scale
		}
	}
	acc, m, l := sc.acc[:R*dv], sc.m[:rp], sc.l[:rp]
	clear(acc)
	clear(l)
	for i := range m {
		m[i] = float32(math.Inf(-1))
	}
	// tiles of up to attnTile positions
	kp, vp := a.packed[reg.k+kh*reg.n*dk:][:reg.n*dk], a.packed[reg.v+kh*reg.n*dv:][:reg.n*dv]
	for j0 := js; j0 < e; j0 += attnTile {
		L := min(attnTile, e-j0)
		a.k.FlashTile(qt, rp, R, dk, dv, kp[(j0-b)*dk:], vp, reg.n, L, j0-b, ps, masked(j0, L), win, m, l, acc, sc.scores)
	}
	var acc2 []float32 // the f16 copies' V sums of a TurboQuant V
	if e < np {
		rn := b + reg.n - reg.rFrom
		xq, xdk := qt, dk
		if q2 != nil {
			xq, xdk = q2, dk0
		}
		xacc, xdv := acc, dv
		if a.lt.RecentV && tv != nil {
			// summed unrotated apart; acc (the quantized rows') is
			// rescaled from the maxima it was summed at (m2) at the end
			copy(sc.m2[:rp], m)
			acc2 = sc.acc2[:R*dv0]
			clear(acc2)
			xacc, xdv = acc2, dv0
		}
		xv, vn, off := vp, reg.n, b
		if a.lt.RecentV { // FlashTile reads V by position: shift positions to the copies' rows
			xv, vn, off = a.packed[reg.rv+kh*rn*dv0:][:rn*dv0], rn, reg.rFrom
			for r := range ps {
				ps[r] -= int32(off - b)
			}
		}
		for j0 := max(e, js); j0 < np; j0 += attnTile {
			L := min(attnTile, np-j0)
			kt := kp[(j0-b)*dk:]
			if a.lt.RecentK {
				kt = a.packed[reg.rk+(kh*rn+j0-reg.rFrom)*dk0:][:L*dk0]
			}
			a.k.FlashTile(xq, rp, R, xdk, xdv, kt, xv, vn, L, j0-off, ps, masked(j0, L), win, m, l, xacc, sc.scores)
		}
	}
	// out = acc / l, or with a sink s: acc·f / (l·f + e^(s-M)), M =
	// max(m, s), f = e^(m-M) (ggml_soft_max_ext's sinks)
	for r := range R {
		t, g := t0+r/G, r%G
		inv := float32(1 / l[r])
		if a.sinks != nil {
			inv = sinkScale(m[r], l[r], a.sinks[kh*G+g])
		}
		o := a.out[(t*h.NHead+kh*G+g)*h.HeadDimV:][:h.HeadDimV]
		if tv != nil { // the sum is rotated: rotate it back
			y, c := sc.vacc[:dv], inv
			if acc2 != nil {
				c *= float32(math.Exp(float64(sc.m2[r] - m[r])))
			}
			for d, v := range acc[r*dv : (r+1)*dv] {
				y[d] = v * c
			}
			a.k.TurboUnrotate(tv, o, y)
			if acc2 != nil {
				for d, v := range acc2[r*dv0 : (r+1)*dv0] {
					o[d] += v * inv
				}
			}
			continue
		}
		for d, v := range acc[r*dv : (r+1)*dv] {
			o[d] = v * inv
		}
	}
}

// sinkScale returns what a row's V sum, accumulated at maximum m with
// softmax sum l, is multiplied by when a sink logit s joins the softmax:
// f/(l·f + e^(s-M)), M = max(m, s), f = e^(m-M), in float64.
func sinkScale(m float32, l float64, s float32) float32 {
	mx := max(float64(m), float64(s))
	f := math.Exp(float64(m) - mx)
	return float32(f / (l*f + math.Exp(float64(s)-mx)))
}
