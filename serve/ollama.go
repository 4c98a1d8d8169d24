// This file holds the Ollama-compatible endpoints (/api/chat,
// /api/generate, /api/version; /api/embed is in embed.go, /api/tags,
// /api/show and /api/ps in ollamashow.go): request translation (sampling
// settings under "options", streaming on by default) and the NDJSON
// shapes with Ollama's count and duration fields (nanoseconds).

package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/stages"
)

// ollamaOptions are the model options Ollama takes per request.
type ollamaOptions struct {
	NumPredict *int     `json:"num_predict"`
	Stop       []string `json:"stop"`
	NumCtx     *int     `json:"num_ctx"` // at most the server's context (fixed at start)
	samplingFields
}

type ollamaCommon struct {
	Model     string          `json:"model"`
	Stream    *bool           `json:"stream"`
	Options   *ollamaOptions  `json:"options"`
	Format    json.RawMessage `json:"format"`
	KeepAlive json.RawMessage `json:"keep_alive"` // accepted, ignored
	// Think: true or false turns thinking on or off; "low", "medium" or
	// "high" are gpt-oss's effort levels.
	Think json.RawMessage `json:"think"`
}

// think decodes the think field into gr.
func (c *ollamaCommon) think(gr *genRequest) *apiError {
	if isNull(c.Think) {
		return nil
	}
	var on bool
	var level string
	switch {
	case json.Unmarshal(c.Think, &on) == nil:
		gr.think.setOn(on, "think")
	case json.Unmarshal(c.Think, &level) == nil:
		if level == "none" {
			return badRequest("think", `think: %q is not a level (use false, or "low", "medium", "high")`, level)
		}
		if e := gr.think.effortLevel(level, "think"); e != nil {
			return e
		}
		gr.think.setOn(true, "think")
	default:
		return badRequest("think", `think: expected true, false, "low", "medium" or "high", got %s`, c.Think)
	}
	return nil
}

func (c *ollamaCommon) translate(s *Server, b *Backend, gr *genRequest) *apiError {
	if c.Model == "" {
		return badRequest("model", "model is required")
	}
	var e *apiError
	if gr.model, e = s.modelName(b, c.Model); e != nil {
		e.message = fmt.Sprintf("model %q not found", c.Model)
		return e
	}

	gr.stream = c.Stream == nil || *c.Stream
	gr.maxTokens = s.cfg.MaxTokens
	gr.params = s.cfg.Defaults
	if o := c.Options; o != nil {
		if n := b.Engine.Config().NCtx; o.NumCtx != nil && *o.NumCtx > n {
			// a smaller num_ctx is honoured by the larger server context
			return badRequest("options.num_ctx", "options.num_ctx: %d is more than the server's context of %d tokens per sequence (set by its --ctx-size)", *o.NumCtx, n)
		}
		if o.NumPredict != nil {
			gr.maxTokens = *o.NumPredict // -1 and -2 (fill the context): no limit
			if gr.maxTokens < 0 {
				gr.maxTokens = 0
			} else if gr.maxTokens == 0 {
				return badRequest("options.num_predict", "num_predict must not be 0")
			}
		}
		gr.stops = o.Stop
		if gr.params, e = o.apply(s.cfg.Defaults, b.Bundle.Model.NVocab); e != nil {
			return e
		}
	}
	if gr.params.Grammar, e = ollamaFormat(c.Format); e != nil {
		return e
	}
	return c.think(gr)
}

type ollamaMessage struct {
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	Thinking   string           `json:"thinking,omitempty"`
	Images     []string         `json:"images,omitempty"`
	ToolCalls  []ollamaToolCall `json:"tool_calls,omitempty"`
	ToolName   string           `json:"tool_name,omitempty"`    // tool: the function that answered
	ToolCallID string           `json:"tool_call_id,omitempty"` // tool
}

// ollamaToolCall is Ollama's call: arguments as an object.
type ollamaToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type ollamaChatRequest struct {
	Messages []ollamaMessage `json:"messages"`
	Tools    []oaiTool       `json:"tools"`
	ollamaCommon
}

type ollamaGenerateRequest struct {
	Prompt string   `json:"prompt"`
	System string   `json:"system"`
	Raw    bool     `json:"raw"`
	Suffix string   `json:"suffix"`
	Images []string `json:"images"`
	ollamaCommon
}

func (s *Server) handleOllamaChat(ctx *fasthttp.RequestCtx) {
	var req ollamaChatRequest
	b, gr := s.prepare(ctx, dialectOllama, &req, ollamaChatFields)
	switch {
	case gr == nil:
	case len(req.Messages) == 0:
		// Ollama answers an empty conversation by loading the model.
		writeJSON(ctx, ollamaChunk{Model: gr.model, CreatedAt: ollamaTime(time.Now()), Message: &ollamaMessage{Role: "assistant"}, Done: true, DoneReason: "load"})
	default:
		s.generate(ctx, b, gr, "", "/api/chat", "messages", &ollamaEncoder{chat: true})
	}
}

// translate checks the conversation and the tools; an empty conversation
// translates to no messages (the handler answers it).
func (r *ollamaChatRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	gr := &genRequest{chat: true}
	if e := r.ollamaCommon.translate(s, b, gr); e != nil {
		return nil, e
	}
	if len(r.Messages) == 0 {
		return gr, nil
	}
	for i, m := range r.Messages {
		field := "messages[" + itoa(i) + "]"
		if e := checkRole(m.Role, field+".role", "system", "user", "assistant", "tool"); e != nil {
			return nil, e
		}
		if len(m.Images) > 0 {
			return nil, badRequest(field+".images", "images are not supported")
		}
		msg, e := ollamaTurn(m, field)
		if e != nil {
			return nil, e
		}
		gr.messages = append(gr.messages, msg)
	}
	spec := func(i int) (toolSpec, *apiError) {
		t, e := r.Tools[i].spec("tools["+itoa(i)+"]", "")
		t.strict = nil // not Ollama's: the model may always choose
		return t, e
	}
	var e *apiError
	if gr.tools, e = offerTools("auto", "", len(r.Tools), spec, toolSettings{}, ""); e != nil {
		return nil, e
	}
	return gr, nil
}

// ollamaTurn translates a message: an assistant's tool_calls (arguments
// an object), a tool result's tool_name.
func ollamaTurn(m ollamaMessage, field string) (chat.Message, *apiError) {
	msg := chat.Message{Role: m.Role, Content: m.Content, Name: m.ToolName, ToolCallID: m.ToolCallID, Reasoning: m.Thinking}
	if m.Thinking != "" && m.Role != "assistant" {
		return msg, badRequest(field+".thinking", "%s.thinking: only an assistant message has thinking", field)
	}
	if len(m.ToolCalls) > 0 && m.Role != "assistant" {
		return msg, badRequest(field+".tool_calls", "%s.tool_calls: only an assistant message makes tool calls", field)
	}
	for k, c := range m.ToolCalls {
		cf := field + ".tool_calls[" + itoa(k) + "].function"
		if c.Function.Name == "" {
			return msg, badRequest(cf+".name", "%s.name is required", cf)
		}
		args, ok := jsonObject(c.Function.Arguments)
		if !ok {
			return msg, badRequest(cf+".arguments", "%s.arguments: a JSON object is required", cf)
		}
		msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
	}
	return msg, nil
}

func (s *Server) handleOllamaGenerate(ctx *fasthttp.RequestCtx) {
	var req ollamaGenerateRequest
	b, gr := s.prepare(ctx, dialectOllama, &req, ollamaGenerateFields)
	switch {
	case gr == nil:
	case req.empty():
		// Ollama answers an empty prompt by loading the model.
		writeJSON(ctx, ollamaChunk{Model: gr.model, CreatedAt: ollamaTime(time.Now()), Response: new(string), Done: true, DoneReason: "load"})
	default:
		s.generate(ctx, b, gr, "", "/api/generate", "prompt", &ollamaEncoder{})
	}
}

// empty reports a request with nothing to generate from.
func (r *ollamaGenerateRequest) empty() bool { return r.Prompt == "" && r.System == "" }

// translate makes the prompt raw, or a conversation of the system prompt
// and the prompt; an empty request translates to neither (the handler
// answers it).
func (r *ollamaGenerateRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	gr := &genRequest{}
	if e := r.ollamaCommon.translate(s, b, gr); e != nil {
		return nil, e
	}
	switch {
	case r.Suffix != "":
		return nil, badRequest("suffix", "suffix is not supported")
	case len(r.Images) > 0:
		return nil, badRequest("images", "images are not supported")
	case r.empty():
	case r.Raw:
		if !isNull(r.Think) {
			return nil, badRequest("think", "think: a raw prompt is not rendered with the chat template, which is what switches thinking, and its reply is not parsed")
		}
		gr.prompt = r.Prompt
	default:
		gr.chat = true
		if r.System != "" {
			gr.messages = append(gr.messages, chat.Message{Role: "system", Content: r.System})
		}
		gr.messages = append(gr.messages, chat.Message{Role: "user", Content: r.Prompt})
	}
	return gr, nil
}

// ollamaTime formats a time as Ollama does.
func ollamaTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ollamaChunk is one NDJSON line of /api/chat (Message) or /api/generate
// (Response); the last one carries the counts and durations.
type ollamaChunk struct {
	Model              string         `json:"model"`
	CreatedAt          string         `json:"created_at"`
	Message            *ollamaMessage `json:"message,omitempty"`
	Response           *string        `json:"response,omitempty"`
	Thinking           string         `json:"thinking,omitempty"` // /api/generate's reasoning
	Done               bool           `json:"done"`
	DoneReason         string         `json:"done_reason,omitempty"`
	TotalDuration      int64          `json:"total_duration,omitempty"`
	LoadDuration       int64          `json:"load_duration,omitempty"`
	PromptEvalCount    int            `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64          `json:"prompt_eval_duration,omitempty"`
	EvalCount          int            `json:"eval_count,omitempty"`
	EvalDuration       int64          `json:"eval_duration,omitempty"`
}

// ollamaEncoder writes /api/chat (chat) or /api/generate output.
type ollamaEncoder struct {
	chat bool
}

func (o *ollamaEncoder) dialect() dialect   { return dialectOllama }
func (o *ollamaEncoder) streamType() string { return "application/x-ndjson" }

func (o *ollamaEncoder) chunk(j *job, text string) ollamaChunk {
	c := ollamaChunk{Model: j.model, CreatedAt: ollamaTime(time.Now())}
	if o.chat {
		c.Message = &ollamaMessage{Role: "assistant", Content: text}
	} else {
		c.Response = &text
	}
	return c
}

func (o *ollamaEncoder) begin(*bufio.Writer, *job, stages.Usage) {}

func (o *ollamaEncoder) delta(w *bufio.Writer, j *job, text string) { ndjson(w, o.chunk(j, text)) }

// reasoning writes a chunk of reasoning: message.thinking (/api/chat) or
// thinking (/api/generate), as Ollama streams it.
func (o *ollamaEncoder) reasoning(w *bufio.Writer, j *job, text string) {
	c := o.chunk(j, "")
	o.think(&c, text)
	ndjson(w, c)
}

// think puts reasoning text into c.
func (o *ollamaEncoder) think(c *ollamaChunk, text string) {
	if o.chat {
		c.Message.Thinking = text
	} else {
		c.Thinking = text
	}
}

// ollamaCall is c in Ollama's shape.
func ollamaCall(c *outCall) ollamaToolCall {
	var t ollamaToolCall
	t.Function.Index, t.Function.Name, t.Function.Arguments = c.index, c.name, json.RawMessage(c.args)
	return t
}

// toolCall writes a chunk carrying one complete call, as Ollama streams them.
func (o *ollamaEncoder) toolCall(w *bufio.Writer, j *job, c *outCall) {
	ch := o.chunk(j, "")
	ch.Message.ToolCalls = []ollamaToolCall{ollamaCall(c)}
	ndjson(w, ch)
}

// final fills the closing fields.
func (o *ollamaEncoder) final(c *ollamaChunk, j *job, ev *stages.Event) {
	c.Done = true
	c.DoneReason = "stop"
	if ev.Finish == stages.FinishLength {
		c.DoneReason = "length"
	}
	c.TotalDuration = int64(time.Since(j.created))
	c.LoadDuration = 1 // Ollama clients divide by it; the model is loaded already
	c.PromptEvalCount = ev.Usage.PromptTokens
	c.PromptEvalDuration = int64(ev.Timing.Prompt)
	c.EvalCount = ev.Usage.GeneratedTokens
	c.EvalDuration = int64(ev.Timing.Generate)
}

func (o *ollamaEncoder) end(w *bufio.Writer, j *job, ev *stages.Event) {
	c := o.chunk(j, "")
	o.final(&c, j, ev)
	ndjson(w, c)
}

func (o *ollamaEncoder) fail(w *bufio.Writer, _ *job, e *apiError) {
	w.Write(e.body(dialectOllama))
	w.WriteByte('\n')
}

// heartbeat: NDJSON has no comments (a blank line breaks Ollama's client).
func (o *ollamaEncoder) heartbeat(*bufio.Writer) bool { return false }

func (o *ollamaEncoder) result(j *job, text string, ev *stages.Event) any {
	c := o.chunk(j, text)
	o.think(&c, j.reasoning.String())
	if j.hasCalls() {
		for i := range j.tools.calls {
			c.Message.ToolCalls = append(c.Message.ToolCalls, ollamaCall(&j.tools.calls[i]))
		}
	}
	o.final(&c, j, ev)
	return c
}

func (s *Server) handleOllamaVersion(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, struct {
		Version string `json:"version"`
	}{"0.0.0-flowinfer"})
}
