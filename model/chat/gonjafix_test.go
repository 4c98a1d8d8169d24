package chat

import (
	"strings"
	"testing"
)

// TestNumberDotNonASCII: the sequences gonja's lexer loops on are found
// inside tags, and nothing else is refused (text, strings, comments).
func TestNumberDotNonASCII(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{"{{ 0.腺 }}", 4},
		{"{{\xff\x7f\xff\xff\x920.腺\xe2 0", 8}, // the fuzzer's input
		{"{% if x == 1.5.é %}", 14},
		{"{{ {'a': {'b': 1}} }}{{ 2.ü }}", 25},
		{"1.请遵守 {{ x }}", -1},               // text
		{"{{ '1.请' }} {{ \"2.é\" }}", -1},   // strings
		{"{# 1.é #}{{ 3.5 }}", -1},          // comment; a plain float
		{"{{ x.é }} {{ a1 }}", -1},          // not after a digit
		{"{{ 'it\\'s 1.é' }}", -1},          // escaped quote
		{"{{ x }} 4.é {% set y = 5 %}", -1}, // text between tags
	} {
		if got := numberDotNonASCII(c.src); got != c.want {
			t.Errorf("%q: %d, want %d", c.src, got, c.want)
		}
	}
	if _, err := New("{{ 0.腺 }}", "", ""); err == nil || !strings.Contains(err.Error(), "cannot lex") {
		t.Errorf("New: %v", err)
	}
}
