// Package serve is flowinfer's HTTP server: OpenAI-compatible
// (/v1/chat/completions, /v1/completions, /v1/responses, /v1/models,
// /v1/embeddings),
// Anthropic-compatible (/v1/messages, /v1/messages/count_tokens) and
// Ollama-compatible (/api/chat, /api/generate, /api/embed, /api/tags,
// /api/show, /api/ps) endpoints, /health and /metrics, on fasthttp.
//
// Each API's request is translated once into one internal request
// (genRequest), tokenized (chat through the model's template, ChatML when
// the GGUF has none) and submitted to the stage engine; the engine's events
// (stages.Event) are encoded straight into that API's wire format, streamed
// as SSE (OpenAI, Anthropic) or NDJSON (Ollama) with a flush per event, or
// collected into one JSON response. Errors come back in each API's own
// shape. A client that leaves mid-stream is noticed when a write fails (SSE
// comment heartbeats are sent while nothing else is, e.g. during prefill)
// and its sequence is cancelled, which frees its KV blocks.
//
// The server listens before the model is loaded: /health answers 503 until
// SetBackend is called. Shutdown stops accepting and waits for in-flight
// streams to finish (drain).
//
// A model whose GGUF has no chat template (stories260K) is chatted with
// through ChatML, as llama-server does (model.Bundle.Template).
//
// Embeddings (embed.go) run through the same engine as prefill-only
// requests, batched with generation: the final hidden states after the
// output norm, pooled (--pooling, else the GGUF's <arch>.pooling_type,
// else the last token) and L2-normalised, as llama-server's.
//
// Tool calling (tools.go): each API's tools and earlier calls and results
// are rendered through the chat template; with tools offered, the reply is
// parsed into content and calls in the format of the template's family
// (model/toolcall: Hermes/Qwen, Llama 3.x, Mistral, generic JSON), text that
// may start a call held back while streaming, and each API's encoder writes
// the calls (OpenAI tool_calls, Anthropic tool_use blocks, Ollama
// tool_calls). Choices that force a call, and the structured-output fields
// (response_format, grammar, json_schema, Ollama's format), constrain
// sampling with a grammar (structured.go).
//
// The Responses API (responses.go) translates its input items
// (messages, function_call, function_call_output) and instructions into
// the same conversation, its text.format into the same grammars, and
// writes response objects and the response.* event stream. Responses are
// not stored: store true and previous_response_id are 400s.
//
// It does not implement images, embedding dimensions other than the
// model's, or reranking: a
// request that asks for one of them gets a 400 naming the field
// (fields.go lists every documented field each API has and what is done
// with it), never a silent drop. Fields no API documents are ignored and
// logged at debug level.
// A client that leaves is noticed on the next write of a stream and, for a
// non-streamed request, by peeking at its connection every 200 ms
// (peerwatch.go); either way its sequence is cancelled and its KV blocks
// freed.
package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// Config sets the server up. Zero fields take the defaults in brackets.
type Config struct {
	// Aliases are the model names clients may use (besides the file name);
	// the first is the one reported [the file's base name].
	Aliases []string
	// APIKey, when set, is required (Authorization: Bearer, or x-api-key)
	// on every endpoint except /health, /v1/models and /api/tags.
	APIKey string
	// Defaults are the sampling settings of a request that sets none;
	// request fields win.
	Defaults sample.Params
	// Stops are stop strings added to every request's own.
	Stops []string
	// MaxTokens is the default token limit of a request (<= 0: until end
	// of generation or a full context).
	MaxTokens int
	// MaxBodyBytes limits request bodies [16 MiB].
	MaxBodyBytes int
	// Heartbeat is how often an SSE comment is written while a stream has
	// nothing else to send [2s].
	Heartbeat time.Duration
	// Fingerprint is the OpenAI system_fingerprint ["flowinfer"].
	Fingerprint string
	// Log receives request errors [no logging].
	Log *zap.Logger
	// ReadTimeout bounds the time a request's headers and body take to
	// arrive [30s]: a client that sends a byte a second is cut. Responses,
	// streams included, are not affected.
	ReadTimeout time.Duration
	// MaxConns caps concurrent connections [1024]; one more gets 503 and is
	// closed.
	MaxConns int
	// MaxHeaderBytes is the largest request head (request line and
	// headers) [16 KiB]; a larger one gets 431.
	MaxHeaderBytes int
	// CORSOrigins are the browser origins allowed to call the API
	// ("https://app.example.com", or "*" for any) [none: no CORS headers,
	// browsers refuse cross-origin calls]. cors.go.
	CORSOrigins []string
	// Pooling is how embeddings pool the tokens' hidden states [the
	// GGUF's <arch>.pooling_type; last when it has none].
	Pooling stages.Pooling
}

func (c *Config) defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 2 * time.Second
	}
	if c.Fingerprint == "" {
		c.Fingerprint = "flowinfer"
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 16 << 10
	}
}

// Backend is the loaded model the server answers with.
type Backend struct {
	Engine   *stages.Engine
	Bundle   *model.Bundle   // tokenizer, chat template, name
	Recorder *graph.Recorder // stage timings for /metrics; may be nil
	Path     string          // the GGUF file
	Size     int64           // its size in bytes
	// Done is closed when the engine's Run has returned: streams still
	// waiting then end with an error instead of hanging.
	Done <-chan struct{}
	// DeviceExperts returns the counters of the device slots that hold
	// routed experts (the VRAM tier); nil: no experts in device slots.
	DeviceExperts func() DeviceExperts
}

// DeviceExperts are the device expert slots' counters since the model
// loaded: lookups found in a slot (hits) or filled into one from the
// model file's bytes on the host (misses).
type DeviceExperts struct {
	Hits, Misses, Evictions int64
	Cached, Slots           int // slots holding an expert, and all slots
}

// Server is the HTTP server.
type Server struct {
	cfg      Config
	backend  atomic.Pointer[Backend]
	draining atomic.Bool
	failed   atomic.Pointer[string] // SetModelFailed's reason; nil: not failed
	metrics  *metrics
	srv      *fasthttp.Server
	routes   map[string]route
	nextID   atomic.Uint64
	stop     chan struct{} // closed by Shutdown's deadline: abort streams
	stopOnce atomic.Bool
	// script, set by tests only (export_test.go), replaces the engine: a
	// request's reply is the pieces it returns for the prompt (tools.go).
	script func(prompt []int32) []string
}

// New returns a server; it serves nothing until Serve.
func New(cfg Config) *Server {
	cfg.defaults()
	s := &Server{cfg: cfg, stop: make(chan struct{}), routes: routeTable()}
	s.metrics = newMetrics(s)
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleReadError,
		Name:               "flowinfer",
		MaxRequestBodySize: cfg.MaxBodyBytes,
		ReadTimeout:        cfg.ReadTimeout,
		Concurrency:        cfg.MaxConns,
		ReadBufferSize:     cfg.MaxHeaderBytes,
		IdleTimeout:        60 * time.Second,
		CloseOnShutdown:    true,
		Logger:             zapPrintf{cfg.Log},
	}
	return s
}

// SetBackend makes the server ready: /health turns 200 and the generation
// endpoints answer.
func (s *Server) SetBackend(b *Backend) { s.backend.Store(b) }

// SetModelFailed marks the model unavailable for reason (e.g. its file
// changed under it): /health answers 503 naming the model and the reason,
// and requests get 503 naming the model, until SetModelFailed(""). reason
// is shown to clients: it must not name server paths.
func (s *Server) SetModelFailed(reason string) {
	if reason == "" {
		s.failed.Store(nil)
		return
	}
	s.failed.Store(&reason)
}

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Handler returns the request handler (for tests on in-memory listeners).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

// Shutdown stops accepting requests and waits for those in flight (streams
// included) to finish, or for ctx to end, after which remaining streams are
// aborted.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	err := s.srv.ShutdownWithContext(ctx)
	if err != nil && s.stopOnce.CompareAndSwap(false, true) {
		close(s.stop)
	}
	return err
}

// zapPrintf adapts a zap logger to fasthttp's Logger.
type zapPrintf struct{ l *zap.Logger }

func (z zapPrintf) Printf(format string, args ...any) { z.l.Sugar().Debugf(format, args...) }

// route is one endpoint.
type route struct {
	method  string
	dialect dialect
	public  bool // no API key needed
	handle  func(s *Server, ctx *fasthttp.RequestCtx)
}

func routeTable() map[string]route {
	return map[string]route{
		"/health":                   {method: "GET", public: true, handle: (*Server).handleHealth},
		"/v1/health":                {method: "GET", public: true, handle: (*Server).handleHealth},
		"/metrics":                  {method: "GET", handle: (*Server).handleMetrics},
		"/debug/trace":              {method: "GET", handle: (*Server).handleDebugTrace},
		"/v1/models":                {method: "GET", public: true, handle: (*Server).handleModels},
		"/models":                   {method: "GET", public: true, handle: (*Server).handleModels},
		"/v1/chat/completions":      {method: "POST", handle: (*Server).handleChatCompletions},
		"/chat/completions":         {method: "POST", handle: (*Server).handleChatCompletions},
		"/v1/completions":           {method: "POST", handle: (*Server).handleCompletions},
		"/v1/responses":             {method: "POST", handle: (*Server).handleResponses},
		"/responses":                {method: "POST", handle: (*Server).handleResponses},
		"/completions":              {method: "POST", handle: (*Server).handleCompletions},
		"/v1/messages":              {method: "POST", dialect: dialectAnthropic, handle: (*Server).handleMessages},
		"/v1/messages/count_tokens": {method: "POST", dialect: dialectAnthropic, handle: (*Server).handleCountTokens},
		"/api/chat":                 {method: "POST", dialect: dialectOllama, handle: (*Server).handleOllamaChat},
		"/api/generate":             {method: "POST", dialect: dialectOllama, handle: (*Server).handleOllamaGenerate},
		"/api/tags":                 {method: "GET", dialect: dialectOllama, public: true, handle: (*Server).handleOllamaTags},
		"/api/version":              {method: "GET", dialect: dialectOllama, public: true, handle: (*Server).handleOllamaVersion},
		"/v1/embeddings":            {method: "POST", handle: (*Server).handleEmbeddings},
		"/embeddings":               {method: "POST", handle: (*Server).handleEmbeddings},
		"/api/embed":                {method: "POST", dialect: dialectOllama, handle: (*Server).handleOllamaEmbed},
		"/api/show":                 {method: "POST", dialect: dialectOllama, handle: (*Server).handleOllamaShow},
		"/api/ps":                   {method: "GET", dialect: dialectOllama, public: true, handle: (*Server).handleOllamaPs},
	}
}

// dialectOf guesses the API of an unknown path, for its error shape.
func dialectOf(path string) dialect {
	switch {
	case strings.HasPrefix(path, "/api/"):
		return dialectOllama
	case strings.HasPrefix(path, "/v1/messages"):
		return dialectAnthropic
	}
	return dialectOpenAI
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	r, ok := s.routes[path]
	endpoint := path
	var modelID string
	if !ok {
		// GET /v1/models/{id} (OpenAI's retrieve model): public, as the list
		for _, p := range []string{"/v1/models/", "/models/"} {
			if id, found := strings.CutPrefix(path, p); found {
				modelID, endpoint, ok = id, p+"{id}", true
				r = route{method: "GET", public: true, handle: func(s *Server, ctx *fasthttp.RequestCtx) { s.handleModel(ctx, modelID) }}
			}
		}
	}
	if !ok {
		endpoint = "other"
	}
	defer func() {
		if p := recover(); p != nil { // a bug, not bad input: answer, log, keep serving
			s.cfg.Log.Error("panic in handler", zap.String("path", path), zap.Any("panic", p), zap.Stack("stack"))
			(&apiError{status: 500, kind: "server_error", message: "internal error"}).write(ctx, r.dialect)
		}
		s.corsHeaders(ctx)
		s.metrics.request(endpoint, ctx.Response.StatusCode())
	}()
	if !ok {
		notFound("", "no endpoint %s %s", ctx.Method(), path).write(ctx, dialectOf(path))
		return
	}
	if s.corsPreflight(ctx, r.method) {
		return
	}
	// every method of a protected route needs the key, so that nothing
	// (not even which method a route takes) answers without it; only a
	// preflight, above, does not: browsers send it without credentials
	if !r.public && !s.authorized(ctx) {
		errUnauthorized.write(ctx, r.dialect)
		// RFC 9110: a 401 names the scheme that would be accepted
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="flowinfer"`)
		return
	}
	method, allow := string(ctx.Method()), r.method
	if r.method == "GET" {
		allow = "GET, HEAD"
		if ctx.IsHead() {
			// RFC 9110: HEAD answers as GET does, without the body
			// (fasthttp sends none for HEAD)
			method = "GET"
		}
	}
	if method != r.method {
		if ctx.IsOptions() {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
		} else {
			(&apiError{status: fasthttp.StatusMethodNotAllowed, kind: "invalid_request_error", message: "method " + string(ctx.Method()) + " not allowed on " + path + " (use " + r.method + ")"}).write(ctx, r.dialect)
		}
		ctx.Response.Header.Set("Allow", allow) // after write, which resets the headers
		return
	}
	r.handle(s, ctx)
}

// authorized checks the API key, if one is set.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	key := ctx.Request.Header.Peek("X-Api-Key")
	if auth := ctx.Request.Header.Peek("Authorization"); len(auth) > 7 && strings.EqualFold(string(auth[:7]), "bearer ") {
		key = auth[7:]
	}
	return subtle.ConstantTimeCompare(key, []byte(s.cfg.APIKey)) == 1
}

// handleReadError answers requests fasthttp could not read (body too large,
// malformed HTTP) in the shape of the endpoint's API when the path is known.
func (s *Server) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	d := dialectOf(string(ctx.Path()))
	var e *apiError
	var small *fasthttp.ErrSmallBuffer
	var nerr net.Error
	// messages quote nothing from the request (fasthttp's own quote the
	// raw head, Authorization header included)
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		e = errBodyTooLarge
		drain(ctx.Conn())
	case errors.As(err, &small):
		e = &apiError{status: fasthttp.StatusRequestHeaderFieldsTooLarge, kind: "invalid_request_error",
			message: fmt.Sprintf("request line and headers exceed %d bytes", s.cfg.MaxHeaderBytes)}
	case errors.As(err, &nerr) && nerr.Timeout():
		e = &apiError{status: fasthttp.StatusRequestTimeout, kind: "invalid_request_error",
			message: fmt.Sprintf("the request did not arrive within %v", s.cfg.ReadTimeout)}
	default:
		s.cfg.Log.Debug("unreadable request", zap.Error(err))
		e = badRequest("", "malformed HTTP request")
	}
	e.write(ctx, d)
	s.metrics.request("other", e.status)
}

// A request rejected before its body was read (413) is answered and its
// connection closed. Closing a socket with unread data makes the kernel
// reset the connection, and a client still sending its body then sees
// "connection reset" instead of the 413 (net/http's server, for the same
// reason, discards some of an unread body and delays its close). drain
// discards what the client is still sending, up to lingerBytes and
// lingerTime, until it pauses for lingerPause.
const (
	lingerBytes = 8 << 20
	lingerTime  = 2 * time.Second
	lingerPause = 100 * time.Millisecond
)

func drain(c net.Conn) {
	buf := make([]byte, 32<<10)
	end := time.Now().Add(lingerTime)
	for n := 0; n < lingerBytes; {
		d := time.Now().Add(lingerPause)
		if d.After(end) {
			d = end
		}
		if c.SetReadDeadline(d) != nil {
			return
		}
		m, err := c.Read(buf)
		n += m
		if err != nil {
			return
		}
	}
}

// ready returns the backend, or writes 503 while the model loads.
func (s *Server) ready(ctx *fasthttp.RequestCtx, d dialect) *Backend {
	b := s.backend.Load()
	switch {
	case b == nil:
		errLoading.write(ctx, d)
		return nil
	case s.draining.Load():
		errDraining.write(ctx, d)
		return nil
	}
	if f := s.failed.Load(); f != nil {
		s.modelFailed(b, *f).write(ctx, d)
		return nil
	}
	select {
	case <-b.Done:
		errEngineDown.write(ctx, d)
		return nil
	default:
	}
	return b
}

func (s *Server) handleHealth(ctx *fasthttp.RequestCtx) {
	b := s.backend.Load()
	if b == nil {
		errLoading.write(ctx, dialectOpenAI)
		return
	}
	if f := s.failed.Load(); f != nil {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		body, _ := json.Marshal(struct {
			Status string `json:"status"`
			Model  string `json:"model"`
			Reason string `json:"reason"`
		}{"unavailable", s.reportedName(b), *f}) // strings: cannot fail
		ctx.SetBody(body)
		return
	}
	select {
	case <-b.Done:
		errEngineDown.write(ctx, dialectOpenAI)
		return
	default:
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ok"}`)
}
