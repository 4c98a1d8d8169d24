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

// TestSetCycle: a template that stores a namespace (or a list or dict
// holding it) into itself is refused; before, {{ ns.x % 2 }} then made
// gonja's Value.String recurse until the goroutine stack overflowed (a
// fatal error: FuzzNew's worker died). Two namespaces' lists aliased to
// each other are not a cycle and still render.
func TestSetCycle(t *testing.T) {
	for _, src := range []string{
		"{%set ns=namespace(x=1)%}{%set ns.index=ns%}{{ns.index%2==0}}{{messages[0].content}}",
		"{%set ns=namespace(x=1)%}{%set ns.index=[1,{'a':ns}]%}{{ns.index%2==0}}{{messages[0].content}}",
		"{%set ns=namespace(x=1)%}{%set ns.index=ns if true else 1%}{{ns.index%2}}{{messages[0].content}}",
	} {
		if _, err := New(src, "", ""); err == nil || !strings.Contains(err.Error(), "stored inside itself") {
			t.Errorf("%q: %v", src, err)
		}
	}
	ok := "{%set ns=namespace(x=1, y=[])%}{%set ns.x=ns.y%}{% for m in messages %}{{m.content}}{% endfor %}"
	tpl, err := New(ok, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.Render([]Message{{Role: "user", Content: "hi"}}, true); err != nil || out != "hi" {
		t.Errorf("%q %v", out, err)
	}
}
