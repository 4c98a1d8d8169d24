// Fuzzing of the request decoders of every generation API, driven through
// the real handlers of a server with stories260K loaded: whatever the body,
// the answer is never a 5xx, an error body has the API's shape (OpenAI
// {"error":{"message","type"}}, Anthropic {"type":"error","error":{"type",
// "message"}}, Ollama {"error":"..."}), a 200 is one JSON object or a
// complete stream in the API's framing (every event JSON, no error event,
// ending as the API ends a stream), and the request allocates at most a
// fixed amount plus a small factor of its body size. Seeds: the requests
// of the SDK tests in sdktest/ (read at test time; the Ollama targets get
// the OpenAI ones in Ollama's form), a few written here, and
// testdata/fuzz/FuzzXxx.

package serve_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
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

// streamEnd checks a 200 stream's framing: every event or line is JSON,
// none is an error, and the last ends the stream.
type streamEnd func(data []byte) error

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

// sseEvents splits an SSE body into its events' (event, data) fields,
// skipping comments (heartbeats).
func sseEvents(data []byte) ([][2]string, error) {
	if !bytes.HasSuffix(data, []byte("\n\n")) {
		return nil, errors.New("does not end with a blank line")
	}
	var evs [][2]string
	for _, block := range strings.Split(strings.TrimSuffix(string(data), "\n\n"), "\n\n") {
		var ev [2]string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event: "):
				ev[0] = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev[1] = strings.TrimPrefix(line, "data: ")
			default:
				return nil, fmt.Errorf("line %q", line)
			}
		}
		if ev[1] != "" {
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

// jsonObject decodes an event's data as a JSON object.
func jsonObject(s string) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		return nil, fmt.Errorf("data %q is not a JSON object", s)
	}
	return m, nil
}

// openAIStream: data lines of JSON chunks, none an error, then [DONE].
func openAIStream(data []byte) error {
	evs, err := sseEvents(data)
	if err != nil {
		return err
	}
	if len(evs) == 0 || evs[len(evs)-1][1] != "[DONE]" {
		return errors.New("does not end with data: [DONE]")
	}
	for _, ev := range evs[:len(evs)-1] {
		m, err := jsonObject(ev[1])
		if err != nil {
			return err
		}
		if _, isErr := m["error"]; isErr {
			return fmt.Errorf("error event %s", ev[1])
		}
	}
	return nil
}

// anthropicStream: named events whose data is a JSON object of that type,
// none an error, the last message_stop.
func anthropicStream(data []byte) error {
	evs, err := sseEvents(data)
	if err != nil {
		return err
	}
	if len(evs) == 0 || evs[len(evs)-1][0] != "message_stop" {
		return errors.New("does not end with message_stop")
	}
	for _, ev := range evs {
		m, err := jsonObject(ev[1])
		if err != nil {
			return err
		}
		if ev[0] == "error" || m["type"] != ev[0] {
			return fmt.Errorf("event %q with data %s", ev[0], ev[1])
		}
	}
	return nil
}

// responsesStream: named events whose data is a JSON object of that type,
// none an error, the last response.completed or response.incomplete.
func responsesStream(data []byte) error {
	evs, err := sseEvents(data)
	if err != nil {
		return err
	}
	if n := len(evs); n == 0 || evs[n-1][0] != "response.completed" && evs[n-1][0] != "response.incomplete" {
		return errors.New("does not end with response.completed or response.incomplete")
	}
	for _, ev := range evs {
		m, err := jsonObject(ev[1])
		if err != nil {
			return err
		}
		if ev[0] == "error" || m["type"] != ev[0] {
			return fmt.Errorf("event %q with data %s", ev[0], ev[1])
		}
	}
	return nil
}

// ollamaStream: JSON lines, none an error, the last (only) one done.
func ollamaStream(data []byte) error {
	if !bytes.HasSuffix(data, []byte("\n")) {
		return errors.New("does not end with a newline")
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, line := range lines {
		m, err := jsonObject(line)
		if err != nil {
			return err
		}
		if _, isErr := m["error"]; isErr || (m["done"] == true) != (i == len(lines)-1) {
			return fmt.Errorf("line %d of %d: %s", i+1, len(lines), line)
		}
	}
	return nil
}

// fuzzAPI posts every fuzzed body to path on one server. Seeds: the SDK
// tests' requests to path, and seeds.
func fuzzAPI(f *testing.F, path string, shape errShape, stream streamEnd, seeds ...string) {
	for _, s := range append(sdkRequests(f)[path], seeds...) {
		f.Add([]byte(s))
	}
	for _, s := range []string{"", "{}", "[]", "null", `{"model":1}`, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"} {
		f.Add([]byte(s))
	}
	// The SDK tests' model name is an alias.
	ts := start(f, serve.Config{MaxBodyBytes: 1 << 20, Aliases: []string{"stories"}}, stages.Config{})
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
		if resp.StatusCode == 200 {
			ct := resp.Header.Get("Content-Type")
			if strings.HasPrefix(ct, "application/json") {
				if _, err := jsonObject(string(data)); err != nil {
					t.Fatalf("%s: 200 for %q: %v", path, body, err)
				}
			} else if err := stream(data); err != nil {
				t.Fatalf("%s: 200 (%s) for %q: %v:\n%s", path, ct, body, err, data)
			}
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > allocBase+allocBodyFactor*uint64(len(body)) {
			t.Fatalf("%s: %d-byte body allocated %d bytes", path, len(body), got)
		}
	})
}

// ollamaSeeds are the SDK tests' OpenAI requests of path in Ollama's form
// (stream false unless asked, max_tokens and stop as options), with
// field as the messages or the prompt; those without one are left out.
func ollamaSeeds(f *testing.F, path, field string) []string {
	var out []string
	for _, r := range sdkRequests(f)[path] {
		var m map[string]any
		if err := json.Unmarshal([]byte(r), &m); err != nil {
			f.Fatal(err)
		}
		if _, ok := m[field]; !ok {
			continue
		}
		o := map[string]any{"model": m["model"], field: m[field], "stream": m["stream"] == true}
		opts := map[string]any{}
		if v, ok := m["max_tokens"]; ok {
			opts["num_predict"] = v
		}
		if v, ok := m["stop"]; ok {
			opts["stop"] = v
		}
		if len(opts) > 0 {
			o["options"] = opts
		}
		b, err := json.Marshal(o)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, string(b))
	}
	if len(out) == 0 {
		f.Fatalf("no %s request in sdktest", path)
	}
	return out
}

func FuzzOpenAIChat(f *testing.F) {
	fuzzAPI(f, "/v1/chat/completions", openAIShape, openAIStream,
		`{"model":"stories260K","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Once upon a time"}],"max_tokens":4,"temperature":0}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stop":["x","y"],"seed":1,"top_p":0.5,"logit_bias":{"5":-100},"n":1}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"logprobs":true,"top_logprobs":2,"response_format":{"type":"text"}}`,
		`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"number"}}}}}],"tool_choice":"auto","parallel_tool_calls":false,"max_tokens":2,"stream":true}`)
}

func FuzzOpenAICompletions(f *testing.F) {
	fuzzAPI(f, "/v1/completions", openAIShape, openAIStream,
		`{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"temperature":0}`,
		`{"prompt":[1,2,3],"max_tokens":2,"stream":true}`,
		`{"prompt":["a"],"max_tokens":2,"stop":"x","presence_penalty":0.5,"frequency_penalty":0.5}`)
}

func FuzzOpenAIResponses(f *testing.F) {
	fuzzAPI(f, "/v1/responses", openAIShape, responsesStream,
		`{"model":"stories260K","instructions":"Be brief.","input":"Once upon a time","max_output_tokens":4,"temperature":0}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":2,"stream":true,"store":false,"metadata":{"a":"b"}}`,
		`{"input":"hi","max_output_tokens":3,"top_p":0.5,"seed":1,"text":{"format":{"type":"json_object"}}}`,
		`{"input":[{"role":"user","content":"w?"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"number"}}}}],"tool_choice":"auto","parallel_tool_calls":false,"max_output_tokens":2,"stream":true}`)
}

func FuzzAnthropicMessages(f *testing.F) {
	fuzzAPI(f, "/v1/messages", anthropicShape, anthropicStream,
		`{"model":"stories260K","max_tokens":4,"messages":[{"role":"user","content":"Once upon a time"}]}`,
		`{"model":"stories260K","max_tokens":2,"system":"Be brief.","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop_sequences":["x"],"temperature":0,"top_k":5}`,
		`{"model":"stories260K","max_tokens":2,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"metadata":{"user_id":"u"}}`,
		`{"model":"stories260K","max_tokens":2,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}],"is_error":true},{"type":"text","text":"go on"}]}]}`)
}

func FuzzOllamaChat(f *testing.F) {
	fuzzAPI(f, "/api/chat", ollamaShape, ollamaStream, append(ollamaSeeds(f, "/v1/chat/completions", "messages"),
		`{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"stream":false,"options":{"num_predict":4,"temperature":0}}`,
		`{"model":"stories260K","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"options":{"num_predict":2,"seed":1,"top_k":3,"stop":["x"]},"keep_alive":"5m"}`,
		`{"model":"stories260K","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","tool_name":"f","content":"ok"}],"options":{"num_predict":2}}`)...)
}

func FuzzOllamaGenerate(f *testing.F) {
	fuzzAPI(f, "/api/generate", ollamaShape, ollamaStream, append(ollamaSeeds(f, "/v1/completions", "prompt"),
		`{"model":"stories260K","prompt":"Once upon a time","stream":false,"options":{"num_predict":4,"temperature":0}}`,
		`{"model":"stories260K","prompt":"hi","raw":true,"system":"s","options":{"num_predict":2,"repeat_penalty":1.1}}`)...)
}
