package serve_test

import (
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestCORS: off by default (no headers); with allowed origins a preflight
// is answered 204 without the API key, responses to an allowed origin
// carry Access-Control-Allow-Origin (errors too, so a page can read them),
// and other origins get nothing.
func TestCORS(t *testing.T) {
	body := `{"prompt":"Once","max_tokens":2}`
	preflight := []string{"Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization, content-type"}

	off := start(t, serve.Config{}, stages.Config{NCtx: 64})
	if r := off.do(t, "OPTIONS", "/v1/completions", nil, preflight...); r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS off: preflight answered with %q", r.header.Get("Access-Control-Allow-Origin"))
	}
	if r := off.post(t, "/v1/completions", body, "Origin", "http://localhost:3000"); r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS off: %d, Allow-Origin %q", r.status, r.header.Get("Access-Control-Allow-Origin"))
	}

	on := start(t, serve.Config{CORSOrigins: []string{"http://localhost:3000"}, APIKey: "k"}, stages.Config{NCtx: 64})
	r := on.do(t, "OPTIONS", "/v1/completions", nil, preflight...)
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		r.header.Get("Access-Control-Allow-Methods") != "POST, OPTIONS" ||
		r.header.Get("Access-Control-Allow-Headers") != "authorization, content-type" || r.header.Get("Access-Control-Max-Age") == "" {
		t.Errorf("preflight: %d %v", r.status, r.header)
	}
	r = on.post(t, "/v1/completions", body, "Origin", "http://localhost:3000", "Authorization", "Bearer k")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" || r.header.Values("Vary") == nil {
		t.Errorf("allowed origin: %d %v", r.status, r.header)
	}
	r = on.post(t, "/v1/completions", `{"prompt":"Once","max_tokens":2,"stream":true}`, "Origin", "http://localhost:3000", "Authorization", "Bearer k")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("stream to an allowed origin: %d %v", r.status, r.header)
	}
	r = on.post(t, "/v1/completions", body, "Origin", "http://localhost:3000")
	if r.status != 401 || r.header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("401 to an allowed origin: %d %v", r.status, r.header)
	}
	r = on.do(t, "OPTIONS", "/v1/completions", nil, "Origin", "http://evil.example", "Access-Control-Request-Method", "POST")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("other origin: %v", r.header)
	}

	anyOrigin := start(t, serve.Config{CORSOrigins: []string{"*"}}, stages.Config{NCtx: 64})
	if r := anyOrigin.post(t, "/v1/completions", body, "Origin", "http://x.example"); r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("*: %v", r.header)
	}
}
