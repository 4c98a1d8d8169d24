// split.go: the BPE pre-tokenizer engine, reproducing llama.cpp's
// unicode_regex_split.
//
// The text is decoded to codepoints and cut into words by a list of regexes
// applied in turn, each refining the segments of the previous one. Like
// llama.cpp, four regex texts (GPT-2, Llama 3, Qwen 2, Qwen 3.5) and the
// newline splitter run as ports of llama.cpp's hand-written code (which
// agrees with the regexp2 path on the same regexes in our randomized tests);
// everything else runs through regexp2 the way llama.cpp runs std::regex:
//   - a regex using \p{N} \p{L} \p{P} \p{M} \p{S} (or \p{Lu} ... \p{Lo}) runs on a
//     "collapsed" text where every non-ASCII codepoint is replaced by one
//     stand-in per category (whitespace by \v), and each \p{..} becomes a
//     class of that stand-in plus the ASCII members llama.cpp lists;
//   - any other regex runs on the codepoints with non-ASCII whitespace
//     replaced by \v;
//   - \s means [\t-\r ] (std::regex in the C locale), $ means end of the
//     segment, and matching is ECMAScript-style leftmost-first backtracking.
// Unmatched stretches between matches become words of their own.

package tokenizer

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
)

type splitKind int

const (
	splitRegex splitKind = iota
	splitGPT2
	splitLlama3
	splitQwen2
	splitQwen35
	splitNewlines
)

type splitStep struct {
	kind      splitKind
	re        *regexp2.Regexp // splitRegex only
	collapsed bool            // run on the collapsed text
}

// splitter is a compiled pre-tokenizer; safe for concurrent use.
type splitter struct {
	steps        []splitStep
	needCollapse bool
}

// collapse stand-ins and the ASCII members of each category, as llama.cpp
// defines them (note: \p{S} lacks '~').
var categoryClasses = map[string]string{
	`\p{N}`:  "\u00D1" + `0-9`,
	`\p{L}`:  "\u00D2" + `A-Za-z`,
	`\p{Lu}`: "\u00D2" + `A-Za-z`,
	`\p{Ll}`: "\u00D2" + `A-Za-z`,
	`\p{Lt}`: "\u00D2" + `A-Za-z`,
	`\p{Lm}`: "\u00D2" + `A-Za-z`,
	`\p{Lo}`: "\u00D2" + `A-Za-z`,
	`\p{P}`:  "\u00D3" + `!-#%-*,-/:-;?-@\[-\]_\{\}`,
	`\p{M}`:  "\u00D4",
	`\p{S}`:  "\u00D5" + `\$\+<->^` + "`" + `\|`,
}

// collapsedRune is the stand-in of a non-ASCII codepoint in collapsed text.
func collapsedRune(f uint16) rune {
	if f&flagWhitespace != 0 {
		return '\v'
	}
	switch f & flagCategories {
	case flagNumber:
		return 0xD1
	case flagLetter:
		return 0xD2
	case flagPunct:
		return 0xD3
	case flagMark:
		return 0xD4
	case flagSymbol:
		return 0xD5
	}
	return 0xD0
}

func usesCategories(expr string) bool {
	for k := range categoryClasses {
		if strings.Contains(expr, k) {
			return true
		}
	}
	return false
}

func newSplitter(regexes []string) (*splitter, error) {
	sp := &splitter{}
	for _, expr := range regexes {
		st := splitStep{}
		switch expr {
		case reGPT2:
			st.kind = splitGPT2
		case reLlama3, reLlama3Orig:
			st.kind = splitLlama3
		case reQwen2:
			st.kind = splitQwen2
		case reQwen35:
			st.kind = splitQwen35
		case reNewlines:
			st.kind = splitNewlines
		default:
			var err error
			if st, err = compileRegexStep(expr); err != nil {
				return nil, err
			}
			sp.needCollapse = sp.needCollapse || st.collapsed
		}
		sp.steps = append(sp.steps, st)
	}
	return sp, nil
}

// compileRegexStep compiles a split regex for the general (regexp2) path.
func compileRegexStep(expr string) (splitStep, error) {
	st := splitStep{kind: splitRegex}
	pat := expr
	if usesCategories(expr) {
		var err error
		if pat, err = collapseRegex(expr); err != nil {
			return st, err
		}
		st.collapsed = true
	}
	pat, err := ecmaRegex(pat)
	if err != nil {
		return st, fmt.Errorf("regex %q: %w", expr, err)
	}
	if st.re, err = regexp2.Compile(pat, regexp2.ECMAScript); err != nil {
		return st, fmt.Errorf("regex %q: %w", expr, err)
	}
	return st, nil
}

// collapseRegex rewrites \p{..} categories to classes over the collapsed
// text, with llama.cpp's rules (including its simple bracket tracking).
func collapseRegex(expr string) (string, error) {
	for i := 0; i < len(expr); i++ {
		if expr[i] >= 0x80 {
			return "", fmt.Errorf("regex %q mixes unicode categories and non-ASCII characters", expr)
		}
	}
	var b strings.Builder
	inside := false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if c == '[' && (i == 0 || expr[i-1] != '\\') {
			b.WriteByte('[')
			inside = true
			continue
		}
		if inside && c == ']' && expr[i-1] != '\\' {
			b.WriteByte(']')
			inside = false
			continue
		}
		if c == '\\' && i+3 < len(expr) && expr[i+1] == 'p' && expr[i+2] == '{' {
			if j := strings.IndexByte(expr[i+3:], '}'); j >= 0 && i+3+j <= i+10 {
				end := i + 3 + j
				if cls, ok := categoryClasses[expr[i:end+1]]; ok {
					if !inside {
						b.WriteByte('[')
					}
					b.WriteString(cls)
					if !inside {
						b.WriteByte(']')
					}
					i = end
					continue
				}
			}
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// ecmaRegex adapts a std::regex ECMAScript pattern to regexp2's ECMAScript
// mode: \s and \S become the C locale's six space characters (regexp2's
// ECMAScript \s also matches Unicode spaces and U+FEFF), and $ becomes \z
// (regexp2's $ also matches before a final newline).
func ecmaRegex(expr string) (string, error) {
	var b strings.Builder
	inside := false
	rs := []rune(expr)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\\' && i+1 < len(rs):
			n := rs[i+1]
			i++
			switch {
			case n == 's' && inside:
				b.WriteString(`\t-\r `)
			case n == 's':
				b.WriteString(`[\t-\r ]`)
			case n == 'S' && inside:
				return "", fmt.Errorf(`\S inside a character class is not supported`)
			case n == 'S':
				b.WriteString(`[^\t-\r ]`)
			default:
				b.WriteRune('\\')
				b.WriteRune(n)
			}
		case c == '[' && !inside:
			inside = true
			b.WriteRune(c)
		case c == ']' && inside:
			inside = false
			b.WriteRune(c)
		case c == '$' && !inside:
			b.WriteString(`\z`)
		default:
			b.WriteRune(c)
		}
	}
	return b.String(), nil
}

// splitScratch holds the per-call buffers of a split.
type splitScratch struct {
	cpts      []rune
	flags     []uint16
	collapsed []rune
	wide      []rune
	offs      []int
	offs2     []int
}

// split cuts text into words. It returns the codepoints of text and the
// word lengths in codepoints; both alias sc.
func (sp *splitter) split(text string, sc *splitScratch) ([]rune, []int) {
	cpts := appendCpts(sc.cpts[:0], text)
	sc.cpts = cpts
	flags := sc.flags[:0]
	for _, r := range cpts {
		flags = append(flags, cptFlags(r))
	}
	sc.flags = flags
	var collapsed, wide []rune
	if sp.needCollapse {
		collapsed = sc.collapsed[:0]
		for i, r := range cpts {
			if r >= 0x80 {
				r = collapsedRune(flags[i])
			}
			collapsed = append(collapsed, r)
		}
		sc.collapsed = collapsed
	}

	offs := append(sc.offs[:0], len(cpts))
	next := sc.offs2[:0]
	for _, st := range sp.steps {
		next = next[:0]
		switch st.kind {
		case splitGPT2, splitLlama3, splitQwen2, splitQwen35:
			next = splitCustom(st.kind, cpts, flags, offs, next)
		case splitNewlines:
			next = splitCustomNewlines(cpts, offs, next)
		default:
			in := collapsed
			if !st.collapsed {
				if wide == nil {
					wide = sc.wide[:0]
					for i, r := range cpts {
						if r > 0x7F && flags[i]&flagWhitespace != 0 {
							r = '\v'
						}
						wide = append(wide, r)
					}
					sc.wide = wide
				}
				in = wide
			}
			next = splitRegexStep(st.re, in, offs, next)
		}
		offs, next = next, offs
	}
	sc.offs, sc.offs2 = offs, next
	return cpts, offs
}

// splitRegexStep cuts each segment at the matches of re; the text between
// matches becomes its own word. Empty matches only mark cut points.
func splitRegexStep(re *regexp2.Regexp, in []rune, offs, out []int) []int {
	start := 0
	for _, n := range offs {
		seg := in[start : start+n]
		start += n
		last := 0
		m, _ := re.FindRunesMatch(seg)
		for m != nil {
			if m.Index > last {
				out = append(out, m.Index-last)
			}
			if m.Length > 0 {
				out = append(out, m.Length)
			}
			last = m.Index + m.Length
			m, _ = re.FindNextMatch(m)
		}
		if last < n {
			out = append(out, n-last)
		}
	}
	return out
}

// segment is a view of one segment for the hand-written splitters: cpt and
// flag accessors return the out-of-range values (-1, 0) outside [ini, end).
type segment struct {
	cpts     []rune
	flags    []uint16
	ini, end int
	prev     int
	out      []int
}

func (s *segment) cpt(i int) rune {
	if i >= s.ini && i < s.end {
		return s.cpts[i]
	}
	return -1
}

func (s *segment) flag(i int) uint16 {
	if i >= s.ini && i < s.end {
		return s.flags[i]
	}
	return 0
}

// add ends a word at end and returns its length.
func (s *segment) add(end int) int {
	n := end - s.prev
	if n > 0 {
		s.out = append(s.out, n)
	}
	s.prev = end
	return n
}

// contraction returns the length (2 or 3) of 's 't 'm 'd 're 've 'll at
// pos, or 0; fold makes the letters case-insensitive.
func (s *segment) contraction(pos int, fold bool) int {
	if s.cpt(pos) != '\'' || pos+1 >= s.end {
		return 0
	}
	low := func(r rune) rune {
		if fold {
			return asciiLower(r)
		}
		return r
	}
	n := low(s.cpt(pos + 1))
	if n == 's' || n == 't' || n == 'm' || n == 'd' {
		return 2
	}
	if pos+2 < s.end {
		nn := low(s.cpt(pos + 2))
		if n == 'r' && nn == 'e' || n == 'v' && nn == 'e' || n == 'l' && nn == 'l' {
			return 3
		}
	}
	return 0
}

// splitCustom is llama.cpp's hand-written version of reGPT2 (kind
// splitGPT2), reLlama3 (splitLlama3: digits in threes), reQwen2
// (splitQwen2: digits one by one) and reQwen35 (splitQwen35: digits one by
// one, marks count as letters): each segment of offs is cut into words, at
// each position a contraction ('s 't 'm 'd 're 've 'll, any case but for
// GPT-2) or else the word the regex's other branches match (gpt2Word,
// llama3Word).
func splitCustom(kind splitKind, cpts []rune, flags []uint16, offs, out []int) []int {
	s := segment{cpts: cpts, flags: flags, out: out}
	maxDigits, letter := 1, uint16(flagLetter)
	switch kind {
	case splitLlama3:
		maxDigits = 3
	case splitQwen35:
		letter |= flagMark
	}
	start := 0
	for _, n := range offs {
		s.ini, s.end, s.prev = start, start+n, start
		start += n
		for pos := s.ini; pos < s.end; {
			if k := s.contraction(pos, kind != splitGPT2); k > 0 {
				pos += s.add(pos + k)
			} else if kind == splitGPT2 {
				pos = s.gpt2Word(pos)
			} else {
				pos = s.llama3Word(pos, maxDigits, letter)
			}
		}
	}
	return s.out
}

// gpt2Word ends the word reGPT2 matches at pos when no contraction does,
// and returns the position after it.
func (s *segment) gpt2Word(pos int) int {
	c := s.cpt(pos)
	f2 := s.flag(pos)
	if c == ' ' {
		f2 = s.flag(pos + 1)
	}
	// <space>?\p{L}+, <space>?\p{N}+, <space>?[^\s\p{L}\p{N}]+
	if cls := gpt2Class(f2); cls != 0 {
		if c == ' ' {
			pos++
		}
		for gpt2Class(f2) == cls {
			pos++
			f2 = s.flag(pos)
		}
		s.add(pos)
		return pos
	}
	nws := 0
	for s.flag(pos+nws)&flagWhitespace != 0 {
		nws++
	}
	return s.whitespace(pos, nws)
}

// gpt2Class sorts a codepoint for the GPT-2 splitter: 1 letter, 2 number,
// 3 anything else but whitespace, 0 whitespace or out of range.
func gpt2Class(f uint16) int {
	switch {
	case f&flagLetter != 0:
		return 1
	case f&flagNumber != 0:
		return 2
	case f&flagWhitespace == 0 && f != 0:
		return 3
	}
	return 0
}

// llama3Word is gpt2Word for reLlama3, reQwen2 and reQwen35: at most
// maxDigits digits make a number, letter is the flags of a letter.
func (s *segment) llama3Word(pos, maxDigits int, letter uint16) int {
	c := s.cpt(pos)
	f := s.flag(pos)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if !(c == '\r' || c == '\n' || f&flagNumber != 0) {
		if f&letter != 0 || s.flag(pos+1)&letter != 0 {
			pos++
			for s.flag(pos)&letter != 0 {
				pos++
			}
			s.add(pos)
			return pos
		}
	}
	// \p{N}{1,maxDigits}
	if f&flagNumber != 0 {
		ini := pos
		for s.flag(pos)&flagNumber != 0 {
			pos++
			if pos-ini >= maxDigits {
				s.add(pos)
				ini = pos
			}
		}
		s.add(pos)
		return pos
	}
	// <space>?[^\s\p{L}\p{N}]+[\r\n]*
	other := flagWhitespace | letter | flagNumber
	f2 := f
	if c == ' ' {
		f2 = s.flag(pos + 1)
	}
	if f2&other == 0 && f != 0 {
		if c == ' ' {
			pos++
		}
		for f2&other == 0 && f2 != 0 {
			pos++
			f2 = s.flag(pos)
		}
		for c2 := s.cpt(pos); c2 == '\r' || c2 == '\n'; c2 = s.cpt(pos) {
			pos++
		}
		s.add(pos)
		return pos
	}
	nws, lastRN := 0, 0
	for s.flag(pos+nws)&flagWhitespace != 0 {
		if c2 := s.cpt(pos + nws); c2 == '\r' || c2 == '\n' {
			lastRN = pos + nws + 1
		}
		nws++
	}
	if lastRN > 0 { // \s*[\r\n]+
		s.add(lastRN)
		return lastRN
	}
	return s.whitespace(pos, nws)
}

// whitespace ends the word of the nws whitespace codepoints at pos as
// \s+(?!\S) and then \s+ match them (all but the last when a codepoint
// follows in the segment, else all), or after pos alone when nws is 0 (no
// match), and returns the position after it.
func (s *segment) whitespace(pos, nws int) int {
	switch {
	case nws > 1 && s.cpt(pos+nws) != -1: // \s+(?!\S)
		pos += nws - 1
	case nws > 0: // \s+
		pos += nws
	default: // no match
		pos++
	}
	s.add(pos)
	return pos
}

// splitCustomNewlines splits into runs of '\n' and runs of anything else.
func splitCustomNewlines(cpts []rune, offs, out []int) []int {
	start := 0
	for _, n := range offs {
		end := start + n
		for pos := start; pos < end; {
			nl := cpts[pos] == '\n'
			run := pos
			for pos < end && (cpts[pos] == '\n') == nl {
				pos++
			}
			out = append(out, pos-run)
		}
		start = end
	}
	return out
}
