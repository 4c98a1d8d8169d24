package grammar

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// testVocab is a small vocabulary with whole words, punctuation, and
// tokens that split UTF-8 characters.
var testVocab = []string{
	"", // 0: control token (empty text)
	"", // 1: EOS
	"{", "}", "{\"", "\"", "\":", "\": ", ", ", ",", ":", " ", "\n", "  ", "[", "]", "[]", "{}",
	"a", "b", "ab", "abc", "name", "\"name", "name\"", "age", "\"age\":", "true", "false", "null",
	"0", "1", "12", "-", "-1", ".", "5", "e", "E+", "1.5",
	"\\", "\\\"", "\\n", "\\u", "00", "e9", "\\u00e9",
	"é", "\xc3", "\xa9", "\xa9\"", "€", "\xe2", "\x82", "\xac", "\x82\xac", "\xe2\x82", "😀", "\xf0\x9f", "\x98\x80",
	"\xff", "\xc0\xaf", // never valid UTF-8
	"x", "y", "z", "xyz", "Z", "\t",
}

func newTestVocab(t testing.TB, words []string) *Vocab {
	pieces := make([][]byte, len(words))
	for i, w := range words {
		pieces[i] = []byte(w)
	}
	v, err := NewVocab(pieces, []int32{1})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// bruteMask tries every token's text from the matcher's state.
func bruteMask(mt *Matcher) []uint64 {
	mask := make([]uint64, mt.words)
	for id := range mt.v.n {
		save, ended := mt.state, mt.ended
		if mt.Accept(int32(id)) == nil {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
		mt.state, mt.ended = save, ended
	}
	return mask
}

func maskIDs(mask []uint64, n int) []int32 {
	var ids []int32
	for id := range n {
		if Allowed(mask, int32(id)) {
			ids = append(ids, int32(id))
		}
	}
	return ids
}

const testJSON = `
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}
`

// TestMaskMatchesBruteForce: along random walks through several grammars
// (each step picks a random allowed token), the trie mask equals trying
// every token's text.
func TestMaskMatchesBruteForce(t *testing.T) {
	v := newTestVocab(t, testVocab)
	grammars := map[string]string{
		"json":    testJSON,
		"utf8":    `root ::= ([a-z] | [é€😀] | "\"")+`,
		"neg":     `root ::= [^a-c\x00-\x1F]* "}"`,
		"literal": `root ::= "{\"name\": \"é€\"}"`,
		"count":   `root ::= [a-z]{2,5} ("," [0-9])?`,
	}
	for name, src := range grammars {
		t.Run(name, func(t *testing.T) {
			g, err := Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(1, 2))
			steps := 0
			for walk := range 30 {
				mt, err := NewMatcher(g, v)
				if err != nil {
					t.Fatal(err)
				}
				for step := 0; step < 40 && mt.Live(); step++ {
					got := maskIDs(mt.Mask(), v.n)
					want := maskIDs(bruteMask(mt), v.n)
					if !slices.Equal(got, want) {
						t.Fatalf("walk %d step %d: trie mask %v, brute force %v", walk, step, got, want)
					}
					steps++
					if len(want) == 0 {
						break
					}
					if err := mt.Accept(want[rnd.IntN(len(want))]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if steps < 100 {
				t.Errorf("only %d steps compared", steps)
			}
		})
	}
}

// TestPartialUTF8: a character split across tokens is accepted piece by
// piece, and a token that would complete it wrongly is masked.
func TestPartialUTF8(t *testing.T) {
	v := newTestVocab(t, testVocab)
	id := func(s string) int32 { return int32(slices.Index(testVocab, s)) }
	g := MustParse(`root ::= "é€" [x-z]`)
	mt, err := NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	m := mt.Mask()
	if !Allowed(m, id("\xc3")) || !Allowed(m, id("é")) || Allowed(m, id("\xa9")) || Allowed(m, id("€")) {
		t.Fatalf("first mask %v", maskIDs(m, v.n))
	}
	for _, s := range []string{"\xc3", "\xa9", "\xe2", "\x82\xac"} {
		if Allowed(mt.Mask(), 1) {
			t.Fatalf("EOS allowed before %q", s)
		}
		if err := mt.Accept(id(s)); err != nil {
			t.Fatalf("accept %q: %v", s, err)
		}
	}
	if mt.CanEnd() {
		t.Fatal("can end before the last character")
	}
	if err := mt.Accept(id("a")); err == nil {
		t.Fatal(`"a" accepted`)
	}
	if err := mt.Accept(id("z")); err != nil {
		t.Fatal(err)
	}
	if !mt.CanEnd() || !slices.Equal(maskIDs(mt.Mask(), v.n), []int32{1}) {
		t.Fatalf("at the end: mask %v", maskIDs(mt.Mask(), v.n))
	}
	if err := mt.Accept(1); err != nil || !mt.Ended() {
		t.Fatalf("EOS: %v", err)
	}
	// bytes that are never UTF-8 are never allowed, even by [^...]
	mt2, _ := NewMatcher(MustParse(`root ::= [^a]*`), v)
	if m := mt2.Mask(); Allowed(m, id("\xff")) || Allowed(m, id("\xc0\xaf")) || !Allowed(m, id("\xe2\x82")) {
		t.Errorf("invalid UTF-8: mask %v", maskIDs(m, v.n))
	}
}
