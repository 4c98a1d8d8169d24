// compile.go: lowers parsed rules to the byte-level program the matcher
// runs. Character classes over code points become alternatives of UTF-8
// byte-range sequences; repetitions become generated rules as llama.cpp's
// grammar parser writes them; groups with several alternatives become
// rules. Left recursion (also through nullable prefixes) is refused.

package grammar

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

type elemKind uint8

const (
	eTerm elemKind = iota // consume one byte in terms[arg]
	eRef                  // expand rule arg
	eEnd                  // end of an alternative
)

type elem struct {
	kind elemKind
	arg  int32
}

// byteSet is a set of byte values.
type byteSet [4]uint64

func (s *byteSet) has(b byte) bool { return s[b>>6]>>(b&63)&1 != 0 }
func (s *byteSet) add(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s[c>>6] |= 1 << (uint(c) & 63)
	}
}

// Grammar is a compiled grammar: immutable, safe for concurrent use by
// many Matchers.
type Grammar struct {
	code     []elem    // every rule's alternatives, each ended by eEnd
	ruleAlts [][]int32 // start positions of each rule's alternatives
	names    []string  // rule names (generated ones are derived from their parent)
	terms    []byteSet
	root     int32
}

// Parse compiles GBNF text; the start symbol is the rule named root.
func Parse(src string) (*Grammar, error) {
	defs, err := parseRules(src)
	if err != nil {
		return nil, err
	}
	l := &lowerer{src: src, ids: map[string]int32{}, termIDs: map[byteSet]int32{}, classIDs: map[string]int32{}}
	for _, d := range defs {
		if _, dup := l.ids[d.name]; dup {
			return nil, errAt(src, d.pos, "rule %q is defined twice", d.name)
		}
		l.ids[d.name] = int32(len(l.rules))
		l.rules = append(l.rules, nil)
		l.names = append(l.names, d.name)
		l.pos = append(l.pos, d.pos)
	}
	root, ok := l.ids["root"]
	if !ok {
		return nil, fmt.Errorf("grammar: %w: no rule named root", ErrSyntax)
	}
	for _, d := range defs {
		id := l.ids[d.name]
		var alts [][]elem
		for _, s := range d.body.seqs {
			e, err := l.seq(s, id)
			if err != nil {
				return nil, err
			}
			alts = append(alts, e)
		}
		l.rules[id] = alts
	}
	g := &Grammar{names: l.names, terms: l.terms, root: root}
	for _, alts := range l.rules {
		var starts []int32
		for _, a := range alts {
			starts = append(starts, int32(len(g.code)))
			g.code = append(g.code, a...)
			g.code = append(g.code, elem{kind: eEnd})
		}
		g.ruleAlts = append(g.ruleAlts, starts)
	}
	if len(g.code) > maxCodeElems {
		return nil, fmt.Errorf("grammar: %w: compiled program of %d elements exceeds the limit of %d", ErrSyntax, len(g.code), maxCodeElems)
	}
	if !g.pruneUnproductive() {
		return nil, fmt.Errorf("grammar: %w: root matches no finite text (every alternative recurses forever)", ErrSyntax)
	}
	if r := g.leftRecursive(); r >= 0 {
		return nil, errAt(src, l.pos[r], "rule %q is left-recursive (directly, or after a part that can match nothing)", g.names[r])
	}
	return g, nil
}

// MustParse is Parse for grammars known to be valid (package constants);
// it panics on error.
func MustParse(src string) *Grammar {
	g, err := Parse(src)
	if err != nil {
		panic(err)
	}
	return g
}

type lowerer struct {
	src      string
	rules    [][][]elem
	names    []string
	pos      []int // source offset naming each rule in errors
	ids      map[string]int32
	terms    []byteSet
	termIDs  map[byteSet]int32
	classIDs map[string]int32
	nElems   int
}

func (l *lowerer) term(s byteSet) elem {
	id, ok := l.termIDs[s]
	if !ok {
		id = int32(len(l.terms))
		l.terms = append(l.terms, s)
		l.termIDs[s] = id
	}
	return elem{kind: eTerm, arg: id}
}

// newRule adds a generated rule derived from parent and returns its id.
func (l *lowerer) newRule(parent int32, alts [][]elem) (elem, error) {
	for _, a := range alts {
		l.nElems += len(a) + 1
	}
	if l.nElems > maxCodeElems {
		return elem{}, fmt.Errorf("grammar: %w: compiled program exceeds the limit of %d elements", ErrSyntax, maxCodeElems)
	}
	id := int32(len(l.rules))
	l.rules = append(l.rules, alts)
	l.names = append(l.names, fmt.Sprintf("%s_%d", l.names[parent], id))
	l.pos = append(l.pos, l.pos[parent])
	return elem{kind: eRef, arg: id}, nil
}

func (l *lowerer) seq(items []*item, parent int32) ([]elem, error) {
	var out []elem
	for _, it := range items {
		e, err := l.item(it, parent)
		if err != nil {
			return nil, err
		}
		out = append(out, e...)
		l.nElems += len(e)
		if l.nElems > maxCodeElems {
			return nil, errAt(l.src, it.pos, "compiled program exceeds the limit of %d elements", maxCodeElems)
		}
	}
	return out, nil
}

// unit lowers it to at most one element (wrapping longer lowerings in a
// generated rule), so that repeating it costs one element per copy.
func (l *lowerer) unit(it *item, parent int32) ([]elem, error) {
	e, err := l.item(it, parent)
	if err != nil || len(e) <= 1 {
		return e, err
	}
	r, err := l.newRule(parent, [][]elem{e})
	return []elem{r}, err
}

func (l *lowerer) item(it *item, parent int32) ([]elem, error) {
	switch it.kind {
	case itemLit:
		out := make([]elem, 0, len(it.lit))
		for _, b := range it.lit {
			var s byteSet
			s.add(b, b)
			out = append(out, l.term(s))
		}
		return out, nil
	case itemClass, itemAny:
		rs := []rng{{0, utf8.MaxRune}}
		if it.kind == itemClass {
			rs = normalize(it.ranges)
			if it.neg {
				rs = complement(rs)
			}
		}
		e, err := l.class(rs, parent)
		if err != nil {
			return nil, err
		}
		if e == nil {
			return nil, errAt(l.src, it.pos, "character class matches no character")
		}
		return []elem{*e}, nil
	case itemRef:
		id, ok := l.ids[it.name]
		if !ok {
			return nil, errAt(l.src, it.pos, "undefined rule %q", it.name)
		}
		return []elem{{kind: eRef, arg: id}}, nil
	case itemGroup:
		if len(it.group.seqs) == 1 {
			return l.seq(it.group.seqs[0], parent)
		}
		var alts [][]elem
		for _, s := range it.group.seqs {
			e, err := l.seq(s, parent)
			if err != nil {
				return nil, err
			}
			alts = append(alts, e)
		}
		r, err := l.newRule(parent, alts)
		return []elem{r}, err
	case itemRep:
		x, err := l.unit(it.sub, parent)
		if err != nil {
			return nil, err
		}
		if len(x) == 0 { // repeating nothing matches nothing
			return nil, nil
		}
		var out []elem
		for range it.min {
			out = append(out, x[0])
		}
		switch {
		case it.max < 0: // star ::= x star | ε
			id := int32(len(l.rules))
			star, err := l.newRule(parent, nil)
			if err != nil {
				return nil, err
			}
			l.rules[id] = [][]elem{{x[0], star}, {}}
			l.nElems += 3
			out = append(out, star)
		case it.max > it.min: // opt_k ::= x opt_{k-1} | ε, opt_1 ::= x | ε
			var prev []elem
			for range it.max - it.min {
				r, err := l.newRule(parent, [][]elem{append([]elem{x[0]}, prev...), {}})
				if err != nil {
					return nil, err
				}
				prev = []elem{r}
			}
			out = append(out, prev...)
		}
		return out, nil
	}
	return nil, errAt(l.src, it.pos, "internal: unknown item kind %d", it.kind)
}

// class lowers a set of code point ranges: one term when all are ASCII,
// else a rule whose alternatives are UTF-8 byte-range sequences. It
// returns nil for an empty set.
func (l *lowerer) class(rs []rng, parent int32) (*elem, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	key := fmt.Sprint(rs)
	if id, ok := l.classIDs[key]; ok {
		return &elem{kind: eRef, arg: id}, nil
	}
	var single byteSet
	var multi [][]elem
	for _, r := range rs {
		for _, s := range utf8Sequences(r.lo, r.hi, nil) {
			if len(s) == 1 {
				single.add(s[0].lo, s[0].hi)
				continue
			}
			var alt []elem
			for _, br := range s {
				var bs byteSet
				bs.add(br.lo, br.hi)
				alt = append(alt, l.term(bs))
			}
			multi = append(multi, alt)
		}
	}
	if single != (byteSet{}) {
		if len(multi) == 0 {
			e := l.term(single)
			return &e, nil
		}
		multi = append([][]elem{{l.term(single)}}, multi...)
	}
	r, err := l.newRule(parent, multi)
	if err != nil {
		return nil, err
	}
	l.classIDs[key] = r.arg
	return &r, nil
}

// normalize sorts and merges ranges.
func normalize(rs []rng) []rng {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b rng) int { return int(a.lo - b.lo) })
	var out []rng
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// complement returns the code points not in the normalized ranges rs.
func complement(rs []rng) []rng {
	var out []rng
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, rng{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, rng{next, utf8.MaxRune})
	}
	return out
}

type byteRange struct{ lo, hi byte }

// utf8Sequences appends the byte-range sequences whose concatenations are
// exactly the UTF-8 encodings of the code points lo..hi (surrogates
// excluded), as Go's regexp/syntax and Rust's regex-syntax split them.
func utf8Sequences(lo, hi rune, out [][]byteRange) [][]byteRange {
	if lo > hi {
		return out
	}
	if lo < 0xD800 && hi > 0xDFFF {
		return utf8Sequences(0xE000, hi, utf8Sequences(lo, 0xD7FF, out))
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		return utf8Sequences(0xE000, hi, out)
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		return utf8Sequences(lo, 0xD7FF, out)
	}
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && hi > m {
			return utf8Sequences(m+1, hi, utf8Sequences(lo, m, out))
		}
	}
	if hi <= 0x7F {
		return append(out, []byteRange{{byte(lo), byte(hi)}})
	}
	for i := uint(1); i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				return utf8Sequences(lo|m+1, hi, utf8Sequences(lo, lo|m, out))
			}
			if hi&m != m {
				return utf8Sequences(hi&^m, hi, utf8Sequences(lo, hi&^m-1, out))
			}
		}
	}
	a := utf8.AppendRune(nil, lo)
	b := utf8.AppendRune(nil, hi)
	s := make([]byteRange, len(a))
	for i := range a {
		s[i] = byteRange{a[i], b[i]}
	}
	return append(out, s)
}

// String prints the compiled program, one rule per line (for debugging).
func (g *Grammar) String() string {
	var b strings.Builder
	for r, starts := range g.ruleAlts {
		fmt.Fprintf(&b, "%s ::=", g.names[r])
		for i, p := range starts {
			if i > 0 {
				b.WriteString(" |")
			}
			for ; g.code[p].kind != eEnd; p++ {
				if e := g.code[p]; e.kind == eRef {
					fmt.Fprintf(&b, " %s", g.names[e.arg])
				} else {
					fmt.Fprintf(&b, " t%d", e.arg)
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
