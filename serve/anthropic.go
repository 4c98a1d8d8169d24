// This file holds the Anthropic-compatible endpoints (/v1/messages,
// /v1/messages/count_tokens): request translation, the Message object and
// the SSE event sequence message_start, content_block_start, ping,
// content_block_delta..., content_block_stop, message_delta, message_stop.

package serve

import (
	"bufio"
	"encoding/json"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/stages"
)

type antMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type antRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      []antMessage    `json:"messages"`
	System        json.RawMessage `json:"system"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	samplingFields
}

// conversation translates system and messages (shared with count_tokens).
func (r *antRequest) conversation() ([]chat.Message, *apiError) {
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages: field required (a non-empty array)")
	}
	var msgs []chat.Message
	if !isNull(r.System) {
		sys, e := textContent(r.System, "system")
		if e != nil {
			return nil, e
		}
		msgs = append(msgs, chat.Message{Role: "system", Content: sys})
	}
	for i, m := range r.Messages {
		field := "messages." + itoa(i)
		if e := checkRole(m.Role, field+".role", "user", "assistant"); e != nil {
			return nil, e
		}
		if isNull(m.Content) {
			return nil, badRequest(field+".content", "%s.content: field required", field)
		}
		text, e := textContent(m.Content, field+".content")
		if e != nil {
			return nil, e
		}
		msgs = append(msgs, chat.Message{Role: m.Role, Content: text})
	}
	return msgs, nil
}

func (r *antRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	if r.Model == "" {
		return nil, badRequest("model", "model: field required")
	}
	if r.MaxTokens == nil {
		return nil, badRequest("max_tokens", "max_tokens: field required")
	}
	if *r.MaxTokens < 1 {
		return nil, badRequest("max_tokens", "max_tokens: must be at least 1, got %d", *r.MaxTokens)
	}
	gr := &genRequest{chat: true, maxTokens: *r.MaxTokens, stream: r.Stream, stops: r.StopSequences}
	var e *apiError
	if gr.model, e = s.modelName(b, r.Model); e != nil {
		return nil, e
	}
	if gr.messages, e = r.conversation(); e != nil {
		return nil, e
	}
	if t := r.Temperature; t != nil && *t > 1 {
		return nil, badRequest("temperature", "temperature: %v is out of range (Anthropic's is 0 to 1)", *t)
	}
	if gr.params, e = r.apply(s.cfg.Defaults, b.Bundle.Model.NVocab); e != nil {
		return nil, e
	}
	return gr, nil
}

func (s *Server) handleMessages(ctx *fasthttp.RequestCtx) {
	b := s.ready(ctx, dialectAnthropic)
	if b == nil {
		return
	}
	var req antRequest
	if e := s.decodeRequest(ctx, &req, antFields); e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	gr, e := req.translate(s, b)
	if e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	s.generate(ctx, b, gr, "msg_", "/v1/messages", "messages", &antEncoder{stops: req.StopSequences})
}

func (s *Server) handleCountTokens(ctx *fasthttp.RequestCtx) {
	b := s.ready(ctx, dialectAnthropic)
	if b == nil {
		return
	}
	var req antRequest
	if e := s.decodeRequest(ctx, &req, antFields); e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	if req.Model == "" {
		badRequest("model", "model: field required").write(ctx, dialectAnthropic)
		return
	}
	if _, e := s.modelName(b, req.Model); e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	msgs, e := req.conversation()
	if e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	gr := &genRequest{chat: true, messages: msgs}
	prompt, e := s.tokenizeAny(b, gr, "messages")
	if e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	writeJSON(ctx, struct {
		InputTokens int `json:"input_tokens"`
	}{len(prompt)})
}

// Response shapes.

type antUsage struct {
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
	InputTokens          int `json:"input_tokens"`
	OutputTokens         int `json:"output_tokens"`
}

func newAntUsage(u stages.Usage) antUsage {
	return antUsage{CacheReadInputTokens: u.CachedTokens, InputTokens: u.PromptTokens - u.CachedTokens, OutputTokens: u.GeneratedTokens}
}

type antText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type antMessageOut struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Role         string    `json:"role"`
	Model        string    `json:"model"`
	Content      []antText `json:"content"`
	StopReason   *string   `json:"stop_reason"`
	StopSequence *string   `json:"stop_sequence"`
	Usage        antUsage  `json:"usage"`
}

// antEncoder writes Messages API responses.
type antEncoder struct {
	stops []string // the request's stop_sequences
}

func (a *antEncoder) dialect() dialect   { return dialectAnthropic }
func (a *antEncoder) streamType() string { return "text/event-stream" }

// stopReason maps the final event to stop_reason and stop_sequence.
func (a *antEncoder) stopReason(ev *stages.Event) (*string, *string) {
	r := "end_turn"
	switch {
	case ev.Finish == stages.FinishLength:
		r = "max_tokens"
	case ev.StopWord != "" && slices.Contains(a.stops, ev.StopWord):
		r = "stop_sequence"
		w := ev.StopWord
		return &r, &w
	}
	return &r, nil
}

func (a *antEncoder) begin(w *bufio.Writer, j *job, u stages.Usage) {
	msg := antMessageOut{ID: j.id, Type: "message", Role: "assistant", Model: j.model, Content: []antText{}, Usage: newAntUsage(u)}
	msg.Usage.OutputTokens = 0
	sse(w, "message_start", struct {
		Type    string        `json:"type"`
		Message antMessageOut `json:"message"`
	}{"message_start", msg})
	sse(w, "content_block_start", struct {
		Type         string  `json:"type"`
		Index        int     `json:"index"`
		ContentBlock antText `json:"content_block"`
	}{"content_block_start", 0, antText{Type: "text"}})
	sse(w, "ping", struct {
		Type string `json:"type"`
	}{"ping"})
}

type antDelta struct {
	Type  string  `json:"type"`
	Index int     `json:"index"`
	Delta antText `json:"delta"`
}

func (a *antEncoder) delta(w *bufio.Writer, _ *job, text string) {
	sse(w, "content_block_delta", antDelta{"content_block_delta", 0, antText{"text_delta", text}})
}

func (a *antEncoder) end(w *bufio.Writer, j *job, ev *stages.Event) {
	sse(w, "content_block_stop", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{"content_block_stop", 0})
	reason, seq := a.stopReason(ev)
	sse(w, "message_delta", struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage antUsage `json:"usage"`
	}{Type: "message_delta", Delta: struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}{reason, seq}, Usage: newAntUsage(ev.Usage)})
	sse(w, "message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
}

func (a *antEncoder) fail(w *bufio.Writer, _ *job, e *apiError) {
	w.WriteString("event: error\ndata: ")
	w.Write(e.body(dialectAnthropic))
	w.WriteString("\n\n")
}

func (a *antEncoder) heartbeat(w *bufio.Writer) bool {
	w.WriteString(": ping\n\n")
	return true
}

func (a *antEncoder) result(j *job, text string, ev *stages.Event) any {
	reason, seq := a.stopReason(ev)
	return antMessageOut{ID: j.id, Type: "message", Role: "assistant", Model: j.model,
		Content: []antText{{Type: "text", Text: text}}, StopReason: reason, StopSequence: seq, Usage: newAntUsage(ev.Usage)}
}
