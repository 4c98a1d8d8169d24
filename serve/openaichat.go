// This file holds POST /v1/chat/completions: the messages (roles, content,
// an assistant's tool calls, a tool's results) and tools, tool_choice and
// parallel_tool_calls translated into the conversation the chat template
// renders. The fields it shares with /v1/completions are openai.go's; the
// response and its chunks, openaiencode.go's.

package serve

import (
	"encoding/json"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model/chat"
)

type oaiMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// ReasoningContent is an assistant turn's reasoning (llama-server's
	// field, as its responses carry it)
	ReasoningContent string        `json:"reasoning_content"`
	ToolCalls        []oaiToolCall `json:"tool_calls"`   // assistant
	ToolCallID       string        `json:"tool_call_id"` // tool
	Name             string        `json:"name"`
}

type oaiChatRequest struct {
	Messages          []oaiMessage    `json:"messages"`
	Tools             []oaiTool       `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	// reasoning: OpenAI's reasoning_effort; llama-server's reasoning_format
	// and chat_template_kwargs (enable_thinking, reasoning_effort)
	ReasoningEffort    *string                    `json:"reasoning_effort"`
	ReasoningFormat    string                     `json:"reasoning_format"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	oaiCommon
}

func (s *Server) handleChatCompletions(ctx *fasthttp.RequestCtx) {
	s.generateOpenAI(ctx, &oaiChatRequest{}, oaiChatFields, "chatcmpl-", "/v1/chat/completions", "messages")
}

func (r *oaiChatRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	gr := &genRequest{chat: true}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages is required and must be a non-empty array")
	}
	callNames := map[string]string{} // tool call id -> function name
	for i, m := range r.Messages {
		field := "messages[" + itoa(i) + "]"
		if e := checkRole(m.Role, field+".role", "system", "developer", "user", "assistant", "tool"); e != nil {
			return nil, e
		}
		if isNull(m.Content) && m.Role != "assistant" {
			// only an assistant turn (one that made tool calls) may have
			// null content (OpenAI's schema)
			return nil, badRequest(field+".content", "%s.content: a %s message needs content (a string or an array of content parts), got null", field, m.Role)
		}
		text, e := textContent(m.Content, field+".content")
		if e != nil {
			return nil, e
		}
		msg := chat.Message{Role: m.Role, Content: text}
		switch {
		case m.ReasoningContent != "" && m.Role != "assistant":
			return nil, badRequest(field+".reasoning_content", "%s.reasoning_content: only an assistant message has reasoning", field)
		case m.ReasoningContent != "":
			msg.Reasoning = m.ReasoningContent
		case len(m.ToolCalls) > 0 && m.Role != "assistant":
			return nil, badRequest(field+".tool_calls", "%s.tool_calls: only an assistant message makes tool calls", field)
		case m.Role == "tool":
			msg.ToolCallID, msg.Name = m.ToolCallID, m.Name
			if msg.Name == "" {
				msg.Name = callNames[m.ToolCallID]
			}
		}
		for k, c := range m.ToolCalls {
			cf := field + ".tool_calls[" + itoa(k) + "]"
			if c.Type != "function" && c.Type != "" {
				return nil, badRequest(cf+".type", "%s.type: %q is not supported (function only)", cf, c.Type)
			}
			if c.Function.Name == "" {
				return nil, badRequest(cf+".function.name", "%s.function.name is required", cf)
			}
			args := c.Function.Arguments
			if args == "" {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
			callNames[c.ID] = c.Function.Name
		}
		gr.messages = append(gr.messages, msg)
	}
	if e := r.translateTools(gr); e != nil {
		return nil, e
	}
	if e := r.translateThinking(gr); e != nil {
		return nil, e
	}
	if e := r.oaiCommon.translate(s, b, gr); e != nil {
		return nil, e
	}
	return gr, nil
}

// translateTools decodes tools, tool_choice and parallel_tool_calls.
func (r *oaiChatRequest) translateTools(gr *genRequest) *apiError {
	choice, named := "auto", ""
	if !isNull(r.ToolChoice) {
		var str string
		var obj struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(r.ToolChoice, &str) == nil:
			choice = str
		case json.Unmarshal(r.ToolChoice, &obj) == nil && obj.Type == "function":
			if obj.Function.Name == "" {
				return badRequest("tool_choice.function.name", "tool_choice.function.name is required")
			}
			choice, named = "function", obj.Function.Name
		default:
			return badRequest("tool_choice", `tool_choice: expected "none", "auto", "required" or {"type":"function","function":{"name":...}}`)
		}
	}
	spec := func(i int) (toolSpec, *apiError) {
		return r.Tools[i].spec("tools["+itoa(i)+"]", ` (type "function" with a "function" object)`)
	}
	ts := toolSettings{single: r.ParallelToolCalls != nil && !*r.ParallelToolCalls}
	var e *apiError
	gr.tools, e = offerTools(choice, named, len(r.Tools), spec, ts, "tool_choice.function.name")
	return e
}

// translateThinking decodes reasoning_effort, reasoning_format and
// chat_template_kwargs. Of the template variables only enable_thinking and
// reasoning_effort are taken: any other would be dropped, so it is refused.
func (r *oaiChatRequest) translateThinking(gr *genRequest) *apiError {
	if e := gr.think.reasoningFormat(r.ReasoningFormat); e != nil {
		return e
	}
	if r.ReasoningEffort != nil {
		if e := gr.think.effortLevel(*r.ReasoningEffort, "reasoning_effort"); e != nil {
			return e
		}
	}
	keys := make([]string, 0, len(r.ChatTemplateKwargs))
	for k := range r.ChatTemplateKwargs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, field := r.ChatTemplateKwargs[k], "chat_template_kwargs."+k
		switch k {
		case "enable_thinking":
			var on bool
			if json.Unmarshal(v, &on) != nil {
				return badRequest(field, "%s: expected a boolean, got %s", field, v)
			}
			gr.think.setOn(on, field)
		case "reasoning_effort":
			var effort string
			if json.Unmarshal(v, &effort) != nil {
				return badRequest(field, "%s: expected a string, got %s", field, v)
			}
			if e := gr.think.effortLevel(effort, field); e != nil {
				return e
			}
		default:
			return badRequest(field, "%s: template variable %q is not supported (enable_thinking and reasoning_effort are)", field, k)
		}
	}
	return nil
}
