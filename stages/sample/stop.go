// This file holds StopMatcher, which finds stop sequences in streamed text.
//
// Text arrives in pieces (one per token) and a stop sequence may span
// several pieces, so the matcher holds back any tail of the text that could
// still grow into a stop sequence and releases it once it cannot. It works
// on bytes: it never splits a character that the input did not split (stop
// strings start on a character boundary), but it does not itself hold back
// incomplete UTF-8 sequences; that is the detokenizer's job.

package sample

import "strings"

// StopMatcher cuts a text stream at the first stop sequence. It is not safe
// for concurrent use.
type StopMatcher struct {
	stops   []string
	maxLen  int
	held    []byte // text not yet emitted: a prefix of some stop string
	scratch []byte
	stopped bool
	matched string // the stop sequence that ended the stream
}

// NewStopMatcher returns a matcher for the given stop sequences; empty
// strings are ignored.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
			m.maxLen = max(m.maxLen, len(s))
		}
	}
	if m.maxLen > 0 {
		m.held = make([]byte, 0, m.maxLen)
	}
	return m
}

// Push adds the next piece of text. It returns the text that can be shown
// now; stopped is true once a stop sequence has completed, and then emit is
// the text before it (the stop sequence itself and anything after it are
// dropped). Where several stop sequences match, the one that completes
// first wins (ties: the one that starts first), whatever the split into
// pieces; llama.cpp's server instead takes the earliest start among the
// matches it finds at a token boundary, which can depend on the split.
// After a stop, Push returns "", true.
//
// Without stop sequences Push returns text unchanged and allocates nothing.
func (m *StopMatcher) Push(text string) (emit string, stopped bool) {
	if m.stopped {
		return "", true
	}
	if len(m.stops) == 0 {
		return text, false
	}
	if len(m.held) == 0 {
		// common case: nothing held, emit a substring of text
		if i := m.firstStop(text); i >= 0 {
			m.stop(text[i:])
			return text[:i], true
		}
		h := m.holdLen(text)
		m.held = append(m.held, text[len(text)-h:]...)
		return text[:len(text)-h], false
	}
	m.scratch = append(append(m.scratch[:0], m.held...), text...)
	all := string(m.scratch)
	m.held = m.held[:0]
	if i := m.firstStop(all); i >= 0 {
		m.stop(all[i:])
		return all[:i], true
	}
	h := m.holdLen(all)
	m.held = append(m.held, all[len(all)-h:]...)
	return all[:len(all)-h], false
}

// stop records the stop: rest starts with the stop sequence that matched
// (the longest one that rest starts with, as firstStop picks among matches
// starting at the same place by their end).
func (m *StopMatcher) stop(rest string) {
	m.stopped = true
	m.matched = ""
	for _, s := range m.stops {
		if strings.HasPrefix(rest, s) && (m.matched == "" || len(s) < len(m.matched)) {
			m.matched = s
		}
	}
}

// Matched returns the stop sequence that ended the stream, or "" before a
// stop.
func (m *StopMatcher) Matched() string { return m.matched }

// Flush returns the held-back text at the end of the stream (nothing after
// a stop) and empties the buffer.
func (m *StopMatcher) Flush() string {
	if m.stopped || len(m.held) == 0 {
		return ""
	}
	s := string(m.held)
	m.held = m.held[:0]
	return s
}

// Reset makes the matcher ready for a new stream with the same stop
// sequences.
func (m *StopMatcher) Reset() {
	m.held = m.held[:0]
	m.stopped = false
	m.matched = ""
}

// firstStop returns the start of the stop sequence that completes first in
// s (the earliest end; among those ending together, the earliest start),
// or -1. Deciding by the end makes the result independent of how the text
// was split into pieces: it is where a byte-by-byte reader would stop.
func (m *StopMatcher) firstStop(s string) int {
	start, end := -1, len(s)+1
	for _, stop := range m.stops {
		// a match must end no later than the best so far
		if i := strings.Index(s[:min(len(s), end)], stop); i >= 0 {
			if e := i + len(stop); e < end || (e == end && i < start) {
				start, end = i, e
			}
		}
	}
	return start
}

// holdLen returns the length of the longest suffix of s that is a proper
// prefix of some stop sequence (the text that must be held back).
func (m *StopMatcher) holdLen(s string) int {
	for j := max(0, len(s)-m.maxLen+1); j < len(s); j++ {
		tail := s[j:]
		for _, stop := range m.stops {
			if len(tail) < len(stop) && strings.HasPrefix(stop, tail) {
				return len(tail)
			}
		}
	}
	return 0
}
