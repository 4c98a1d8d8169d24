// regex.go: a JSON Schema "pattern" to GBNF for the inside of a JSON
// string. Supported: literals and escapes (\d \w \s \D \W \S, \t \n \r,
// \xHH, \uHHHH, escaped punctuation), character classes with ranges and
// negation, '.', groups ((...), (?:...), named groups), alternation, and
// the quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same
// strings). ^ and $ are honoured only at the ends; an unanchored end lets
// any characters come before or after, as JSON Schema's search semantics
// say. Backreferences, lookaround, word boundaries, Unicode properties,
// possessive quantifiers and inline flags are refused with an error naming
// them. Characters are written as JSON requires inside a string (a quote
// as \", a backslash as \\, control characters escaped).

package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

type regexConv struct {
	src []rune
	i   int
	c   *schemaConv
	dep int
}

func regexToGBNF(pattern string, c *schemaConv) (string, error) {
	if !utf8.ValidString(pattern) {
		return "", fmt.Errorf("pattern is not valid UTF-8")
	}
	r := &regexConv{src: []rune(pattern), c: c}
	anchoredStart, anchoredEnd := false, false
	if len(r.src) > 0 && r.src[0] == '^' {
		anchoredStart = true
		r.i = 1
	}
	if n := len(r.src); n > r.i && r.src[n-1] == '$' && (n < 2 || r.src[n-2] != '\\') {
		anchoredEnd = true
		r.src = r.src[:n-1]
	}
	body, err := r.alt()
	if err != nil {
		return "", err
	}
	if r.i < len(r.src) {
		return "", r.errf("unexpected %q", r.src[r.i])
	}
	anyChars := c.use("char") + "*"
	if !anchoredStart {
		body = anyChars + " " + body
	}
	if !anchoredEnd {
		body = body + " " + anyChars
	}
	return body, nil
}

func (r *regexConv) errf(format string, args ...any) error {
	return fmt.Errorf("pattern offset %d: %s", r.i, fmt.Sprintf(format, args...))
}

func (r *regexConv) alt() (string, error) {
	r.dep++
	defer func() { r.dep-- }()
	if r.dep > maxNesting {
		return "", r.errf("nested deeper than %d", maxNesting)
	}
	var alts []string
	for {
		s, err := r.seq()
		if err != nil {
			return "", err
		}
		alts = append(alts, s)
		if r.i < len(r.src) && r.src[r.i] == '|' {
			r.i++
			continue
		}
		if len(alts) == 1 {
			return "(" + alts[0] + ")", nil
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
}

func (r *regexConv) seq() (string, error) {
	var parts []string
	for r.i < len(r.src) {
		c := r.src[r.i]
		if c == '|' || c == ')' {
			break
		}
		atom, err := r.atom()
		if err != nil {
			return "", err
		}
		q, err := r.quantifier()
		if err != nil {
			return "", err
		}
		parts = append(parts, "("+atom+")"+q)
	}
	if len(parts) == 0 {
		return `""`, nil
	}
	return strings.Join(parts, " "), nil
}

func (r *regexConv) quantifier() (string, error) {
	if r.i >= len(r.src) {
		return "", nil
	}
	var q string
	switch c := r.src[r.i]; c {
	case '*', '+', '?':
		r.i++
		q = string(c)
	case '{':
		end := r.i + 1
		for end < len(r.src) && r.src[end] != '}' {
			end++
		}
		if end >= len(r.src) {
			return "", r.errf("unclosed {")
		}
		body := string(r.src[r.i+1 : end])
		lo, hi, ok := strings.Cut(body, ",")
		m, err1 := strconv.Atoi(lo)
		n := m
		var err2 error
		if ok && hi != "" {
			n, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || m < 0 || n < m {
			return "", r.errf("bad quantifier {%s}", body)
		}
		if m > maxRepeat || n > maxRepeat {
			return "", r.errf("quantifier {%s} above %d", body, maxRepeat)
		}
		r.i = end + 1
		switch {
		case ok && hi == "":
			q = fmt.Sprintf("{%d,}", m)
		case ok:
			q = fmt.Sprintf("{%d,%d}", m, n)
		default:
			q = fmt.Sprintf("{%d}", m)
		}
	default:
		return "", nil
	}
	if r.i < len(r.src) {
		switch r.src[r.i] {
		case '?':
			r.i++ // lazy: same language
		case '+':
			return "", r.errf("possessive quantifiers are not supported")
		}
	}
	return q, nil
}

// any code point but the newline, as '.' in a regular expression
var dotRanges = []rng{{0, '\n' - 1}, {'\n' + 1, utf8.MaxRune}}

func (r *regexConv) atom() (string, error) {
	c := r.src[r.i]
	switch c {
	case '(':
		r.i++
		if r.i < len(r.src) && r.src[r.i] == '?' {
			rest := string(r.src[r.i:min(len(r.src), r.i+3)])
			switch {
			case strings.HasPrefix(rest, "?:"):
				r.i += 2
			case strings.HasPrefix(rest, "?P<") || strings.HasPrefix(rest, "?<") && !strings.HasPrefix(rest, "?<=") && !strings.HasPrefix(rest, "?<!"):
				for r.i < len(r.src) && r.src[r.i] != '>' {
					r.i++
				}
				r.i++
			case strings.HasPrefix(rest, "?=") || strings.HasPrefix(rest, "?!") || strings.HasPrefix(rest, "?<"):
				return "", r.errf("lookaround (%s...) is not supported", rest)
			default:
				return "", r.errf("group flags (%s...) are not supported", rest)
			}
		}
		body, err := r.alt()
		if err != nil {
			return "", err
		}
		if r.i >= len(r.src) || r.src[r.i] != ')' {
			return "", r.errf("unclosed group")
		}
		r.i++
		return body, nil
	case '[':
		r.i++
		return r.class()
	case '.':
		r.i++
		return jsonClass(dotRanges), nil
	case '\\':
		rs, err := r.escape(false)
		if err != nil {
			return "", err
		}
		return jsonClass(rs), nil
	case '^', '$':
		return "", r.errf("anchor %q inside the pattern is not supported", c)
	case '*', '+', '?', '{':
		return "", r.errf("quantifier %q with nothing to repeat", c)
	}
	r.i++
	return jsonClass([]rng{{c, c}}), nil
}

// escape reads \x at r.i and returns its code point ranges.
func (r *regexConv) escape(inClass bool) ([]rng, error) {
	r.i++
	if r.i >= len(r.src) {
		return nil, r.errf("pattern ends with \\")
	}
	e := r.src[r.i]
	r.i++
	digits := []rng{{'0', '9'}}
	word := []rng{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	space := []rng{{'\t', '\r'}, {' ', ' '}}
	switch e {
	case 'd':
		return digits, nil
	case 'D':
		return complement(digits), nil
	case 'w':
		return word, nil
	case 'W':
		return complement(word), nil
	case 's':
		return space, nil
	case 'S':
		return complement(space), nil
	case 't':
		return []rng{{'\t', '\t'}}, nil
	case 'n':
		return []rng{{'\n', '\n'}}, nil
	case 'r':
		return []rng{{'\r', '\r'}}, nil
	case 'f':
		return []rng{{'\f', '\f'}}, nil
	case 'v':
		return []rng{{'\v', '\v'}}, nil
	case 'x', 'u':
		n := 2
		if e == 'u' {
			n = 4
		}
		if r.i+n > len(r.src) {
			return nil, r.errf("\\%c needs %d hex digits", e, n)
		}
		v, err := strconv.ParseUint(string(r.src[r.i:r.i+n]), 16, 32)
		if err != nil || v >= 0xD800 && v <= 0xDFFF {
			return nil, r.errf("bad escape \\%c%s", e, string(r.src[r.i:r.i+n]))
		}
		r.i += n
		return []rng{{rune(v), rune(v)}}, nil
	case 'b', 'B':
		if inClass && e == 'b' {
			return []rng{{'\b', '\b'}}, nil
		}
		return nil, r.errf("word boundary \\%c is not supported", e)
	case 'p', 'P':
		return nil, r.errf("Unicode property classes \\%c{...} are not supported", e)
	case 'A', 'z', 'Z', 'G':
		return nil, r.errf("anchor \\%c is not supported", e)
	}
	if e >= '0' && e <= '9' {
		return nil, r.errf("backreference \\%c is not supported", e)
	}
	if e >= 'a' && e <= 'z' || e >= 'A' && e <= 'Z' {
		return nil, r.errf("escape \\%c is not supported", e)
	}
	return []rng{{e, e}}, nil
}

func (r *regexConv) class() (string, error) {
	neg := false
	if r.i < len(r.src) && r.src[r.i] == '^' {
		neg = true
		r.i++
	}
	var rs []rng
	first := true
	for {
		if r.i >= len(r.src) {
			return "", r.errf("unclosed [")
		}
		c := r.src[r.i]
		if c == ']' && !first {
			r.i++
			break
		}
		first = false
		var lo []rng
		if c == '\\' {
			e, err := r.escape(true)
			if err != nil {
				return "", err
			}
			lo = e
		} else {
			if c == '[' && r.i+1 < len(r.src) && r.src[r.i+1] == ':' {
				return "", r.errf("POSIX classes [:...:] are not supported")
			}
			r.i++
			lo = []rng{{c, c}}
		}
		if len(lo) == 1 && lo[0].lo == lo[0].hi && r.i+1 < len(r.src) && r.src[r.i] == '-' && r.src[r.i+1] != ']' {
			r.i++
			var hi rune
			if r.src[r.i] == '\\' {
				e, err := r.escape(true)
				if err != nil {
					return "", err
				}
				if len(e) != 1 || e[0].lo != e[0].hi {
					return "", r.errf("class range ending in a class")
				}
				hi = e[0].lo
			} else {
				hi = r.src[r.i]
				r.i++
			}
			if hi < lo[0].lo {
				return "", r.errf("reversed class range")
			}
			lo = []rng{{lo[0].lo, hi}}
		}
		rs = append(rs, lo...)
	}
	rs = normalize(rs)
	if neg {
		rs = complement(rs)
	}
	if len(rs) == 0 {
		return "", r.errf("class matches nothing")
	}
	return jsonClass(rs), nil
}

// jsonClass writes code point ranges as they appear inside a JSON string:
// plain characters as a class, a quote, a backslash and control characters
// as their escapes.
func jsonClass(rs []rng) string {
	rs = normalize(rs)
	var plain []rng
	var alts []string
	special := func(r rune) bool { return r < 0x20 || r == '"' || r == '\\' }
	for _, x := range rs {
		lo := x.lo
		for c := x.lo; c <= x.hi && c < 0x80; c++ {
			if special(c) {
				if c > lo {
					plain = append(plain, rng{lo, c - 1})
				}
				q := jsonString(string(c))
				alts = append(alts, gbnfLiteral(q[1:len(q)-1]))
				lo = c + 1
			}
		}
		if lo <= x.hi {
			plain = append(plain, rng{lo, x.hi})
		}
	}
	if len(plain) > 0 {
		if len(plain) == 1 && plain[0].lo == plain[0].hi {
			alts = append([]string{gbnfLiteral(string(plain[0].lo))}, alts...)
		} else {
			alts = append([]string{gbnfClass(plain)}, alts...)
		}
	}
	return strings.Join(alts, " | ")
}
