// This file is the path every generation endpoint shares: name the model,
// tokenize, submit to the engine, then stream the job's events through the
// endpoint's encoder or collect them into one response.

package serve

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/toolcall"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// encoder writes one endpoint's output for a job: a stream of chunks, or
// one response object.
type encoder interface {
	dialect() dialect
	// streamType is the Content-Type of a stream.
	streamType() string
	// begin is written once, when the first event arrives.
	begin(w *bufio.Writer, j *job, u stages.Usage)
	// delta writes new text.
	delta(w *bufio.Writer, j *job, text string)
	// end writes the closing chunks from the final event.
	end(w *bufio.Writer, j *job, ev *stages.Event)
	// fail ends a stream that cannot complete.
	fail(w *bufio.Writer, j *job, e *apiError)
	// heartbeat writes a keep-alive and reports whether the format has one.
	heartbeat(w *bufio.Writer) bool
	// result is the non-stream response body.
	result(j *job, text string, ev *stages.Event) any
}

// newID returns prefix plus 26 random characters.
func newID(prefix string) string { return prefix + rand.Text() }

// modelName resolves the model a client asked for: "" or any accepted name
// is fine; the name is echoed back (the reported name for "").
func (s *Server) modelName(b *Backend, asked string) (string, *apiError) {
	if asked == "" {
		return s.reportedName(b), nil
	}
	for _, n := range s.acceptedNames(b) {
		if asked == n {
			return asked, nil
		}
	}
	return "", notFound("model_not_found", "model %q not found (this server serves %q)", asked, s.reportedName(b))
}

// reportedName is the model's name in /v1/models and responses.
func (s *Server) reportedName(b *Backend) string {
	if len(s.cfg.Aliases) > 0 {
		return s.cfg.Aliases[0]
	}
	return filepath.Base(b.Path)
}

func (s *Server) acceptedNames(b *Backend) []string {
	base := filepath.Base(b.Path)
	names := append([]string{base, strings.TrimSuffix(base, ".gguf"), b.Path}, s.cfg.Aliases...)
	if b.Bundle.Name != "" {
		names = append(names, b.Bundle.Name)
	}
	return names
}

// tokenize turns the request into prompt tokens that fit the context.
func (s *Server) tokenize(b *Backend, gr *genRequest, param string) ([]int32, *apiError) {
	prompt, e := s.tokenizeAny(b, gr, param)
	if e != nil {
		return nil, e
	}
	if n := b.Engine.Config().NCtx; len(prompt) >= n {
		e := badRequest(param, "the prompt has %d tokens; the context holds %d, including at least one generated token", len(prompt), n)
		e.code = "context_length_exceeded"
		return nil, e
	}
	return prompt, nil
}

// tokenizeAny turns the request into prompt tokens: chat messages through
// the template (tokenized with special tokens parsed, as llama-server
// does), a raw prompt as it is.
func (s *Server) tokenizeAny(b *Backend, gr *genRequest, param string) ([]int32, *apiError) {
	tok := b.Bundle.Tokenizer
	var prompt []int32
	switch {
	case gr.chat:
		t := b.Bundle.Template
		if t == nil {
			return nil, badRequest(param, "the model's chat template is not supported; use a raw prompt endpoint (/v1/completions, /api/generate with raw)")
		}
		opts, e := gr.think.checkThinking(t)
		if e != nil {
			return nil, e
		}
		r, err := t.RenderWith(gr.messages, gr.toolList(), true, opts)
		if err != nil {
			return nil, renderError(err, param)
		}
		gr.inReasoning = templateReasoning(t).InReasoning(r.Prompt)
		prompt = tok.Encode(t.TrimForTokenizer(r.Prompt, tok.AddBOS(), tok.AddEOS()), true, true)
		gr.ckptAt = messageStarts(b, t, gr, opts, r.Prompt, prompt)
	case gr.tokens != nil:
		for i, id := range gr.tokens {
			if id < 0 || int(id) >= tok.NVocab() {
				return nil, badRequest(param, "%s[%d]: token %d is outside the vocabulary of %d", param, i, id, tok.NVocab())
			}
		}
		prompt = gr.tokens
	default:
		prompt = tok.Encode(gr.prompt, true, true)
	}
	if len(prompt) == 0 {
		return nil, badRequest(param, "the prompt is empty")
	}
	return prompt, nil
}

// start tokenizes and submits gr. On failure it has written the error.
func (s *Server) start(ctx *fasthttp.RequestCtx, b *Backend, gr *genRequest, idPrefix, endpoint, param string, enc encoder) *job {
	prompt, e := s.tokenize(b, gr, param)
	if e == nil {
		e = s.constrain(b, gr)
	}
	if e != nil {
		e.write(ctx, enc.dialect())
		return nil
	}
	j := s.newJob(b, gr, newID(idPrefix), endpoint, prompt)
	if e := s.submit(b, j); e != nil {
		e.write(ctx, enc.dialect())
		return nil
	}
	return j
}

// newJob makes gr's job for the tokenized prompt (not yet submitted).
func (s *Server) newJob(b *Backend, gr *genRequest, id, endpoint string, prompt []int32) *job {
	j := newJob(context.Background(), id, gr.model, endpoint, prompt)
	j.req.ID = s.nextID.Add(1)
	j.req.Params = gr.params
	j.req.MaxTokens = gr.maxTokens
	j.req.CheckpointAt = gr.ckptAt
	j.req.IgnoreEOG = gr.ignoreEOS
	j.req.Logprobs, j.req.TopLogprobs = gr.logprobs, gr.topLogprobs
	j.req.Stops = append(append([]string(nil), gr.stops...), s.cfg.Stops...)
	if gr.chat && b.Bundle.Template != nil {
		j.req.Stops = append(j.req.Stops, b.Bundle.Template.StopStrings()...)
	}
	j.onToken = s.metrics.token
	t := b.Bundle.Template
	if t == nil || !gr.chat {
		return j
	}
	var markers []string
	f := toolcall.Detect(t.Source(), t.Family() == chat.ChatML)
	if len(gr.toolList()) > 0 {
		j.tools = newToolState(gr.tools, f)
		markers = f.Markers()
	}
	if j.parse = newOutput(t, gr, f); j.parse != nil {
		markers = append(markers, templateReasoning(t).Markers()...)
	}
	j.req.Preserve = markerTokens(b, markers)
	return j
}

// submit hands j to the engine.
func (s *Server) submit(b *Backend, j *job) *apiError {
	if s.script != nil { // tests: scripted generation instead of the engine
		go runScript(j, s.script(j.req.Prompt))
		return nil
	}
	if err := b.Engine.Submit(j.req); err != nil {
		j.cancel()
		return submitError(err)
	}
	return nil
}

// submitError maps an Engine.Submit error to the client's answer.
func submitError(err error) *apiError {
	switch {
	case errors.Is(err, stages.ErrQueueFull):
		return errQueueFull
	case errors.Is(err, stages.ErrEngineClosed):
		return errDraining
	case errors.Is(err, sample.ErrParams):
		return badRequest("", "%s", strings.TrimPrefix(err.Error(), "sample: "))
	}
	return badRequest("", "%s", strings.TrimPrefix(err.Error(), "stages: "))
}

// peerCheckEvery is how often a non-streamed request checks that its client
// is still connected (peerwatch.go).
const peerCheckEvery = 200 * time.Millisecond

// statusClientClosed is nginx's 499: the client closed the connection
// before the answer.
const statusClientClosed = 499

// generate runs gr and answers with enc's stream or result.
func (s *Server) generate(ctx *fasthttp.RequestCtx, b *Backend, gr *genRequest, idPrefix, endpoint, param string, enc encoder) {
	if o, ok := enc.(*oaiEncoder); ok && gr.n > 1 {
		s.generateN(ctx, b, gr, idPrefix, endpoint, param, o)
		return
	}
	j := s.start(ctx, b, gr, idPrefix, endpoint, param, enc)
	if j == nil {
		return
	}
	if gr.stream {
		s.stream(ctx, b, j, enc)
		return
	}
	defer j.abandon()
	watch := watchClient(ctx.Conn(), j.abandon)
	text, final := j.wait(b.Done, s.stop)
	watch.stop()
	switch {
	case final == nil && watch.left():
		s.cfg.Log.Debug("client left before the answer", zap.String("id", j.id))
		ctx.SetStatusCode(statusClientClosed) // for the metrics; nobody reads it
		ctx.SetConnectionClose()
	case final == nil:
		errEngineDown.write(ctx, enc.dialect())
	case final.Finish == stages.FinishError:
		s.cfg.Log.Error("generation failed", zap.String("id", j.id), zap.Error(final.Err))
		s.failedError(b, "generation", final.Err).write(ctx, enc.dialect())
	default:
		s.metrics.finished(final)
		writeJSON(ctx, enc.result(j, splitCalls(j, text, final), final))
	}
}

// writeJSON answers 200 with v as JSON.
func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil { // our own response types: a bug
		(&apiError{status: 500, kind: "server_error", message: "encoding the response: " + err.Error()}).write(ctx, dialectOpenAI)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// sse writes one SSE event: an optional event name and a JSON data line.
func sse(w *bufio.Writer, event string, v any) {
	b, _ := json.Marshal(v) // our own response types
	sseData(w, event, b)
}

// sseData is sse with the data already encoded.
func sseData(w *bufio.Writer, event string, data []byte) {
	if event != "" {
		w.WriteString("event: ")
		w.WriteString(event)
		w.WriteByte('\n')
	}
	w.WriteString("data: ")
	w.Write(data)
	w.WriteString("\n\n")
}

// ssePing writes an SSE comment, which clients skip: the SSE encoders'
// heartbeat.
func ssePing(w *bufio.Writer) bool {
	w.WriteString(": ping\n\n")
	return true
}

// ndjson writes one JSON line.
func ndjson(w *bufio.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(b)
	w.WriteByte('\n')
}

// decode reads the JSON body into v; anything malformed is a 400.
func decode(ctx *fasthttp.RequestCtx, v any) *apiError {
	body := ctx.PostBody()
	if len(strings.TrimSpace(string(body))) == 0 {
		return badRequest("", "the request body is empty; expected a JSON object")
	}
	if countObjects(body, MaxJSONObjects) > MaxJSONObjects {
		return badRequest("", "the request has more than %d JSON objects", MaxJSONObjects)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return decodeError(err)
	}
	return nil
}
