package serve_test

import (
	"math"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestLogprobs: chat's logprobs.content and completions' legacy arrays,
// streaming and not: one entry per generated token whose texts join into
// the answer, greedy picks the first alternative, alternatives are sorted
// and at most as many as asked, and the stream's entries equal the
// non-stream answer's.
func TestLogprobs(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 128})
	chat := map[string]any{"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}},
		"max_tokens": 10, "temperature": 0, "logprobs": true, "top_logprobs": 3}
	m := ts.post(t, "/v1/chat/completions", chat).json(t)
	content, _ := path(m, "choices.0.logprobs.content").([]any)
	text, _ := path(m, "choices.0.message.content").(string)
	if len(content) == 0 || num(path(m, "usage.completion_tokens")) < len(content) {
		t.Fatalf("logprobs.content %d entries, usage %v: %v", len(content), path(m, "usage"), m)
	}
	var joined strings.Builder
	var tokens []string
	for i, c := range content {
		e := c.(map[string]any)
		tok := e["token"].(string)
		tokens = append(tokens, tok)
		joined.WriteString(tok)
		lp := e["logprob"].(float64)
		top := e["top_logprobs"].([]any)
		if lp > 0 || len(top) != 3 || len(e["bytes"].([]any)) != len(tok) {
			t.Errorf("entry %d: %v", i, e)
			continue
		}
		first := top[0].(map[string]any)
		if first["token"] != tok || math.Abs(first["logprob"].(float64)-lp) > 1e-6 {
			t.Errorf("entry %d: greedy chose %q (%v), the likeliest is %v", i, tok, lp, first)
		}
		for k := 1; k < len(top); k++ {
			if top[k].(map[string]any)["logprob"].(float64) > top[k-1].(map[string]any)["logprob"].(float64) {
				t.Errorf("entry %d: alternatives not sorted: %v", i, top)
			}
		}
	}
	if !strings.HasPrefix(joined.String(), text) {
		t.Errorf("tokens join into %q, answer %q", joined.String(), text)
	}
	// without logprobs: null
	delete(chat, "logprobs")
	delete(chat, "top_logprobs")
	if m := ts.post(t, "/v1/chat/completions", chat).json(t); path(m, "choices.0.logprobs") != nil {
		t.Errorf("logprobs not asked for: %v", path(m, "choices.0.logprobs"))
	}

	// streamed: the chunks' entries, in order, are the same tokens
	chat["logprobs"], chat["top_logprobs"], chat["stream"] = true, 3, true
	r := ts.post(t, "/v1/chat/completions", chat)
	var streamed []string
	for _, ev := range parseSSE(t, r.body) {
		if ev.data == "[DONE]" {
			continue
		}
		c := decodeJSON(t, ev.data)
		for _, e := range asList(path(c, "choices.0.logprobs.content")) {
			streamed = append(streamed, e.(map[string]any)["token"].(string))
		}
	}
	if strings.Join(streamed, "|") != strings.Join(tokens, "|") {
		t.Errorf("streamed tokens %q, non-stream %q", streamed, tokens)
	}

	// completions: legacy arrays, text_offset into the text
	cm := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": 2}).json(t)
	ctext := path(cm, "choices.0.text").(string)
	toks := asList(path(cm, "choices.0.logprobs.tokens"))
	offs := asList(path(cm, "choices.0.logprobs.text_offset"))
	lps := asList(path(cm, "choices.0.logprobs.token_logprobs"))
	tops := asList(path(cm, "choices.0.logprobs.top_logprobs"))
	if len(toks) == 0 || len(offs) != len(toks) || len(lps) != len(toks) || len(tops) != len(toks) {
		t.Fatalf("completions logprobs: %v", path(cm, "choices.0.logprobs"))
	}
	for i, tk := range toks {
		off := num(offs[i])
		if off > len(ctext) || !strings.HasPrefix(ctext[off:], tk.(string)) && off+len(tk.(string)) <= len(ctext) {
			t.Errorf("token %d %q at offset %d of %q", i, tk, off, ctext)
		}
		if top := tops[i].(map[string]any); len(top) == 0 || len(top) > 2 || top[tk.(string)] == nil {
			t.Errorf("token %d %q: top_logprobs %v", i, tk, top)
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
