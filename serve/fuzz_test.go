// Fuzzing of the request decoders of every generation API, driven through
// the real handlers of a server with stories260K loaded: whatever the body,
// the answer is never a 5xx, an error body has the API's shape (OpenAI
// {"error":{"message","type"}}, Anthropic {"type":"error","error":{"type",
// "message"}}, Ollama {"error":"..."}), and the request allocates at most a
// fixed amount plus a small factor of its body size.

package serve_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// Allocation bound of one fuzzed request: generating up to the test
// context (256 tokens) on stories260K, plus allocBodyFactor per body byte.
const (
	allocBase       = 64 << 20
	allocBodyFactor = 32
)

type errShape func(m map[string]any) bool

func openAIShape(m map[string]any) bool {
	e, ok := m["error"].(map[string]any)
	return ok && isString(e["message"]) && isString(e["type"])
}

func anthropicShape(m map[string]any) bool {
	e, ok := m["error"].(map[string]any)
	return ok && m["type"] == "error" && isString(e["message"]) && isString(e["type"])
}

func ollamaShape(m map[string]any) bool { return isString(m["error"]) }

func isString(v any) bool { _, ok := v.(string); return ok }

// fuzzAPI posts every fuzzed body to path on one server.
func fuzzAPI(f *testing.F, path string, shape errShape, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{"", "{}", "[]", "null", `{"model":1}`, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"} {
		f.Add([]byte(s))
	}
	ts := start(f, serve.Config{MaxBodyBytes: 1 << 20}, stages.Config{})
	client := &http.Client{Timeout: 5 * time.Second}
	f.Fuzz(func(t *testing.T, body []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		req, err := http.NewRequest("POST", ts.url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", path, err)
		}
		runtime.ReadMemStats(&after)
		if resp.StatusCode >= 500 {
			t.Fatalf("%s: status %d for %q: %s", path, resp.StatusCode, body, data)
		}
		if resp.StatusCode >= 400 {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil || !shape(m) {
				t.Fatalf("%s: status %d, error body not in the API's shape: %s", path, resp.StatusCode, data)
			}
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > allocBase+allocBodyFactor*uint64(len(body)) {
			t.Fatalf("%s: %d-byte body allocated %d bytes", path, len(body), got)
		}
	})
}

func FuzzOpenAIChat(f *testing.F) {
	fuzzAPI(f, "/v1/chat/completions", openAIShape,
		`{"model":"stories260K","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Once upon a time"}],"max_tokens":4,"temperature":0}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stop":["x","y"],"seed":1,"top_p":0.5,"logit_bias":{"5":-100},"n":1}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"logprobs":true,"top_logprobs":2,"response_format":{"type":"text"}}`,
		`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"number"}}}}}],"tool_choice":"auto","parallel_tool_calls":false,"max_tokens":2,"stream":true}`)
}

func FuzzOpenAICompletions(f *testing.F) {
	fuzzAPI(f, "/v1/completions", openAIShape,
		`{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"temperature":0}`,
		`{"prompt":[1,2,3],"max_tokens":2,"stream":true}`,
		`{"prompt":["a"],"max_tokens":2,"stop":"x","presence_penalty":0.5,"frequency_penalty":0.5}`)
}

func FuzzAnthropicMessages(f *testing.F) {
	fuzzAPI(f, "/v1/messages", anthropicShape,
		`{"model":"stories260K","max_tokens":4,"messages":[{"role":"user","content":"Once upon a time"}]}`,
		`{"model":"stories260K","max_tokens":2,"system":"Be brief.","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop_sequences":["x"],"temperature":0,"top_k":5}`,
		`{"model":"stories260K","max_tokens":2,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"metadata":{"user_id":"u"}}`,
		`{"model":"stories260K","max_tokens":2,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}],"is_error":true},{"type":"text","text":"go on"}]}]}`)
}

func FuzzOllamaChat(f *testing.F) {
	fuzzAPI(f, "/api/chat", ollamaShape,
		`{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"stream":false,"options":{"num_predict":4,"temperature":0}}`,
		`{"model":"stories260K","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"options":{"num_predict":2,"seed":1,"top_k":3,"stop":["x"]},"keep_alive":"5m"}`,
		`{"model":"stories260K","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","tool_name":"f","content":"ok"}],"options":{"num_predict":2}}`)
}

func FuzzOllamaGenerate(f *testing.F) {
	fuzzAPI(f, "/api/generate", ollamaShape,
		`{"model":"stories260K","prompt":"Once upon a time","stream":false,"options":{"num_predict":4,"temperature":0}}`,
		`{"model":"stories260K","prompt":"hi","raw":true,"system":"s","options":{"num_predict":2,"repeat_penalty":1.1}}`)
}
