package grammar

import (
	"errors"
	"testing"
	"time"
)

// TestTooComplex: grammars whose parse states explode are refused with
// ErrTooComplex quickly instead of exhausting memory or time.
func TestTooComplex(t *testing.T) {
	v := newTestVocab(t, testVocab)
	for _, src := range []string{`root ::= (("a"?){1000}){1000}`, `root ::= ((("a"?){1000}){1000}){1000} "b"`} {
		t0 := time.Now()
		_, err := NewMatcher(MustParse(src), v)
		if !errors.Is(err, ErrTooComplex) {
			t.Errorf("%s: NewMatcher error %v, want ErrTooComplex", src, err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%s: took %v", src, d)
		}
	}
}
