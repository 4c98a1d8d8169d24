// This file holds what POST /v1/responses writes: the response object
// with its message and function_call output items and the request's
// settings it repeats, and the streamed event sequence (response.created,
// response.output_item.added, response.output_text.delta, ...,
// response.completed) with increasing sequence numbers, as the official
// SDK's responses.stream accumulates it. Nothing is stored: an object is
// written once and forgotten.

package serve

import (
	"bufio"
	"crypto/rand"
	"encoding/json"

	"github.com/flowinfer/flowinfer/stages"
)

// respEcho are the request's settings a response object repeats.
type respEcho struct {
	Instructions      *string         `json:"instructions"`
	Metadata          json.RawMessage `json:"metadata"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
	Temperature       float32         `json:"temperature"`
	TopP              float32         `json:"top_p"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	Tools             json.RawMessage `json:"tools"`
	Text              json.RawMessage `json:"text"`
	MaxOutputTokens   *int            `json:"max_output_tokens"`
	User              *string         `json:"user"`
	Reasoning         respReasoning   `json:"reasoning"`
}

func (r *respRequest) echo(gr *genRequest) respEcho {
	e := respEcho{Instructions: r.Instructions, Metadata: r.Metadata, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		Temperature: gr.params.Temperature, TopP: gr.params.TopP, ToolChoice: r.ToolChoice, MaxOutputTokens: r.MaxOutputTokens, User: r.User}
	if isNull(e.Metadata) {
		e.Metadata = json.RawMessage("{}")
	}
	if r.Reasoning != nil {
		e.Reasoning = *r.Reasoning
	}
	if isNull(e.ToolChoice) {
		e.ToolChoice = json.RawMessage(`"auto"`)
	}
	e.Tools = json.RawMessage("[]")
	if len(r.Tools) > 0 {
		e.Tools, _ = json.Marshal(r.Tools) // decoded from JSON: encodes
	}
	format := json.RawMessage(`{"type":"text"}`)
	if r.Text != nil && !isNull(r.Text.Format) {
		format = r.Text.Format
	}
	e.Text, _ = json.Marshal(struct {
		Format    json.RawMessage `json:"format"`
		Verbosity string          `json:"verbosity"`
	}{format, "medium"})
	return e
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func newRespUsage(u stages.Usage) *respUsage {
	r := &respUsage{InputTokens: u.PromptTokens, OutputTokens: u.GeneratedTokens, TotalTokens: u.PromptTokens + u.GeneratedTokens}
	r.InputTokensDetails.CachedTokens = u.CachedTokens
	return r
}

type respOutputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func outputText(text string) respOutputText {
	return respOutputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

type respMessage struct {
	Type    string           `json:"type"`
	ID      string           `json:"id"`
	Status  string           `json:"status"`
	Role    string           `json:"role"`
	Content []respOutputText `json:"content"`
}

type respFunctionCall struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// respReasoningItem is a reasoning output item: the model's reasoning as
// one reasoning_text part (no summary: this server does not summarize).
type respReasoningItem struct {
	Type    string              `json:"type"`
	ID      string              `json:"id"`
	Status  string              `json:"status"`
	Summary []any               `json:"summary"`
	Content []respReasoningText `json:"content"`
}

type respReasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// respReasoning is the reasoning setting: in the request, and echoed.
type respReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type respIncomplete struct {
	Reason string `json:"reason"`
}

type respError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// respObject is the response object.
type respObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Background         bool            `json:"background"`
	Error              *respError      `json:"error"`
	IncompleteDetails  *respIncomplete `json:"incomplete_details"`
	Model              string          `json:"model"`
	Output             []any           `json:"output"` // respMessage, respFunctionCall
	PreviousResponseID *string         `json:"previous_response_id"`
	MaxToolCalls       *int            `json:"max_tool_calls"`
	TopLogprobs        int             `json:"top_logprobs"`
	ServiceTier        string          `json:"service_tier"`
	Store              bool            `json:"store"`
	Truncation         string          `json:"truncation"`
	Usage              *respUsage      `json:"usage"`
	respEcho
}

// respEncoder writes Responses API objects and event streams.
type respEncoder struct {
	echo respEcho
	// stream state
	seq    int    // next sequence_number
	begun  bool   // response.created was written
	output []any  // the items so far
	msg    int    // index in output of the open message (-1: none)
	msgID  string // its id
	text   []byte // its text so far
	// the open reasoning item: rsOpen, its index in output, id and text
	rsOpen bool
	rs     int
	rsID   string
	rsText []byte
}

// reasoning writes reasoning text: a reasoning item (opened at its first
// text) with one reasoning_text part, streamed as
// response.reasoning_text.delta events.
func (r *respEncoder) reasoning(w *bufio.Writer, _ *job, text string) {
	r.closeMessage(w, "completed")
	if !r.rsOpen {
		r.rsOpen, r.rs, r.rsID, r.rsText = true, len(r.output), newID("rs_"), r.rsText[:0]
		item := respReasoningItem{Type: "reasoning", ID: r.rsID, Status: "in_progress", Summary: []any{}, Content: []respReasoningText{}}
		r.output = append(r.output, item)
		r.event(w, "response.output_item.added", map[string]any{"output_index": r.rs, "item": item})
		r.event(w, "response.content_part.added", map[string]any{"item_id": r.rsID, "output_index": r.rs, "content_index": 0, "part": respReasoningText{Type: "reasoning_text"}})
	}
	r.rsText = append(r.rsText, text...)
	r.event(w, "response.reasoning_text.delta", map[string]any{"item_id": r.rsID, "output_index": r.rs, "content_index": 0, "delta": text})
}

// closeReasoning ends the open reasoning item, if any.
func (r *respEncoder) closeReasoning(w *bufio.Writer, status string) {
	if !r.rsOpen {
		return
	}
	text := string(r.rsText)
	part := respReasoningText{Type: "reasoning_text", Text: text}
	r.event(w, "response.reasoning_text.done", map[string]any{"item_id": r.rsID, "output_index": r.rs, "content_index": 0, "text": text})
	r.event(w, "response.content_part.done", map[string]any{"item_id": r.rsID, "output_index": r.rs, "content_index": 0, "part": part})
	item := respReasoningItem{Type: "reasoning", ID: r.rsID, Status: status, Summary: []any{}, Content: []respReasoningText{part}}
	r.output[r.rs] = item
	r.event(w, "response.output_item.done", map[string]any{"output_index": r.rs, "item": item})
	r.rsOpen = false
}

func (r *respEncoder) dialect() dialect   { return dialectOpenAI }
func (r *respEncoder) streamType() string { return "text/event-stream" }

func (r *respEncoder) object(j *job, status string) respObject {
	return respObject{ID: j.id, Object: "response", CreatedAt: j.created.Unix(), Status: status, Model: j.model, Output: []any{},
		ServiceTier: "default", Truncation: "disabled", respEcho: r.echo}
}

// event writes one event: its type as the SSE event name and in the data,
// with the next sequence number.
func (r *respEncoder) event(w *bufio.Writer, typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = r.seq
	r.seq++
	sse(w, typ, fields)
}

func (r *respEncoder) begin(w *bufio.Writer, j *job, _ stages.Usage) {
	r.begun = true
	o := r.object(j, "in_progress")
	r.event(w, "response.created", map[string]any{"response": o})
	r.event(w, "response.in_progress", map[string]any{"response": o})
}

// openMessage starts a message item with its output_text part.
func (r *respEncoder) openMessage(w *bufio.Writer) {
	r.msg, r.msgID, r.text = len(r.output), newID("msg_"), r.text[:0]
	item := respMessage{Type: "message", ID: r.msgID, Status: "in_progress", Role: "assistant", Content: []respOutputText{}}
	r.output = append(r.output, item)
	r.event(w, "response.output_item.added", map[string]any{"output_index": r.msg, "item": item})
	r.event(w, "response.content_part.added", map[string]any{"item_id": r.msgID, "output_index": r.msg, "content_index": 0, "part": outputText("")})
}

// closeMessage ends the open message, if any.
func (r *respEncoder) closeMessage(w *bufio.Writer, status string) {
	if r.msg < 0 {
		return
	}
	text := string(r.text)
	part := outputText(text)
	r.event(w, "response.output_text.done", map[string]any{"item_id": r.msgID, "output_index": r.msg, "content_index": 0, "text": text, "logprobs": []any{}})
	r.event(w, "response.content_part.done", map[string]any{"item_id": r.msgID, "output_index": r.msg, "content_index": 0, "part": part})
	item := respMessage{Type: "message", ID: r.msgID, Status: status, Role: "assistant", Content: []respOutputText{part}}
	r.output[r.msg] = item
	r.event(w, "response.output_item.done", map[string]any{"output_index": r.msg, "item": item})
	r.msg = -1
}

func (r *respEncoder) delta(w *bufio.Writer, _ *job, text string) {
	if text == "" {
		return
	}
	r.closeReasoning(w, "completed")
	if r.msg < 0 {
		r.openMessage(w)
	}
	r.text = append(r.text, text...)
	const typ = "response.output_text.delta"
	sse(w, typ, respTextDelta{Type: typ, SequenceNumber: r.seq, ItemID: r.msgID, OutputIndex: r.msg, Delta: text, Logprobs: noLogprobs})
	r.seq++
}

// respTextDelta is the per-token event (a struct, not event's map).
type respTextDelta struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Delta          string `json:"delta"`
	Logprobs       []any  `json:"logprobs"`
}

var noLogprobs = []any{}

// toolCall writes a function_call item: added with empty arguments, the
// arguments as one delta, done.
func (r *respEncoder) toolCall(w *bufio.Writer, _ *job, c *outCall) {
	r.closeReasoning(w, "completed")
	r.closeMessage(w, "completed")
	idx := len(r.output)
	item := respFunctionCall{Type: "function_call", ID: "fc_" + rand.Text(), CallID: c.id, Name: c.name, Status: "in_progress"}
	r.output = append(r.output, item)
	r.event(w, "response.output_item.added", map[string]any{"output_index": idx, "item": item})
	r.event(w, "response.function_call_arguments.delta", map[string]any{"item_id": item.ID, "output_index": idx, "delta": c.args})
	r.event(w, "response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": idx, "name": c.name, "arguments": c.args})
	item.Arguments, item.Status = c.args, "completed"
	r.output[idx] = item
	r.event(w, "response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

// finish fills the final status, output and usage of o (reasoning tokens:
// those after which the reply was inside its reasoning, job.push).
func finishObject(o *respObject, j *job, ev *stages.Event, output []any) {
	o.Status, o.Output, o.Usage = "completed", output, newRespUsage(ev.Usage)
	o.Usage.OutputTokensDetails.ReasoningTokens = j.thinking
	if ev.Finish == stages.FinishLength {
		o.Status, o.IncompleteDetails = "incomplete", &respIncomplete{Reason: "max_output_tokens"}
	}
}

func (r *respEncoder) end(w *bufio.Writer, j *job, ev *stages.Event) {
	status := "completed"
	if ev.Finish == stages.FinishLength {
		status = "incomplete"
	}
	r.closeReasoning(w, status)
	if len(r.output) == 0 { // an empty reply is an empty message
		r.openMessage(w)
	}
	r.closeMessage(w, status)
	o := r.object(j, "")
	finishObject(&o, j, ev, r.output)
	r.event(w, "response."+o.Status, map[string]any{"response": o})
}

// fail writes OpenAI's error event, then response.failed.
func (r *respEncoder) fail(w *bufio.Writer, j *job, e *apiError) {
	code := e.code
	if code == "" {
		code = "server_error"
	}
	var param any
	if e.param != "" {
		param = e.param
	}
	if !r.begun { // the SDK expects response.created first
		r.begin(w, j, stages.Usage{})
	}
	r.event(w, "error", map[string]any{"code": code, "message": e.message, "param": param})
	o := r.object(j, "failed")
	o.Output = r.output
	if o.Output == nil {
		o.Output = []any{}
	}
	o.Error = &respError{Code: code, Message: e.message}
	r.event(w, "response.failed", map[string]any{"response": o})
}

func (r *respEncoder) heartbeat(w *bufio.Writer) bool { return ssePing(w) }

func (r *respEncoder) result(j *job, text string, ev *stages.Event) any {
	status := "completed"
	if ev.Finish == stages.FinishLength {
		status = "incomplete"
	}
	var output []any
	if rs := j.reasoning.String(); rs != "" {
		output = append(output, respReasoningItem{Type: "reasoning", ID: newID("rs_"), Status: status, Summary: []any{},
			Content: []respReasoningText{{Type: "reasoning_text", Text: rs}}})
	}
	if text != "" || !j.hasCalls() {
		output = append(output, respMessage{Type: "message", ID: newID("msg_"), Status: status, Role: "assistant", Content: []respOutputText{outputText(text)}})
	}
	if j.tools != nil {
		for _, c := range j.tools.calls {
			output = append(output, respFunctionCall{Type: "function_call", ID: "fc_" + rand.Text(), CallID: c.id, Name: c.name, Arguments: c.args, Status: "completed"})
		}
	}
	o := r.object(j, "")
	finishObject(&o, j, ev, output)
	return o
}
