package serve_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// checkShape asserts an error body has its API's shape.
func checkShape(t *testing.T, api string, r response) {
	t.Helper()
	m := r.json(t)
	switch api {
	case "openai":
		e, ok := m["error"].(map[string]any)
		if !ok || e["message"] == "" || e["type"] == nil {
			t.Errorf("OpenAI error shape: %s", r.body)
			return
		}
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := e[k]; !ok {
				t.Errorf("OpenAI error without %q: %s", k, r.body)
			}
		}
	case "anthropic":
		if m["type"] != "error" || path(m, "error.type") == nil || path(m, "error.message") == nil {
			t.Errorf("Anthropic error shape: %s", r.body)
		}
	case "ollama":
		if s, ok := m["error"].(string); !ok || s == "" || len(m) != 1 {
			t.Errorf("Ollama error shape: %s", r.body)
		}
	}
}

// TestBadInput: every malformed request gets a 4xx in its API's shape.
func TestBadInput(t *testing.T) {
	ts := start(t, serve.Config{MaxBodyBytes: 64 << 10}, stages.Config{NCtx: 64})
	long := strings.Repeat("Once upon a time there was a girl. ", 40)
	huge := `{"prompt":"` + strings.Repeat("a", 100<<10) + `"}`
	msgs := `[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, api, path, body string
		status                int
		param                 string // OpenAI param, or a word the message must contain
	}{
		{"empty body", "openai", "/v1/chat/completions", ``, 400, ""},
		{"invalid JSON", "openai", "/v1/chat/completions", `{"messages":`, 400, ""},
		{"not an object", "openai", "/v1/chat/completions", `[1,2]`, 400, ""},
		{"messages missing", "openai", "/v1/chat/completions", `{}`, 400, "messages"},
		{"messages empty", "openai", "/v1/chat/completions", `{"messages":[]}`, 400, "messages"},
		{"messages wrong type", "openai", "/v1/chat/completions", `{"messages":"hi"}`, 400, "messages"},
		{"bad role", "openai", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"content wrong type", "openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content"},
		{"image part", "openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content"},
		{"temperature wrong type", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"temperature":"hot"}`, 400, "temperature"},
		{"max_tokens zero", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"max_tokens":0}`, 400, "max_tokens"},
		{"max_tokens fractional", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"max_tokens":1.5}`, 400, "max_tokens"},
		{"top_p out of range", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"top_p":7}`, 400, ""},
		{"temperature negative", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"temperature":-1}`, 400, "temperature"},
		{"temperature huge", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"temperature":1e308}`, 400, "temperature"},
		{"top_k negative", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"top_k":-5}`, 400, "top_k"},
		{"user content null", "openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":null}]}`, 400, "messages[0].content"},
		{"completions temperature negative", "openai", "/v1/completions", `{"prompt":"x","temperature":-1}`, 400, "temperature"},
		{"completions top_k negative", "openai", "/v1/completions", `{"prompt":"x","top_k":-5}`, 400, "top_k"},
		{"anthropic temperature above 1", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5,"temperature":1.5,"messages":` + msgs + `}`, 400, "temperature"},
		{"anthropic temperature negative", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5,"temperature":-1,"messages":` + msgs + `}`, 400, "temperature"},
		{"anthropic top_k negative", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5,"top_k":-5,"messages":` + msgs + `}`, 400, "top_k"},
		{"ollama chat temperature negative", "ollama", "/api/chat", `{"model":"stories260K","messages":` + msgs + `,"options":{"temperature":-1}}`, 400, "temperature"},
		{"ollama generate top_k negative", "ollama", "/api/generate", `{"model":"stories260K","prompt":"x","options":{"top_k":-5}}`, 400, "top_k"},
		{"stop wrong type", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"stop":3}`, 400, "stop"},
		{"n=0", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"n":0}`, 400, "n"},
		{"logprobs not a bool", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"logprobs":"yes"}`, 400, "logprobs"},
		{"top_logprobs without logprobs", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"top_logprobs":2}`, 400, "top_logprobs"},
		{"top_logprobs above 20", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs"},
		{"completions logprobs above 20", "openai", "/v1/completions", `{"prompt":"x","logprobs":21}`, 400, "logprobs"},
		{"logit_bias bad id", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"logit_bias":{"99999":1}}`, 400, "logit_bias"},
		{"stream_options wrong type", "openai", "/v1/chat/completions", `{"messages":` + msgs + `,"stream_options":{"include_usage":"yes"}}`, 400, "stream_options.include_usage"},
		{"unknown model", "openai", "/v1/chat/completions", `{"model":"gpt-9","messages":` + msgs + `}`, 404, "model"},
		{"prompt too long", "openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages"},
		{"prompt missing", "openai", "/v1/completions", `{}`, 400, "prompt"},
		{"prompt wrong type", "openai", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt"},
		{"two prompts", "openai", "/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt"},
		{"token out of vocab", "openai", "/v1/completions", `{"prompt":[1,5000]}`, 400, "prompt"},
		{"completion too long", "openai", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "prompt"},
		{"body too large", "openai", "/v1/completions", huge, 413, ""},
		{"unknown path", "openai", "/v1/nothing", `{}`, 404, ""},
		{"wrong method", "openai", "/v1/models", ``, 405, ""}, // POST
		{"anthropic invalid JSON", "anthropic", "/v1/messages", `{`, 400, ""},
		{"anthropic max_tokens missing", "anthropic", "/v1/messages", `{"model":"stories260K","messages":` + msgs + `}`, 400, "max_tokens"},
		{"anthropic model missing", "anthropic", "/v1/messages", `{"max_tokens":5,"messages":` + msgs + `}`, 400, "model"},
		{"anthropic messages missing", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5}`, 400, "messages"},
		{"anthropic system role", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, 400, "role"},
		{"anthropic unknown model", "anthropic", "/v1/messages", `{"model":"claude-9","max_tokens":5,"messages":` + msgs + `}`, 404, "claude-9"},
		{"anthropic tool_use block", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, 400, "tool_result"},
		{"anthropic too long", "anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":5,"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "context"},
		{"anthropic body too large", "anthropic", "/v1/messages", huge, 413, ""},
		{"count_tokens bad", "anthropic", "/v1/messages/count_tokens", `{"model":"stories260K","messages":7}`, 400, "messages"},
		{"ollama invalid JSON", "ollama", "/api/chat", `nope`, 400, ""},
		{"ollama model missing", "ollama", "/api/chat", `{"messages":` + msgs + `}`, 400, "model"},
		{"ollama unknown model", "ollama", "/api/chat", `{"model":"llama9","messages":` + msgs + `}`, 404, "llama9"},
		{"ollama options wrong type", "ollama", "/api/generate", `{"model":"stories260K","prompt":"x","options":{"temperature":"x"}}`, 400, "temperature"},
		{"ollama format", "ollama", "/api/generate", `{"model":"stories260K","prompt":"x","format":"yaml"}`, 400, "format"},
		{"ollama too long", "ollama", "/api/generate", `{"model":"stories260K","prompt":"` + long + `","raw":true}`, 400, "context"},
		{"ollama unknown path", "ollama", "/api/pull", `{}`, 404, ""},
		{"ollama body too large", "ollama", "/api/generate", huge, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if c.name == "wrong method" {
				method = "POST"
			}
			r := ts.do(t, method, c.path, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			checkShape(t, c.api, r)
			if c.param == "" {
				return
			}
			m := r.json(t)
			if c.api == "openai" {
				if p, _ := path(m, "error.param").(string); p != c.param {
					t.Errorf("param %q, want %q: %s", p, c.param, r.body)
				}
			} else if !strings.Contains(string(r.body), c.param) {
				t.Errorf("message does not mention %q: %s", c.param, r.body)
			}
		})
	}
	// The server is still fine.
	if r := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 2}); r.status != 200 {
		t.Errorf("after bad input: %d %s", r.status, r.body)
	}
	if r := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"`+long+`"}]}`); path(r.json(t), "error.code") != "context_length_exceeded" {
		t.Errorf("context error code: %s", r.body)
	}
}

// TestAPIKey: with a key set, requests without it or with a wrong one get
// 401 in their API's shape; Bearer and x-api-key both work; health and the
// model lists stay public.
func TestAPIKey(t *testing.T) {
	ts := start(t, serve.Config{APIKey: "sekrit"}, stages.Config{})
	endpoints := []struct{ api, path, body string }{
		{"openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`},
		{"openai", "/v1/completions", `{"prompt":"hi","max_tokens":1}`},
		{"anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"ollama", "/api/generate", `{"model":"stories260K","prompt":"hi","stream":false,"options":{"num_predict":1}}`},
	}
	for _, e := range endpoints {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"x-api-key", "sekri"}} {
			r := ts.post(t, e.path, e.body, hdr...)
			if r.status != 401 {
				t.Errorf("%s %v: status %d", e.path, hdr, r.status)
			}
			if w := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(w, "Bearer") {
				t.Errorf("%s %v: WWW-Authenticate %q", e.path, hdr, w)
			}
			checkShape(t, e.api, r)
		}
		for _, hdr := range [][]string{{"Authorization", "Bearer sekrit"}, {"x-api-key", "sekrit"}} {
			if r := ts.post(t, e.path, e.body, hdr...); r.status != 200 {
				t.Errorf("%s %v: status %d %s", e.path, hdr, r.status, r.body)
			}
		}
	}
	for _, p := range []string{"/health", "/v1/models", "/api/tags", "/v1/models/stories260K.gguf"} {
		if r := ts.do(t, "GET", p, nil); r.status != 200 {
			t.Errorf("%s without key: %d", p, r.status)
		}
	}
	if r := ts.do(t, "GET", "/metrics", nil); r.status != 401 {
		t.Errorf("/metrics without key: %d", r.status)
	}
}

// TestAPIKeyEveryMethod: without the key, every method on every protected
// route is a 401 (HEAD included, which used to answer 204); with it, HEAD
// answers as GET does without a body, OPTIONS lists the methods, and any
// other method is a 405 naming them. Public routes answer HEAD as GET
// without the key.
func TestAPIKeyEveryMethod(t *testing.T) {
	ts := start(t, serve.Config{APIKey: "sekrit"}, stages.Config{})
	key := []string{"Authorization", "Bearer sekrit"}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	routes := serve.Routes()
	routes["/v1/models/stories260K.gguf"] = serve.Route{Method: "GET", Public: true}
	protected := 0
	for p, r := range routes {
		allow := r.Method
		if r.Method == "GET" {
			allow = "GET, HEAD"
		}
		if !r.Public {
			protected++
			for _, m := range methods {
				res := ts.do(t, m, p, nil)
				if res.status != 401 || !strings.HasPrefix(res.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s without the key: %d %q", m, p, res.status, res.header.Get("WWW-Authenticate"))
				}
			}
		}
		var hdr []string
		if !r.Public {
			hdr = key
		}
		for _, m := range methods {
			switch {
			case m == r.Method:
				continue // the route's own method: its handler's tests
			case m == "HEAD" && r.Method == "GET":
				q := p
				if p == "/debug/trace" {
					q += "?seconds=0.05" // not its default 5 s window
				}
				get, head := ts.do(t, "GET", q, nil, hdr...), ts.do(t, "HEAD", q, nil, hdr...)
				if head.status != get.status || len(head.body) != 0 || head.header.Get("Content-Type") != get.header.Get("Content-Type") {
					t.Errorf("HEAD %s: %d %q (%d bytes), GET: %d %q", p, head.status, head.header.Get("Content-Type"), len(head.body), get.status, get.header.Get("Content-Type"))
				}
			case m == "OPTIONS":
				if res := ts.do(t, m, p, nil, hdr...); res.status != 204 || res.header.Get("Allow") != allow {
					t.Errorf("OPTIONS %s: %d Allow %q", p, res.status, res.header.Get("Allow"))
				}
			default:
				if res := ts.do(t, m, p, nil, hdr...); res.status != 405 || res.header.Get("Allow") != allow {
					t.Errorf("%s %s: %d Allow %q, want 405 %q", m, p, res.status, res.header.Get("Allow"), allow)
				}
			}
		}
	}
	if protected < 10 {
		t.Errorf("only %d protected routes", protected)
	}
}

// TestBodyTooLargeWhileSending sends a body over the limit in pieces, as a
// slow client would, and checks that it reads the 413 instead of a reset
// connection.
func TestBodyTooLargeWhileSending(t *testing.T) {
	ts := start(t, serve.Config{MaxBodyBytes: 64 << 10}, stages.Config{NCtx: 64})
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 1 << 20
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	piece := bytes.Repeat([]byte("a"), size/8)
	for range 8 {
		if _, err := c.Write(piece); err != nil {
			t.Fatalf("writing the body: %v", err) // reset by the server
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
}

// TestRetrieveModel: GET /v1/models/{id} answers the model's entry under
// its name or an alias, and 404 in OpenAI's shape for any other id.
func TestRetrieveModel(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"gpt-4o-mini", "tiny"}}, stages.Config{})
	for _, id := range []string{"gpt-4o-mini", "tiny"} {
		r := ts.do(t, "GET", "/v1/models/"+id, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", id, r.status, r.body)
		}
		m := r.json(t)
		if m["id"] != id || m["object"] != "model" || m["owned_by"] != "flowinfer" {
			t.Errorf("%s: %s", id, r.body)
		}
	}
	for _, p := range []string{"/v1/models/gpt-9", "/v1/models/", "/models/nope"} {
		r := ts.do(t, "GET", p, nil)
		if r.status != 404 {
			t.Errorf("%s: %d", p, r.status)
		}
		checkShape(t, "openai", r)
	}
}

// TestSlowClientCut: a client that sends its request a little at a time is
// cut after ReadTimeout (408), whatever it sends next.
func TestSlowClientCut(t *testing.T) {
	ts := start(t, serve.Config{ReadTimeout: 500 * time.Millisecond}, stages.Config{NCtx: 64})
	for _, partial := range []string{"POST /v1/compl", "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		fmt.Fprint(c, partial)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		// one more byte a while later: the server must not wait for it
		time.Sleep(200 * time.Millisecond)
		c.Write([]byte("x"))
		resp, _ := io.ReadAll(c)
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%q: connection held %v", partial, d)
		}
		if len(resp) > 0 && !bytes.Contains(resp, []byte(" 408 ")) && !bytes.Contains(resp, []byte(" 400 ")) {
			t.Errorf("%q: answered %q", partial, resp[:min(len(resp), 80)])
		}
		c.Close()
	}
}

// TestOversizedHeaders: a request head over MaxHeaderBytes gets 431 with a
// message that quotes nothing from the request (no API key echoed).
func TestOversizedHeaders(t *testing.T) {
	ts := start(t, serve.Config{MaxHeaderBytes: 8 << 10, APIKey: "sekrit-key"}, stages.Config{NCtx: 64})
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit-key\r\nX-Pad: %s\r\nContent-Length: 2\r\n\r\n{}", strings.Repeat("p", 12<<10))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, _ := io.ReadAll(c)
	if !bytes.HasPrefix(resp, []byte("HTTP/1.1 431")) {
		t.Fatalf("answered %q", resp[:min(len(resp), 120)])
	}
	if bytes.Contains(resp, []byte("sekrit")) || bytes.Contains(resp, []byte("ppppp")) {
		t.Errorf("the answer quotes the request: %q", resp)
	}
	// a realistic head (8 KiB of headers) is fine
	r := ts.do(t, "GET", "/health", nil, "X-Pad", strings.Repeat("p", 6<<10))
	if r.status != 200 {
		t.Errorf("6 KiB header: status %d", r.status)
	}
}

// TestMaxConns: connections beyond MaxConns are answered 503 and closed.
func TestMaxConns(t *testing.T) {
	ts := start(t, serve.Config{MaxConns: 2}, stages.Config{NCtx: 64})
	addr := strings.TrimPrefix(ts.url, "http://")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // both accepted and being served
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, _ := io.ReadAll(c)
	if !bytes.Contains(resp, []byte(" 503 ")) {
		t.Errorf("third connection answered %q", resp[:min(len(resp), 120)])
	}
	for _, h := range held {
		h.Close()
	}
}
