// This file holds what the OpenAI-compatible generation endpoints write:
// the chat completion and text completion objects and their stream chunks
// (SSE, ending with data: [DONE]), field for field as llama-server writes
// them (system_fingerprint, usage.prompt_tokens_details.cached_tokens,
// timings, stream_options.include_usage), with logprobs in chat's and
// completions' shapes, and the encoder that writes them from a job's
// events. It decodes nothing.

package serve

import (
	"bufio"
	"encoding/json"
	"time"

	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages"
)

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
	Role    string  `json:"role"`
	Content *string `json:"content"` // null when the reply is only tool calls
	// ReasoningContent is the reply's reasoning, separated from the
	// content (llama-server's field; absent when there is none)
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	ToolCalls        []oaiToolCall `json:"tool_calls,omitempty"`
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

// reasoning writes a chunk of reasoning: delta.reasoning_content, as
// llama-server streams it.
func (o *oaiEncoder) reasoning(w *bufio.Writer, j *job, text string) {
	r := o.frame(j)
	r.Choices = []oaiChoice{{Delta: struct {
		ReasoningContent string `json:"reasoning_content"`
	}{text}}}
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
	sseData(w, "", e.body(dialectOpenAI))
}

func (o *oaiEncoder) heartbeat(w *bufio.Writer) bool { return ssePing(w) }

func (o *oaiEncoder) result(j *job, text string, ev *stages.Event) any {
	r := o.frame(j)
	if o.chat {
		r.Object = "chat.completion"
		m := &oaiOutMessage{Role: "assistant", Content: &text, ReasoningContent: j.reasoning.String()}
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
