// This file holds the stages of the sampler chain. Each works on a candidate
// list in scratch memory and allocates nothing.
//
// Logit bias and penalties change few logits, so they are not applied to a
// copy of the whole row: the changed values go to s.adj, their ids are
// marked in the s.touched bitset, and the scans over the raw row skip marked
// ids (the check only runs for values that would enter the result, so it
// costs almost nothing) and then merge s.adj.

package sample

import (
	"cmp"
	"math"
	"slices"
)

var negInf = float32(math.Inf(-1))

func (s *Sampler) isTouched(id int) bool { return s.touched[id>>6]>>(uint(id)&63)&1 != 0 }
func (s *Sampler) touch(id int32)        { s.touched[id>>6] |= 1 << (uint32(id) & 63) }

// clearTouched unmarks the ids in s.adj.
func (s *Sampler) clearTouched() {
	for _, a := range s.adj {
		s.touched[a.id>>6] = 0
	}
	s.adj = s.adj[:0]
}

// applyBiasPenalties fills s.adj with the biased and penalised logits of
// the tokens in the logit bias and in the penalty window, in that order
// (bias first, as llama.cpp's chain), and marks them in s.touched.
func (s *Sampler) applyBiasPenalties(logits []float32) {
	for _, b := range s.bias {
		s.adj = append(s.adj, cand{id: b.id, logit: logits[b.id] + b.logit})
		s.touch(b.id)
	}
	nb := len(s.adj) // s.adj[:nb] is sorted by id
	for _, h := range s.hist {
		var i int
		if s.isTouched(int(h.id)) { // also in the logit bias
			i, _ = slices.BinarySearchFunc(s.adj[:nb], h.id, func(c cand, id int32) int { return cmp.Compare(c.id, id) })
		} else {
			i = len(s.adj)
			s.adj = append(s.adj, cand{id: h.id, logit: logits[h.id]})
			s.touch(h.id)
		}
		s.adj[i].logit = s.penalize(s.adj[i].logit, h.count)
	}
	for i := range s.adj {
		if math.IsNaN(float64(s.adj[i].logit)) {
			s.adj[i].logit = negInf
		}
	}
}

// penalize applies llama.cpp's penalties to the logit of a token seen count
// times in the window: the repeat penalty divides a positive logit and
// multiplies a non-positive one (so it always lowers it for a penalty > 1),
// then count*frequency + presence is subtracted.
func (s *Sampler) penalize(l float32, count int32) float32 {
	if l <= 0 {
		l *= s.p.RepeatPenalty
	} else {
		l /= s.p.RepeatPenalty
	}
	return l - (float32(count)*s.p.FrequencyPenalty + s.p.PresencePenalty)
}

// argmax returns the id with the largest logit after bias and penalties,
// the lowest id among equals, or -1 when none is above -Inf.
func (s *Sampler) argmax(logits []float32) int32 {
	best, bestID := negInf, int32(-1)
	for i := 0; ; i++ {
		j := firstAbove(logits[i:], best)
		if j < 0 {
			break
		}
		if i += j; !s.isTouched(i) {
			best, bestID = logits[i], int32(i)
		}
	}
	for _, a := range s.adj {
		if a.logit > best || (a.logit == best && bestID >= 0 && a.id < bestID && a.logit > negInf) {
			best, bestID = a.logit, a.id
		}
	}
	return bestID
}

// firstAbove returns the index of the first value in l above t, or -1. It
// is the hot loop of top-k and greedy (the values that pass are rare): four
// compares per step, and not inlined so both callers run the same code.
//
//go:noinline
func firstAbove(l []float32, t float32) int {
	j := 0
	for ; j+4 <= len(l); j += 4 {
		b := l[j : j+4 : j+4]
		if b[0] > t || b[1] > t || b[2] > t || b[3] > t {
			break
		}
	}
	for ; j < len(l); j++ {
		if l[j] > t {
			return j
		}
	}
	return -1
}

// better orders candidates: larger logit first, lower id among equals.
func better(a, b cand) bool { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id) }

// cmpCand sorts candidates best first.
func cmpCand(a, b cand) int {
	if better(a, b) {
		return -1
	}
	if better(b, a) {
		return 1
	}
	return 0
}

// candidates returns the candidate list after bias, penalties and top-k,
// without -Inf/NaN logits. With top-k on it is sorted best first (llama.cpp
// sorts in top-k too); otherwise it is in id order.
func (s *Sampler) candidates(logits []float32) []cand {
	c := s.cands[:0]
	if s.p.TopK <= 0 {
		for i, v := range logits {
			if v > negInf && !s.isTouched(i) {
				c = append(c, cand{id: int32(i), logit: v})
			}
		}
		// re-insert changed logits in id order
		n := len(c)
		for _, a := range s.adj {
			if a.logit > negInf {
				c = append(c, a)
			}
		}
		if len(c) > n {
			slices.SortFunc(c[n:], func(a, b cand) int { return cmp.Compare(a.id, b.id) })
			mergeByID(c, n)
		}
		s.cands = c
		return c
	}

	// top-k: a min-heap whose root is the worst of the best k so far
	k := cap(c)
	i := 0
	for ; i < len(logits) && len(c) < k; i++ {
		if v := logits[i]; v > negInf && !s.isTouched(i) {
			c = append(c, cand{id: int32(i), logit: v})
		}
	}
	heapify(c)
	for ; i < len(logits); i++ {
		// later ids lose ties, so only a strictly larger logit enters
		j := firstAbove(logits[i:], c[0].logit)
		if j < 0 {
			break
		}
		if i += j; !s.isTouched(i) {
			c[0] = cand{id: int32(i), logit: logits[i]}
			siftDown(c, 0)
		}
	}
	for _, a := range s.adj {
		if !(a.logit > negInf) {
			continue
		}
		if len(c) < k {
			c = append(c, a)
			siftUp(c, len(c)-1)
		} else if better(a, c[0]) {
			c[0] = a
			siftDown(c, 0)
		}
	}
	slices.SortFunc(c, cmpCand)
	s.cands = c
	return c
}

// mergeByID merges the id-sorted runs c[:n] and c[n:] in place. The second
// run is short (the touched tokens), so this shifts elements right to left.
func mergeByID(c []cand, n int) {
	for j := n; j < len(c); j++ {
		x := c[j]
		k := j
		for k > 0 && c[k-1].id > x.id {
			c[k] = c[k-1]
			k--
		}
		c[k] = x
	}
}

// Heap helpers: a min-heap under better (the root is the worst candidate).

func heapify(c []cand) {
	for i := len(c)/2 - 1; i >= 0; i-- {
		siftDown(c, i)
	}
}

func siftDown(c []cand, i int) {
	n := len(c)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		w := l
		if r := l + 1; r < n && better(c[l], c[r]) {
			w = r
		}
		if !better(c[i], c[w]) {
			return
		}
		c[i], c[w] = c[w], c[i]
		i = w
	}
}

func siftUp(c []cand, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !better(c[p], c[i]) {
			return
		}
		c[i], c[p] = c[p], c[i]
		i = p
	}
}

// selectTop moves the best m candidates to the front of c, sorted best
// first; the rest follow in no particular order, all no better than c[m-1].
func selectTop(c []cand, m int) {
	if m >= len(c) {
		slices.SortFunc(c, cmpCand)
		return
	}
	h := c[:m]
	heapify(h)
	for i := m; i < len(c); i++ {
		if better(c[i], h[0]) {
			c[i], h[0] = h[0], c[i]
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, cmpCand)
}

// expf is float32 e^x, rounded once from the float64 result.
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// softmax sets c[i].p as llama.cpp's softmax (float32 throughout) with the
// given maximum logit. An +Inf maximum shares the mass among +Inf logits.
func softmax(c []cand, maxL float32) {
	if math.IsInf(float64(maxL), 1) {
		var n float32
		for i := range c {
			c[i].p = 0
			if c[i].logit == maxL {
				c[i].p, n = 1, n+1
			}
		}
		for i := range c {
			c[i].p /= n
		}
		return
	}
	var sum float32
	for i := range c {
		p := expf(c[i].logit - maxL)
		c[i].p = p
		sum += p
	}
	for i := range c {
		c[i].p /= sum
	}
}

func maxLogit(c []cand, sorted bool) float32 {
	if sorted {
		return c[0].logit
	}
	m := c[0].logit
	for _, x := range c[1:] {
		m = max(m, x.logit)
	}
	return m
}

// topPProbe is how many candidates top-p sorts first when the list is
// unsorted (llama.cpp's adaptive top-p does the same): a nucleus rarely
// needs more, and sorting a whole vocabulary is expensive.
const topPProbe = 256

// Nucleus histogram: when the probe is not enough, probability mass is
// binned by distance below the top logit, nucleusBuckets bins of
// 1/nucleusScale logit each (the last bin takes the tail), to find which
// candidates can be in the nucleus before sorting only those.
const (
	nucleusBuckets = 512
	nucleusScale   = 16
)

// topP keeps the shortest best-first prefix whose probability reaches p
// (at least one token), with probabilities from the softmax of the current
// logits. The result is sorted.
func topP(c []cand, p float32, sorted bool, hist *[nucleusBuckets]float64) []cand {
	maxL := maxLogit(c, sorted)
	softmax(c, maxL)
	done := len(c) // c[:done] is sorted and no candidate after it is better
	if !sorted {
		done = min(topPProbe, len(c))
		selectTop(c, done)
		if n, ok := cumCut(c[:done], p); ok {
			return c[:n]
		}
		done = partitionNucleus(c, maxL, p, hist)
	}
	if n, ok := cumCut(c[:done], p); ok {
		return c[:n]
	}
	slices.SortFunc(c[done:], cmpCand)
	if n, ok := cumCut(c, p); ok {
		return c[:n]
	}
	return c
}

// cumCut returns the length of the shortest prefix of c whose summed
// probability (float32, in order, as llama.cpp) reaches p.
func cumCut(c []cand, p float32) (int, bool) {
	var cum float32
	for i := range c {
		cum += c[i].p
		if cum >= p {
			return i + 1, true
		}
	}
	return 0, false
}

// partitionNucleus moves to the front of c, sorted, every candidate in the
// histogram bins needed to reach probability p, and returns how many that
// is; the candidates after them are all worse.
func partitionNucleus(c []cand, maxL, p float32, hist *[nucleusBuckets]float64) int {
	if math.IsInf(float64(maxL), 1) {
		slices.SortFunc(c, cmpCand)
		return len(c)
	}
	bin := func(l float32) int { return min(nucleusBuckets-1, int((maxL-l)*nucleusScale)) }
	clear(hist[:])
	for _, x := range c {
		hist[bin(x.logit)] += float64(x.p)
	}
	last, cum := nucleusBuckets-1, 0.0
	for b, m := range hist {
		if cum += m; cum >= float64(p) {
			last = b
			break
		}
	}
	n := 0
	for i := range c {
		if bin(c[i].logit) <= last {
			c[n], c[i] = c[i], c[n]
			n++
		}
	}
	slices.SortFunc(c[:n], cmpCand)
	return n
}

// minP keeps the candidates whose probability is at least p times the
// largest, i.e. whose logit is at least max + ln p. Order is kept.
func minP(c []cand, p float32, sorted bool) []cand {
	minL := maxLogit(c, sorted) + float32(math.Log(float64(p)))
	if sorted {
		i := 1 // the best always stays
		for i < len(c) && c[i].logit >= minL {
			i++
		}
		return c[:i]
	}
	n := 0
	for _, x := range c {
		if x.logit >= minL {
			c[n] = x
			n++
		}
	}
	return c[:n]
}

// dist draws an index from the softmax of the candidates' logits with the
// uniform value r in [0, 1), as llama.cpp's dist sampler: float32
// exponentials, float64 running sum, the first index whose running sum
// reaches r times the total.
func dist(c []cand, sorted bool, r float64) int {
	if len(c) == 1 {
		return 0
	}
	maxL := maxLogit(c, sorted)
	if math.IsInf(float64(maxL), 1) {
		softmax(c, maxL)
	} else {
		for i := range c {
			c[i].p = expf(c[i].logit - maxL)
		}
	}
	var sum float64
	for i := range c {
		sum += float64(c[i].p)
	}
	target := sum * r
	var run float64
	for i := range c {
		run += float64(c[i].p)
		if run >= target {
			return i
		}
	}
	return len(c) - 1
}
