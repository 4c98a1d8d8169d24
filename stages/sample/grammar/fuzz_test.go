package grammar

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseGBNF: any text either parses or fails with an ErrSyntax error
// (never a panic), and a parsed grammar can start a matcher and step
// through a few bytes without panicking.
func FuzzParseGBNF(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.gbnf"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(testJSON)
	f.Add(JSONObjectGBNF)
	f.Add(`root ::= [^\x00-\x1F"]{0,5} | "\u00e9"+`)
	f.Add("root ::= (\"a\"\n| b)\nb ::= b? \"c\"")
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Parse(src)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v does not wrap ErrSyntax", err)
			}
			return
		}
		m := newMachine(g)
		s := m.start()
		for _, b := range []byte(`{"a": 1é}` + "\x00\xff") {
			s = m.step(s, b)
			if s == dead {
				break
			}
		}
	})
}

// FuzzSchemaToGBNF: any input either is refused with ErrSchema or gives
// GBNF that Parse compiles (the converter never writes a broken grammar)
// and that a matcher can start.
func FuzzSchemaToGBNF(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"enum":[1,"x",null]}},"required":["a"]}`,
		`{"type":"array","items":{"type":"integer","minimum":-7,"maximum":1234},"minItems":1,"maxItems":3}`,
		`{"type":"string","pattern":"^(ab|[^\\d\"]){2,4}x?$"}`,
		`{"$defs":{"n":{"anyOf":[{"type":"null"},{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}}}]}},"$ref":"#/$defs/n"}`,
		`{"prefixItems":[{"const":"é\n\"\\"},{"type":"number","minimum":0,"maximum":10}],"items":false}`,
		`{"type":["string","boolean"],"minLength":2}`,
		`{"additionalProperties":{"type":"boolean"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		src, err := SchemaToGBNF([]byte(schema))
		if err != nil {
			if !errors.Is(err, ErrSchema) {
				t.Fatalf("error %v does not wrap ErrSchema", err)
			}
			return
		}
		g, err := Parse(src)
		if err != nil {
			t.Fatalf("schema %s gave a grammar that does not parse: %v\n%s", schema, err, src)
		}
		newMachine(g).start()
	})
}
