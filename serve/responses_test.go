package serve_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// respEvents parses a Responses stream: every event's SSE name is its
// type, sequence numbers count up from 0; it returns the events' data.
func respEvents(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, ev := range parseSSE(t, body) {
		m := decodeJSON(t, ev.data)
		if ev.event != m["type"] {
			t.Errorf("event %d: SSE name %q, type %v", i, ev.event, m["type"])
		}
		if n, ok := m["sequence_number"].(float64); !ok || int(n) != i {
			t.Errorf("event %d (%v): sequence_number %v", i, m["type"], m["sequence_number"])
		}
		out = append(out, m)
	}
	return out
}

func eventTypes(evs []map[string]any) string {
	var types []string
	for _, e := range evs {
		types = append(types, strings.TrimPrefix(fmt.Sprint(e["type"]), "response."))
	}
	return strings.Join(types, " ")
}

// respOutput returns a final response's output text (its message items'
// output_text parts) and function_call items.
func respOutput(t *testing.T, o any) (string, []map[string]any) {
	t.Helper()
	var text strings.Builder
	var calls []map[string]any
	for _, it := range asList(path(o, "output")) {
		m := it.(map[string]any)
		switch m["type"] {
		case "message":
			if m["role"] != "assistant" || !strings.HasPrefix(fmt.Sprint(m["id"]), "msg_") {
				t.Errorf("message item: %v", m)
			}
			for _, p := range asList(m["content"]) {
				if path(p, "type") != "output_text" || path(p, "annotations") == nil {
					t.Errorf("content part: %v", p)
				}
				text.WriteString(fmt.Sprint(path(p, "text")))
			}
		case "function_call":
			if !strings.HasPrefix(fmt.Sprint(m["id"]), "fc_") || !strings.HasPrefix(fmt.Sprint(m["call_id"]), "call_") || m["status"] != "completed" {
				t.Errorf("function_call item: %v", m)
			}
			calls = append(calls, m)
		default:
			t.Errorf("output item type %v", m["type"])
		}
	}
	return text.String(), calls
}

// TestResponses: the response object (ids, status, output items, usage,
// echoed settings) and the streamed event sequence, whose deltas add up to
// the final response's text.
func TestResponses(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 512})
	body := `{"model":"stories260K","instructions":"Tell a story.","input":"Once upon a time","max_output_tokens":8,"temperature":0,"metadata":{"k":"v"}}`
	r := ts.post(t, "/v1/responses", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	o := r.json(t)
	for k, want := range map[string]any{"object": "response", "status": "incomplete", "incomplete_details.reason": "max_output_tokens",
		"model": "stories260K", "instructions": "Tell a story.", "metadata.k": "v", "temperature": 0.0, "store": false,
		"tool_choice": "auto", "text.format.type": "text", "max_output_tokens": 8.0, "parallel_tool_calls": true,
		"usage.output_tokens": 8.0, "usage.output_tokens_details.reasoning_tokens": 0.0, "error": nil, "previous_response_id": nil} {
		if got := path(o, k); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", k, got, want)
		}
	}
	if !strings.HasPrefix(fmt.Sprint(o["id"]), "resp_") || num(o["created_at"]) == 0 {
		t.Errorf("id %v created_at %v", o["id"], o["created_at"])
	}
	if in, out, total := num(path(o, "usage.input_tokens")), num(path(o, "usage.output_tokens")), num(path(o, "usage.total_tokens")); in == 0 || total != in+out {
		t.Errorf("usage %v", o["usage"])
	}
	text, calls := respOutput(t, o)
	if text == "" || len(calls) != 0 || path(o, "output.0.status") != "incomplete" {
		t.Errorf("output %v", o["output"])
	}

	// the same request streamed (greedy): the same text
	sr := ts.post(t, "/v1/responses", strings.Replace(body, `"temperature":0`, `"temperature":0,"stream":true`, 1))
	if sr.status != 200 {
		t.Fatalf("stream: %d %s", sr.status, sr.body)
	}
	evs := respEvents(t, sr.body)
	types := eventTypes(evs)
	want := "created in_progress output_item.added content_part.added output_text.delta"
	if !strings.HasPrefix(types, want) || !strings.HasSuffix(types, "output_text.done content_part.done output_item.done incomplete") {
		t.Errorf("events: %s", types)
	}
	var deltas strings.Builder
	for _, e := range evs {
		if e["type"] == "response.output_text.delta" {
			if num(e["output_index"]) != 0 || num(e["content_index"]) != 0 || e["item_id"] != path(evs[2], "item.id") {
				t.Errorf("delta %v", e)
			}
			deltas.WriteString(e["delta"].(string))
		}
	}
	final := evs[len(evs)-1]["response"]
	ftext, _ := respOutput(t, final)
	if deltas.String() != text || ftext != text || path(evs[len(evs)-4], "text") != text {
		t.Errorf("streamed %q, final %q, non-streamed %q", deltas.String(), ftext, text)
	}
	if path(final, "id") != path(evs[0], "response.id") || path(evs[0], "response.status") != "in_progress" || num(path(final, "usage.output_tokens")) != 8 {
		t.Errorf("created %v / final %v", evs[0], final)
	}

	// input items: messages with text parts
	items := `[{"role":"developer","content":"Be brief."},{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi"},{"type":"input_text","text":"there"}]},
		{"role":"assistant","content":[{"type":"output_text","text":"Hello."}]},{"role":"user","content":"Tell a story."}]`
	if r := ts.post(t, "/v1/responses", `{"input":`+items+`,"max_output_tokens":3}`); r.status != 200 {
		t.Errorf("items: %d %s", r.status, r.body)
	}
}

// TestResponsesTools: function_call items from the model's calls, streamed
// and not; function_call and function_call_output input items rendered as
// the assistant's calls and tool messages.
func TestResponsesTools(t *testing.T) {
	ts := startScripted(t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 4)
	tool := `{"type":"function","name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`
	r := ts.post(t, "/v1/responses", `{"input":"Weather in Paris?","tools":[`+tool+`]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	o := r.json(t)
	text, calls := respOutput(t, o)
	if text != "" || len(calls) != 1 || calls[0]["name"] != "get_weather" || calls[0]["arguments"] != `{"city":"Paris"}` || o["status"] != "completed" {
		t.Fatalf("output %v", o["output"])
	}
	if path(o, "tools.0.name") != "get_weather" {
		t.Errorf("tools echo %v", o["tools"])
	}
	sr := ts.post(t, "/v1/responses", `{"input":"Weather in Paris?","stream":true,"tools":[`+tool+`]}`)
	evs := respEvents(t, sr.body)
	if types := eventTypes(evs); types != "created in_progress output_item.added function_call_arguments.delta function_call_arguments.done output_item.done completed" {
		t.Errorf("events: %s", types)
	}
	if len(evs) == 7 {
		if path(evs[2], "item.type") != "function_call" || path(evs[2], "item.arguments") != "" || path(evs[4], "arguments") != `{"city":"Paris"}` ||
			path(evs[3], "item_id") != path(evs[2], "item.id") || path(evs[5], "item.status") != "completed" {
			t.Errorf("call events %v", evs[2:6])
		}
		if _, calls := respOutput(t, evs[6]["response"]); len(calls) != 1 || calls[0]["call_id"] != path(evs[2], "item.call_id") {
			t.Errorf("final output %v", path(evs[6], "response.output"))
		}
	}

	// the output items go back as input, with the call's output
	items, _ := json.Marshal(append([]any{map[string]any{"role": "user", "content": "Weather in Paris?"}},
		append(asList(o["output"]), map[string]any{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "sunny"})...))
	if r := ts.post(t, "/v1/responses", `{"input":`+string(items)+`,"tools":[`+tool+`]}`); r.status != 200 || !strings.Contains(ts.lastPrompt(), "<tool_response>\nsunny\n</tool_response>") {
		t.Errorf("output items as input: %d %s\n%q", r.status, r.body, ts.lastPrompt())
	}

	// an earlier call and its output are rendered through the template
	conv := `[{"role":"user","content":"Weather?"},{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\": \"Paris\"}"},
		{"type":"function_call_output","call_id":"call_1","output":"sunny"}]`
	if r := ts.post(t, "/v1/responses", `{"input":`+conv+`,"tools":[`+tool+`]}`); r.status != 200 {
		t.Fatalf("conversation: %d %s", r.status, r.body)
	}
	want := "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if p := ts.lastPrompt(); !strings.HasSuffix(p, want) {
		t.Errorf("prompt %q\nwant suffix %q", p, want)
	}
	// instructions come first, as a system message
	if r := ts.post(t, "/v1/responses", `{"instructions":"Be nice.","input":"Hi"}`); r.status != 200 || !strings.Contains(ts.lastPrompt(), "<|im_start|>system\nBe nice.<|im_end|>") {
		t.Errorf("instructions: %d %q", r.status, ts.lastPrompt())
	}
}

// TestResponsesStructured: text.format json_schema and a forced call
// (tool_choice required) are valid against their schema at temperature 1
// over several seeds, streamed and not.
func TestResponsesStructured(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 1024, NSeq: 4})
	format := `"text":{"format":{"type":"json_schema","name":"person","strict":true,"schema":` + personSchema + `}}`
	tools := `"tools":[{"type":"function","name":"add_person","parameters":` + personSchema + `}],"tool_choice":"required","parallel_tool_calls":false`
	var wg sync.WaitGroup
	for seed := range 6 {
		for _, stream := range []bool{false, true} {
			for _, extra := range []string{format, tools} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := fmt.Sprintf(`{"input":"Tell me about a person.","temperature":1,"seed":%d,"max_output_tokens":400,"stream":%v,%s}`, seed, stream, extra)
					r := ts.post(t, "/v1/responses", body)
					if r.status != 200 {
						t.Errorf("%s: %d %s", body, r.status, r.body)
						return
					}
					var o any
					if stream {
						evs := respEvents(t, r.body)
						o = evs[len(evs)-1]["response"]
					} else {
						o = r.json(t)
					}
					if path(o, "status") != "completed" {
						t.Errorf("%s: status %v", body, path(o, "status"))
					}
					text, calls := respOutput(t, o)
					if extra == tools {
						if len(calls) != 1 || calls[0]["name"] != "add_person" {
							t.Errorf("%s: output %v", body, path(o, "output"))
							return
						}
						text = calls[0]["arguments"].(string)
					}
					if err := validPerson(text); err != nil {
						t.Errorf("%s: %v: %q", body, err, text)
					}
				}()
			}
		}
	}
	wg.Wait()
}

// TestResponsesRefused: what /v1/responses cannot do is a 400 naming the
// field.
func TestResponsesRefused(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 1024})
	fn := `{"type":"function","name":"f","parameters":{"type":"object"}}`
	for _, c := range []struct{ body, param string }{
		{`{"input":"x","store":true}`, "store"},
		{`{"input":"x","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"input":"x","reasoning":{"effort":"low"}}`, "reasoning.effort"},
		{`{"input":"x","reasoning":{"summary":"auto"}}`, "reasoning.summary"},
		{`{"model":"stories260K"}`, "input"},
		{`{"input":[]}`, "input"},
		{`{"input":[{"type":"reasoning","summary":[{"type":"text","text":"x"}]},{"role":"user","content":"y"}]}`, "input[0].summary"},
		{`{"input":[{"type":"item_reference","id":"x"}]}`, "input[0].type"},
		{`{"input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x"}]}]}`, "input[0].content"},
		{`{"input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, "input[0].name"},
		{`{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id"},
		{`{"input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type"},
		{`{"input":"x","tools":[{"type":"function","name":"f","strict":true}]}`, "tools[0].strict"},
		{`{"input":"x","tools":[` + fn + `],"tool_choice":{"type":"allowed_tools","tools":[]}}`, "tool_choice"},
		{`{"input":"x","tools":[` + fn + `],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice.name"},
		{`{"input":"x","tool_choice":"required"}`, "tool_choice"},
		{`{"input":"x","text":{"format":{"type":"xml"}}}`, "text.format.type"},
		{`{"input":"x","text":{"format":{"type":"json_schema","name":"s"}}}`, "text.format.schema"},
		{`{"input":"x","text":{"verbosity":"low"}}`, "text.verbosity"},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens"},
		{`{"input":"x","tools":[` + fn + `],"tool_choice":"required","text":{"format":{"type":"json_object"}}}`, "tool_choice"},
		// chat completions fields: one output per response, no stop, ...
		{`{"input":"x","n":2}`, "n"},
		{`{"input":"x","max_tokens":5}`, "max_tokens"},
		{`{"input":"x","stop":["."]}`, "stop"},
		{`{"input":"x","response_format":{"type":"json_object"}}`, "response_format"},
		{`{"input":"x","logprobs":true}`, "logprobs"},
	} {
		r := ts.post(t, "/v1/responses", c.body)
		if r.status != 400 || path(r.json(t), "error.param") != c.param {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, r.status, r.body, c.param)
		}
	}
	// accepted: store false, metadata, user, n 1, strict with a forced call
	for _, body := range []string{
		`{"input":"x","store":false,"user":"u","metadata":{"a":"b"},"n":1,"max_output_tokens":2}`,
		`{"input":"x","tools":[{"type":"function","name":"f","strict":true,"parameters":{"type":"object","properties":{},"additionalProperties":false}}],"tool_choice":{"type":"function","name":"f"},"max_output_tokens":30}`,
	} {
		if r := ts.post(t, "/v1/responses", body); r.status != 200 {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}
}
