// This file holds the OpenAI-compatible endpoints (/v1/chat/completions,
// /v1/completions, /v1/models): request translation and the response and
// chunk shapes, field for field as llama-server writes them
// (system_fingerprint, usage.prompt_tokens_details.cached_tokens, timings,
// stream_options.include_usage).

package serve

import (
	"bufio"
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages"
)

type oaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaiToolCall   `json:"tool_calls"`   // assistant
	ToolCallID string          `json:"tool_call_id"` // tool
	Name       string          `json:"name"`
}

// oaiToolCall is a call in an assistant message, and in a response.
type oaiToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// oaiTool is an entry of "tools".
type oaiTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

type oaiStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// oaiCommon are the fields chat and completions share.
type oaiCommon struct {
	Model               string            `json:"model"`
	Stream              bool              `json:"stream"`
	StreamOptions       *oaiStreamOptions `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	NPredict            *int              `json:"n_predict"` // llama-server's name
	Stop                json.RawMessage   `json:"stop"`
	N                   *int              `json:"n"`
	Logprobs            json.RawMessage   `json:"logprobs"`     // chat: a bool; completions: 0 to 20 alternatives
	TopLogprobs         *int              `json:"top_logprobs"` // chat only
	IgnoreEOS           bool              `json:"ignore_eos"`   // llama-server's extension
	samplingFields
	structuredFields
}

type oaiChatRequest struct {
	Messages          []oaiMessage    `json:"messages"`
	Tools             []oaiTool       `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	oaiCommon
}

type oaiCompletionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	Suffix *string         `json:"suffix"`
	oaiCommon
}

// maxChoices bounds n (choices per request: each is a sequence).
const maxChoices = 16

// maxTopLogprobs bounds the alternatives per token (OpenAI's chat limit).
const maxTopLogprobs = 20

// logprobs reads chat's logprobs (a bool) and top_logprobs (0 to 20, with
// logprobs), or completions' logprobs (the number of alternatives, 0 to
// 20; 0 reports only the chosen token's).
func (c *oaiCommon) logprobs(gr *genRequest) *apiError {
	if gr.chat {
		if !isNull(c.Logprobs) {
			var on bool
			if json.Unmarshal(c.Logprobs, &on) != nil {
				return badRequest("logprobs", "logprobs: expected a boolean, got %s", c.Logprobs)
			}
			gr.logprobs = on
		}
		if c.TopLogprobs != nil {
			switch n := *c.TopLogprobs; {
			case n < 0 || n > maxTopLogprobs:
				return badRequest("top_logprobs", "top_logprobs: %d is out of range (0 to %d)", n, maxTopLogprobs)
			case !gr.logprobs && n > 0:
				return badRequest("top_logprobs", "top_logprobs needs logprobs: true")
			}
			gr.topLogprobs = *c.TopLogprobs
		}
		return nil
	}
	if c.TopLogprobs != nil {
		return badRequest("top_logprobs", "top_logprobs is a chat completions field: /v1/completions takes logprobs: N")
	}
	if isNull(c.Logprobs) {
		return nil
	}
	var n int
	if json.Unmarshal(c.Logprobs, &n) != nil || n < 0 || n > maxTopLogprobs {
		return badRequest("logprobs", "logprobs: expected the number of alternatives per token, 0 to %d, got %s", maxTopLogprobs, c.Logprobs)
	}
	gr.logprobs, gr.topLogprobs = true, n
	return nil
}

// translate fills the fields chat and completions share.
func (c *oaiCommon) translate(s *Server, b *Backend, gr *genRequest) *apiError {
	var e *apiError
	if gr.model, e = s.modelName(b, c.Model); e != nil {
		e.param = "model"
		return e
	}
	gr.n = 1
	if c.N != nil {
		if *c.N < 1 || *c.N > maxChoices {
			return badRequest("n", "n: %d is out of range (1 to %d)", *c.N, maxChoices)
		}
		gr.n = *c.N
	}
	if e := c.logprobs(gr); e != nil {
		return e
	}
	limit := c.MaxTokens
	field := "max_tokens"
	if c.MaxCompletionTokens != nil {
		limit, field = c.MaxCompletionTokens, "max_completion_tokens"
	} else if limit == nil && c.NPredict != nil {
		limit, field = c.NPredict, "n_predict"
	}
	if gr.maxTokens, e = maxTokens(limit, s.cfg.MaxTokens, field); e != nil {
		return e
	}
	if gr.stops, e = stringOrList(c.Stop, "stop"); e != nil {
		return e
	}
	if gr.params, e = c.apply(s.cfg.Defaults, b.Bundle.Model.NVocab); e != nil {
		return e
	}
	if gr.params.Grammar, e = c.grammarOf(); e != nil {
		return e
	}
	gr.stream = c.Stream
	gr.ignoreEOS = c.IgnoreEOS
	gr.usage = c.Stream && c.StreamOptions != nil && c.StreamOptions.IncludeUsage
	return nil
}

func (s *Server) handleChatCompletions(ctx *fasthttp.RequestCtx) {
	var req oaiChatRequest
	b, gr := s.prepare(ctx, dialectOpenAI, &req, oaiChatFields)
	if gr == nil {
		return
	}
	s.generate(ctx, b, gr, "chatcmpl-", "/v1/chat/completions", "messages", &oaiEncoder{s: s, chat: true, usage: gr.usage, logprobs: gr.logprobs, tok: b.Bundle.Tokenizer})
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
	force, e := forceOf(choice, named, len(r.Tools))
	if e != nil {
		return e
	}
	if len(r.Tools) == 0 || choice == "none" {
		return nil // tool_choice none: the model is not shown the tools
	}
	ts := &toolSettings{single: r.ParallelToolCalls != nil && !*r.ParallelToolCalls, force: force}
	for i, t := range r.Tools {
		field := "tools[" + itoa(i) + "]"
		if t.Type != "function" || t.Function == nil {
			return badRequest(field+".type", "%s: only function tools are supported (type \"function\" with a \"function\" object)", field)
		}
		if t.Function.Strict != nil && *t.Function.Strict && force == "" {
			// strict arguments are guaranteed only for a forced call (the
			// grammar constrains the whole reply); a call the model may or
			// may not make would need a grammar triggered mid-reply
			return badRequest(field+".function.strict", "%s.function.strict: true with tool_choice %q: arguments are guaranteed to match the schema only when the call is forced (tool_choice \"required\" or a named function)", field, choice)
		}
		tool, e := functionTool(t.Function.Name, t.Function.Description, t.Function.Parameters, field+".function")
		if e != nil {
			return e
		}
		ts.tools = append(ts.tools, tool)
	}
	if e := ts.checkForce("tool_choice.function.name"); e != nil {
		return e
	}
	gr.tools = ts
	return nil
}

func (s *Server) handleCompletions(ctx *fasthttp.RequestCtx) {
	var req oaiCompletionRequest
	b, gr := s.prepare(ctx, dialectOpenAI, &req, oaiCompletionFields)
	if gr == nil {
		return
	}
	s.generate(ctx, b, gr, "cmpl-", "/v1/completions", "prompt", &oaiEncoder{s: s, usage: gr.usage, logprobs: gr.logprobs, tok: b.Bundle.Tokenizer})
}

func (r *oaiCompletionRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	gr := &genRequest{}
	if isNull(r.Prompt) {
		return nil, badRequest("prompt", "prompt is required")
	}
	if r.Echo {
		return nil, badRequest("echo", "echo is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, badRequest("suffix", "suffix is not supported")
	}
	// A string, one string in an array, token ids, or one array of ids.
	var str string
	var strs []string
	var ids []int32
	var idss [][]int32
	switch {
	case json.Unmarshal(r.Prompt, &str) == nil:
		gr.prompt = str
	case json.Unmarshal(r.Prompt, &strs) == nil && len(strs) == 1:
		gr.prompt = strs[0]
	case json.Unmarshal(r.Prompt, &ids) == nil && len(ids) > 0:
		gr.tokens = ids
	case json.Unmarshal(r.Prompt, &idss) == nil && len(idss) == 1 && len(idss[0]) > 0:
		gr.tokens = idss[0]
	case len(strs) > 1 || len(idss) > 1:
		return nil, badRequest("prompt", "only one prompt per request is supported")
	default:
		return nil, badRequest("prompt", "prompt must be a string, an array of one string, or an array of token ids")
	}
	if e := r.oaiCommon.translate(s, b, gr); e != nil {
		return nil, e
	}
	return gr, nil
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// Response shapes.

type oaiUsage struct {
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func newOAIUsage(u stages.Usage) *oaiUsage {
	o := &oaiUsage{CompletionTokens: u.GeneratedTokens, PromptTokens: u.PromptTokens, TotalTokens: u.PromptTokens + u.GeneratedTokens}
	o.PromptTokensDetails.CachedTokens = u.CachedTokens
	return o
}

// oaiTimings is llama-server's timings object.
type oaiTimings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// newTimings computes llama-server's timings: rates of generation count the
// decode runs (the first token comes from the prompt step).
func newTimings(ev *stages.Event) *oaiTimings {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	t := &oaiTimings{CacheN: ev.Usage.CachedTokens, PromptN: ev.Usage.PromptTokens - ev.Usage.CachedTokens, PromptMS: ms(ev.Timing.Prompt),
		PredictedN: ev.Usage.GeneratedTokens, PredictedMS: ms(ev.Timing.Generate)}
	if t.PromptN > 0 && t.PromptMS > 0 {
		t.PromptPerTokenMS = t.PromptMS / float64(t.PromptN)
		t.PromptPerSecond = 1e3 * float64(t.PromptN) / t.PromptMS
	}
	if runs := t.PredictedN - 1; runs > 0 && t.PredictedMS > 0 {
		t.PredictedPerTokenMS = t.PredictedMS / float64(runs)
		t.PredictedPerSecond = 1e3 * float64(runs) / t.PredictedMS
	}
	return t
}

type oaiOutMessage struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"` // null when the reply is only tool calls
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

// oaiChoice is a choice of a response or a chunk: Message (chat), Delta
// (chat chunk) or Text (completions).
type oaiChoice struct {
	FinishReason *string        `json:"finish_reason"`
	Index        int            `json:"index"`
	Message      *oaiOutMessage `json:"message,omitempty"`
	Delta        any            `json:"delta,omitempty"`
	Text         *string        `json:"text,omitempty"`
	// Logprobs: chat's {content: [...]} or completions' legacy arrays;
	// null when not asked for (OpenAI writes the null)
	Logprobs any `json:"logprobs"`
}

// oaiTokenLogprob is one token of chat's logprobs.content.
type oaiTokenLogprob struct {
	Token       string          `json:"token"`
	Logprob     float32         `json:"logprob"`
	Bytes       []int           `json:"bytes"`
	TopLogprobs []oaiTopLogprob `json:"top_logprobs"`
}

type oaiTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type oaiChatLogprobs struct {
	Content []oaiTokenLogprob `json:"content"`
	Refusal []oaiTokenLogprob `json:"refusal"`
}

// oaiCompletionLogprobs is completions' legacy shape.
type oaiCompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// tokenBytes returns a token's text as OpenAI reports it: the string (a
// partial UTF-8 character becomes U+FFFD when encoded) and its bytes.
func tokenBytes(tok *tokenizer.Tokenizer, id int32) (string, []int) {
	p := tok.Piece(id, false)
	b := make([]int, len(p))
	for i, c := range p {
		b[i] = int(c)
	}
	return string(p), b
}

// logprobsOf renders lps in the endpoint's shape; offset is the text
// length before the first of them (completions' text_offset).
func (o *oaiEncoder) logprobsOf(lps []stages.TokenLogprob, offset int) any {
	if o.chat {
		out := oaiChatLogprobs{Content: make([]oaiTokenLogprob, len(lps)), Refusal: nil}
		for i, lp := range lps {
			t := oaiTokenLogprob{Logprob: lp.Logprob, TopLogprobs: make([]oaiTopLogprob, len(lp.Top))}
			t.Token, t.Bytes = tokenBytes(o.tok, lp.Token)
			for k, a := range lp.Top {
				t.TopLogprobs[k].Token, t.TopLogprobs[k].Bytes = tokenBytes(o.tok, a.Token)
				t.TopLogprobs[k].Logprob = a.Logprob
			}
			out.Content[i] = t
		}
		return out
	}
	out := oaiCompletionLogprobs{Tokens: make([]string, len(lps)), TokenLogprobs: make([]float32, len(lps)),
		TopLogprobs: make([]map[string]float32, len(lps)), TextOffset: make([]int, len(lps))}
	for i, lp := range lps {
		out.Tokens[i], _ = tokenBytes(o.tok, lp.Token)
		out.TokenLogprobs[i] = lp.Logprob
		out.TextOffset[i] = offset
		offset += len(o.tok.Piece(lp.Token, false))
		top := make(map[string]float32, len(lp.Top))
		for _, a := range lp.Top {
			t, _ := tokenBytes(o.tok, a.Token)
			if _, dup := top[t]; !dup { // two ids with one text: keep the likelier
				top[t] = a.Logprob
			}
		}
		out.TopLogprobs[i] = top
	}
	return out
}

type oaiResponse struct {
	Choices           []oaiChoice `json:"choices"`
	Created           int64       `json:"created"`
	Model             string      `json:"model"`
	SystemFingerprint string      `json:"system_fingerprint"`
	Object            string      `json:"object"`
	Usage             *oaiUsage   `json:"usage,omitempty"`
	ID                string      `json:"id"`
	Timings           *oaiTimings `json:"timings,omitempty"`
}

// finishReason maps the engine's reason to OpenAI's ("tool_calls" when
// the reply made calls).
func finishReason(f stages.FinishReason, j *job) *string {
	r := "stop"
	switch {
	case j.hasCalls():
		r = "tool_calls"
	case f == stages.FinishLength:
		r = "length"
	}
	return &r
}

// oaiDeltaCall is a call in a chunk: index, id, type and name first, then
// the arguments, as the SDKs' stream helpers accumulate them.
type oaiDeltaCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaiCallsDelta struct {
	ToolCalls []oaiDeltaCall `json:"tool_calls"`
}

func (o *oaiEncoder) toolCall(w *bufio.Writer, j *job, c *outCall) {
	head := oaiDeltaCall{Index: c.index, ID: c.id, Type: "function"}
	head.Function.Name = c.name
	args := oaiDeltaCall{Index: c.index}
	args.Function.Arguments = c.args
	for _, d := range []oaiDeltaCall{head, args} {
		r := o.frame(j)
		r.Choices = []oaiChoice{{Delta: oaiCallsDelta{[]oaiDeltaCall{d}}}}
		o.send(w, r)
	}
}

// oaiEncoder writes chat completions (chat) or text completions.
type oaiEncoder struct {
	s        *Server
	chat     bool
	usage    bool                 // stream_options.include_usage
	logprobs bool                 // the request asked for logprobs
	tok      *tokenizer.Tokenizer // for the tokens' text in logprobs
	offset   int                  // text streamed so far (completions' text_offset)
	// index is the choice this encoder writes (n > 1: one encoder per
	// choice); multi: its end writes only the choice's finish chunk, the
	// usage and [DONE] coming once after every choice (generateN).
	index int
	multi bool
}

// send writes one chunk of this encoder's choice.
func (o *oaiEncoder) send(w *bufio.Writer, r oaiResponse) {
	for i := range r.Choices {
		r.Choices[i].Index = o.index
	}
	sse(w, "", r)
}

func (o *oaiEncoder) dialect() dialect   { return dialectOpenAI }
func (o *oaiEncoder) streamType() string { return "text/event-stream" }

func (o *oaiEncoder) frame(j *job) oaiResponse {
	obj := "text_completion"
	if o.chat {
		obj = "chat.completion.chunk"
	}
	return oaiResponse{Created: j.created.Unix(), Model: j.model, SystemFingerprint: o.s.cfg.Fingerprint, Object: obj, ID: j.id}
}

// The first chunk's delta and the last one's, as llama-server writes them.
const (
	roleDelta  = `{"role":"assistant","content":null}`
	emptyDelta = `{}`
)

func (o *oaiEncoder) begin(w *bufio.Writer, j *job, _ stages.Usage) {
	if o.chat {
		r := o.frame(j)
		r.Choices = []oaiChoice{{Delta: json.RawMessage(roleDelta)}}
		o.send(w, r)
	}
}

func (o *oaiEncoder) delta(w *bufio.Writer, j *job, text string) {
	r := o.frame(j)
	if o.chat {
		r.Choices = []oaiChoice{{Delta: struct {
			Content string `json:"content"`
		}{text}}}
	} else {
		r.Choices = []oaiChoice{{Text: &text}}
	}
	if o.logprobs {
		r.Choices[0].Logprobs = o.logprobsOf(j.takeLogprobs(), o.offset)
	}
	o.offset += len(text)
	o.send(w, r)
}

func (o *oaiEncoder) end(w *bufio.Writer, j *job, ev *stages.Event) {
	r := o.frame(j)
	if o.chat {
		r.Choices = []oaiChoice{{FinishReason: finishReason(ev.Finish, j), Delta: json.RawMessage(emptyDelta)}}
	} else {
		empty := ""
		r.Choices = []oaiChoice{{FinishReason: finishReason(ev.Finish, j), Text: &empty}}
	}
	if !o.usage && !o.multi {
		r.Timings = newTimings(ev)
	}
	o.send(w, r)
	if o.multi {
		return
	}
	if o.usage {
		r.Choices = []oaiChoice{}
		r.Usage = newOAIUsage(ev.Usage)
		r.Timings = newTimings(ev)
		o.send(w, r)
	}
	w.WriteString("data: [DONE]\n\n")
}

func (o *oaiEncoder) fail(w *bufio.Writer, _ *job, e *apiError) {
	w.WriteString("data: ")
	w.Write(e.body(dialectOpenAI))
	w.WriteString("\n\n")
}

func (o *oaiEncoder) heartbeat(w *bufio.Writer) bool {
	w.WriteString(": ping\n\n")
	return true
}

func (o *oaiEncoder) result(j *job, text string, ev *stages.Event) any {
	r := o.frame(j)
	if o.chat {
		r.Object = "chat.completion"
		m := &oaiOutMessage{Role: "assistant", Content: &text}
		if j.hasCalls() {
			if text == "" {
				m.Content = nil
			}
			for _, c := range j.tools.calls {
				tc := oaiToolCall{ID: c.id, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = c.name, c.args
				m.ToolCalls = append(m.ToolCalls, tc)
			}
		}
		r.Choices = []oaiChoice{{FinishReason: finishReason(ev.Finish, j), Message: m}}
	} else {
		r.Choices = []oaiChoice{{FinishReason: finishReason(ev.Finish, j), Text: &text}}
	}
	if o.logprobs {
		r.Choices[0].Logprobs = o.logprobsOf(j.takeLogprobs(), 0)
	}
	r.Choices[0].Index = o.index
	r.Usage = newOAIUsage(ev.Usage)
	r.Timings = newTimings(ev)
	return r
}

// handleModels lists the one model (OpenAI's shape, with llama-server's meta).
func (s *Server) handleModels(ctx *fasthttp.RequestCtx) {
	b := s.ready(ctx, dialectOpenAI)
	if b == nil {
		return
	}
	writeJSON(ctx, struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{"list", []modelEntry{s.modelEntry(b)}})
}

// handleModel answers GET /v1/models/{id}: the model's entry when id is its
// name or an alias, else 404 (OpenAI's retrieve-model call).
func (s *Server) handleModel(ctx *fasthttp.RequestCtx, id string) {
	b := s.ready(ctx, dialectOpenAI)
	if b == nil {
		return
	}
	if _, e := s.modelName(b, id); e != nil || id == "" {
		if e == nil {
			e = notFound("model_not_found", "model %q not found", id)
		}
		e.write(ctx, dialectOpenAI)
		return
	}
	e := s.modelEntry(b)
	e.ID = id
	writeJSON(ctx, e)
}

type modelMeta struct {
	NVocab    int   `json:"n_vocab"`
	NCtx      int   `json:"n_ctx"`
	NCtxTrain int   `json:"n_ctx_train"`
	NEmbd     int   `json:"n_embd"`
	Size      int64 `json:"size"`
}

type modelEntry struct {
	ID      string    `json:"id"`
	Aliases []string  `json:"aliases"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	OwnedBy string    `json:"owned_by"`
	Meta    modelMeta `json:"meta"`
}

func (s *Server) modelEntry(b *Backend) modelEntry {
	m := b.Bundle.Model
	aliases := s.cfg.Aliases
	if aliases == nil {
		aliases = []string{}
	}
	return modelEntry{ID: s.reportedName(b), Aliases: aliases, Object: "model", Created: time.Now().Unix(), OwnedBy: "flowinfer",
		Meta: modelMeta{NVocab: m.NVocab, NCtx: b.Engine.Config().NCtx, NCtxTrain: m.NCtxTrain, NEmbd: m.NEmbd, Size: b.Size}}
}
