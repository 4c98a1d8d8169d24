// This file holds the Anthropic-compatible endpoints (/v1/messages,
// /v1/messages/count_tokens): request translation, the Message object and
// the SSE event sequence message_start, content_block_start, ping,
// content_block_delta..., content_block_stop, message_delta, message_stop.

package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"
	"strings"

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
	Tools         []antTool       `json:"tools"`
	ToolChoice    *antToolChoice  `json:"tool_choice"`
	Thinking      *antThinkingReq `json:"thinking"`
	samplingFields
	omitThinking bool // thinking.display "omitted"
}

// antThinkingReq is the request's thinking setting.
type antThinkingReq struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
	// Display: "summarized" (the default; the reasoning comes whole, there
	// is no summarizer) or "omitted" (thinking blocks without their text)
	Display string `json:"display"`
}

// translateThinking decodes thinking: enabled (without a budget) and
// disabled switch thinking on and off; adaptive leaves it to the model
// (the template's default). A budget cannot be enforced (reasoning.go).
func (r *antRequest) translateThinking(gr *genRequest) *apiError {
	t := r.Thinking
	if t == nil {
		return nil
	}
	switch t.Type {
	case "enabled":
		gr.think.setOn(true, "thinking")
	case "disabled":
		gr.think.setOn(false, "thinking")
	case "adaptive":
	default:
		return badRequest("thinking.type", `thinking.type: %q is not one of "enabled", "disabled", "adaptive"`, t.Type)
	}
	switch t.Display {
	case "", "summarized":
	case "omitted":
		r.omitThinking = true
	default:
		return badRequest("thinking.display", `thinking.display: %q is not one of "summarized", "omitted"`, t.Display)
	}
	if t.BudgetTokens != nil && t.Type != "disabled" {
		return badRequest("thinking.budget_tokens", "thinking.budget_tokens: a thinking budget cannot be enforced by this server (it would need the sampler to end the thinking when the budget is spent); omit it, or use thinking type \"adaptive\"")
	}
	return nil
}

// antTool is a client tool (a server tool has a versioned type, such as
// "web_search_20250305").
type antTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type antToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// translateTools decodes tools and tool_choice into gr.
func (r *antRequest) translateTools(gr *genRequest) *apiError {
	ts := &toolSettings{idPrefix: "toolu_"}
	if c := r.ToolChoice; c != nil {
		switch c.Type {
		case "auto":
		case "none":
			return nil // the model is not shown the tools
		case "any":
			ts.force = "*"
		case "tool":
			if c.Name == "" {
				return badRequest("tool_choice.name", "tool_choice.name: field required")
			}
			ts.force = c.Name
		default:
			return badRequest("tool_choice", `tool_choice.type: %q is not one of "auto", "any", "tool", "none"`, c.Type)
		}
		ts.single = c.DisableParallelToolUse
	}
	for i, t := range r.Tools {
		field := "tools." + itoa(i)
		if t.Type != "" && t.Type != "custom" {
			return badRequest(field+".type", "%s.type: server tool %q is not available (client tools only)", field, t.Type)
		}
		if len(t.InputSchema) == 0 {
			return badRequest(field+".input_schema", "%s.input_schema: field required", field)
		}
		tool, e := functionTool(t.Name, t.Description, t.InputSchema, field)
		if e != nil {
			return e
		}
		ts.tools = append(ts.tools, tool)
	}
	if ts.force != "" && len(ts.tools) == 0 {
		return badRequest("tool_choice", "tool_choice: type %q forces a tool call but there are no tools", r.ToolChoice.Type)
	}
	if e := ts.checkForce("tool_choice.name"); e != nil {
		return e
	}
	if len(ts.tools) > 0 {
		gr.tools = ts
	}
	return nil
}

// antBlock is a content block of a message in a request.
type antBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`          // tool_use
	Name      string          `json:"name"`        // tool_use
	Input     json.RawMessage `json:"input"`       // tool_use
	Thinking  string          `json:"thinking"`    // thinking
	ToolUseID string          `json:"tool_use_id"` // tool_result
	Content   json.RawMessage `json:"content"`     // tool_result: a string or text blocks
	IsError   bool            `json:"is_error"`    // tool_result
}

// antTurn translates one message: a string, or blocks of text, tool_use
// (assistant) and tool_result (user: each becomes a "tool" message, before
// the user's text). names maps tool_use ids to function names.
func antTurn(m antMessage, field string, names map[string]string) ([]chat.Message, *apiError) {
	var str string
	if json.Unmarshal(m.Content, &str) == nil {
		return []chat.Message{{Role: m.Role, Content: str}}, nil
	}
	var blocks []antBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, badRequest(field, "%s: expected a string or an array of content blocks", field)
	}
	var out []chat.Message
	msg := chat.Message{Role: m.Role}
	var text []string
	for i, b := range blocks {
		bf := field + "." + itoa(i)
		switch {
		case b.Type == "text":
			text = append(text, b.Text)
		case b.Type == "thinking" && m.Role == "assistant":
			// the template keeps or drops it, as the model was trained
			msg.Reasoning += b.Thinking
		case b.Type == "tool_use" && m.Role == "assistant":
			if b.Name == "" {
				return nil, badRequest(bf+".name", "%s.name: field required", bf)
			}
			args, ok := jsonObject(b.Input)
			if !ok {
				return nil, badRequest(bf+".input", "%s.input: a JSON object is required", bf)
			}
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
			names[b.ID] = b.Name
		case b.Type == "tool_result" && m.Role == "user":
			if _, ok := names[b.ToolUseID]; !ok {
				return nil, badRequest(bf+".tool_use_id", "%s: tool_result block with tool_use_id %q, which no earlier tool_use block has", bf, b.ToolUseID)
			}
			content, e := textContent(b.Content, bf+".content")
			if e != nil {
				return nil, e
			}
			if b.IsError {
				content = "Error: " + content
			}
			out = append(out, chat.Message{Role: "tool", Content: content, ToolCallID: b.ToolUseID, Name: names[b.ToolUseID]})
		case b.Type == "":
			return nil, badRequest(bf, "%s: content block without a type", bf)
		default:
			return nil, badRequest(bf, "%s: content block type %q is not supported in a %s message (text; tool_use and thinking in assistant messages; tool_result in user messages)", bf, b.Type, m.Role)
		}
	}
	msg.Content = strings.Join(text, "\n")
	if len(text) > 0 || len(msg.ToolCalls) > 0 || msg.Reasoning != "" || len(out) == 0 {
		out = append(out, msg)
	}
	return out, nil
}

// jsonObject returns raw compacted if it is a JSON object ({} if absent).
func jsonObject(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "{}", true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
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
	names := map[string]string{}
	for i, m := range r.Messages {
		field := "messages." + itoa(i)
		if e := checkRole(m.Role, field+".role", "user", "assistant"); e != nil {
			return nil, e
		}
		if isNull(m.Content) {
			return nil, badRequest(field+".content", "%s.content: field required", field)
		}
		turn, e := antTurn(m, field+".content", names)
		if e != nil {
			return nil, e
		}
		msgs = append(msgs, turn...)
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
	if e := r.translateChat(s, b, gr); e != nil {
		return nil, e
	}
	if t := r.Temperature; t != nil && *t > 1 {
		return nil, badRequest("temperature", "temperature: %v is out of range (Anthropic's is 0 to 1)", *t)
	}
	var e *apiError
	if gr.params, e = r.apply(s.cfg.Defaults, b.Bundle.Model.NVocab); e != nil {
		return nil, e
	}
	return gr, nil
}

func (s *Server) handleMessages(ctx *fasthttp.RequestCtx) {
	var req antRequest
	b, gr := s.prepare(ctx, dialectAnthropic, &req, antFields)
	if gr == nil {
		return
	}
	s.generate(ctx, b, gr, "msg_", "/v1/messages", "messages", &antEncoder{stops: req.StopSequences, omitThinking: req.omitThinking})
}

// translateChat fills gr's model, conversation and tools: what a message
// and a token count share.
func (r *antRequest) translateChat(s *Server, b *Backend, gr *genRequest) *apiError {
	var e *apiError
	if gr.model, e = s.modelName(b, r.Model); e != nil {
		return e
	}
	if gr.messages, e = r.conversation(); e != nil {
		return e
	}
	if e := r.translateThinking(gr); e != nil {
		return e
	}
	return r.translateTools(gr)
}

func (s *Server) handleCountTokens(ctx *fasthttp.RequestCtx) {
	var req antRequest
	b := s.receive(ctx, dialectAnthropic, &req, antFields)
	if b == nil {
		return
	}
	prompt, e := req.countTokens(s, b)
	if e != nil {
		e.write(ctx, dialectAnthropic)
		return
	}
	writeJSON(ctx, struct {
		InputTokens int `json:"input_tokens"`
	}{len(prompt)})
}

// countTokens is the prompt a message would have (count_tokens, which
// needs no max_tokens).
func (r *antRequest) countTokens(s *Server, b *Backend) ([]int32, *apiError) {
	if r.Model == "" {
		return nil, badRequest("model", "model: field required")
	}
	gr := &genRequest{chat: true}
	if e := r.translateChat(s, b, gr); e != nil {
		return nil, e
	}
	return s.tokenizeAny(b, gr, "messages")
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

// antThinking is a thinking content block. Its signature is empty: this
// server does not sign reasoning (and ignores thinking blocks sent back).
type antThinking struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

// antToolUse is a tool_use content block of a response.
type antToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type antMessageOut struct {
	ID           string   `json:"id"`
	Type         string   `json:"type"`
	Role         string   `json:"role"`
	Model        string   `json:"model"`
	Content      []any    `json:"content"` // antText, antToolUse
	StopReason   *string  `json:"stop_reason"`
	StopSequence *string  `json:"stop_sequence"`
	Usage        antUsage `json:"usage"`
}

// antEncoder writes Messages API responses.
type antEncoder struct {
	stops []string // the request's stop_sequences
	// omitThinking: thinking blocks carry no text (thinking.display omitted)
	omitThinking bool
	// stream state: the open content block (-1: none), its type, and the
	// next index
	open, next int
	openType   string
}

func (a *antEncoder) dialect() dialect   { return dialectAnthropic }
func (a *antEncoder) streamType() string { return "text/event-stream" }

// stopReason maps the final event to stop_reason and stop_sequence.
func (a *antEncoder) stopReason(j *job, ev *stages.Event) (*string, *string) {
	r := "end_turn"
	switch {
	case j.hasCalls():
		r = "tool_use"
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
	msg := antMessageOut{ID: j.id, Type: "message", Role: "assistant", Model: j.model, Content: []any{}, Usage: newAntUsage(u)}
	msg.Usage.OutputTokens = 0
	sse(w, "message_start", struct {
		Type    string        `json:"type"`
		Message antMessageOut `json:"message"`
	}{"message_start", msg})
	a.open = -1
	if j.parse == nil {
		// without tools or reasoning the reply is one text block: open it now
		a.startBlock(w, antText{Type: "text"})
	}
	sse(w, "ping", struct {
		Type string `json:"type"`
	}{"ping"})
}

// startBlock opens the next content block.
func (a *antEncoder) startBlock(w *bufio.Writer, block any) {
	a.open = a.next
	a.next++
	switch b := block.(type) {
	case antText:
		a.openType = b.Type
	case antThinking:
		a.openType = b.Type
	case antToolUse:
		a.openType = b.Type
	}
	sse(w, "content_block_start", struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}{"content_block_start", a.open, block})
}

// stopBlock closes the open content block, if any.
func (a *antEncoder) stopBlock(w *bufio.Writer) {
	if a.open < 0 {
		return
	}
	sse(w, "content_block_stop", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{"content_block_stop", a.open})
	a.open = -1
}

// toolCall writes a tool_use block: its start with an empty input, the
// input as one input_json_delta, its stop.
func (a *antEncoder) toolCall(w *bufio.Writer, _ *job, c *outCall) {
	a.stopBlock(w)
	a.startBlock(w, antToolUse{Type: "tool_use", ID: c.id, Name: c.name, Input: json.RawMessage("{}")})
	sse(w, "content_block_delta", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta struct {
			Type        string `json:"type"`
			PartialJSON string `json:"partial_json"`
		} `json:"delta"`
	}{Type: "content_block_delta", Index: a.open, Delta: struct {
		Type        string `json:"type"`
		PartialJSON string `json:"partial_json"`
	}{"input_json_delta", c.args}})
	a.stopBlock(w)
}

type antDelta struct {
	Type  string  `json:"type"`
	Index int     `json:"index"`
	Delta antText `json:"delta"`
}

func (a *antEncoder) delta(w *bufio.Writer, _ *job, text string) {
	if a.open < 0 || a.openType != "text" {
		a.stopBlock(w)
		a.startBlock(w, antText{Type: "text"})
	}
	sse(w, "content_block_delta", antDelta{"content_block_delta", a.open, antText{"text_delta", text}})
}

// reasoning writes reasoning as thinking_delta events of a thinking block.
func (a *antEncoder) reasoning(w *bufio.Writer, _ *job, text string) {
	if a.open < 0 || a.openType != "thinking" {
		a.stopBlock(w)
		a.startBlock(w, antThinking{Type: "thinking"})
	}
	if a.omitThinking {
		return
	}
	sse(w, "content_block_delta", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
		} `json:"delta"`
	}{Type: "content_block_delta", Index: a.open, Delta: struct {
		Type     string `json:"type"`
		Thinking string `json:"thinking"`
	}{"thinking_delta", text}})
}

func (a *antEncoder) end(w *bufio.Writer, j *job, ev *stages.Event) {
	if a.next == 0 { // an empty reply still has its text block
		a.startBlock(w, antText{Type: "text"})
	}
	a.stopBlock(w)
	reason, seq := a.stopReason(j, ev)
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
	sseData(w, "error", e.body(dialectAnthropic))
}

func (a *antEncoder) heartbeat(w *bufio.Writer) bool { return ssePing(w) }

func (a *antEncoder) result(j *job, text string, ev *stages.Event) any {
	reason, seq := a.stopReason(j, ev)
	content := []any{}
	if r := j.reasoning.String(); r != "" {
		if a.omitThinking {
			r = ""
		}
		content = append(content, antThinking{Type: "thinking", Thinking: r})
	}
	if text != "" || !j.hasCalls() {
		content = append(content, antText{Type: "text", Text: text})
	}
	if j.tools != nil {
		for _, c := range j.tools.calls {
			content = append(content, antToolUse{Type: "tool_use", ID: c.id, Name: c.name, Input: json.RawMessage(c.args)})
		}
	}
	return antMessageOut{ID: j.id, Type: "message", Role: "assistant", Model: j.model,
		Content: content, StopReason: reason, StopSequence: seq, Usage: newAntUsage(ev.Usage)}
}
