// parse.go: the GBNF parser. It turns grammar text into rules of items
// (literals, character classes, rule references, groups, repetitions); the
// compiler (compile.go) lowers them to the byte-level program the matcher
// runs. Every error names the line and column where it was found.

package grammar

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// ErrSyntax is wrapped by every error Parse returns for malformed text.
var ErrSyntax = errors.New("grammar syntax error")

// Limits on what Parse accepts, so that no input can exhaust memory.
const (
	maxSource    = 1 << 20 // bytes of grammar text
	maxRepeat    = 1000    // m and n in x{m,n}
	maxNesting   = 200     // nested groups
	maxCodeElems = 1 << 20 // elements of the compiled program
)

type itemKind uint8

const (
	itemLit   itemKind = iota // a byte string
	itemClass                 // a character class (ranges of code points, maybe negated)
	itemAny                   // '.': any code point
	itemRef                   // a rule reference
	itemGroup                 // a parenthesised alternation
	itemRep                   // sub repeated min..max times (max < 0: unbounded)
)

// rng is an inclusive range of code points.
type rng struct{ lo, hi rune }

type item struct {
	kind     itemKind
	pos      int // byte offset in the source, for errors
	lit      []byte
	ranges   []rng
	neg      bool
	name     string
	group    *alts
	sub      *item
	min, max int
}

// alts is an alternation of sequences.
type alts struct {
	seqs [][]*item
}

// ruleDef is one `name ::= alternatives` definition.
type ruleDef struct {
	name string
	pos  int
	body *alts
}

type parser struct {
	src   string
	i     int
	depth int
}

// errAt formats a syntax error at byte offset off as line:col.
func errAt(src string, off int, format string, args ...any) error {
	line, col := 1, 1
	for j := 0; j < off && j < len(src); {
		r, n := utf8.DecodeRuneInString(src[j:])
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		j += n
	}
	return fmt.Errorf("grammar: line %d col %d: %w: %s", line, col, ErrSyntax, fmt.Sprintf(format, args...))
}

func (p *parser) errf(format string, args ...any) error { return errAt(p.src, p.i, format, args...) }

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// space skips blanks and comments; newlines too when newlineOK.
func (p *parser) space(newlineOK bool) {
	for p.i < len(p.src) {
		switch c := p.src[p.i]; {
		case c == ' ' || c == '\t':
			p.i++
		case c == '#':
			for p.i < len(p.src) && p.src[p.i] != '\n' && p.src[p.i] != '\r' {
				p.i++
			}
		case (c == '\n' || c == '\r') && newlineOK:
			p.i++
		default:
			return
		}
	}
}

func (p *parser) name() string {
	start := p.i
	for p.i < len(p.src) && isWordChar(p.src[p.i]) {
		p.i++
	}
	return p.src[start:p.i]
}

// parseRules parses a whole grammar.
func parseRules(src string) ([]ruleDef, error) {
	if len(src) > maxSource {
		return nil, fmt.Errorf("grammar: %w: source of %d bytes exceeds the limit of %d", ErrSyntax, len(src), maxSource)
	}
	if !utf8.ValidString(src) {
		off := 0
		for off < len(src) {
			r, n := utf8.DecodeRuneInString(src[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, errAt(src, off, "invalid UTF-8")
	}
	p := &parser{src: src}
	var defs []ruleDef
	p.space(true)
	for p.i < len(p.src) {
		start := p.i
		name := p.name()
		if name == "" {
			return nil, p.errf("expected a rule name, found %q", p.peekText())
		}
		p.space(false)
		if !hasPrefixAt(p.src, p.i, "::=") {
			return nil, p.errf("expected ::= after rule name %q", name)
		}
		p.i += 3
		p.space(true)
		body, err := p.alternates(false)
		if err != nil {
			return nil, err
		}
		defs = append(defs, ruleDef{name: name, pos: start, body: body})
		if p.i < len(p.src) {
			switch p.src[p.i] {
			case '\r', '\n':
			default:
				return nil, p.errf("expected a newline or end of input after rule %q, found %q", name, p.peekText())
			}
		}
		p.space(true)
	}
	return defs, nil
}

func hasPrefixAt(s string, i int, pre string) bool {
	return len(s)-i >= len(pre) && s[i:i+len(pre)] == pre
}

// peekText returns a short excerpt at the cursor for error messages.
func (p *parser) peekText() string {
	if p.i >= len(p.src) {
		return "end of input"
	}
	end := p.i
	for n := 0; end < len(p.src) && n < 8; n++ {
		_, w := utf8.DecodeRuneInString(p.src[end:])
		end += w
	}
	return p.src[p.i:end]
}

func (p *parser) alternates(nested bool) (*alts, error) {
	a := &alts{}
	for {
		s, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		a.seqs = append(a.seqs, s)
		if p.i < len(p.src) && p.src[p.i] == '|' {
			p.i++
			p.space(true)
			continue
		}
		return a, nil
	}
}

// sequence parses items until '|', ')', a newline (at top level) or the end.
func (p *parser) sequence(nested bool) ([]*item, error) {
	var seq []*item
	for p.i < len(p.src) {
		c := p.src[p.i]
		start := p.i
		var it *item
		switch {
		case c == '"':
			p.i++
			lit, err := p.literal()
			if err != nil {
				return nil, err
			}
			it = &item{kind: itemLit, pos: start, lit: lit}
		case c == '[':
			p.i++
			it2, err := p.class()
			if err != nil {
				return nil, err
			}
			it = it2
			it.pos = start
		case c == '.':
			p.i++
			it = &item{kind: itemAny, pos: start}
		case isWordChar(c):
			name := p.name()
			it = &item{kind: itemRef, pos: start, name: name}
			// a rule name followed by ::= means the previous rule ended
			// without a newline: that is malformed.
			save := p.i
			p.space(false)
			if hasPrefixAt(p.src, p.i, "::=") {
				p.i = start
				return nil, p.errf("rule %q starts before the previous rule ended (missing newline?)", name)
			}
			p.i = save
		case c == '(':
			p.i++
			p.depth++
			if p.depth > maxNesting {
				return nil, p.errf("groups nested deeper than %d", maxNesting)
			}
			p.space(true)
			g, err := p.alternates(true)
			if err != nil {
				return nil, err
			}
			if p.i >= len(p.src) || p.src[p.i] != ')' {
				return nil, errAt(p.src, start, "unclosed group: expected ')'")
			}
			p.i++
			p.depth--
			it = &item{kind: itemGroup, pos: start, group: g}
		case c == '*' || c == '+' || c == '?' || c == '{':
			if len(seq) == 0 {
				return nil, p.errf("repetition %q with nothing to repeat", string(c))
			}
			last := seq[len(seq)-1]
			rep, err := p.repetition(last)
			if err != nil {
				return nil, err
			}
			seq[len(seq)-1] = rep
			p.space(nested)
			continue
		case c == '<' || c == '!':
			return nil, p.errf("token references (<[id]>, !<...>) are not supported")
		default:
			if c == '|' || c == ')' || c == '\n' || c == '\r' {
				return seq, nil
			}
			return nil, p.errf("unexpected %q", p.peekText())
		}
		seq = append(seq, it)
		p.space(nested)
	}
	return seq, nil
}

// repetition parses *, +, ?, {m}, {m,}, {m,n} applied to last.
func (p *parser) repetition(last *item) (*item, error) {
	start := p.i
	c := p.src[p.i]
	p.i++
	rep := &item{kind: itemRep, pos: start, sub: last}
	switch c {
	case '*':
		rep.min, rep.max = 0, -1
	case '+':
		rep.min, rep.max = 1, -1
	case '?':
		rep.min, rep.max = 0, 1
	case '{':
		p.space(false)
		m, ok := p.integer()
		if !ok {
			return nil, p.errf("expected a number after '{'")
		}
		rep.min, rep.max = m, m
		p.space(false)
		if p.i < len(p.src) && p.src[p.i] == ',' {
			p.i++
			p.space(false)
			rep.max = -1
			if p.i < len(p.src) && p.src[p.i] != '}' {
				n, ok := p.integer()
				if !ok {
					return nil, p.errf("expected a number or '}' after ','")
				}
				rep.max = n
				p.space(false)
			}
		}
		if p.i >= len(p.src) || p.src[p.i] != '}' {
			return nil, p.errf("expected '}' to close the repetition")
		}
		p.i++
		if rep.max >= 0 && rep.max < rep.min {
			return nil, errAt(p.src, start, "repetition {%d,%d}: maximum below minimum", rep.min, rep.max)
		}
		if rep.min > maxRepeat || rep.max > maxRepeat {
			return nil, errAt(p.src, start, "repetition count above the limit of %d", maxRepeat)
		}
	}
	return rep, nil
}

func (p *parser) integer() (int, bool) {
	start := p.i
	for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
		p.i++
	}
	if p.i == start || p.i-start > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(p.src[start:p.i])
	return n, err == nil
}

// char reads one (possibly escaped) code point inside a literal or class.
func (p *parser) char() (rune, error) {
	if p.i >= len(p.src) {
		return 0, p.errf("unexpected end of input")
	}
	if p.src[p.i] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.i:])
		p.i += n
		return r, nil
	}
	start := p.i
	p.i++
	if p.i >= len(p.src) {
		return 0, p.errf("unexpected end of input after '\\'")
	}
	e := p.src[p.i]
	p.i++
	switch e {
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
		if len(p.src)-p.i < n {
			return 0, errAt(p.src, start, "escape \\%c needs %d hex digits", e, n)
		}
		v, err := strconv.ParseUint(p.src[p.i:p.i+n], 16, 32)
		if err != nil {
			return 0, errAt(p.src, start, "escape \\%c needs %d hex digits, found %q", e, n, p.src[p.i:p.i+n])
		}
		p.i += n
		if v > utf8.MaxRune || (v >= 0xD800 && v <= 0xDFFF) {
			return 0, errAt(p.src, start, "escape %s is not a Unicode scalar value", p.src[start:p.i])
		}
		return rune(v), nil
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'n':
		return '\n', nil
	case '\\', '"', '[', ']', '-', '^', '.', '/', '\'':
		return rune(e), nil
	}
	return 0, errAt(p.src, start, "unknown escape \\%c", e)
}

// literal parses the rest of a "..." string literal.
func (p *parser) literal() ([]byte, error) {
	start := p.i - 1
	var b []byte
	for {
		if p.i >= len(p.src) {
			return nil, errAt(p.src, start, "unterminated string literal")
		}
		if p.src[p.i] == '"' {
			p.i++
			return b, nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		b = utf8.AppendRune(b, r)
	}
}

// class parses the rest of a [...] character class.
func (p *parser) class() (*item, error) {
	start := p.i - 1
	it := &item{kind: itemClass}
	if p.i < len(p.src) && p.src[p.i] == '^' {
		it.neg = true
		p.i++
	}
	for {
		if p.i >= len(p.src) {
			return nil, errAt(p.src, start, "unterminated character class")
		}
		if p.src[p.i] == ']' {
			p.i++
			return it, nil
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.i+1 < len(p.src) && p.src[p.i] == '-' && p.src[p.i+1] != ']' {
			p.i++
			at := p.i
			hi, err = p.char()
			if err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, errAt(p.src, at, "character range %q-%q is reversed", lo, hi)
			}
		}
		it.ranges = append(it.ranges, rng{lo, hi})
	}
}
