package serve

import (
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/model/chat"
)

// TestStartCandidates: the messages whose starts are checkpointed are the
// first after the leading system messages and the last two, at most
// maxMessageStarts, never the first message.
func TestStartCandidates(t *testing.T) {
	roles := func(rs ...string) []chat.Message {
		m := make([]chat.Message, len(rs))
		for i, r := range rs {
			m[i].Role = r
		}
		return m
	}
	for _, tc := range []struct {
		msgs []chat.Message
		want []int
	}{
		{roles("user"), nil},
		{roles("system"), nil},
		{roles("system", "user"), []int{1}},
		{roles("system", "developer", "user"), []int{2}},
		{roles("user", "assistant", "user"), []int{1, 2}},
		{roles("system", "user", "assistant", "user"), []int{1, 2, 3}},
		{roles("system", "user", "assistant", "user", "assistant", "user"), []int{1, 4, 5}},
	} {
		if got := startCandidates(tc.msgs); !slices.Equal(got, tc.want) {
			t.Errorf("%v: %v, want %v", tc.msgs, got, tc.want)
		}
	}
}
