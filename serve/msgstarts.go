package serve

// msgstarts.go: where a chat prompt's messages start, in tokens, so that a
// model whose per-sequence state the engine can only resume from a
// checkpoint (a hybrid model's recurrent layers; a sliding-window model's
// rings, which keep only the last window of rows) checkpoints it there
// (stages.Request.CheckpointAt): two chats sharing a long system prompt
// then share its computation whatever their user turns, as llama-server's
// checkpoints before a user message do. llama-server finds messages by per-template
// delimiters; here the template itself says where: the conversation is
// rendered again with one message's content replaced, and the two texts
// part where that content begins (rendering the conversation cut before
// the message does not work in general: Qwen3.5's template refuses a
// conversation without a user message). The message's tokens start where
// the tokens of the text before that point stop agreeing with the
// prompt's. Models without checkpoints skip the work.

import (
	"slices"
	"strings"

	"github.com/flowinfer/flowinfer/model/chat"
)

// maxMessageStarts bounds the extra renders per request: the end of the
// leading system messages (a shared system prompt) and the starts of the
// last two messages (an edited or regenerated last turn; the previous turn
// of a conversation).
const maxMessageStarts = 3

// messageStarts returns the positions, ascending, inside prompt (the
// tokens of full, gr's conversation rendered by t with the generation
// prompt and opts) where the contents of chosen messages start; nil when
// none is found or b's engine keeps no state checkpoints.
func messageStarts(b *Backend, t *chat.Template, gr *genRequest, opts chat.RenderOptions, full string, prompt []int32) []int {
	if b.Bundle.Model == nil || b.Engine.Config().Checkpoints(&b.Bundle.Model.Hyper) == 0 {
		return nil
	}
	tok := b.Bundle.Tokenizer
	var at []int
	for _, i := range startCandidates(gr.messages) {
		c, ok := contentStart(t, gr.messages, i, gr.toolList(), opts, full)
		if !ok {
			continue
		}
		head := tok.Encode(t.TrimForTokenizer(full[:c], tok.AddBOS(), false), true, true)
		n := 0
		for n < len(head) && n < len(prompt) && head[n] == prompt[n] {
			n++
		}
		if n > 0 && n < len(prompt) && (len(at) == 0 || n > at[len(at)-1]) {
			at = append(at, n)
		}
	}
	return at
}

// contentStart returns the offset in full (msgs rendered by t with the
// generation prompt) where message i's content begins: where full and the
// rendering with that content replaced part. ok is false when the
// replaced conversation does not render.
func contentStart(t *chat.Template, msgs []chat.Message, i int, tools []chat.Tool, opts chat.RenderOptions, full string) (c int, ok bool) {
	alt := slices.Clone(msgs)
	alt[i].Content = "#"
	if strings.HasPrefix(msgs[i].Content, "#") {
		alt[i].Content = "@"
	}
	r, err := t.RenderWith(alt, tools, true, opts)
	if err != nil {
		return 0, false
	}
	for c < len(full) && c < len(r.Prompt) && full[c] == r.Prompt[c] {
		c++
	}
	return c, true
}

// startCandidates returns the indexes, ascending, of the messages whose
// starts are checkpointed: the first after the leading system messages
// and the last two, never the first message (position 0).
func startCandidates(msgs []chat.Message) []int {
	var c []int
	first := 0
	for first < len(msgs) && (msgs[first].Role == "system" || msgs[first].Role == "developer") {
		first++
	}
	if first > 0 && first < len(msgs) {
		c = append(c, first)
	}
	for i := max(len(msgs)-2, first+1); i < len(msgs); i++ {
		if len(c) < maxMessageStarts && i > 0 {
			c = append(c, i)
		}
	}
	return c
}
