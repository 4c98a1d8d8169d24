// encode.go: Encode, and the two merge algorithms — SPM (score-driven
// bigram merging over UTF-8 characters, byte fallback for leftovers) and BPE
// (rank-driven pair merging inside each pre-tokenized word).

package tokenizer

import "strings"

// encodeScratch holds reusable per-call buffers (pooled in the Tokenizer).
type encodeScratch struct {
	frags, frags2 []frag
	found         []bool
	text          []byte
	split         splitScratch
	word          []byte
	syms          []symbol
	spmHeap       heap
	bpeHeap       heap
	key           []byte
}

// symbol is a run of bytes of the text being merged; merged-away symbols
// have n == 0.
type symbol struct {
	prev, next int32
	off, n     int32
}

// Encode converts text to token ids like llama_tokenize. addSpecial adds
// BOS/EOS as the vocabulary asks (AddBOS, AddEOS); parseSpecial lets
// control-token texts in the input (such as "<|im_start|>") become those
// tokens. User-defined tokens are always matched. SPM prefixes each text
// fragment that starts the input or follows a special token with a space
// when AddSpacePrefix is set.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	sc := t.scratch.Get().(*encodeScratch)
	defer t.scratch.Put(sc)

	out := make([]int32, 0, len(text)/4+4)
	var frags []frag
	if text != "" {
		frags = t.partition(text, parseSpecial, sc)
	}
	bos, eos := t.special[SpecialBOS], t.special[SpecialEOS]
	if addSpecial && t.addBOS && bos >= 0 {
		out = append(out, bos)
	}
	switch t.typ {
	case modelSPM:
		prevSpecial := true
		for _, f := range frags {
			if f.tok >= 0 {
				out = append(out, f.tok)
				prevSpecial = true
				continue
			}
			buf := sc.text[:0]
			if t.addSpacePrefix && prevSpecial {
				buf = append(buf, "\u2581"...)
			}
			buf = appendEscaped(buf, text[f.off:f.off+f.n])
			sc.text = buf
			out = t.encodeSPM(buf, out, sc)
			prevSpecial = false
		}
	case modelBPE:
		for _, f := range frags {
			if f.tok >= 0 {
				out = append(out, f.tok)
				continue
			}
			s := text[f.off : f.off+f.n]
			if t.pre.escapeWS {
				sc.text = appendEscaped(sc.text[:0], s)
				s = string(sc.text)
			}
			out = t.encodeBPE(s, out, sc)
		}
	}
	if addSpecial && t.addEOS && eos >= 0 {
		out = append(out, eos)
	}
	return out
}

// appendEscaped appends s with every space replaced by U+2581.
func appendEscaped(dst []byte, s string) []byte {
	for {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, "\u2581"...)
		s = s[i+1:]
	}
}

// encodeSPM tokenizes one escaped fragment (llm_tokenizer_spm_session).
// When no token can span the start of a run of U+2581 (see spmCuts), the
// fragment is cut there and each piece is merged on its own: merges never
// cross a cut, and the merge order restricted to a piece is the same, so
// the result is identical to merging the whole fragment at once, with
// small work queues instead of one the size of the text.
func (t *Tokenizer) encodeSPM(text []byte, out []int32, sc *encodeScratch) []int32 {
	if !t.spmCuts {
		return t.encodeSPMChunk(text, out, sc)
	}
	lo, prevSP := 0, false
	for off := 0; off < len(text); {
		n := min(utf8SeqLen(text[off]), len(text)-off)
		sp := n == 3 && text[off] == 0xE2 && text[off+1] == 0x96 && text[off+2] == 0x81
		if sp && !prevSP && off > lo {
			out = t.encodeSPMChunk(text[lo:off], out, sc)
			lo = off
		}
		prevSP = sp
		off += n
	}
	return t.encodeSPMChunk(text[lo:], out, sc)
}

// encodeSPMChunk runs SPM merging over text.
func (t *Tokenizer) encodeSPMChunk(text []byte, out []int32, sc *encodeScratch) []int32 {
	syms := sc.syms[:0]
	for off := 0; off < len(text); {
		n := min(utf8SeqLen(text[off]), len(text)-off)
		syms = append(syms, symbol{prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1, off: int32(off), n: int32(n)})
		off += n
	}
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	h := sc.spmHeap[:0]

	tryAdd := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		a, b := syms[l], syms[r]
		id, ok := t.ids[string(text[a.off:a.off+a.n+b.n])]
		if !ok {
			return
		}
		h.push(bigram{key: -float64(t.scores[id]), left: l, right: r, size: a.n + b.n})
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		tryAdd(i-1, i)
	}
	for len(h) > 0 {
		bg := h.pop()
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // outdated
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		tryAdd(l.prev, bg.left)
		tryAdd(bg.left, l.next)
	}
	for i := int32(0); i != -1; i = syms[i].next {
		s := syms[i]
		piece := text[s.off : s.off+s.n]
		if id, ok := t.ids[string(piece)]; ok {
			out = append(out, id)
			continue
		}
		for _, b := range piece {
			out = t.appendByteToken(out, b)
		}
	}
	sc.syms, sc.spmHeap = syms, h
	return out
}

// appendByteToken appends the byte-fallback token of b. llama.cpp throws
// when the vocabulary has none; we fall back to UNK, or drop the byte.
func (t *Tokenizer) appendByteToken(out []int32, b byte) []int32 {
	if id := t.byteTok[b]; id >= 0 {
		return append(out, id)
	}
	if t.typ == modelSPM {
		if unk := t.special[SpecialUNK]; unk >= 0 {
			return append(out, unk)
		}
	}
	return out
}

// encodeBPE tokenizes one raw fragment (llm_tokenizer_bpe_session).
func (t *Tokenizer) encodeBPE(text string, out []int32, sc *encodeScratch) []int32 {
	cpts, offs := t.split.split(text, &sc.split)
	raw := t.pre.kind.rawBytes()
	start := 0
	for _, n := range offs {
		word := sc.word[:0]
		for _, r := range cpts[start : start+n] {
			if raw {
				word = appendUTF8(word, r)
				continue
			}
			var u [4]byte
			for _, b := range appendUTF8(u[:0], r) {
				word = append(word, byteRuneUTF8[b]...)
			}
		}
		start += n
		sc.word = word
		out = t.mergeWord(word, out, sc)
	}
	return out
}

// mergeWord runs BPE merges over one (byte-encoded) word and appends its
// tokens.
func (t *Tokenizer) mergeWord(word []byte, out []int32, sc *encodeScratch) []int32 {
	if len(word) == 0 {
		return out
	}
	if t.pre.ignoreMerges {
		if id, ok := t.ids[string(word)]; ok {
			return append(out, id)
		}
	}
	syms := sc.syms[:0]
	if t.pre.kind == preGemma4 && strings.Trim(string(word), "\n") == "" {
		if id, ok := t.ids[string(word)]; ok {
			return append(out, id)
		}
	}
	for off := 0; off < len(word); {
		n := min(utf8SeqLen(word[off]), len(word)-off)
		syms = append(syms, symbol{prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1, off: int32(off), n: int32(n)})
		off += n
	}
	syms[len(syms)-1].next = -1
	h := sc.bpeHeap[:0]
	key := sc.key

	tryAdd := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		a, b := syms[l], syms[r]
		key = append(key[:0], word[a.off:a.off+a.n]...)
		key = append(key, ' ')
		key = append(key, word[b.off:b.off+b.n]...)
		rank, ok := t.ranks[string(key)]
		if !ok {
			return
		}
		h.push(bigram{key: float64(rank), left: l, right: r, size: a.n + b.n})
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		tryAdd(i-1, i)
	}
	for len(h) > 0 {
		bg := h.pop()
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // outdated
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		tryAdd(l.prev, bg.left)
		tryAdd(bg.left, l.next)
	}
	for _, s := range syms {
		if s.n == 0 {
			continue
		}
		piece := word[s.off : s.off+s.n]
		if id, ok := t.ids[string(piece)]; ok {
			out = append(out, id)
			continue
		}
		for _, b := range piece {
			if id := t.byteTok[b]; id >= 0 {
				out = append(out, id)
			}
		}
	}
	sc.syms, sc.bpeHeap, sc.key = syms, h, key
	return out
}

// bigram is a candidate merge of the adjacent symbols left and right, in
// the work queue of SPM (key: minus the merged token's score, so that the
// highest score comes first) or BPE (key: the merge's rank). Scores and
// ranks convert to float64 exactly, so keys compare as they do. size is
// the sum of the symbols' sizes when it was queued: a change means the
// pair is outdated (a live symbol only grows, so the sum changes when
// either size does).
type bigram struct {
	key         float64
	left, right int32
	size        int32
}

// before orders a work queue: least key first, then leftmost.
func (a *bigram) before(b *bigram) bool {
	return a.key < b.key || a.key == b.key && a.left < b.left
}

// heap is the work queue of SPM and BPE, a binary heap of bigrams ordered
// by before.
type heap []bigram

func (h *heap) push(x bigram) {
	q := append(*h, x)
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].before(&q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
	*h = q
}

// pop removes and returns the first bigram in before's order.
func (h *heap) pop() bigram {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(q) {
			break
		}
		m := l
		if r := l + 1; r < len(q) && q[r].before(&q[l]) {
			m = r
		}
		if !q[m].before(&q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}
