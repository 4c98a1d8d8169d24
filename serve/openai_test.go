package serve_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

var chatMsgs = []map[string]any{{"role": "system", "content": "You are a storyteller."}, {"role": "user", "content": "Tell me a story."}}

// TestChatCompletion: the non-stream response has llama-server's fields, and
// its text is what a raw completion of the rendered ChatML prompt gives.
func TestChatCompletion(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	r := ts.post(t, "/v1/chat/completions", map[string]any{"model": "stories260K", "messages": chatMsgs, "max_tokens": 12})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	m := r.json(t)
	for _, k := range []string{"choices", "created", "model", "system_fingerprint", "object", "usage", "id", "timings"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %q missing: %s", k, r.body)
		}
	}
	if m["object"] != "chat.completion" || !strings.HasPrefix(m["id"].(string), "chatcmpl-") || m["model"] != "stories260K" {
		t.Errorf("object/id/model: %s", r.body)
	}
	if path(m, "choices.0.message.role") != "assistant" || path(m, "choices.0.finish_reason") != "length" || num(path(m, "choices.0.index")) != 0 {
		t.Errorf("choice: %s", r.body)
	}
	u := m["usage"].(map[string]any)
	if num(u["completion_tokens"]) != 12 || num(u["total_tokens"]) != num(u["prompt_tokens"])+12 || path(u, "prompt_tokens_details.cached_tokens") == nil {
		t.Errorf("usage: %v", u)
	}
	for _, k := range []string{"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"} {
		if _, ok := path(m, "timings").(map[string]any)[k]; !ok {
			t.Errorf("timings.%s missing", k)
		}
	}
	// The same prompt rendered by hand (ChatML, the default template).
	raw := "<|im_start|>system\nYou are a storyteller.<|im_end|>\n<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n"
	c := ts.post(t, "/v1/completions", map[string]any{"prompt": raw, "max_tokens": 12}).json(t)
	if got, want := path(m, "choices.0.message.content"), path(c, "choices.0.text"); got != want {
		t.Errorf("chat %q != completion of the rendered prompt %q", got, want)
	}
	if num(path(c, "usage.prompt_tokens")) != num(u["prompt_tokens"]) {
		t.Errorf("prompt tokens: chat %v, raw %v", u["prompt_tokens"], path(c, "usage.prompt_tokens"))
	}
}

// collectChat streams a chat completion and returns its events.
func collectChat(t *testing.T, ts *testServer, req map[string]any) []sseEvent {
	t.Helper()
	req["stream"] = true
	r := ts.post(t, "/v1/chat/completions", req)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	return parseSSE(t, r.body)
}

// TestChatStream: the chunk sequence matches llama-server's (role chunk,
// content chunks, finish chunk with timings, [DONE]) and its text the
// non-stream text.
func TestChatStream(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	want := path(ts.post(t, "/v1/chat/completions", map[string]any{"messages": chatMsgs, "max_tokens": 10}).json(t), "choices.0.message.content")
	evs := collectChat(t, ts, map[string]any{"messages": chatMsgs, "max_tokens": 10})
	if n := len(evs); n < 4 || evs[n-1].data != "[DONE]" {
		t.Fatalf("stream: %+v", evs)
	}
	first := decodeJSON(t, evs[0].data)
	if !reflect.DeepEqual(path(first, "choices.0.delta"), map[string]any{"role": "assistant", "content": nil}) || first["object"] != "chat.completion.chunk" {
		t.Errorf("first chunk %s", evs[0].data)
	}
	var text strings.Builder
	id := first["id"]
	for _, ev := range evs[1 : len(evs)-2] {
		c := decodeJSON(t, ev.data)
		if c["id"] != id || path(c, "choices.0.finish_reason") != nil {
			t.Errorf("content chunk %s", ev.data)
		}
		text.WriteString(path(c, "choices.0.delta.content").(string))
	}
	last := decodeJSON(t, evs[len(evs)-2].data)
	if path(last, "choices.0.finish_reason") != "length" || !reflect.DeepEqual(path(last, "choices.0.delta"), map[string]any{}) || last["timings"] == nil || last["usage"] != nil {
		t.Errorf("finish chunk %s", evs[len(evs)-2].data)
	}
	if text.String() != want {
		t.Errorf("streamed %q, non-stream %q", text.String(), want)
	}
}

// TestChatStreamUsage: include_usage adds a chunk with choices [] and usage
// (with cached_tokens) before [DONE]; the finish chunk then has no timings.
func TestChatStreamUsage(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	req := func() map[string]any {
		return map[string]any{"messages": chatMsgs, "max_tokens": 6, "stream_options": map[string]any{"include_usage": true}}
	}
	collectChat(t, ts, req()) // warm the prefix cache
	evs := collectChat(t, ts, req())
	n := len(evs)
	if n < 4 || evs[n-1].data != "[DONE]" {
		t.Fatalf("stream: %+v", evs)
	}
	fin, use := decodeJSON(t, evs[n-3].data), decodeJSON(t, evs[n-2].data)
	if path(fin, "choices.0.finish_reason") != "length" || fin["timings"] != nil {
		t.Errorf("finish chunk %s", evs[n-3].data)
	}
	if ch, ok := use["choices"].([]any); !ok || len(ch) != 0 || use["timings"] == nil {
		t.Errorf("usage chunk %s", evs[n-2].data)
	}
	if num(path(use, "usage.completion_tokens")) != 6 || num(path(use, "usage.prompt_tokens_details.cached_tokens")) == 0 {
		t.Errorf("usage %s (a repeated prompt must hit the cache)", evs[n-2].data)
	}
	if c, p := num(path(use, "usage.prompt_tokens_details.cached_tokens")), num(path(use, "usage.prompt_tokens")); c >= p || num(path(use, "timings.cache_n")) != c || num(path(use, "timings.prompt_n")) != p-c {
		t.Errorf("cached %d of %d: %s", c, p, evs[n-2].data)
	}
}

// TestCompletions covers /v1/completions: prompt forms, stop strings,
// streaming, and the sampling fields.
func TestCompletions(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	text := func(req map[string]any) (string, map[string]any) {
		t.Helper()
		r := ts.post(t, "/v1/completions", req)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		m := r.json(t)
		s, _ := path(m, "choices.0.text").(string)
		return s, m
	}
	// llama.cpp's greedy continuation of "Once upon a time" (goldens).
	got, m := text(map[string]any{"prompt": "Once upon a time", "max_tokens": 8})
	if got != ", there was a little girl" || m["object"] != "text_completion" || !strings.HasPrefix(m["id"].(string), "cmpl-") {
		t.Errorf("completion %q: %v", got, m)
	}
	t.Run("prompt forms", func(t *testing.T) {
		ids := []int{1, 403, 407, 261, 378} // <s> Once upon a time
		for _, p := range []any{[]string{"Once upon a time"}, ids, [][]int{ids}} {
			if s, _ := text(map[string]any{"prompt": p, "max_tokens": 8}); s != got {
				t.Errorf("prompt %v: %q, want %q", p, s, got)
			}
		}
	})
	t.Run("stop", func(t *testing.T) {
		for _, stop := range []any{"girl na", []string{"xyz", "girl na"}} {
			s, m := text(map[string]any{"prompt": "Once upon a time", "max_tokens": 20, "stop": stop})
			if s != ", there was a little " || path(m, "choices.0.finish_reason") != "stop" {
				t.Errorf("stop %v: %q %v", stop, s, path(m, "choices.0.finish_reason"))
			}
		}
	})
	t.Run("ignore_eos", func(t *testing.T) {
		// A story ends with </s> well within 500 tokens; not with ignore_eos.
		_, m := text(map[string]any{"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true})
		if num(path(m, "usage.completion_tokens")) != 200 || path(m, "choices.0.finish_reason") != "length" {
			t.Errorf("ignore_eos: %v", m["usage"])
		}
	})
	t.Run("max_completion_tokens", func(t *testing.T) {
		_, m := text(map[string]any{"prompt": "Once upon a time", "max_completion_tokens": 3})
		if num(path(m, "usage.completion_tokens")) != 3 {
			t.Errorf("usage %v", m["usage"])
		}
	})
	t.Run("seed", func(t *testing.T) {
		req := map[string]any{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 1234}
		a, _ := text(req)
		b, _ := text(req)
		req["seed"] = 99
		c, _ := text(req)
		if a != b || a == c {
			t.Errorf("seed 1234 twice: %q, %q; seed 99: %q", a, b, c)
		}
	})
	t.Run("logit_bias", func(t *testing.T) {
		// The continuation starts with ",": banning it changes the text.
		comma, ok := ts.bundle.Tokenizer.Lookup(",")
		if !ok {
			t.Fatal("no token for \",\"")
		}
		s, _ := text(map[string]any{"prompt": "Once upon a time", "max_tokens": 8, "logit_bias": map[string]any{strconv.Itoa(int(comma)): -100}})
		if strings.HasPrefix(s, ",") || s == got {
			t.Errorf("banned %d: %q", comma, s)
		}
	})
	t.Run("penalties", func(t *testing.T) {
		s, _ := text(map[string]any{"prompt": "Once upon a time", "max_tokens": 30, "frequency_penalty": 2, "presence_penalty": 2})
		plain, _ := text(map[string]any{"prompt": "Once upon a time", "max_tokens": 30})
		if s == plain {
			t.Errorf("penalties changed nothing: %q", s)
		}
	})
	t.Run("stream", func(t *testing.T) {
		r := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 8, "stream": true, "stream_options": map[string]any{"include_usage": true}})
		evs := parseSSE(t, r.body)
		var b strings.Builder
		for _, ev := range evs[:len(evs)-3] {
			c := decodeJSON(t, ev.data)
			if c["object"] != "text_completion" {
				t.Errorf("chunk %s", ev.data)
			}
			b.WriteString(path(c, "choices.0.text").(string))
		}
		if b.String() != got || path(decodeJSON(t, evs[len(evs)-3].data), "choices.0.finish_reason") != "length" || num(path(decodeJSON(t, evs[len(evs)-2].data), "usage.completion_tokens")) != 8 {
			t.Errorf("stream %q: %+v", b.String(), evs)
		}
	})
}

// TestModels: /v1/models lists the served model under its alias.
func TestModels(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"tiny", "story"}}, stages.Config{})
	m := ts.do(t, "GET", "/v1/models", nil).json(t)
	if m["object"] != "list" || path(m, "data.0.id") != "tiny" || path(m, "data.0.object") != "model" || num(path(m, "data.0.meta.n_vocab")) != 512 || num(path(m, "data.0.meta.n_ctx")) != 256 {
		t.Errorf("models: %v", m)
	}
	for _, name := range []string{"tiny", "story", "stories260K", "stories260K.gguf"} {
		if r := ts.post(t, "/v1/completions", map[string]any{"model": name, "prompt": "Once", "max_tokens": 1}); r.status != 200 {
			t.Errorf("model %q: %d %s", name, r.status, r.body)
		}
	}
}
