// special.go: splitting the input at special-token texts before the
// tokenizer proper runs (llama.cpp's tokenizer_st_partition).
//
// Each special token, longest first, cuts every remaining raw-text fragment
// at each of its occurrences. Control and unknown tokens take part only when
// parseSpecial is set; user-defined tokens always do. A token with the
// lstrip/rstrip attribute also swallows the whitespace before/after it.
// A trie over the special texts first finds which of them occur at all, so
// vocabularies with thousands of control tokens cost one scan of the text.

package tokenizer

import (
	"slices"
	"strings"
)

// frag is a piece of the input: raw text [off, off+n) or a token.
type frag struct {
	tok    int32 // -1 for raw text
	off, n int
}

// partition splits text into raw fragments and special tokens.
func (t *Tokenizer) partition(text string, parseSpecial bool, sc *encodeScratch) []frag {
	frags := append(sc.frags[:0], frag{tok: -1, off: 0, n: len(text)})
	if len(t.specials) == 0 {
		sc.frags = frags
		return frags
	}
	found := slices.Grow(sc.found[:0], len(t.specials))[:len(t.specials)]
	clear(found)
	t.specialTrie.scan(text, found)
	sc.found = found

	next := sc.frags2[:0]
	for i, id := range t.specials {
		if !found[i] {
			continue
		}
		a := t.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		next = next[:0]
		for _, f := range frags {
			if f.tok >= 0 {
				next = append(next, f)
				continue
			}
			base, n := f.off, f.n
			for n > 0 {
				k := strings.Index(text[base:base+n], tok)
				if k < 0 {
					next = append(next, frag{tok: -1, off: base, n: n})
					break
				}
				left := k
				if a&attrLStrip != 0 {
					for left > 0 && isCSpace(text[base+left-1]) {
						left--
					}
				}
				if left > 0 {
					next = append(next, frag{tok: -1, off: base, n: left})
				}
				next = append(next, frag{tok: id, off: base + k, n: len(tok)})
				rOff := base + k + len(tok)
				rLen := base + n - rOff
				if a&attrRStrip != 0 {
					for rLen > 0 && isCSpace(text[rOff]) {
						rOff++
						rLen--
					}
				}
				base, n = rOff, rLen
			}
		}
		frags, next = next, frags
	}
	sc.frags, sc.frags2 = frags, next
	return frags
}

// trie is a byte trie over the special-token texts.
type trie struct {
	nodes []trieNode
	edges []trieEdge
	first [256]bool // bytes that start some text
}

type trieNode struct {
	edge, nEdges int32 // children: edges[edge : edge+nEdges], sorted by byte
	term         int32 // index of the text ending here, -1 if none
}

type trieEdge struct {
	b     byte
	child int32
}

func newTrie(texts []string) trie {
	// build with maps, then flatten breadth-first with sorted edges
	type node struct {
		kids map[byte]int
		term int
	}
	tmp := []node{{kids: map[byte]int{}, term: -1}}
	for i, s := range texts {
		cur := 0
		for j := 0; j < len(s); j++ {
			nx, ok := tmp[cur].kids[s[j]]
			if !ok {
				nx = len(tmp)
				tmp = append(tmp, node{kids: map[byte]int{}, term: -1})
				tmp[cur].kids[s[j]] = nx
			}
			cur = nx
		}
		if tmp[cur].term < 0 {
			tmp[cur].term = i
		}
	}
	var tr trie
	for _, s := range texts {
		if s != "" {
			tr.first[s[0]] = true
		}
	}
	order := []int{0}
	index := map[int]int32{0: 0}
	tr.nodes = make([]trieNode, 0, len(tmp))
	for q := 0; q < len(order); q++ {
		nd := tmp[order[q]]
		keys := make([]byte, 0, len(nd.kids))
		for b := range nd.kids {
			keys = append(keys, b)
		}
		slices.Sort(keys)
		tn := trieNode{edge: int32(len(tr.edges)), nEdges: int32(len(keys)), term: int32(nd.term)}
		for _, b := range keys {
			c := nd.kids[b]
			index[c] = int32(len(order))
			order = append(order, c)
			tr.edges = append(tr.edges, trieEdge{b: b, child: index[c]})
		}
		tr.nodes = append(tr.nodes, tn)
	}
	return tr
}

// scan marks in found every text that occurs somewhere in s.
func (tr *trie) scan(s string, found []bool) {
	if len(tr.nodes) == 0 {
		return
	}
	for i := 0; i < len(s); i++ {
		if !tr.first[s[i]] {
			continue
		}
		cur := int32(0)
		for j := i; j < len(s); j++ {
			nd := &tr.nodes[cur]
			edges := tr.edges[nd.edge : nd.edge+nd.nEdges]
			k, ok := slices.BinarySearchFunc(edges, s[j], func(e trieEdge, b byte) int { return int(e.b) - int(b) })
			if !ok {
				break
			}
			cur = edges[k].child
			if term := tr.nodes[cur].term; term >= 0 {
				found[term] = true
			}
		}
	}
}
