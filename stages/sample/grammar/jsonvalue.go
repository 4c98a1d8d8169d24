// jsonvalue.go: a JSON decoder that keeps object key order (a schema's
// properties are generated in the order written), and GBNF literal
// escaping.

package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// jobj is a JSON object with its keys in document order.
type jobj struct {
	keys []string
	vals map[string]any
}

func (o *jobj) get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered decodes JSON into nil, bool, json.Number, string, []any
// and *jobj.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

const maxJSONDepth = 200

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jobj{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// encodeJSON writes v compactly, objects in key order, without HTML
// escaping: the text a model should produce for a const or enum value.
func encodeJSON(b *strings.Builder, v any) {
	switch v := v.(type) {
	case *jobj:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			encodeJSON(b, k)
			b.WriteByte(':')
			encodeJSON(b, v.vals[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			encodeJSON(b, e)
		}
		b.WriteByte(']')
	case string:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v) // a string always encodes
		b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	case json.Number:
		b.WriteString(v.String())
	case bool:
		fmt.Fprint(b, v)
	case nil:
		b.WriteString("null")
	}
}

// gbnfLiteral quotes s as a GBNF string literal.
func gbnfLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		b.WriteString(gbnfChar(r, `"\`))
	}
	b.WriteByte('"')
	return b.String()
}

// gbnfChar writes r for a GBNF literal or class, escaping the characters
// in special and anything not printable.
func gbnfChar(r rune, special string) string {
	switch {
	case r == '\n':
		return `\n`
	case r == '\t':
		return `\t`
	case r == '\r':
		return `\r`
	case strings.ContainsRune(special, r):
		return `\` + string(r)
	case r < 0x20 || r == 0x7F:
		return fmt.Sprintf(`\x%02X`, r)
	case r == utf8.RuneError:
		return `\uFFFD`
	case r > 0xFFFF:
		return fmt.Sprintf(`\U%08X`, r)
	}
	return string(r)
}

// gbnfClass writes the code point ranges rs as a GBNF character class.
func gbnfClass(rs []rng) string {
	var b strings.Builder
	b.WriteByte('[')
	for _, r := range rs {
		b.WriteString(gbnfChar(r.lo, `]\-^[`))
		if r.hi != r.lo {
			b.WriteByte('-')
			b.WriteString(gbnfChar(r.hi, `]\-^[`))
		}
	}
	b.WriteByte(']')
	return b.String()
}
