package serve_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

func ndjsonLines(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestOllama covers /api/chat and /api/generate, streamed (the default)
// and not, with their count and duration fields, and /api/tags.
func TestOllama(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"stories"}}, stages.Config{})
	final := func(t *testing.T, m map[string]any, n int) {
		t.Helper()
		if m["done"] != true || m["done_reason"] != "length" || num(m["eval_count"]) != n || num(m["prompt_eval_count"]) == 0 || m["model"] != "stories" {
			t.Errorf("final %v", m)
		}
		for _, k := range []string{"total_duration", "load_duration", "prompt_eval_duration", "eval_duration", "created_at"} {
			if m[k] == nil {
				t.Errorf("%s missing: %v", k, m)
			}
		}
	}
	chat := map[string]any{"model": "stories", "messages": chatMsgs, "options": map[string]any{"num_predict": 6, "temperature": 0}}
	r := ts.post(t, "/api/chat", chat)
	if r.status != 200 || r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	lines := ndjsonLines(t, r.body)
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		if l["done"] != false || path(l, "message.role") != "assistant" {
			t.Errorf("chunk %v", l)
		}
		text.WriteString(path(l, "message.content").(string))
	}
	final(t, lines[len(lines)-1], 6)
	want := path(ts.post(t, "/v1/chat/completions", map[string]any{"messages": chatMsgs, "max_tokens": 6}).json(t), "choices.0.message.content")
	if text.String() != want {
		t.Errorf("ollama %q, openai %q", text.String(), want)
	}

	chat["stream"] = false
	m := ts.post(t, "/api/chat", chat).json(t)
	final(t, m, 6)
	if path(m, "message.content") != want {
		t.Errorf("non-stream %v", m)
	}

	gen := ts.post(t, "/api/generate", map[string]any{"model": "stories", "prompt": "Once upon a time", "raw": true, "stream": false, "options": map[string]any{"num_predict": 8, "stop": []string{"xyz"}}}).json(t)
	final(t, gen, 8)
	if gen["response"] != ", there was a little girl" {
		t.Errorf("generate %v", gen)
	}
	lines = ndjsonLines(t, ts.post(t, "/api/generate", map[string]any{"model": "stories", "prompt": "Tell me a story.", "system": "You are a storyteller.", "options": map[string]any{"num_predict": 6}}).body)
	text.Reset()
	for _, l := range lines {
		text.WriteString(l["response"].(string))
	}
	if text.String() != want {
		t.Errorf("generate with system %q, chat %q", text.String(), want)
	}
	// An empty request loads the model.
	if m := ts.post(t, "/api/generate", map[string]any{"model": "stories"}).json(t); m["done"] != true || m["done_reason"] != "load" {
		t.Errorf("load: %v", m)
	}

	tags := ts.do(t, "GET", "/api/tags", nil).json(t)
	if path(tags, "models.0.name") != "stories" || path(tags, "models.0.details.format") != "gguf" || path(tags, "models.0.details.family") != "llama" || num(path(tags, "models.0.size")) == 0 {
		t.Errorf("tags %v", tags)
	}
}
