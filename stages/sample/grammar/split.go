// split.go: masks for states that loop on most bytes (the inside of a
// string). For such a state the allowed tokens are (a) every token whose
// whole text loops on it, which depends only on the state's loop
// signature (the ASCII bytes that loop, and whether every multi-byte
// character does), and (b) whatever the walk allows among the rest. The
// vocabulary keeps, per signature, the bitset of (a) and a compact trie of
// the rest, so a new string state costs a copy of the bitset and a walk of
// a trie a few percent the size of the whole, which stays in cache.

package grammar

import (
	"math/bits"
)

// maxSplits caps the signatures a Vocab keeps (a grammar has few).
const maxSplits = 16

// minSplitBytes is how many ASCII bytes must loop on a state for the
// split to be worth using.
const minSplitBytes = 32

// resNode is a node of a residual trie: like trieNode, with its own
// tokens' range explicit (the residual trie omits subtrees).
type resNode struct {
	skip, tokLo, tokHi int32
	depth              uint16
	b                  byte
}

type loopSplit struct {
	sig    subtreeBytes
	inside []uint64  // tokens whose whole text loops
	nodes  []resNode // preorder; nodes[0] is the root; skip indexes this slice

	// inside tokens by length in characters (a last partial one counts):
	// lenOrder[:lenEnd[k]] are those of at most k characters
	lenOrder []int32
	lenEnd   []int32
	upTo     map[int32][]uint64 // bitsets of lenOrder[:lenEnd[k]], built on use
}

// charLen counts the characters of text (started ones included).
func charLen(text []byte) int {
	n := 0
	for _, b := range text {
		if b&0xC0 != 0x80 {
			n++
		}
	}
	return n
}

// insideUpTo returns the bitset of inside tokens of at most k characters
// (k < 0: all).
func (v *Vocab) insideUpTo(sp *loopSplit, k int32) []uint64 {
	if k < 0 || int(k) >= len(sp.lenEnd)-1 {
		return sp.inside
	}
	v.splitMu.Lock()
	defer v.splitMu.Unlock()
	if m, ok := sp.upTo[k]; ok {
		return m
	}
	m := make([]uint64, len(sp.inside))
	for _, id := range sp.lenOrder[:sp.lenEnd[k]] {
		m[id>>6] |= 1 << (uint(id) & 63)
	}
	sp.upTo[k] = m
	return m
}

func splitWorthwhile(sig subtreeBytes) bool {
	return bits.OnesCount64(sig.ascii[0])+bits.OnesCount64(sig.ascii[1]) >= minSplitBytes
}

// inside reports whether text loops on a state of signature sig.
func (sig *subtreeBytes) inside(text []byte) bool {
	nonASCII := false
	for _, b := range text {
		if b >= 0x80 {
			nonASCII = true
		} else if sig.ascii[b>>6]>>(b&63)&1 == 0 {
			return false
		}
	}
	return !nonASCII || sig.nonASCII && utf8Prefix(text)
}

// split returns the vocabulary split for sig, building it on first use.
// Safe for concurrent use.
func (v *Vocab) split(sig subtreeBytes) *loopSplit {
	v.splitMu.Lock()
	defer v.splitMu.Unlock()
	for _, sp := range v.splits {
		if sp.sig == sig {
			return sp
		}
	}
	sp := &loopSplit{sig: sig, inside: make([]uint64, (v.n+63)/64), upTo: map[int32][]uint64{}}
	// outside[k]: tokens among toks[:k] that do not loop
	outside := make([]int32, len(v.toks)+1)
	var count []int32 // inside tokens per length
	for k, id := range v.toks {
		outside[k+1] = outside[k]
		if p := v.pieces[id]; sig.inside(p) {
			sp.inside[id>>6] |= 1 << (uint(id) & 63)
			n := charLen(p)
			for len(count) <= n {
				count = append(count, 0)
			}
			count[n]++
		} else {
			outside[k+1]++
		}
	}
	// counting sort of the inside tokens by length
	sp.lenEnd = make([]int32, len(count))
	total := int32(0)
	for n, c := range count {
		total += c
		sp.lenEnd[n] = total
	}
	sp.lenOrder = make([]int32, total)
	pos := make([]int32, len(count))
	for n := 1; n < len(count); n++ {
		pos[n] = sp.lenEnd[n-1]
	}
	for _, id := range v.toks {
		if p := v.pieces[id]; sig.inside(p) {
			n := charLen(p)
			sp.lenOrder[pos[n]] = id
			pos[n]++
		}
	}
	sp.nodes = append(sp.nodes, resNode{})
	type open struct {
		idx   int
		depth uint16
	}
	var stack []open
	end := len(v.nodes) - 1
	for i := 1; i < end; {
		n := v.nodes[i]
		if outside[v.nodes[n.skip].tokLo] == outside[n.tokLo] {
			i = int(n.skip) // every token below loops
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].depth >= n.depth {
			sp.nodes[stack[len(stack)-1].idx].skip = int32(len(sp.nodes))
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, open{len(sp.nodes), n.depth})
		sp.nodes = append(sp.nodes, resNode{tokLo: n.tokLo, tokHi: v.nodes[i+1].tokLo, depth: n.depth, b: n.b})
		i++
	}
	for _, o := range stack {
		sp.nodes[o.idx].skip = int32(len(sp.nodes))
	}
	if len(v.splits) == maxSplits {
		v.splits = v.splits[1:]
	}
	v.splits = append(v.splits, sp)
	return sp
}

// fillSplit computes the mask of state s, whose chain signature is sp's
// and which allows budget more plain characters (-1: any number).
func (mt *Matcher) fillSplit(mask []uint64, s int32, sp *loopSplit, budget int32) {
	copy(mask, mt.v.insideUpTo(sp, budget))
	if mt.m.canEnd[s] {
		for _, id := range mt.v.eog {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	m, toks, st, nodes := mt.m, mt.v.toks, mt.walk, sp.nodes
	st[0] = s
	for i := 1; i < len(nodes); {
		n := nodes[i]
		from := st[n.depth-1]
		t := m.trans[int(from)<<8|int(n.b)]
		if t == unknown {
			t = m.step(from, n.b)
		}
		if t == dead {
			i = int(n.skip)
			continue
		}
		st[n.depth] = t
		for _, id := range toks[n.tokLo:n.tokHi] {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
		i++
	}
}
