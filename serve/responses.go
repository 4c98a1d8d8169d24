// This file holds OpenAI's Responses API (POST /v1/responses): input as a
// string or a list of items (messages, function_call, function_call_output)
// translated into the chat conversation the other endpoints render, the
// response object with its message and function_call output items, and the
// streamed event sequence (response.created, response.output_item.added,
// response.output_text.delta, ..., response.completed) with increasing
// sequence numbers, as the official SDK's responses.stream accumulates it.
//
// Responses are not stored: store false (or absent) is the only mode;
// store true, previous_response_id and conversation are refused with a 400
// naming them, as retrieval could not follow.

package serve

import (
	"bufio"
	"crypto/rand"
	"encoding/json"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// respRequest is the create-response request.
type respRequest struct {
	Model             string          `json:"model"`
	Input             json.RawMessage `json:"input"`
	Instructions      *string         `json:"instructions"`
	Tools             []respTool      `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	Text              *respText       `json:"text"`
	MaxOutputTokens   *int            `json:"max_output_tokens"`
	Stream            bool            `json:"stream"`
	Metadata          json.RawMessage `json:"metadata"`
	User              *string         `json:"user"`
	samplingFields
}

// respTool is a tool in the Responses API's flat shape.
type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// respText is the "text" settings: the output format and verbosity.
type respText struct {
	Format    json.RawMessage `json:"format"`
	Verbosity *string         `json:"verbosity"`
}

// respFormat is text.format.
type respFormat struct {
	Type   string          `json:"type"`
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

// respItem is an input item: a message (type "message" or no type, with a
// role), a function_call or a function_call_output.
type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

const noStorage = "responses are not stored by this server: send the whole conversation in input"

// respFields: OpenAI's create response request.
var respFields = map[string]fieldRule{
	"store":                  refused(noStorage + " (store: false)"),
	"previous_response_id":   refused(noStorage),
	"conversation":           refused(noStorage),
	"background":             refused("background responses need storage, which is not available"),
	"include":                refused("none of the additional outputs (include) are available"),
	"max_tool_calls":         refused("max_tool_calls is not implemented: parallel_tool_calls false allows one call"),
	"prompt":                 refused("prompt templates are not available"),
	"reasoning":              refused(noThinking),
	"top_logprobs":           refused("logprobs are not implemented on /v1/responses"),
	"truncation":             refused("truncation is not implemented: a prompt that does not fit is an error", `"disabled"`),
	"stream_options":         accepted("include_obfuscation pads events against length side channels on the internet: a local server sends none"),
	"safety_identifier":      accepted(localServer),
	"service_tier":           accepted(localServer),
	"prompt_cache_key":       accepted("prefixes are cached automatically"),
	"prompt_cache_retention": accepted("prefixes are cached automatically"),
}

func (s *Server) handleResponses(ctx *fasthttp.RequestCtx) {
	var req respRequest
	b, gr := s.prepare(ctx, dialectOpenAI, &req, respFields)
	if gr == nil {
		return
	}
	enc := &respEncoder{echo: req.echo(gr), msg: -1}
	s.generate(ctx, b, gr, "resp_", "/v1/responses", "input", enc)
}

func (r *respRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	gr := &genRequest{chat: true, n: 1, stream: r.Stream}
	var e *apiError
	if gr.model, e = s.modelName(b, r.Model); e != nil {
		e.param = "model"
		return nil, e
	}
	if r.Instructions != nil && *r.Instructions != "" {
		gr.messages = append(gr.messages, chat.Message{Role: "system", Content: *r.Instructions})
	}
	msgs, e := respInput(r.Input)
	if e != nil {
		return nil, e
	}
	gr.messages = append(gr.messages, msgs...)
	if e := r.translateTools(gr); e != nil {
		return nil, e
	}
	if gr.maxTokens, e = maxTokens(r.MaxOutputTokens, s.cfg.MaxTokens, "max_output_tokens"); e != nil {
		return nil, e
	}
	if gr.params, e = r.apply(s.cfg.Defaults, b.Bundle.Model.NVocab); e != nil {
		return nil, e
	}
	if gr.params.Grammar, e = r.format(); e != nil {
		return nil, e
	}
	return gr, nil
}

// respInput translates input: a string (one user message) or a list of
// items.
func respInput(raw json.RawMessage) ([]chat.Message, *apiError) {
	if isNull(raw) {
		return nil, badRequest("input", "input is required: a string or a list of input items")
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return []chat.Message{{Role: "user", Content: str}}, nil
	}
	var items []respItem
	if json.Unmarshal(raw, &items) != nil {
		return nil, badRequest("input", "input: expected a string or a list of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input: the list of items is empty")
	}
	var msgs []chat.Message
	callNames := map[string]string{} // call_id -> function name
	for i, it := range items {
		field := "input[" + itoa(i) + "]"
		switch it.Type {
		case "message", "":
			if e := checkRole(it.Role, field+".role", "user", "system", "developer", "assistant"); e != nil {
				return nil, e
			}
			text, e := respContent(it.Content, field+".content")
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, chat.Message{Role: it.Role, Content: text})
		case "function_call":
			if it.Name == "" {
				return nil, badRequest(field+".name", "%s.name is required", field)
			}
			if it.CallID == "" {
				return nil, badRequest(field+".call_id", "%s.call_id is required", field)
			}
			args := it.Arguments
			if args == "" {
				args = "{}"
			}
			call := chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: args}
			callNames[it.CallID] = it.Name
			// calls after an assistant turn (text or calls) belong to it
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
				continue
			}
			msgs = append(msgs, chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{call}})
		case "function_call_output":
			if it.CallID == "" {
				return nil, badRequest(field+".call_id", "%s.call_id is required", field)
			}
			if isNull(it.Output) {
				return nil, badRequest(field+".output", "%s.output is required", field)
			}
			out, e := respContent(it.Output, field+".output")
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, chat.Message{Role: "tool", Content: out, ToolCallID: it.CallID, Name: callNames[it.CallID]})
		default:
			return nil, badRequest(field+".type", "%s.type: %q is not supported (message, function_call and function_call_output are)", field, it.Type)
		}
	}
	return msgs, nil
}

// respContent decodes a message's content or a call's output: a string or
// a list of input_text / output_text parts (joined with newlines).
func respContent(raw json.RawMessage, field string) (string, *apiError) {
	if isNull(raw) {
		return "", badRequest(field, "%s is required (a string or a list of text parts)", field)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []contentPart
	if json.Unmarshal(raw, &parts) != nil {
		return "", badRequest(field, "%s: expected a string or a list of content parts", field)
	}
	return joinParts(parts, field, "input_text", "output_text")
}

// translateTools decodes tools, tool_choice and parallel_tool_calls.
func (r *respRequest) translateTools(gr *genRequest) *apiError {
	choice, named := "auto", ""
	if !isNull(r.ToolChoice) {
		var str string
		var obj struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		switch {
		case json.Unmarshal(r.ToolChoice, &str) == nil:
			choice = str
		case json.Unmarshal(r.ToolChoice, &obj) == nil && obj.Type == "function":
			if obj.Name == "" {
				return badRequest("tool_choice.name", "tool_choice.name is required")
			}
			choice, named = "function", obj.Name
		default:
			return badRequest("tool_choice", `tool_choice: expected "none", "auto", "required" or {"type":"function","name":...}`)
		}
	}
	force, e := forceOf(choice, named, len(r.Tools))
	if e != nil {
		return e
	}
	if len(r.Tools) == 0 || choice == "none" {
		return nil // tool_choice none: the model is not shown the tools
	}
	ts := &toolSettings{single: r.ParallelToolCalls != nil && !*r.ParallelToolCalls, force: force, idPrefix: "call_"}
	for i, t := range r.Tools {
		field := "tools[" + itoa(i) + "]"
		if t.Type != "function" {
			return badRequest(field+".type", "%s.type: %q is not supported (function tools only)", field, t.Type)
		}
		if t.Strict != nil && *t.Strict && force == "" {
			return badRequest(field+".strict", "%s.strict: true with tool_choice %q: arguments are guaranteed to match the schema only when the call is forced (tool_choice \"required\" or a named function)", field, choice)
		}
		tool, e := functionTool(t.Name, t.Description, t.Parameters, field)
		if e != nil {
			return e
		}
		ts.tools = append(ts.tools, tool)
	}
	if e := ts.checkForce("tool_choice.name"); e != nil {
		return e
	}
	gr.tools = ts
	return nil
}

// format compiles text.format (nil: plain text) and checks verbosity.
func (r *respRequest) format() (*grammar.Grammar, *apiError) {
	if r.Text == nil {
		return nil, nil
	}
	if v := r.Text.Verbosity; v != nil && *v != "medium" {
		return nil, badRequest("text.verbosity", "text.verbosity: %q: verbosity control is not implemented (medium only)", *v)
	}
	if isNull(r.Text.Format) {
		return nil, nil
	}
	var f respFormat
	if json.Unmarshal(r.Text.Format, &f) != nil {
		return nil, badRequest("text.format", "text.format: expected an object with a type, got %s", r.Text.Format)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return grammar.MustParse(grammar.JSONObjectGBNF), nil
	case "json_schema":
		if isNull(f.Schema) {
			return nil, badRequest("text.format.schema", "text.format.schema is required")
		}
		return schemaGrammar(f.Schema, "text.format.schema")
	}
	return nil, badRequest("text.format.type", "text.format.type %q is not one of text, json_object, json_schema", f.Type)
}

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
}

func (r *respRequest) echo(gr *genRequest) respEcho {
	e := respEcho{Instructions: r.Instructions, Metadata: r.Metadata, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		Temperature: gr.params.Temperature, TopP: gr.params.TopP, ToolChoice: r.ToolChoice, MaxOutputTokens: r.MaxOutputTokens, User: r.User}
	if isNull(e.Metadata) {
		e.Metadata = json.RawMessage("{}")
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

// Response shapes.

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
	Reasoning          respReasoning   `json:"reasoning"`
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

// finish fills the final status, output and usage of o.
func finishObject(o *respObject, ev *stages.Event, output []any) {
	o.Status, o.Output, o.Usage = "completed", output, newRespUsage(ev.Usage)
	if ev.Finish == stages.FinishLength {
		o.Status, o.IncompleteDetails = "incomplete", &respIncomplete{Reason: "max_output_tokens"}
	}
}

func (r *respEncoder) end(w *bufio.Writer, j *job, ev *stages.Event) {
	status := "completed"
	if ev.Finish == stages.FinishLength {
		status = "incomplete"
	}
	if len(r.output) == 0 { // an empty reply is an empty message
		r.openMessage(w)
	}
	r.closeMessage(w, status)
	o := r.object(j, "")
	finishObject(&o, ev, r.output)
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

func (r *respEncoder) heartbeat(w *bufio.Writer) bool {
	w.WriteString(": ping\n\n")
	return true
}

func (r *respEncoder) result(j *job, text string, ev *stages.Event) any {
	status := "completed"
	if ev.Finish == stages.FinishLength {
		status = "incomplete"
	}
	var output []any
	if text != "" || !j.hasCalls() {
		output = append(output, respMessage{Type: "message", ID: newID("msg_"), Status: status, Role: "assistant", Content: []respOutputText{outputText(text)}})
	}
	if j.tools != nil {
		for _, c := range j.tools.calls {
			output = append(output, respFunctionCall{Type: "function_call", ID: "fc_" + rand.Text(), CallID: c.id, Name: c.name, Arguments: c.args, Status: "completed"})
		}
	}
	o := r.object(j, "")
	finishObject(&o, ev, output)
	return o
}
