// This file works around gonja v2.9.1's parser, which accepts a conditional
// expression "X if C else Y" only as a whole {{ }} or {% set %} expression
// and rejects it inside parentheses, brackets or call arguments
// ("Unbalanced parenthesis"). Such templates (Gemma 3, gpt-oss, LFM2, ...)
// are rewritten before parsing: each parenthesised or bracketed conditional
// becomes ((C) and [(X)] or [(Y)])[0], which gonja evaluates lazily and to the
// same value, since a one-element list is always true. The rewrite is only
// tried when the template does not parse as written.

package chat

import "strings"

// undefinedName is a variable no template defines: "X if C" without else
// yields undefined.
const undefinedName = "__flowinfer_undefined__"

// rewriteInlineIfs rewrites conditional expressions nested in (), [] inside
// Jinja tags. ok is false when nothing needed rewriting.
func rewriteInlineIfs(src string) (out string, ok bool) {
	var b strings.Builder
	changed := false
	i := 0
	for i < len(src) {
		open, close := "", ""
		switch {
		case strings.HasPrefix(src[i:], "{{"):
			open, close = "{{", "}}"
		case strings.HasPrefix(src[i:], "{%"):
			open, close = "{%", "%}"
		case strings.HasPrefix(src[i:], "{#"):
			end := strings.Index(src[i+2:], "#}")
			if end < 0 {
				b.WriteString(src[i:])
				return b.String(), changed
			}
			b.WriteString(src[i : i+2+end+2])
			i += 2 + end + 2
			continue
		default:
			b.WriteByte(src[i])
			i++
			continue
		}
		end := tagEnd(src, i+2, close)
		if end < 0 {
			b.WriteString(src[i:])
			return b.String(), changed
		}
		body := src[i+2 : end]
		if isRawTag(open, body) {
			// Copy {% raw %}...{% endraw %} verbatim.
			stop := strings.Index(src[end:], "endraw")
			if stop < 0 {
				b.WriteString(src[i:])
				return b.String(), changed
			}
			stop += end
			closeAt := strings.Index(src[stop:], "%}")
			if closeAt < 0 {
				b.WriteString(src[i:])
				return b.String(), changed
			}
			b.WriteString(src[i : stop+closeAt+2])
			i = stop + closeAt + 2
			continue
		}
		nb := rewriteExpr(body)
		if open == "{%" {
			nb = completeSetConditional(nb)
		}
		if nb != body {
			changed = true
		}
		b.WriteString(open + nb + close)
		i = end + len(close)
	}
	return b.String(), changed
}

func isRawTag(open, body string) bool {
	if open != "{%" {
		return false
	}
	f := strings.Fields(strings.Trim(body, "-+ \t\r\n"))
	return len(f) == 1 && f[0] == "raw"
}

// completeSetConditional gives "{% set x = X if C %}", which gonja rejects,
// the "else undefined" Jinja implies.
func completeSetConditional(body string) string {
	trimmed := strings.TrimLeft(body, "-+ \t\r\n")
	if !strings.HasPrefix(trimmed, "set ") && !strings.HasPrefix(trimmed, "set\t") {
		return body
	}
	ifAt := findKeyword(body, "if")
	if ifAt < 0 || findKeyword(body[ifAt:], "else") >= 0 {
		return body
	}
	end := len(strings.TrimRight(body, "-+ \t\r\n"))
	return body[:end] + " else " + undefinedName + body[end:]
}

// tagEnd finds close after position i, skipping string literals.
func tagEnd(s string, i int, close string) int {
	for i < len(s) {
		switch c := s[i]; c {
		case '\'', '"':
			i = skipString(s, i)
			continue
		}
		if strings.HasPrefix(s[i:], close) {
			return i
		}
		i++
	}
	return -1
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	i++
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
			continue
		case q:
			return i + 1
		}
		i++
	}
	return len(s)
}

// rewriteExpr rewrites the groups inside an expression, keeping its top
// level as is (gonja handles a top-level conditional itself).
func rewriteExpr(s string) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		c := s[i]
		switch c {
		case '\'', '"':
			j := skipString(s, i)
			b.WriteString(s[i:j])
			i = j
		case '(', '[':
			j := matchClose(s, i)
			if j < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteByte(c)
			b.WriteString(rewriteGroup(s[i+1 : j]))
			b.WriteByte(s[j])
			i = j + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// matchClose returns the index of the bracket closing the one at i.
func matchClose(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '\'', '"':
			j = skipString(s, j) - 1
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// rewriteGroup rewrites the comma-separated items inside a bracket pair.
func rewriteGroup(s string) string {
	parts := splitTop(s, ',')
	for i, p := range parts {
		p = rewriteExpr(p)
		prefix := ""
		if k := kwargPrefix(p); k > 0 {
			prefix, p = p[:k], p[k:]
		}
		parts[i] = prefix + rewriteConditional(p)
	}
	return strings.Join(parts, ",")
}

// rewriteConditional turns a top-level "X if C else Y" into the lazy
// and/or form; anything else is returned unchanged.
func rewriteConditional(p string) string {
	ifAt := findKeyword(p, "if")
	if ifAt < 0 {
		return p
	}
	x := p[:ifAt]
	rest := p[ifAt+2:]
	cond, alt := rest, undefinedName
	if elseAt := findKeyword(rest, "else"); elseAt >= 0 {
		cond, alt = rest[:elseAt], rewriteConditional(rest[elseAt+4:])
	}
	if strings.TrimSpace(x) == "" || strings.TrimSpace(cond) == "" {
		return p
	}
	lead := p[:len(p)-len(strings.TrimLeft(p, " \t\r\n"))]
	return lead + "((" + strings.TrimSpace(cond) + ") and [(" + strings.TrimSpace(x) + ")] or [(" + strings.TrimSpace(alt) + ")])[0]"
}

// splitTop splits s at sep characters outside brackets and strings.
func splitTop(s string, sep byte) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'', '"':
			i = skipString(s, i) - 1
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case sep:
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// findKeyword finds word as a whole identifier outside brackets and strings.
func findKeyword(s, word string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			i = skipString(s, i) - 1
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case depth == 0 && strings.HasPrefix(s[i:], word):
			before := i == 0 || !isIdentByte(s[i-1])
			after := i+len(word) >= len(s) || !isIdentByte(s[i+len(word)])
			if before && after {
				return i
			}
		}
	}
	return -1
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// kwargPrefix returns the length of a leading "name=" (not "=="), or 0.
func kwargPrefix(p string) int {
	i := 0
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	start := i
	for i < len(p) && isIdentByte(p[i]) && p[i] != '.' {
		i++
	}
	if i == start {
		return 0
	}
	for i < len(p) && (p[i] == ' ' || p[i] == '\t') {
		i++
	}
	if i < len(p) && p[i] == '=' && (i+1 >= len(p) || p[i+1] != '=') {
		return i + 1
	}
	return 0
}
