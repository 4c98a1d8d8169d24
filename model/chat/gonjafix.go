package chat

import "fmt"

// numberDotNonASCII returns the byte offset of the first '.' that follows
// a digit and precedes a non-ASCII character inside a Jinja tag ({{ }} or
// {% %}, outside string literals), or -1.
//
// gonja v2.9.1's lexer cannot take that sequence: scanNumber consumes the
// '.', peeks at the next rune, then backs up by the width of the peeked
// (multi-byte) rune instead of the '.', so it re-lexes the number forever
// and appends tokens until memory runs out (FuzzNew found it:
// testdata/fuzz/FuzzNew/issue19-gonja-number-dot-loop). New refuses such templates
// with an error instead; text outside tags (a numbered list in a
// system prompt, say) is not affected. The scan is conservative: {% raw %}
// content is scanned like a tag.
func numberDotNonASCII(src string) int {
	const (
		text = iota
		code
		comment
	)
	state, depth := text, 0
	var quote byte
	for i := 0; i < len(src); i++ {
		c := src[i]
		next := byte(0)
		if i+1 < len(src) {
			next = src[i+1]
		}
		switch state {
		case text:
			if c == '{' && (next == '{' || next == '%') {
				state, depth, quote = code, 0, 0
				i++
			} else if c == '{' && next == '#' {
				state = comment
				i++
			}
		case comment:
			if c == '#' && next == '}' {
				state = text
				i++
			}
		case code:
			switch {
			case quote != 0:
				if c == '\\' {
					i++
				} else if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
			case c == '{':
				depth++
			case c == '}' && depth > 0:
				depth--
			case (c == '}' || c == '%') && next == '}' && depth == 0:
				state = text
				i++
			case c == '.' && i > 0 && src[i-1] >= '0' && src[i-1] <= '9' && next >= 0x80:
				return i
			}
		}
	}
	return -1
}

// checkGonjaLexable returns an error for a template gonja's lexer would
// loop on (numberDotNonASCII).
func checkGonjaLexable(src string) error {
	if i := numberDotNonASCII(src); i >= 0 {
		return fmt.Errorf("chat template: a number followed by '.' and a non-ASCII character at byte %d inside a tag: the Jinja engine cannot lex it", i)
	}
	return nil
}
