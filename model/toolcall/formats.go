// This file decodes the bodies of the non-JSON call formats: Qwen3.5's XML
// form and Gemma 4's own object syntax, into calls with JSON arguments.

package toolcall

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
)

// decodeXML reads the body of <tool_call>...</tool_call> in the XML form:
//
//	<function=NAME>
//	<parameter=P>
//	VALUE
//	</parameter>
//	</function>
//
// as common_chat_params_init_qwen3_coder's grammar reads it: one newline
// after the opening tag and before the closing one belongs to the markup;
// a value is JSON unless strParam says the parameter is a string (or it
// does not parse as JSON), then it is text.
func decodeXML(body string, strParam func(fn, param string) bool) ([]Call, bool) {
	s := strings.TrimSpace(body)
	rest, ok := strings.CutPrefix(s, "<function=")
	if !ok {
		return nil, false
	}
	name, rest, ok := strings.Cut(rest, ">")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, "<\n") {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteByte('{')
	seen := map[string]bool{}
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if after, ok := strings.CutPrefix(rest, "</function>"); ok {
			if strings.TrimSpace(after) != "" {
				return nil, false
			}
			break
		}
		after, ok := strings.CutPrefix(rest, "<parameter=")
		if !ok {
			return nil, false
		}
		param, after, ok := strings.Cut(after, ">")
		param = strings.TrimSpace(param)
		if !ok || param == "" || strings.ContainsAny(param, "<\n") || seen[param] {
			return nil, false
		}
		seen[param] = true
		value, after, ok := strings.Cut(after, "</parameter>")
		if !ok {
			return nil, false
		}
		value = strings.TrimPrefix(value, "\n")
		value = strings.TrimSuffix(value, "\n")
		rest = after
		var v []byte
		if strParam == nil || !strParam(name, param) {
			if t := strings.TrimSpace(value); t != "" && json.Valid([]byte(t)) {
				var c bytes.Buffer
				if json.Compact(&c, []byte(t)) == nil {
					v = c.Bytes()
				}
			}
		}
		if v == nil {
			v = jsonString(value)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(jsonString(param))
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []Call{{Name: name, Arguments: b.String()}}, true
}

// jsonString quotes s as JSON without escaping <, > and & (the arguments
// are not HTML).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// maxGemmaDepth bounds the nesting of a Gemma 4 argument value.
const maxGemmaDepth = 64

// decodeGemma4 reads the body of <|tool_call>...<tool_call|>:
// call:NAME{key:VALUE,...}, where a string is <|"|>text<|"|>, keys are
// bare, and numbers, true, false, null, [...] and {...} are as in JSON
// (gemma4_to_json in llama.cpp's chat-peg-parser.cpp).
func decodeGemma4(body string) ([]Call, bool) {
	s, ok := strings.CutPrefix(strings.TrimSpace(body), "call:")
	if !ok {
		return nil, false
	}
	i := strings.IndexByte(s, '{')
	if i <= 0 {
		return nil, false
	}
	name := strings.TrimSpace(s[:i])
	if name == "" || strings.ContainsAny(name, " \n<>") {
		return nil, false
	}
	d := gemmaDecoder{s: s[i:]}
	var b bytes.Buffer
	if !d.value(&b, 0) || strings.TrimSpace(d.s) != "" || b.Len() == 0 || b.Bytes()[0] != '{' {
		return nil, false
	}
	if !json.Valid(b.Bytes()) {
		return nil, false
	}
	return []Call{{Name: name, Arguments: b.String()}}, true
}

type gemmaDecoder struct{ s string }

func (d *gemmaDecoder) ws() { d.s = strings.TrimLeftFunc(d.s, unicode.IsSpace) }

// value translates one value at the start of d.s to JSON in b.
func (d *gemmaDecoder) value(b *bytes.Buffer, depth int) bool {
	if depth > maxGemmaDepth {
		return false
	}
	d.ws()
	switch {
	case strings.HasPrefix(d.s, gemmaQuote):
		text, rest, ok := strings.Cut(d.s[len(gemmaQuote):], gemmaQuote)
		if !ok {
			return false
		}
		b.Write(jsonString(text))
		d.s = rest
		return true
	case strings.HasPrefix(d.s, "{"):
		d.s = d.s[1:]
		b.WriteByte('{')
		for first := true; ; first = false {
			d.ws()
			if strings.HasPrefix(d.s, "}") {
				d.s = d.s[1:]
				b.WriteByte('}')
				return true
			}
			if !first {
				if !strings.HasPrefix(d.s, ",") {
					return false
				}
				d.s = d.s[1:]
				d.ws()
				b.WriteByte(',')
			}
			key, rest, ok := strings.Cut(d.s, ":")
			if !ok || key == "" || strings.ContainsAny(key, "}{,\n") {
				return false
			}
			key = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(key, gemmaQuote), gemmaQuote))
			b.Write(jsonString(key))
			b.WriteByte(':')
			d.s = rest
			if !d.value(b, depth+1) {
				return false
			}
		}
	case strings.HasPrefix(d.s, "["):
		d.s = d.s[1:]
		b.WriteByte('[')
		for first := true; ; first = false {
			d.ws()
			if strings.HasPrefix(d.s, "]") {
				d.s = d.s[1:]
				b.WriteByte(']')
				return true
			}
			if !first {
				if !strings.HasPrefix(d.s, ",") {
					return false
				}
				d.s = d.s[1:]
				b.WriteByte(',')
			}
			if !d.value(b, depth+1) {
				return false
			}
		}
	}
	// a number, true, false or null: up to the next delimiter
	end := strings.IndexAny(d.s, ",}]")
	if end < 0 {
		end = len(d.s)
	}
	lit := strings.TrimSpace(d.s[:end])
	if lit == "" || !json.Valid([]byte(lit)) || strings.ContainsAny(lit, "\"{[") {
		return false
	}
	b.WriteString(lit)
	d.s = d.s[end:]
	return true
}
