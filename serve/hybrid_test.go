package serve_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model/chat"
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

// TestHybridChatSystemPrompt: two chats with the same long system prompt
// (about 1,000 tokens) and different long user messages (about 600, far
// beyond the checkpoints planned near a prompt's end): the second reuses
// the system prompt through the checkpoint taken where the user message
// starts, so it computes only its user part (the cached count is exactly
// the tokens the two prompts share), and its log probabilities are bit for
// bit those of a server that has not seen the first chat. The same holds
// for a sliding-window model (gemma3-small: windows of 128, rings of 192
// rows for steps of 64, so the first chat's user message overwrites the
// system prompt's window: a server without checkpoints reuses nothing),
// through its window checkpoint.
func TestHybridChatSystemPrompt(t *testing.T) {
	for _, preset := range []string{"qwen35-small", "gemma3-small"} {
		t.Run(preset, func(t *testing.T) { chatSystemPrompt(t, preset) })
	}
}

func chatSystemPrompt(t *testing.T, preset string) {
	s, err := synth.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), preset+".gguf")
	if err := synth.WriteFile(p, s, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	system := "You are a helpful assistant. " + strings.Repeat("Remember the river, the stone and the garden. ", 59)
	users := []string{
		strings.Repeat("Tell me about the little girl named Lily and her park. ", 32),
		strings.Repeat("Which word comes last in the story of the old stone? ", 32),
	}
	messages := func(user string) []map[string]any {
		return []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}}
	}
	ask := func(ts *testServer, user string) map[string]any {
		t.Helper()
		r := ts.post(t, "/v1/chat/completions", map[string]any{"max_tokens": 4, "temperature": 0,
			"logprobs": true, "top_logprobs": 5, "messages": messages(user)})
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		return r.json(t)
	}
	ecfg := stages.Config{NCtx: 2048, NSeq: 2}
	if preset == "gemma3-small" {
		ecfg.MaxBatch = 64 // rings of 192 rows: 64 beyond the window of 128
	}
	start := func() *testServer {
		be := cpu.NewBackend(1, nil)
		t.Cleanup(be.Close)
		return startOn(t, p, serve.Config{}, ecfg, be, false)
	}
	ts := start()
	// the prompts as serve tokenizes them: their common prefix is the
	// system message and the user message's header
	tpl, tok := ts.bundle.Template, ts.bundle.Tokenizer
	var prompts [2][]int32
	for i, u := range users {
		text, err := tpl.Render([]chat.Message{{Role: "system", Content: system}, {Role: "user", Content: u}}, true)
		if err != nil {
			t.Fatal(err)
		}
		prompts[i] = tok.Encode(tpl.TrimForTokenizer(text, tok.AddBOS(), tok.AddEOS()), true, true)
	}
	shared := 0
	for prompts[0][shared] == prompts[1][shared] {
		shared++
	}
	if shared < 900 || len(prompts[1])-shared < 500 {
		t.Fatalf("fixture: %d shared tokens, %d of the second user message (want about 1,000 and 600)", shared, len(prompts[1])-shared)
	}
	first := ask(ts, users[0])
	second := ask(ts, users[1])
	fresh := ask(start(), users[1])
	if c := num(path(first, "usage.prompt_tokens_details.cached_tokens")); c != 0 {
		t.Errorf("first request: %d cached tokens", c)
	}
	if n := num(path(second, "usage.prompt_tokens")); n != len(prompts[1]) {
		t.Errorf("second request: %d prompt tokens, want %d", n, len(prompts[1]))
	}
	if c := num(path(second, "usage.prompt_tokens_details.cached_tokens")); c != shared {
		t.Errorf("second request: %d cached tokens, want the %d it shares with the first (the system prompt)", c, shared)
	}
	a, b := path(second, "choices.0.logprobs.content"), path(fresh, "choices.0.logprobs.content")
	if a == nil || !reflect.DeepEqual(a, b) {
		t.Errorf("second request's log probabilities differ from a fresh server's:\n%v\n%v", a, b)
	}
	if preset == "gemma3-small" { // the premise: without checkpoints the rings no longer hold it
		ecfg.StateCheckpoints = -1
		plain := start()
		ask(plain, users[0])
		if c := num(path(ask(plain, users[1]), "usage.prompt_tokens_details.cached_tokens")); c != 0 {
			t.Errorf("without checkpoints: second request %d cached tokens, want 0", c)
		}
	}
}
