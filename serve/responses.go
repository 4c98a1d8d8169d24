// This file holds OpenAI's Responses API (POST /v1/responses) as far as
// the request goes: input as a string or a list of items (messages,
// function_call, function_call_output) translated into the chat
// conversation the other endpoints render, with its tools, text format and
// limits. The response object and its event stream are
// responsesencode.go's.
//
// Responses are not stored: store false (or absent) is the only mode;
// store true, previous_response_id and conversation are refused with a 400
// naming them, as retrieval could not follow.

package serve

import (
	"encoding/json"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model/chat"
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
	Reasoning         *respReasoning  `json:"reasoning"`
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
	Summary   json.RawMessage `json:"summary"` // reasoning
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
	"top_logprobs":           refused("logprobs are not implemented on /v1/responses"),
	"truncation":             refused("truncation is not implemented: a prompt that does not fit is an error", `"disabled"`),
	"stream_options":         accepted("include_obfuscation pads events against length side channels on the internet: a local server sends none"),
	"safety_identifier":      accepted(localServer),
	"service_tier":           accepted(localServer),
	"prompt_cache_key":       accepted("prefixes are cached automatically"),
	"prompt_cache_retention": accepted("prefixes are cached automatically"),
	// chat completions fields the Responses API does not have, which
	// clients send here by habit: dropped, each would change the answer
	// without a word
	"n":               refused("one output per response: send n requests, or use /v1/chat/completions with n", "1"),
	"max_tokens":      refused("the Responses API's limit is max_output_tokens"),
	"stop":            refused("stop sequences are not part of the Responses API: use /v1/chat/completions or /v1/completions"),
	"response_format": refused("the Responses API's output format is text.format", `{"type":"text"}`),
	"logprobs":        refused("logprobs are not implemented on /v1/responses"),
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
	if rs := r.Reasoning; rs != nil {
		if rs.Summary != nil && *rs.Summary != "" {
			return nil, badRequest("reasoning.summary", "reasoning.summary: %q: reasoning summaries are not generated (the reasoning comes whole, as a reasoning item's reasoning_text)", *rs.Summary)
		}
		if rs.Effort != nil {
			if e := gr.think.effortLevel(*rs.Effort, "reasoning.effort"); e != nil {
				return nil, e
			}
		}
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
	reasoning := ""                  // of the assistant turn that follows
	assistant := func(m chat.Message) chat.Message {
		m.Reasoning, reasoning = reasoning, ""
		return m
	}
	for i, it := range items {
		field := "input[" + itoa(i) + "]"
		switch it.Type {
		case "reasoning":
			text, e := reasoningText(it, field)
			if e != nil {
				return nil, e
			}
			reasoning += text
		case "message", "":
			if e := checkRole(it.Role, field+".role", "user", "system", "developer", "assistant"); e != nil {
				return nil, e
			}
			text, e := respContent(it.Content, field+".content")
			if e != nil {
				return nil, e
			}
			m := chat.Message{Role: it.Role, Content: text}
			if it.Role == "assistant" {
				m = assistant(m)
			}
			msgs = append(msgs, m)
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
			msgs = append(msgs, assistant(chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{call}}))
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
			return nil, badRequest(field+".type", "%s.type: %q is not supported (message, reasoning, function_call and function_call_output are)", field, it.Type)
		}
	}
	return msgs, nil
}

// reasoningText is the text of a reasoning input item: its reasoning_text
// parts, else its summary_text parts (joined with newlines).
func reasoningText(it respItem, field string) (string, *apiError) {
	var parts []contentPart
	if !isNull(it.Content) {
		if json.Unmarshal(it.Content, &parts) != nil {
			return "", badRequest(field+".content", "%s.content: expected a list of reasoning_text parts", field)
		}
		if len(parts) > 0 {
			return joinParts(parts, field+".content", "reasoning_text")
		}
	}
	if isNull(it.Summary) {
		return "", nil
	}
	if json.Unmarshal(it.Summary, &parts) != nil {
		return "", badRequest(field+".summary", "%s.summary: expected a list of summary_text parts", field)
	}
	return joinParts(parts, field+".summary", "summary_text")
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
	spec := func(i int) (toolSpec, *apiError) {
		t, field := r.Tools[i], "tools["+itoa(i)+"]"
		if t.Type != "function" {
			return toolSpec{}, badRequest(field+".type", "%s.type: %q is not supported (function tools only)", field, t.Type)
		}
		return toolSpec{field: field, name: t.Name, description: t.Description, parameters: t.Parameters, strict: t.Strict}, nil
	}
	ts := toolSettings{single: r.ParallelToolCalls != nil && !*r.ParallelToolCalls, idPrefix: "call_"}
	var e *apiError
	gr.tools, e = offerTools(choice, named, len(r.Tools), spec, ts, "tool_choice.name")
	return e
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
	return formatGrammar("text.format", f.Type, f.Schema, "text.format.schema")
}
