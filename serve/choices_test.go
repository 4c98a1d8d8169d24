package serve_test

import (
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestChoices: n > 1 answers n choices, each reproducible with seed+i (the
// same text as an n=1 request with that seed), usage summing their tokens,
// the later choices reusing the first's prompt blocks; streamed, every
// choice's chunks carry its index and finish, then one usage and [DONE].
func TestChoices(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 256, NSeq: 4})
	prompt := strings.Repeat("Once upon a time there was a girl. ", 5) // > 2 KV blocks
	req := func(n int, seed int, stream bool) map[string]any {
		return map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 1, "seed": seed, "n": n, "stream": stream,
			"stream_options": map[string]any{"include_usage": true}}
	}
	cached := ts.engine.Stats().CachedTokens
	m := ts.post(t, "/v1/completions", req(3, 5, false)).json(t)
	chs := asList(path(m, "choices"))
	if len(chs) != 3 {
		t.Fatalf("%d choices: %v", len(chs), m)
	}
	total := 0
	for i, c := range chs {
		if num(path(c, "index")) != i || path(c, "finish_reason") == nil {
			t.Errorf("choice %d: %v", i, c)
		}
		one := ts.post(t, "/v1/completions", req(1, 5+i, false)).json(t)
		if got, want := path(c, "text"), path(one, "choices.0.text"); got != want {
			t.Errorf("choice %d: %q; n=1 with seed %d: %q", i, got, 5+i, want)
		}
		total += num(path(one, "usage.completion_tokens"))
	}
	if num(path(m, "usage.completion_tokens")) != total || num(path(m, "usage.total_tokens")) != total+num(path(m, "usage.prompt_tokens")) {
		t.Errorf("usage %v, want %d completion tokens", path(m, "usage"), total)
	}
	if got := ts.engine.Stats().CachedTokens - cached; got < 2*32 {
		t.Errorf("choices 1 and 2 reused %d prompt tokens from the cache, want at least 64", got)
	}
	if chs[0].(map[string]any)["text"] == chs[1].(map[string]any)["text"] && chs[1].(map[string]any)["text"] == chs[2].(map[string]any)["text"] {
		t.Errorf("three sampled choices are identical: %v", chs)
	}

	// streamed
	r := ts.post(t, "/v1/completions", req(2, 9, true))
	texts := map[int]string{}
	finished := map[int]bool{}
	done, usage := 0, 0
	for _, ev := range parseSSE(t, r.body) {
		if ev.data == "[DONE]" {
			done++
			continue
		}
		c := decodeJSON(t, ev.data)
		if u := path(c, "usage"); u != nil {
			usage = num(path(c, "usage.completion_tokens"))
		}
		for _, ch := range asList(path(c, "choices")) {
			i := num(path(ch, "index"))
			s, _ := path(ch, "text").(string)
			texts[i] += s
			if path(ch, "finish_reason") != nil {
				finished[i] = true
			}
		}
	}
	if done != 1 || !finished[0] || !finished[1] || len(texts) != 2 {
		t.Errorf("stream: %d [DONE], finished %v, texts %v", done, finished, texts)
	}
	for i := range 2 {
		one := ts.post(t, "/v1/completions", req(1, 9+i, false)).json(t)
		if texts[i] != path(one, "choices.0.text") {
			t.Errorf("streamed choice %d %q, n=1 seed %d %q", i, texts[i], 9+i, path(one, "choices.0.text"))
		}
		usage -= num(path(one, "usage.completion_tokens"))
	}
	if usage != 0 {
		t.Errorf("streamed usage off by %d tokens", usage)
	}

	// chat, greedy: identical choices
	cm := ts.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Once"}},
		"max_tokens": 6, "temperature": 0, "n": 2}).json(t)
	if a, b := path(cm, "choices.0.message.content"), path(cm, "choices.1.message.content"); a == nil || a != b || num(path(cm, "choices.1.index")) != 1 {
		t.Errorf("greedy chat n=2: %v", cm)
	}
	for _, n := range []int{0, 17} {
		if r := ts.post(t, "/v1/completions", req(n, 1, false)); r.status != 400 || !strings.Contains(string(r.body), `"n"`) {
			t.Errorf("n=%d: %d %s", n, r.status, r.body)
		}
	}
}
