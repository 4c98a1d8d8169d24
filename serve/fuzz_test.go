// Fuzzing of the request decoders of every generation API, driven through
// the real handlers of a server with stories260K loaded: whatever the body,
// the answer is never a 5xx, an error body has the API's shape (OpenAI
// {"error":{"message","type"}}, Anthropic {"type":"error","error":{"type",
// "message"}}, Ollama {"error":"..."}), a 200 is one JSON object or a
// complete stream in the API's framing (every event JSON, no error event,
// ending as the API ends a stream), and the request allocates at most a
// fixed amount plus a small factor of its body size (counted with
// runtime/metrics, which does not stop the world; the count plus the most
// it can leave uncounted, allocSlack, must stay within the bound). The
// server is the real one (every handler, the SIMD backend on one thread);
// a body reaches its handler as fasthttp hands it one after reading a
// request (post), without a connection. One target, FuzzAPIs, posts each
// body to all six. Seeds: the requests of the SDK tests in sdktest/ (read
// at test time; the Ollama APIs get the OpenAI ones in Ollama's form), a
// few written here per API, and testdata/fuzz/FuzzAPIs.

package serve_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

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

// api is one generation endpoint under fuzzing: its path, the shape of
// its error bodies, the framing of its streams and its seeds besides the
// SDK tests' requests to its path.
type api struct {
	path   string
	shape  errShape
	stream streamEnd
	seeds  func(f *testing.F) []string
}

var (
	openAIChatAPI        = api{"/v1/chat/completions", openAIShape, openAIStream, openAIChatSeeds}
	openAICompletionsAPI = api{"/v1/completions", openAIShape, openAIStream, openAICompletionsSeeds}
	openAIResponsesAPI   = api{"/v1/responses", openAIShape, responsesStream, openAIResponsesSeeds}
	anthropicMessagesAPI = api{"/v1/messages", anthropicShape, anthropicStream, anthropicMessagesSeeds}
	ollamaChatAPI        = api{"/api/chat", ollamaShape, ollamaStream, ollamaChatSeeds}
	ollamaGenerateAPI    = api{"/api/generate", ollamaShape, ollamaStream, ollamaGenerateSeeds}
)

// commonSeeds are bodies FuzzAPIs also starts from.
var commonSeeds = []string{"", "{}", "[]", "null", `{"model":1}`, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"}

// apis are the endpoints FuzzAPIs posts every body to.
var apis = []api{openAIChatAPI, openAICompletionsAPI, openAIResponsesAPI, anthropicMessagesAPI, ollamaChatAPI, ollamaGenerateAPI}

// addSeeds adds p's seeds to f's corpus.
func addSeeds(f *testing.F, p api) {
	for _, s := range append(sdkRequests(f)[p.path], p.seeds(f)...) {
		f.Add([]byte(s))
	}
}

// FuzzAPIs posts every fuzzed body to each of the six generation APIs in
// turn, from the union of their seeds: one target for the six request
// decoders, because a fuzzing execution costs a fixed time for Go's
// coverage bookkeeping, proportional to the instrumented code linked
// (about 145,000 counters here, most of an execution's time), which one
// target shares among six requests where six targets would pay it six
// times for the same requests.
func FuzzAPIs(f *testing.F) {
	for _, p := range apis {
		addSeeds(f, p)
	}
	for _, s := range commonSeeds {
		f.Add([]byte(s))
	}
	a := newAPIFuzz(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range apis {
			a.check(t, p, body)
		}
	})
}

// apiFuzz posts bodies to the handler of a server with stories260K loaded
// (without a listener: post).
type apiFuzz struct {
	ts     *testServer
	handle fasthttp.RequestHandler
	allocs []metrics.Sample
}

func newAPIFuzz(t testing.TB) *apiFuzz {
	// The SDK tests' model name is an alias. A request that sets no limit
	// generates 2 tokens: enough for every part of a stream's framing.
	ts := startInmem(t, serve.Config{MaxBodyBytes: 1 << 20, Aliases: []string{"stories"}, MaxTokens: 2}, stages.Config{})
	return &apiFuzz{ts: ts, handle: ts.srv.Handler(), allocs: []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}}
}

// allocated returns the bytes the process allocated so far, as counted by
// runtime/metrics, which (unlike runtime.ReadMemStats) does not stop the
// world. The runtime counts a small object when the span it came from
// leaves a P's cache, so a difference of two reads falls short of the bytes
// allocated in between by at most what the spans cached at the second read
// hold: allocSlack.
func (a *apiFuzz) allocated() uint64 {
	metrics.Read(a.allocs)
	return a.allocs[0].Value.Uint64()
}

// allocSlack bounds the bytes allocated but not yet counted by
// runtime/metrics: each P caches at most one span per span class, that is
// per size class (68 in Go 1.26) with and without pointers, and one of each
// size class's spans takes 168 pages of 8 KiB in all
// (internal/runtime/gc.SizeClassToNPages): 2.625 MiB per P. Objects
// larger than 32 KiB are counted when allocated.
func allocSlack() uint64 { return uint64(runtime.GOMAXPROCS(0)) * 2 * 168 * 8192 }

// TestAllocSlack: between two runtime.ReadMemStats (exact: they flush the
// span caches), objects of every size class are allocated and counted
// with runtime/metrics; the exact figure exceeds the count by at most
// allocSlack.
func TestAllocSlack(t *testing.T) {
	a := &apiFuzz{allocs: []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}}
	var keep [][]byte
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := a.allocated()
	for size := 1; size <= 64<<10; size += 1 + size/16 {
		keep = append(keep, make([]byte, size), []byte(strings.Repeat("x", size)))
	}
	c1 := a.allocated()
	runtime.ReadMemStats(&m1)
	exact, counted := m1.TotalAlloc-m0.TotalAlloc, c1-c0
	if exact > counted+allocSlack() || counted > exact {
		t.Fatalf("allocated %d bytes (ReadMemStats), counted %d (runtime/metrics), slack %d", exact, counted, allocSlack())
	}
	t.Logf("%d objects: allocated %d bytes, counted %d, slack %d", len(keep), exact, counted, allocSlack())
}

// post hands body to the server's handler as a POST to path, as fasthttp
// would after reading the request off a connection (without the
// connection: a fuzzing execution pays for every instrumented package's
// coverage counters, and net/http's client and the in-memory listener
// doubled the time of one), and returns the status, the content type and
// the whole body, a stream's included.
func (a *apiFuzz) post(path string, body []byte) (int, string, []byte) {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI(path)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	a.handle(&ctx)
	data := ctx.Response.Body() // reads a stream to its end
	return ctx.Response.StatusCode(), string(ctx.Response.Header.ContentType()), data
}

// check posts body to p and checks the answer.
func (a *apiFuzz) check(t testing.TB, p api, body []byte) {
	path := p.path
	before := a.allocated()
	status, ct, data := a.post(path, body)
	after := a.allocated()
	if status >= 500 {
		t.Fatalf("%s: status %d for %q: %s", path, status, body, data)
	}
	if status >= 400 {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil || !p.shape(m) {
			t.Fatalf("%s: status %d, error body not in the API's shape: %s", path, status, data)
		}
	}
	if status == 200 {
		if strings.HasPrefix(ct, "application/json") {
			if _, err := jsonObject(string(data)); err != nil {
				t.Fatalf("%s: 200 for %q: %v", path, body, err)
			}
		} else if err := p.stream(data); err != nil {
			t.Fatalf("%s: 200 (%s) for %q: %v:\n%s", path, ct, body, err, data)
		}
	}
	// The count can fall short by allocSlack: checked against the bound
	// less that, so the bound holds for what was allocated.
	if got := after - before; got+allocSlack() > allocBase+allocBodyFactor*uint64(len(body)) {
		t.Fatalf("%s: %d-byte body allocated %d bytes (+ %d not yet counted at most)", path, len(body), got, allocSlack())
	}
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

func openAIChatSeeds(f *testing.F) []string {
	return []string{
		`{"model":"stories260K","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Once upon a time"}],"max_tokens":4,"temperature":0}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stop":["x","y"],"seed":1,"top_p":0.5,"logit_bias":{"5":-100},"n":1}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"logprobs":true,"top_logprobs":2,"response_format":{"type":"text"}}`,
		`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"number"}}}}}],"tool_choice":"auto","parallel_tool_calls":false,"max_tokens":2,"stream":true}`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a","reasoning_content":"r"},{"role":"user","content":"b"}],"max_tokens":2,"reasoning_format":"none","chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"none","stream":true}`,
	}
}

func openAICompletionsSeeds(f *testing.F) []string {
	return []string{
		`{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"temperature":0}`,
		`{"prompt":[1,2,3],"max_tokens":2,"stream":true}`,
		`{"prompt":["a"],"max_tokens":2,"stop":"x","presence_penalty":0.5,"frequency_penalty":0.5}`,
	}
}

func openAIResponsesSeeds(f *testing.F) []string {
	return []string{
		`{"model":"stories260K","instructions":"Be brief.","input":"Once upon a time","max_output_tokens":4,"temperature":0}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":2,"stream":true,"store":false,"metadata":{"a":"b"}}`,
		`{"input":"hi","max_output_tokens":3,"top_p":0.5,"seed":1,"text":{"format":{"type":"json_object"}}}`,
		`{"input":[{"role":"user","content":"a"},{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r"}]},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"reasoning":{"effort":"none"},"max_output_tokens":2,"stream":true}`,
		`{"input":[{"role":"user","content":"w?"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"number"}}}}],"tool_choice":"auto","parallel_tool_calls":false,"max_output_tokens":2,"stream":true}`,
	}
}

func anthropicMessagesSeeds(f *testing.F) []string {
	return []string{
		`{"model":"stories260K","max_tokens":4,"messages":[{"role":"user","content":"Once upon a time"}]}`,
		`{"model":"stories260K","max_tokens":2,"system":"Be brief.","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop_sequences":["x"],"temperature":0,"top_k":5}`,
		`{"model":"stories260K","max_tokens":2,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"metadata":{"user_id":"u"}}`,
		`{"model":"stories260K","max_tokens":2,"thinking":{"type":"disabled"},"stream":true,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"b"}]},{"role":"user","content":"c"}]}`,
		`{"model":"stories260K","max_tokens":2,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}],"is_error":true},{"type":"text","text":"go on"}]}]}`,
	}
}

func ollamaChatSeeds(f *testing.F) []string {
	return append(ollamaSeeds(f, "/v1/chat/completions", "messages"),
		`{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"stream":false,"options":{"num_predict":4,"temperature":0}}`,
		`{"model":"stories260K","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"options":{"num_predict":2,"seed":1,"top_k":3,"stop":["x"]},"keep_alive":"5m"}`,
		`{"model":"stories260K","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a","thinking":"t"},{"role":"user","content":"b"}],"think":"low","options":{"num_predict":2}}`,
		`{"model":"stories260K","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","tool_name":"f","content":"ok"}],"options":{"num_predict":2}}`)
}

func ollamaGenerateSeeds(f *testing.F) []string {
	return append(ollamaSeeds(f, "/v1/completions", "prompt"),
		`{"model":"stories260K","prompt":"Once upon a time","stream":false,"options":{"num_predict":4,"temperature":0}}`,
		`{"model":"stories260K","prompt":"hi","raw":true,"system":"s","options":{"num_predict":2,"repeat_penalty":1.1}}`,
		`{"model":"stories260K","prompt":"hi","think":false,"options":{"num_predict":2}}`)
}
