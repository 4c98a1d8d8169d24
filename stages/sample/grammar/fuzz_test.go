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
