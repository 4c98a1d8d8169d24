package serve_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

func antReq(extra map[string]any) map[string]any {
	m := map[string]any{"model": "stories260K", "max_tokens": 10, "system": "You are a storyteller.",
		"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "Tell me a story."}}}}}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// TestMessages: the non-stream Message object, its stop reasons, and that
// system as a string or as blocks renders the same prompt.
func TestMessages(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	r := ts.post(t, "/v1/messages", antReq(nil))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	m := r.json(t)
	if m["type"] != "message" || m["role"] != "assistant" || !strings.HasPrefix(m["id"].(string), "msg_") || m["model"] != "stories260K" ||
		path(m, "content.0.type") != "text" || m["stop_reason"] != "max_tokens" || m["stop_sequence"] != nil {
		t.Errorf("message: %s", r.body)
	}
	if num(path(m, "usage.output_tokens")) != 10 || num(path(m, "usage.input_tokens")) == 0 || path(m, "usage.cache_read_input_tokens") == nil {
		t.Errorf("usage: %v", m["usage"])
	}
	text := path(m, "content.0.text").(string)

	// Same conversation with system as blocks: same text.
	blocks := antReq(map[string]any{"system": []map[string]any{{"type": "text", "text": "You are a storyteller."}}})
	if got := path(ts.post(t, "/v1/messages", blocks).json(t), "content.0.text"); got != text {
		t.Errorf("system blocks: %q, string: %q", got, text)
	}
	// It matches the OpenAI endpoint on the same conversation.
	oai := ts.post(t, "/v1/chat/completions", map[string]any{"messages": chatMsgs, "max_tokens": 10}).json(t)
	if got := path(oai, "choices.0.message.content"); got != text {
		t.Errorf("anthropic %q, openai %q", text, got)
	}
	// A stop sequence inside the text: stop_reason stop_sequence.
	if len(text) > 4 {
		stop := text[2:4]
		m := ts.post(t, "/v1/messages", antReq(map[string]any{"stop_sequences": []string{stop}})).json(t)
		if m["stop_reason"] != "stop_sequence" || m["stop_sequence"] != stop || path(m, "content.0.text") != text[:strings.Index(text, stop)] {
			t.Errorf("stop %q: %v", stop, m)
		}
	}
	// Generation ending by itself: end_turn (a long budget; the model ends
	// its story with </s> or the template's stop string).
	m = ts.post(t, "/v1/messages", antReq(map[string]any{"max_tokens": 240})).json(t)
	if m["stop_reason"] != "end_turn" && m["stop_reason"] != "max_tokens" {
		t.Errorf("stop_reason %v", m["stop_reason"])
	}
}

// TestMessagesStream: the exact SSE event sequence and the text.
func TestMessagesStream(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	want := path(ts.post(t, "/v1/messages", antReq(nil)).json(t), "content.0.text")
	r := ts.post(t, "/v1/messages", antReq(map[string]any{"stream": true}))
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	evs := parseSSE(t, r.body)
	var names []string
	var text strings.Builder
	for _, ev := range evs {
		d := decodeJSON(t, ev.data)
		if d["type"] != ev.event {
			t.Errorf("event %q carries type %v", ev.event, d["type"])
		}
		if len(names) == 0 || names[len(names)-1] != ev.event {
			names = append(names, ev.event)
		}
		switch ev.event {
		case "message_start":
			msg := d["message"].(map[string]any)
			if !reflect.DeepEqual(msg["content"], []any{}) || msg["stop_reason"] != nil || num(path(msg, "usage.input_tokens"))+num(path(msg, "usage.cache_read_input_tokens")) == 0 || num(path(msg, "usage.output_tokens")) != 0 {
				t.Errorf("message_start %s", ev.data)
			}
		case "content_block_start":
			if !reflect.DeepEqual(d["content_block"], map[string]any{"type": "text", "text": ""}) || num(d["index"]) != 0 {
				t.Errorf("content_block_start %s", ev.data)
			}
		case "content_block_delta":
			if path(d, "delta.type") != "text_delta" {
				t.Errorf("delta %s", ev.data)
			}
			text.WriteString(path(d, "delta.text").(string))
		case "message_delta":
			if path(d, "delta.stop_reason") != "max_tokens" || num(path(d, "usage.output_tokens")) != 10 {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	wantNames := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("events %v\nwant   %v", names, wantNames)
	}
	if text.String() != want {
		t.Errorf("streamed %q, non-stream %q", text.String(), want)
	}
}

// TestCountTokens counts what /v1/messages evaluates.
func TestCountTokens(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	req := antReq(nil)
	delete(req, "max_tokens") // not needed for counting
	c := ts.post(t, "/v1/messages/count_tokens", req)
	if c.status != 200 {
		t.Fatalf("status %d: %s", c.status, c.body)
	}
	m := ts.post(t, "/v1/messages", antReq(nil)).json(t)
	if got, want := num(c.json(t)["input_tokens"]), num(path(m, "usage.input_tokens"))+num(path(m, "usage.cache_read_input_tokens")); got != want || got == 0 {
		t.Errorf("count_tokens %d, messages used %d", got, want)
	}
}
