// Package sdkreq reads the request bodies the SDK tests in serve/sdktest
// send, from their JavaScript sources, so that Go tests (the fuzz targets'
// seeds) use what real clients write. It reads the subset their request
// literals use (object and array literals, shorthand and spread
// properties, quoted strings with .repeat(n), numbers, true, false, null,
// and consts: values and one-parameter arrow functions returning an
// object) and skips any call whose argument uses anything else (a value
// computed at run time, such as a stop string cut from an earlier answer).
package sdkreq

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// Requests returns the JSON bodies of the SDK calls in the test files of
// dir (serve/sdktest), by API path. The OpenAI SDK's chat.completions.create and
// completions.create post to /v1/chat/completions and /v1/completions,
// the Anthropic SDK's messages.create to /v1/messages; their .stream(x)
// helpers post x with "stream": true.
func Requests(dir string) (map[string][]string, error) {
	out := map[string][]string{}
	seen := map[string]bool{}
	for _, name := range []string{"openai.test.mjs", "anthropic.test.mjs", "responses.test.mjs"} {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		toks, err := jsTokens(string(src))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		p := &jsParser{toks: toks, consts: map[string]any{}}
		p.readConsts()
		for i := 0; i+3 < len(toks); i++ {
			call := toks[i+1].text
			if toks[i].text != "." || (call != "create" && call != "stream") || toks[i+2].text != "(" {
				continue
			}
			path := sdkPath(toks[:i])
			if path == "" {
				continue
			}
			p.pos = i + 3
			v, err := p.value(nil)
			if err != nil {
				continue // not a literal
			}
			obj, ok := v.(map[string]any)
			if !ok {
				continue
			}
			if call == "stream" {
				obj["stream"] = true
			}
			b, err := json.Marshal(obj)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if !seen[string(b)] {
				seen[string(b)] = true
				out[path] = append(out[path], string(b))
			}
		}
	}
	return out, nil
}

// sdkPath is the API path of a call whose receiver ends the tokens before:
// ... chat . completions, ... completions, ... messages, ... responses.
func sdkPath(before []jsToken) string {
	n := len(before)
	if n == 0 {
		return ""
	}
	switch before[n-1].text {
	case "messages":
		return "/v1/messages"
	case "responses":
		return "/v1/responses"
	case "completions":
		if n >= 3 && before[n-2].text == "." && before[n-3].text == "chat" {
			return "/v1/chat/completions"
		}
		return "/v1/completions"
	}
	return ""
}

type jsToken struct {
	text string
	str  bool // a string literal; text is its value
}

// jsTokens splits JavaScript source into identifiers, numbers, string
// literals and punctuation (=> and ... as one token), dropping comments.
func jsTokens(src string) ([]jsToken, error) {
	var toks []jsToken
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("unterminated comment")
			}
			i += end + 4
		case c == '\'' || c == '"' || c == '`':
			var b strings.Builder
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' && j+1 < len(src) {
					j++
					switch src[j] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					default:
						b.WriteByte(src[j])
					}
					continue
				}
				b.WriteByte(src[j])
			}
			if j >= len(src) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			text := b.String()
			if c == '`' && strings.Contains(text, "${") {
				text = "\x00template" // not a constant
			}
			toks = append(toks, jsToken{text: text, str: true})
			i = j + 1
		case c == '_' || c == '$' || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)):
			j := i
			for j < len(src) && (src[j] == '_' || src[j] == '$' || src[j] == '.' && unicode.IsDigit(rune(c)) ||
				unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			toks = append(toks, jsToken{text: src[i:j]})
			i = j
		case strings.HasPrefix(src[i:], "..."), strings.HasPrefix(src[i:], "=>"):
			n := 2
			if c == '.' {
				n = 3
			}
			toks = append(toks, jsToken{text: src[i : i+n]})
			i += n
		default:
			toks = append(toks, jsToken{text: src[i : i+1]})
			i++
		}
	}
	return toks, nil
}

// jsFunc is a const arrow function (param = default) => (object).
type jsFunc struct {
	param string
	body  int // token index of the returned expression
}

type jsParser struct {
	toks   []jsToken
	pos    int
	consts map[string]any // values, or jsFunc
	depth  int            // nesting of value, bounded by maxDepth
}

const maxDepth = 100

// readConsts evaluates every `const NAME = ...` whose value it can read.
func (p *jsParser) readConsts() {
	for i := 0; i+3 < len(p.toks); i++ {
		if p.toks[i].text != "const" || p.toks[i+1].str || p.toks[i+2].text != "=" {
			continue
		}
		name := p.toks[i+1].text
		// (param = {}) => (body)
		if j := i + 3; j+8 < len(p.toks) && p.toks[j].text == "(" && p.toks[j+2].text == "=" &&
			p.toks[j+3].text == "{" && p.toks[j+4].text == "}" && p.toks[j+5].text == ")" &&
			p.toks[j+6].text == "=>" && p.toks[j+7].text == "(" {
			p.consts[name] = jsFunc{param: p.toks[j+1].text, body: j + 8}
			continue
		}
		p.pos = i + 3
		if v, err := p.value(nil); err == nil {
			p.consts[name] = v
		}
	}
}

func (p *jsParser) next() (jsToken, error) {
	if p.pos >= len(p.toks) {
		return jsToken{}, fmt.Errorf("end of input")
	}
	p.pos++
	return p.toks[p.pos-1], nil
}

func (p *jsParser) peek(text string) bool {
	return p.pos < len(p.toks) && !p.toks[p.pos].str && p.toks[p.pos].text == text
}

func (p *jsParser) expect(text string) error {
	t, err := p.next()
	if err != nil || t.str || t.text != text {
		return fmt.Errorf("want %q at token %d", text, p.pos-1)
	}
	return nil
}

// value reads one value; env holds a called function's parameter.
func (p *jsParser) value(env map[string]any) (any, error) {
	if p.depth++; p.depth > maxDepth {
		p.depth--
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	defer func() { p.depth-- }()
	t, err := p.next()
	if err != nil {
		return nil, err
	}
	if t.str {
		if t.text == "\x00template" {
			return nil, fmt.Errorf("template literal")
		}
		s := t.text
		if p.peek(".") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].text == "repeat" {
			p.pos += 2
			if err := p.expect("("); err != nil {
				return nil, err
			}
			n, err := p.next()
			if err != nil {
				return nil, err
			}
			k, err := strconv.Atoi(n.text)
			if err != nil || k < 0 || k > 1<<16 {
				return nil, fmt.Errorf("repeat(%s)", n.text)
			}
			s = strings.Repeat(s, k)
			if err := p.expect(")"); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	switch t.text {
	case "{":
		obj := map[string]any{}
		for !p.peek("}") {
			if p.peek("...") {
				p.pos++
				v, err := p.value(env)
				if err != nil {
					return nil, err
				}
				m, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("spread of a non-object")
				}
				for k, x := range m {
					obj[k] = x
				}
			} else {
				key, err := p.next()
				if err != nil {
					return nil, err
				}
				if p.peek(":") {
					p.pos++
					v, err := p.value(env)
					if err != nil {
						return nil, err
					}
					obj[key.text] = v
				} else { // shorthand
					v, err := p.lookup(key.text, env)
					if err != nil {
						return nil, err
					}
					obj[key.text] = v
				}
			}
			if !p.peek(",") {
				break
			}
			p.pos++
		}
		return obj, p.expect("}")
	case "[":
		arr := []any{}
		for !p.peek("]") {
			v, err := p.value(env)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
			if !p.peek(",") {
				break
			}
			p.pos++
		}
		return arr, p.expect("]")
	case "-":
		v, err := p.value(env)
		if f, ok := v.(float64); ok && err == nil {
			return -f, nil
		}
		return nil, fmt.Errorf("minus of a non-number")
	case "true":
		return true, nil
	case "false":
		return false, nil
	case "null":
		return nil, nil
	}
	if f, err := strconv.ParseFloat(t.text, 64); err == nil {
		return f, nil
	}
	if fn, ok := p.consts[t.text].(jsFunc); ok && p.peek("(") {
		p.pos++
		arg := any(map[string]any{})
		if !p.peek(")") {
			if arg, err = p.value(env); err != nil {
				return nil, err
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		saved := p.pos
		p.pos = fn.body
		v, err := p.value(map[string]any{fn.param: arg})
		p.pos = saved
		return v, err
	}
	return p.lookup(t.text, env)
}

func (p *jsParser) lookup(name string, env map[string]any) (any, error) {
	if v, ok := env[name]; ok {
		return v, nil
	}
	if v, ok := p.consts[name]; ok {
		if _, isFunc := v.(jsFunc); !isFunc {
			return v, nil
		}
	}
	return nil, fmt.Errorf("unknown name %s", name)
}
