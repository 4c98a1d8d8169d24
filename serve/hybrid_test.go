package serve_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestHybridChatPrefix: through the chat endpoint, a hybrid model
// (qwen35-small) reuses a shared system prompt: the second request, with
// another user message, reports most of its prompt cached (restored from a
// recurrent-state checkpoint), and answers as a server that has not seen
// the first one; n = 2 choices of one prompt answer alike (greedy) and the
// second reuses the first one's prefix.
func TestHybridChatPrefix(t *testing.T) {
	s, err := synth.Preset("qwen35-small")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := synth.WriteFile(p, s, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	system := "You are a helpful assistant. " + strings.Repeat("Remember the river, the stone and the garden. ", 20)
	ask := func(ts *testServer, user string, n int) map[string]any {
		t.Helper()
		r := ts.post(t, "/v1/chat/completions", map[string]any{"max_tokens": 6, "temperature": 0, "n": n,
			"messages": []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}}})
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		return r.json(t)
	}
	ecfg := stages.Config{NCtx: 1024, NSeq: 2}
	ts := startModel(t, p, serve.Config{}, ecfg, 0)
	first := ask(ts, "What is the first note about?", 1)
	second := ask(ts, "Which word comes last?", 1)
	fresh := ask(startModel(t, p, serve.Config{}, ecfg, 0), "Which word comes last?", 1)
	prompt, cached := num(path(second, "usage.prompt_tokens")), num(path(second, "usage.prompt_tokens_details.cached_tokens"))
	// the system prompt is most of the 400 tokens
	if num(path(first, "usage.prompt_tokens_details.cached_tokens")) != 0 || cached < 3*prompt/4 || cached >= prompt {
		t.Errorf("cached tokens: first %v, second %d of %d (want the system prompt's, less up to 2 blocks)",
			path(first, "usage.prompt_tokens_details.cached_tokens"), cached, prompt)
	}
	if a, b := path(second, "choices.0.message.content"), path(fresh, "choices.0.message.content"); a != b {
		t.Errorf("second request answers %q, a fresh server %q", a, b)
	}
	two := ask(ts, "Tell me a story.", 2)
	if a, b := path(two, "choices.0.message.content"), path(two, "choices.1.message.content"); a != b {
		t.Errorf("n = 2, greedy: choices %q and %q differ", a, b)
	}
}
