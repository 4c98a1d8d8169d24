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
	sp := &loopSplit{sig: sig, inside: make([]uint64, (v.n+63)/64)}
	// outside[k]: tokens among toks[:k] that do not loop
	outside := make([]int32, len(v.toks)+1)
	for k, id := range v.toks {
		outside[k+1] = outside[k]
		if sig.inside(v.pieces[id]) {
			sp.inside[id>>6] |= 1 << (uint(id) & 63)
		} else {
			outside[k+1]++
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

// fillSplit computes the mask of state s, whose loop signature is sp's.
func (mt *Matcher) fillSplit(mask []uint64, s int32, sp *loopSplit) {
	copy(mask, sp.inside)
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
