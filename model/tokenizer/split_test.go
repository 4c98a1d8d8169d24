// split_test.go: the pre-tokenizer splitters.

package tokenizer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// words splits text with the given regexes and returns the words.
func words(t *testing.T, regexes []string, text string) []string {
	t.Helper()
	sp, err := newSplitter(regexes)
	if err != nil {
		t.Fatal(err)
	}
	var sc splitScratch
	cpts, offs := sp.split(text, &sc)
	var out []string
	start := 0
	for _, n := range offs {
		out = append(out, string(cpts[start:start+n]))
		start += n
	}
	return out
}

func TestSplitExamples(t *testing.T) {
	tests := []struct {
		pre  string
		text string
		want []string
	}{
		{"gpt-2", "Hello world", []string{"Hello", " world"}},
		{"gpt-2", "I'm 123 ok!!  x", []string{"I", "'m", " 123", " ok", "!!", " ", " x"}},
		{"gpt-2", "a\t\tb  ", []string{"a", "\t", "\t", "b", "  "}},
		{"llama3", "12345 abc", []string{"123", "45", " abc"}},
		{"llama3", "\n\n  x", []string{"\n\n", " ", " x"}},
		{"llama3", "I'M ok?!\n\nyes", []string{"I", "'M", " ok", "?!\n\n", "yes"}},
		{"qwen2", "12345", []string{"1", "2", "3", "4", "5"}},
		{"starcoder", "x=1234", []string{"x", "=", "1", "2", "3", "4"}},
		{"falcon", "a.b 12345", []string{"a", ".", "b", " ", "123", "45"}},
		{"deepseek-llm", "Hi\n 12  ", []string{"Hi", "\n", " ", "12", "  "}},
		{"default", "x, 1234", []string{"x", ",", " ", "123", "4"}},
		{"superbpe", "1234567", []string{"1", "234", "567"}},
	}
	for _, tc := range tests {
		t.Run(tc.pre+"/"+tc.text, func(t *testing.T) {
			c, ok := preConfigFor(tc.pre)
			if !ok {
				t.Fatalf("unknown pre %q", tc.pre)
			}
			if got := words(t, c.kind.regexes(), tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSplitCustomMatchesRegex checks the hand-written splitters against the
// general regexp2 path running the regex they stand for, on random text
// mixing the character classes they care about. (llama.cpp's own custom
// code is what we reproduce; agreement with the regex is a cross-check of
// both paths.)
func TestSplitCustomMatchesRegex(t *testing.T) {
	alphabet := []rune{'a', 'B', ' ', ' ', '\n', '\r', '\t', '1', '2', '\'', 's', 'L', 'l', 'e', '.', '!',
		'é', '中', '\u00a0', '\u2003', '\u0663', '\u0301', '😀', 'K', '\u0085', '$'}
	for _, expr := range []string{reGPT2, reLlama3, reQwen2, reQwen35} {
		custom, err := newSplitter([]string{expr})
		if err != nil {
			t.Fatal(err)
		}
		st, err := compileRegexStep(expr)
		if err != nil {
			t.Fatal(err)
		}
		general := &splitter{steps: []splitStep{st}, needCollapse: st.collapsed}
		r := rand.New(rand.NewPCG(1, 2))
		var sa, sb splitScratch
		for range 3000 {
			rs := make([]rune, r.IntN(14))
			for i := range rs {
				rs[i] = alphabet[r.IntN(len(alphabet))]
			}
			text := string(rs)
			_, a := custom.split(text, &sa)
			_, b := general.split(text, &sb)
			if !slices.Equal(a, b) {
				t.Errorf("%.30s... on %q: custom %v, regex %v", expr, text, a, b)
				break
			}
		}
	}
}

func TestAppendCpts(t *testing.T) {
	tests := []struct {
		in   string
		want []rune
	}{
		{"aé中😀", []rune{'a', 'é', '中', '😀'}},
		{"\xff\x80a", []rune{0xFFFD, 0xFFFD, 'a'}},
		{"\xc3", []rune{0xFFFD}},
		{"\xe4\xb8", []rune{0xFFFD, 0xFFFD}},
		{"\xc0\x80", []rune{0}},              // overlong accepted
		{"\xed\xa0\x80", []rune{0xD800}},     // surrogate accepted
		{"\xf7\xbf\xbf\xbf", []rune{0xFFFD}}, // beyond U+10FFFF
	}
	for _, tc := range tests {
		if got := appendCpts(nil, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("appendCpts(%q) = %U, want %U", tc.in, got, tc.want)
		}
	}
	if got := string(appendUTF8(nil, 0xD800)); got != "\xed\xa0\x80" {
		t.Errorf("surrogate encodes as %q", got)
	}
}

func TestCategoryFlags(t *testing.T) {
	tests := []struct {
		r    rune
		want uint16
	}{
		{'a', flagLetter}, {'5', flagNumber}, {' ', flagSeparator | flagWhitespace}, {'\n', flagControl | flagWhitespace},
		{'$', flagSymbol}, {'~', flagSymbol}, {'!', flagPunct}, {'\u0301', flagMark}, {'\u00a0', flagSeparator | flagWhitespace},
		{'\u0085', flagControl | flagWhitespace}, {0x2EBF0, flagLetter}, {0x31EF, flagSymbol}, {0xE000, flagControl},
		{0x0378, flagUndefined}, {0x1C, flagControl},
	}
	for _, tc := range tests {
		if got := cptFlags(tc.r); got != tc.want {
			t.Errorf("cptFlags(%U) = %#x, want %#x", tc.r, got, tc.want)
		}
	}
}
