// This file holds what the OpenAI-compatible generation endpoints
// (/v1/chat/completions in openaichat.go, /v1/completions in
// openaicompletions.go) decode alike: the fields they share (model,
// stream and stream_options, max_tokens and its aliases, stop, n,
// logprobs, sampling and structured output), validated and translated
// into the genRequest; the tool shapes chat and Ollama's /api/chat
// decode; and generateOpenAI, their handlers' shared body. The responses
// they write are in openaiencode.go.

package serve

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

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

// spec declares t, the tool at field, or refuses a tool that is not a
// function; hint ends the refusal (the API's own wording).
func (t *oaiTool) spec(field, hint string) (toolSpec, *apiError) {
	if t.Type != "function" || t.Function == nil {
		return toolSpec{}, badRequest(field+".type", "%s: only function tools are supported%s", field, hint)
	}
	f := t.Function
	return toolSpec{field: field + ".function", name: f.Name, description: f.Description, parameters: f.Parameters, strict: f.Strict}, nil
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

// generateOpenAI answers chat and completions: req (an *oaiChatRequest or
// an *oaiCompletionRequest) translated, then generated with the OpenAI
// encoder (chat's shapes for a chat request).
func (s *Server) generateOpenAI(ctx *fasthttp.RequestCtx, req translator, rules map[string]fieldRule, idPrefix, endpoint, param string) {
	b, gr := s.prepare(ctx, dialectOpenAI, req, rules)
	if gr == nil {
		return
	}
	s.generate(ctx, b, gr, idPrefix, endpoint, param, &oaiEncoder{s: s, chat: gr.chat, usage: gr.usage, logprobs: gr.logprobs, tok: b.Bundle.Tokenizer})
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
