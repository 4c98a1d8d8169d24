package grammar

import (
	"math"
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
	"hello", "hello world", "abcdefgh", " the", "éé", "ab\"", "ab\",", "\"}", "0123456789",
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
		"counted": `root ::= "\"" [^"\\\x00-\x1F]{0,6} "\"" [a-z]?`,
		"chain":   `root ::= [^"]{1,3} [^"]* "\""`,
	}
	for name, schema := range map[string]string{
		"schema":  `{"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":7},"t":{"type":"string"}},"required":["s","t"]}`,
		"pattern": `{"type":"string","pattern":"^[^,]{0,9}$"}`,
	} {
		src, err := SchemaToGBNF([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		grammars[name] = src
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

// TestMaskBigVocab: on the 150K-token benchmark vocabulary, the masks of
// the benchmark states (strings, counted strings, objects) equal the
// brute-force masks, along a short random walk from each.
func TestMaskBigVocab(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 150K-token vocabulary")
	}
	pieces, eog := loadBigVocab(t)
	v, err := NewVocab(pieces, eog)
	if err != nil {
		t.Fatal(err)
	}
	grammars := map[string]*Grammar{"json": MustParse(JSONObjectGBNF)}
	if grammars["schema"], err = FromSchema([]byte(benchSchema)); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, st := range benchStates {
		mt, err := NewMatcher(grammars[st.grammar], v)
		if err != nil {
			t.Fatal(err)
		}
		if !mt.AcceptBytes([]byte(st.prefix)) {
			t.Fatalf("prefix %q rejected", st.prefix)
		}
		for step := range 4 {
			got := mt.Mask()
			want := bruteMask(mt)
			if !slices.Equal(got, want) {
				g, w := maskIDs(got, v.n), maskIDs(want, v.n)
				t.Fatalf("%s/%s step %d: trie mask has %d tokens, brute force %d", st.grammar, st.name, step, len(g), len(w))
			}
			ids := maskIDs(want, v.n)
			if len(ids) == 0 {
				break
			}
			if err := mt.Accept(ids[rnd.IntN(len(ids))]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestApplyTo(t *testing.T) {
	src := make([]float32, 300)
	for i := range src {
		src[i] = float32(i)
	}
	mask := []uint64{
		^uint64(0),              // 0..63 allowed
		0,                       // 64..127 banned
		1<<3 | 1<<63,            // 131, 191: few allowed
		^uint64(1<<5 | 1<<6),    // 197, 198 banned: many allowed
		^uint64(0) &^ (1 << 40), // 296 banned, bits past 299 ignored
	}
	dst := make([]float32, len(src))
	ApplyTo(dst, src, mask)
	inPlace := slices.Clone(src)
	Apply(inPlace, mask)
	if !slices.Equal(dst, inPlace) {
		t.Fatal("Apply and ApplyTo differ")
	}
	for i, v := range dst {
		want := Allowed(mask, int32(i))
		if got := !math.IsInf(float64(v), -1); got != want || got && v != src[i] {
			t.Fatalf("logit %d = %v (allowed %v)", i, v, want)
		}
	}
}

// TestNoAllocsWarm: once its states have been seen, a Matcher's Mask and
// Accept allocate nothing.
func TestNoAllocsWarm(t *testing.T) {
	v := newTestVocab(t, testVocab)
	mt, err := NewMatcher(MustParse(testJSON), v)
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int32 { return int32(slices.Index(testVocab, s)) }
	seq := []int32{id("{\""), id("name"), id("\":"), id(" "), id("\""), id("abc"), id("ab"), id("é"), id("\""), id("}")}
	run := func() {
		mt.Reset()
		for _, tok := range seq {
			if !Allowed(mt.Mask(), tok) {
				t.Fatalf("token %q not allowed", testVocab[tok])
			}
			if err := mt.Accept(tok); err != nil {
				t.Fatal(err)
			}
		}
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Errorf("%v allocations per warm run", n)
	}
}
