// vocab.go: the byte trie of a vocabulary's token texts, flattened in
// preorder so that a mask walk is one forward pass over an array and a
// rejected prefix skips its whole subtree with one jump.

package grammar

import (
	"bytes"
	"fmt"
	"slices"
)

// trieNode is one trie node: the byte on the edge into it, its depth
// (bytes from the root) and the index just past its subtree.
type trieNode struct {
	skip  int32
	depth uint16
	b     byte
}

// maxPiece caps the bytes of a token text in the trie; longer tokens are
// never allowed under a grammar.
const maxPiece = 1<<16 - 1

// Vocab is the trie of a vocabulary's token texts, built once per
// tokenizer; immutable and safe for concurrent use by many Matchers.
type Vocab struct {
	n        int        // tokens
	nodes    []trieNode // preorder; nodes[0] is the root
	tokStart []int32    // tokens ending at node i: toks[tokStart[i]:tokStart[i+1]]
	toks     []int32    // token ids in node order
	pieces   [][]byte   // each token's text (nil: never allowed except as EOG)
	eog      []int32    // end-of-generation tokens
	isEOG    map[int32]bool
	maxDepth int
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
	v.tokStart = append(v.tokStart, 0)
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
			v.nodes = append(v.nodes, trieNode{depth: uint16(d + 1), b: p[d]})
			v.tokStart = append(v.tokStart, int32(len(v.toks)))
		}
		v.toks = append(v.toks, id)
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	for _, n := range path {
		v.nodes[n].skip = int32(len(v.nodes))
	}
	v.tokStart = append(v.tokStart, int32(len(v.toks)))
	return v, nil
}

// Size returns the number of token ids.
func (v *Vocab) Size() int { return v.n }

// Nodes returns the number of trie nodes (for reports).
func (v *Vocab) Nodes() int { return len(v.nodes) }
