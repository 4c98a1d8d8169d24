package serve

import (
	"os"
	"slices"
	"strings"
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

// TestContentStart: with Qwen3.5's template (which refuses a conversation
// without a user message, so cutting the conversation before one would
// not work) and the built-in ChatML one, a message's content starts right
// after its role header, whatever the content begins with.
func TestContentStart(t *testing.T) {
	src, err := os.ReadFile("../model/chat/testdata/templates/Qwen3.5-4B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	qwen, err := chat.New(string(src), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	for name, tpl := range map[string]*chat.Template{"Qwen3.5": qwen, "ChatML": chat.Default()} {
		for _, user := range []string{"Hello there", "#hash first", ""} {
			msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: user}}
			full, err := tpl.Render(msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			c, ok := contentStart(tpl, msgs, 1, nil, chat.RenderOptions{}, full)
			head := "<|im_start|>user\n"
			if !ok || !strings.HasSuffix(full[:c], "Be brief.<|im_end|>\n"+head) {
				t.Errorf("%s, user %q: content starts at %d (%v): %q, want right after %q", name, user, c, ok, full[:c], head)
			}
		}
	}
}
