package sample

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// refStop is the oracle: read the text byte by byte and stop at the first
// point where it ends with a stop sequence (the longest, if several).
func refStop(text string, stops []string) (string, bool) {
	for end := 1; end <= len(text); end++ {
		cut := -1
		for _, s := range stops {
			if s != "" && strings.HasSuffix(text[:end], s) && (cut < 0 || end-len(s) < cut) {
				cut = end - len(s)
			}
		}
		if cut >= 0 {
			return text[:cut], true
		}
	}
	return text, false
}

// run pushes pieces and returns everything emitted (including Flush) and
// whether it stopped.
func run(m *StopMatcher, pieces []string) (string, bool) {
	var b strings.Builder
	for _, p := range pieces {
		e, stopped := m.Push(p)
		b.WriteString(e)
		if stopped {
			if e2, s2 := m.Push("more"); e2 != "" || !s2 {
				panic("Push after stop emitted text")
			}
			if f := m.Flush(); f != "" {
				panic("Flush after stop returned text")
			}
			return b.String(), true
		}
	}
	b.WriteString(m.Flush())
	return b.String(), false
}

// splits returns text cut into pieces in several ways: whole, byte by
// byte, and random pieces of 1 to 4 bytes (which cut UTF-8 characters).
func splits(text string, rng *rand.Rand) [][]string {
	out := [][]string{{text}}
	var bytes []string
	for i := range len(text) {
		bytes = append(bytes, text[i:i+1])
	}
	out = append(out, bytes)
	for range 20 {
		var ps []string
		for rest := text; rest != ""; {
			n := min(len(rest), 1+rng.IntN(4))
			ps = append(ps, rest[:n])
			rest = rest[n:]
		}
		out = append(out, ps)
	}
	return out
}

func TestStopMatcher(t *testing.T) {
	cases := []struct {
		name  string
		stops []string
		text  string
		want  string
		stop  bool
	}{
		{"no stops", nil, "hello world", "hello world", false},
		{"empty stop ignored", []string{""}, "hello", "hello", false},
		{"simple", []string{"</s>"}, "hello</s>world", "hello", true},
		{"at start", []string{"</s>"}, "</s>hello", "", true},
		{"almost", []string{"</s>"}, "a</b></s", "a</b></s", false},
		{"overlapping ab abc", []string{"ab", "abc"}, "xxabcd", "xx", true},
		{"overlapping abc ab", []string{"abc", "ab"}, "xxabd", "xx", true},
		{"only complete stops count", []string{"bcd", "abcz"}, "_abcd", "_a", true},
		{"inner shorter completes first", []string{"abcd", "bc"}, "xabce", "xa", true},
		{"first to complete wins", []string{"cbb", "b"}, "acbb", "ac", true},
		{"same end: earlier start wins", []string{"b", "ab"}, "xab", "x", true},
		{"self-overlap", []string{"aab"}, "aaaab!", "aa", true},
		{"repeated prefix", []string{"\n\nUser:"}, "hi\n\n\nUser\n\nUser:x", "hi\n\n\nUser", true},
		{"unicode", []string{"。\n", "终"}, "你好。世界终了", "你好。世界", true},
		{"unicode prefix held then released", []string{"éa"}, "caféb", "caféb", false},
		{"emoji", []string{"🙂🙃"}, "ok 🙂 🙂🙃 no", "ok 🙂 ", true},
		{"stop is whole text", []string{"stop"}, "stop", "", true},
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, stop := refStop(c.text, c.stops)
			if want != c.want || stop != c.stop {
				t.Fatalf("case table disagrees with the oracle: %q %v", want, stop)
			}
			for _, pieces := range splits(c.text, rng) {
				got, stopped := run(NewStopMatcher(c.stops), pieces)
				if got != c.want || stopped != c.stop {
					t.Fatalf("pieces %q: emitted %q stopped=%v, want %q %v", pieces, got, stopped, c.want, c.stop)
				}
			}
		})
	}
}

// TestStopMatcherHoldsOnlyWhatItMust checks text is released as soon as it
// can no longer start a stop sequence.
func TestStopMatcherHoldsOnlyWhatItMust(t *testing.T) {
	m := NewStopMatcher([]string{"</s>", "STOP"})
	steps := []struct{ in, out string }{
		{"hello <", "hello "},
		{"/", ""},
		{"x", "</x"},
		{"ST", ""},
		{"OP", ""},
	}
	for i, s := range steps {
		got, stopped := m.Push(s.in)
		if got != s.out {
			t.Fatalf("step %d: Push(%q) = %q, want %q", i, s.in, got, s.out)
		}
		if stopped != (i == len(steps)-1) {
			t.Fatalf("step %d: stopped = %v", i, stopped)
		}
	}
	m.Reset()
	if got, _ := m.Push("ab S"); got != "ab " {
		t.Fatalf("after Reset: %q", got)
	}
	if got := m.Flush(); got != "S" {
		t.Fatalf("Flush = %q, want %q", got, "S")
	}
	if got := m.Flush(); got != "" {
		t.Fatalf("second Flush = %q", got)
	}
}

// TestStopMatcherRandom compares against the oracle on random text over a
// small alphabet, where partial matches are everywhere.
func TestStopMatcherRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	alpha := []string{"a", "b", "c", "é"}
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alpha[rng.IntN(len(alpha))])
		}
		return b.String()
	}
	for range 2000 {
		var stops []string
		for range 1 + rng.IntN(3) {
			stops = append(stops, word(1+rng.IntN(4)))
		}
		text := word(rng.IntN(30))
		want, stop := refStop(text, stops)
		for _, pieces := range splits(text, rng)[:5] {
			got, stopped := run(NewStopMatcher(stops), pieces)
			if got != want || stopped != stop {
				t.Fatalf("stops %q pieces %q: %q %v, want %q %v", stops, pieces, got, stopped, want, stop)
			}
		}
	}
}

func TestStopMatcherAllocs(t *testing.T) {
	m := NewStopMatcher(nil)
	if a := testing.AllocsPerRun(100, func() { m.Push("some token text") }); a != 0 {
		t.Fatalf("no stops: %v allocations per Push", a)
	}
	m = NewStopMatcher([]string{"</s>"})
	if a := testing.AllocsPerRun(100, func() { m.Push("plain text ") }); a != 0 {
		t.Fatalf("nothing held: %v allocations per Push", a)
	}
}

// TestStopMatched: Matched names the stop sequence that ended the stream,
// across pieces, and Reset clears it.
func TestStopMatched(t *testing.T) {
	for _, c := range []struct {
		stops  []string
		pieces []string
		want   string
	}{
		{[]string{"END", "STOP"}, []string{"abc S", "TO", "P more"}, "STOP"},
		{[]string{"ab", "abc"}, []string{"xxa", "bc"}, "ab"},
		{[]string{"x"}, []string{"none here"}, ""},
	} {
		m := NewStopMatcher(c.stops)
		for _, p := range c.pieces {
			m.Push(p)
		}
		if got := m.Matched(); got != c.want {
			t.Errorf("stops %q, pieces %q: matched %q, want %q", c.stops, c.pieces, got, c.want)
		}
		m.Reset()
		if m.Matched() != "" {
			t.Error("Reset kept the match")
		}
	}
}
