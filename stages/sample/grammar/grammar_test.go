package grammar

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// matches reports whether g accepts exactly s (prefix = true: s can still
// be continued to a sentence).
func matches(t *testing.T, g *Grammar, s string) (full, prefix bool) {
	t.Helper()
	m := newMachine(g)
	st := m.start()
	for i := 0; i < len(s); i++ {
		if st = m.step(st, s[i]); st == dead {
			return false, false
		}
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	return m.canEnd[st], true
}

func TestAcceptStrings(t *testing.T) {
	cases := []struct {
		name, src string
		good, bad []string
	}{
		{"literal", `root ::= "ab" "c"`, []string{"abc"}, []string{"", "ab", "abcd", "abd"}},
		{"alt", `root ::= "a" | "bc" | ""`, []string{"a", "bc", ""}, []string{"b", "ab", "abc"}},
		{"star", `root ::= "a"* "b"`, []string{"b", "ab", "aaaab"}, []string{"", "a", "ba"}},
		{"plus", `root ::= [0-9]+`, []string{"0", "123"}, []string{"", "a", "1a"}},
		{"opt", `root ::= "-"? [0-9]`, []string{"-1", "1"}, []string{"--1", "-"}},
		{"count", `root ::= "x"{2,4}`, []string{"xx", "xxx", "xxxx"}, []string{"x", "xxxxx"}},
		{"exact", `root ::= [ab]{3}`, []string{"aba", "bbb"}, []string{"ab", "abab"}},
		{"atleast", `root ::= "x"{2,}`, []string{"xx", "xxxxxxx"}, []string{"x", ""}},
		{"atmost", `root ::= "x"{,2}`, nil, nil}, // syntax error case below handles it
		{"group", `root ::= ("ab" | "c")+ "."`, []string{"ab.", "cab.", "abcc."}, []string{".", "a.", "abc"}},
		{"negclass", `root ::= [^a-c\n]+`, []string{"xyz", "é€😀", "d"}, []string{"a", "xa", "\n", ""}},
		{"unicode class", `root ::= [α-ω]+`, []string{"αβω"}, []string{"a", "Α"}},
		{"any", `root ::= . .`, []string{"ab", "éx", "😀😀"}, []string{"a", "abc", "\xff\xfe"}},
		{"escapes", `root ::= "\x41\u00e9\U0001F600\t\"\\" [\]\-]`, []string{"Aé😀\t\"\\]", "Aé😀\t\"\\-"}, []string{"Aé😀\t\"\\a"}},
		{"rules", "# comment\nroot ::= greeting \" \" name # trailing\ngreeting ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z]*\n", []string{"hi Bob", "hello X"}, []string{"hi bob", "hey Bob"}},
		{"multiline group", "root ::= (\n  \"a\" |\n  \"b\"\n) \"c\"", []string{"ac", "bc"}, []string{"c"}},
		{"right recursion", `root ::= "(" root ")" | "x"`, []string{"x", "(x)", "((x))"}, []string{"(x", "()", "x)"}},
		{"empty star item", `root ::= ""* "a"`, []string{"a"}, []string{""}},
		{"nullable nested star", `root ::= ("a"?)* "b"`, []string{"b", "ab", "aab"}, []string{"", "ba"}},
		{"unproductive branch", "root ::= \"a\" | \"b\" x\nx ::= \"c\" x", []string{"a"}, []string{"b", "bc", "bccc"}},
		{"tail cycle", "root ::= a \"x\" | \"y\"\na ::= \"b\"? c\nc ::= \"c\" | a", []string{"y", "cx", "bcx", "bbcx"}, []string{"x", "bx"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Parse(c.src)
			if c.good == nil && c.bad == nil {
				if err == nil {
					t.Fatalf("Parse(%q) accepted", c.src)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.good {
				if full, _ := matches(t, g, s); !full {
					t.Errorf("%q rejected", s)
				}
			}
			for _, s := range c.bad {
				if full, _ := matches(t, g, s); full {
					t.Errorf("%q accepted", s)
				}
			}
		})
	}
}

func TestPrefixes(t *testing.T) {
	g := MustParse(`root ::= "{" [a-z]* "}"`)
	for _, s := range []string{"", "{", "{ab"} {
		if full, prefix := matches(t, g, s); full || !prefix {
			t.Errorf("%q: full %v prefix %v, want a live incomplete prefix", s, full, prefix)
		}
	}
	if _, prefix := matches(t, g, "{A"); prefix {
		t.Error(`"{A" is not a prefix`)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{`root ::= "abc`, "line 1 col 10: grammar syntax error: unterminated string literal"},
		{"root ::= [a-z", "line 1 col 10"},
		{"root ::= foo", `line 1 col 10: grammar syntax error: undefined rule "foo"`},
		{"root ::= \"a\"\nroot ::= \"b\"", `line 2 col 1: grammar syntax error: rule "root" is defined twice`},
		{"x ::= \"a\"", "no rule named root"},
		{"root ::= (\"a\"", "line 1 col 10: grammar syntax error: unclosed group"},
		{"root ::= \"a\" )", "line 1 col 14"},
		{"root ::= * \"a\"", "nothing to repeat"},
		{"root ::= \"a\"{3,2}", "maximum below minimum"},
		{"root ::= \"a\"{5000}", "above the limit"},
		{"root ::= \"\\q\"", "unknown escape"},
		{"root ::= \"\\xZZ\"", "hex digits"},
		{"root ::= \"\\uD800\"", "not a Unicode scalar value"},
		{"root ::= [z-a]", "reversed"},
		{"root ::= root \"a\" | \"b\"", `rule "root" is left-recursive`},
		{"root ::= a \"x\" | \"y\"\na ::= \"b\"? root", `left-recursive`},
		{"root = \"a\"", "expected ::="},
		{"root ::= \"a\"\n  \"b\"", "line 2 col 3: grammar syntax error: expected a rule name"},
		{"root ::= <[123]>", "token references"},
		{"root ::= \"a\" root", "no finite text"},
		{"root ::= [^\\x00-\\U0010FFFF]", "matches no character"},
		{"root ::= \"a\" \xff", "invalid UTF-8"},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", c.src)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want it to contain %q", c.src, err, c.want)
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, does not wrap ErrSyntax", c.src, err)
		}
	}
}

// TestTestdataGrammars: llama.cpp-style grammars in testdata parse and
// accept a sample; the bad-*.gbnf ones fail with a position.
func TestTestdataGrammars(t *testing.T) {
	samples := map[string]string{
		"json.gbnf":       `{"a": [1, 2.5, "x\n"], "b": {"c": null}}`,
		"arithmetic.gbnf": "(a+b)*2=x\n",
		"list.gbnf":       "- one\n- two\n",
		"chess.gbnf":      "1. e4 e5\n2. Nf3 Nc6\n",
		"japanese.gbnf":   "こんにちは 世界",
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.gbnf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata grammars: %v", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Parse(string(src))
		name := filepath.Base(f)
		if strings.HasPrefix(name, "bad-") {
			if err == nil || !strings.Contains(err.Error(), "line ") {
				t.Errorf("%s: error %v, want one with a position", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if full, _ := matches(t, g, samples[name]); !full {
			t.Errorf("%s rejects %q", name, samples[name])
		}
	}
}
