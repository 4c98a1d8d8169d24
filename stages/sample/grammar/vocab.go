// vocab.go: the byte trie of a vocabulary's token texts, flattened in
// preorder so that a mask walk is one forward pass over an array and a
// rejected prefix skips its whole subtree with one jump.

package grammar

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"
)

// trieNode is one trie node: the byte on the edge into it, its depth
// (bytes from the root), the index just past its subtree, and where its
// tokens start in Vocab.toks (they end where the next node's start).
//
// Each node also summarises the token texts in its subtree from its own
// byte on (see subtreeBytes), in the same cache line as the rest, because
// the mask walk reads it at every node it reaches.
type trieNode struct {
	skip  int32
	tokLo int32
	depth uint16
	b     byte
	sum   subtreeBytes
}

// subtreeBytes summarises the token texts under a trie node, from the
// node's own byte on: the ASCII bytes in them (one bit each), whether any
// holds a non-ASCII byte, and whether any is not a valid UTF-8 prefix
// (whole characters, then maybe the start of one).
type subtreeBytes struct {
	nonASCII bool
	badUTF8  bool
	ascii    [2]uint64
}

// maxPiece caps the bytes of a token text in the trie; longer tokens are
// never allowed under a grammar.
const maxPiece = 1<<16 - 1

// Vocab is the trie of a vocabulary's token texts, built once per
// tokenizer; immutable and safe for concurrent use by many Matchers.
type Vocab struct {
	n        int             // tokens
	nodes    []trieNode      // preorder; nodes[0] is the root, a sentinel ends it
	summary  map[int32]int32 // node (depth <= summaryDepth) -> index in sums
	sums     []subtreeBytes
	toks     []int32  // token ids in node order
	pieces   [][]byte // each token's text (nil: never allowed except as EOG)
	eog      []int32  // end-of-generation tokens
	isEOG    map[int32]bool
	maxDepth int

	splitMu sync.Mutex
	splits  []*loopSplit // per loop signature, built on first use (split.go)
}

// NewVocab builds the trie of pieces[id], the bytes each token id
// produces. Tokens with empty text (control tokens) are never allowed
// unless listed in eog, the end-of-generation tokens, which are allowed
// exactly when the grammar can end.
func NewVocab(pieces [][]byte, eog []int32) (*Vocab, error) {
	v := &Vocab{n: len(pieces), pieces: make([][]byte, len(pieces)), isEOG: map[int32]bool{}}
	for _, id := range eog {
		if id < 0 || int(id) >= len(pieces) {
			return nil, fmt.Errorf("grammar: end-of-generation token %d outside the vocabulary of %d", id, len(pieces))
		}
		if !v.isEOG[id] {
			v.isEOG[id] = true
			v.eog = append(v.eog, id)
		}
	}
	var ids []int32
	for id, p := range pieces {
		if len(p) == 0 || len(p) > maxPiece || v.isEOG[int32(id)] {
			continue
		}
		v.pieces[id] = p
		ids = append(ids, int32(id))
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return bytes.Compare(pieces[a], pieces[b]) })

	v.nodes = append(v.nodes, trieNode{})
	var path []int32 // node index at each depth of the current path (path[0] = root)
	path = append(path, 0)
	var prev []byte
	for _, id := range ids {
		p := pieces[id]
		lcp := 0
		for lcp < len(p) && lcp < len(prev) && p[lcp] == prev[lcp] {
			lcp++
		}
		// close the nodes deeper than the common prefix
		for len(path) > lcp+1 {
			v.nodes[path[len(path)-1]].skip = int32(len(v.nodes))
			path = path[:len(path)-1]
		}
		for d := lcp; d < len(p); d++ {
			path = append(path, int32(len(v.nodes)))
			v.nodes = append(v.nodes, trieNode{depth: uint16(d + 1), b: p[d], tokLo: int32(len(v.toks))})
		}
		v.toks = append(v.toks, id)
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	for _, n := range path {
		v.nodes[n].skip = int32(len(v.nodes))
	}
	end := int32(len(v.nodes))
	v.nodes = append(v.nodes, trieNode{skip: end + 1, tokLo: int32(len(v.toks))}) // sentinel
	v.buildSummaries()
	return v, nil
}

// Size returns the number of token ids.
func (v *Vocab) Size() int { return v.n }

// Nodes returns the number of trie nodes (for reports).
func (v *Vocab) Nodes() int { return len(v.nodes) }

// buildSummaries records, for every node, what the token texts in its
// subtree hold from the node's byte on.
func (v *Vocab) buildSummaries() {
	n := len(v.nodes) - 1
	path := make([]int32, v.maxDepth+1) // path[d] = the open node at depth d
	for i := 1; i < n; i++ {
		nd := v.nodes[i]
		path[nd.depth] = int32(i)
		// add this edge to every ancestor-or-self
		for d := 1; d <= int(nd.depth); d++ {
			s := &v.nodes[path[d]].sum
			if nd.b < 0x80 {
				s.ascii[nd.b>>6] |= 1 << (nd.b & 63)
			} else {
				s.nonASCII = true
			}
		}
		// tokens ending here: is their text from depth d on a UTF-8 prefix?
		for _, id := range v.toks[nd.tokLo:v.nodes[i+1].tokLo] {
			p := v.pieces[id]
			for d := 1; d <= int(nd.depth); d++ {
				if !utf8Prefix(p[d-1:]) {
					v.nodes[path[d]].sum.badUTF8 = true
				}
			}
		}
	}
}

// utf8Prefix reports whether p is valid UTF-8 up to maybe an incomplete
// last character.
func utf8Prefix(p []byte) bool {
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		if r != utf8.RuneError || n > 1 {
			p = p[n:]
			continue
		}
		// invalid here: fine only if p is the start of a character
		return len(p) < utf8.UTFMax && !utf8.FullRune(p) && startOfRune(p)
	}
	return true
}

// startOfRune reports whether the incomplete p can be completed to a
// valid character.
func startOfRune(p []byte) bool {
	for _, s := range utf8Sequences(0x80, utf8.MaxRune, nil) {
		if len(p) >= len(s) {
			continue
		}
		ok := true
		for i, b := range p {
			if b < s[i].lo || b > s[i].hi {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
