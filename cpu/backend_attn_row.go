package cpu

// backend_attn_row.go: the row form of the Backend's attention (a lone
// row of a sequence, decode, or each row of a run shorter than
// attnMinRun): one batch row and one KV head at a time, read straight
// from the cache's tiles and rows, in float32 or in integers by the
// cached types (row says which). It does not plan or dispatch units
// (backend_attn.go) and packs nothing: the block form is
// backend_attn_flash.go.

import "github.com/flowinfer/flowinfer/quant"

// row computes the group of query heads of KV head kh for the lone batch
// row t, one AttnScoresTiles and one AttnSum call per run of consecutive
// cached rows. Both meet the stored values in float32 arithmetic
// (TurboQuant rows in the rotated domain, met by rotated queries), so a
// lone row sees what a prefill tile and Ref see up to float rounding: the
// scores of block and TurboQuant rows are summed on their integer values
// or codebook levels and scaled once per block and row. Except K rows of
// q4_0 and 4-bit TurboQuant, scored in integers against the query rounded
// to int16 steps of its largest |value|/32767 (kern_qint.go): that moves
// the scores by up to 2^-16 of that value per product, finer than
// llama.cpp's rounding of the query to the cache's type. And except V rows
// of q4_0, q8_0 and 3- and 4-bit TurboQuant, summed in integers (sumQ,
// kern_wint.go): the weights times the rows' scales rounded to int16 steps
// of their largest/32767, the sums exact. V sums of TurboQuant rows stay
// rotated until the end.
func (a *attnTask) row(sc *attnScratch, t, kh int) {
	h, kv := a.h, a.kv
	dk, dv, G := h.HeadDimK, h.HeadDimV, a.group
	s, np := int(a.seq[t]), int(a.pos[t])+1
	// the row sees positions [lo, np) (a sliding window from lo on):
	// position j's score is sco[g*ns + j-lo], and with sinks slot n of
	// each head holds the sink, so that the softmax takes it in
	lo := a.lowest(np - 1)
	n := np - lo
	ns := n
	if a.sinks != nil {
		ns++
	}
	sco := sc.scores[:G*ns]
	// scores: sco[g*ns + j-lo] = K_j · q_g, run by run of consecutive rows
	qBase := (t*h.NHead + kh*G) * dk
	qg := a.q[qBase : qBase+G*dk]
	tk := kv.TurboK(a.layer, kh)
	qf, kw := qg, dk // the queries, and the width of the rows they meet
	if tk != nil {
		kw = tk.Padded()
		for g := range G {
			a.k.TurboRotate(tk, sc.qrot[g*kw:(g+1)*kw], qg[g*dk:(g+1)*dk])
		}
		qf = sc.qrot[:G*kw]
	}
	e := max(kv.RecentFrom(np-1), lo) // --kv-recent: rows from e on read as f16 copies
	ek, ev := np, np
	if a.lt.RecentK {
		ek = e
	}
	if a.lt.RecentV {
		ev = e
	}
	kq := quantOf(a.lt.K)
	xq := qintKind(kq, tk) && ek > lo && sc.qint.Round(kq, tk, qf, G, kw) // rounded once for every run
	for j := lo; j < ek; {
		m := a.span(s, j, ek-j)
		kt, r0 := kv.KHeadTiles(a.layer, kh, s, j, m)
		if xq {
			a.k.AttnScoresTilesQ(kq, tk, kt, a.lt.KUnit, r0, m, &sc.qint, sco[j-lo:], ns)
		} else {
			a.k.attnScoresTiles(kq, tk, kt, a.lt.KUnit, r0, m, kw, qf, G, sco[j-lo:], ns, false)
		}
		j += m
	}
	for j := ek; j < np; { // the f16 copies meet the unrotated queries
		m := kv.RecentRun(s, j, np-j)
		a.k.AttnScores(quant.F16, nil, kv.RecentKHeadRows(a.layer, kh, s, j, m), 2*dk, m, dk, qg, G, sco[j-lo:], ns)
		j += m
	}
	// softmax per query head (float64 sums); Softmax scales the row, so
	// a sink goes in divided by the scale
	for g := range G {
		if a.sinks != nil {
			sco[g*ns+n] = a.sinks[kh*G+g] / a.scale
		}
		a.k.Softmax(sco[g*ns:(g+1)*ns], a.scale)
	}
	// out_g = Σ_j w_gj · V_j
	oBase := (t*h.NHead + kh*G) * dv
	out := a.out[oBase : oBase+G*dv]
	tv := kv.TurboV(a.layer, kh)
	acc, ad := out, dv
	if tv != nil {
		ad = tv.Padded()
		acc = sc.vacc[:G*ad]
	}
	vq := quantOf(a.lt.V)
	if !(wintKind(vq, tv) && ev > lo && a.sumQ(sc, vq, tv, t, kh, lo, ev, ad, sco, ns, acc)) {
		clear(acc)
		for j0 := lo; j0 < ev; {
			m := a.span(s, j0, ev-j0)
			vr := kv.VHeadRows(a.layer, kh, s, j0, m)
			// each V row once for the whole group, positions in order (as Ref)
			a.k.AttnSum(vq, tv, vr, a.lt.VHead, m, ad, sco[j0-lo:], ns, G, acc)
			j0 += m
		}
	}
	if tv != nil {
		for g := range G {
			a.k.TurboUnrotate(tv, out[g*dv:(g+1)*dv], acc[g*ad:(g+1)*ad])
		}
	}
	for j0 := ev; j0 < np; { // the f16 copies, summed unrotated
		m := kv.RecentRun(s, j0, np-j0)
		a.k.AttnSum(quant.F16, nil, kv.RecentVHeadRows(a.layer, kh, s, j0, m), 2*dv, m, dv, sco[j0-lo:], ns, G, out)
		j0 += m
	}
}

// sumQ sets acc to the V sums of the lone batch row t's group of query
// heads (KV head kh) over the quantized rows [lo, ev) of type vq (tv:
// TurboQuant; position j's weights at w[j-lo:], heads lw apart), in
// integers (kern_wint.go), chunk by chunk of WIntChunk positions; false,
// acc untouched, when RoundWeights refuses a chunk's weights (the caller
// sums in float32).
func (a *attnTask) sumQ(sc *attnScratch, vq quant.Type, tv *quant.Turbo, t, kh, lo, ev, dim int, w []float32, lw int, acc []float32) bool {
	kv, s, x := a.kv, int(a.seq[t]), &sc.wint
	x.Begin(vq, tv, a.group, dim)
	for c0 := lo; c0 < ev; c0 += WIntChunk {
		c1 := min(c0+WIntChunk, ev)
		wc := w[c0-lo:]
		if a.span(s, c0, c1-c0) == c1-c0 { // one run: one call
			var next []byte // the next chunk's first run, prefetched
			if c1 < ev {
				next = kv.VHeadRows(a.layer, kh, s, c1, a.span(s, c1, min(WIntChunk, ev-c1)))
			}
			if !a.k.AttnSumChunk(x, kv.VHeadRows(a.layer, kh, s, c0, c1-c0), a.lt.VHead, c1-c0, wc, lw, next) {
				return false
			}
			continue
		}
		x.Chunk(c1 - c0)
		for j := c0; j < c1; {
			n := a.span(s, j, c1-j)
			a.k.AttnSumScales(x, kv.VHeadRows(a.layer, kh, s, j, n), a.lt.VHead, j-c0, n, wc, lw)
			j += n
		}
		if !a.k.RoundWeights(x, wc, lw) {
			return false
		}
		for j := c0; j < c1; {
			n := a.span(s, j, c1-j)
			a.k.AttnSumQ(x, kv.VHeadRows(a.layer, kh, s, j, n), a.lt.VHead, j-c0, n)
			j += n
		}
		x.Fold()
	}
	x.Finish(acc)
	return true
}
