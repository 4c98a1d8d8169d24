package serve_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// The golden model (stories260K) never decides to call a tool, so these
// tests script its output: serve.SetScript replaces the engine with
// canned text, which goes through the same mailbox, parser and encoders
// as generated text. stories260K has no chat template, so the server
// chats through ChatML with tools rendered the Qwen2.5/Hermes way, and
// parses <tool_call> blocks.

// scripted starts a server whose replies are reply, cut into pieces of
// size bytes; the prompts it was given are recorded.
type scripted struct {
	*testServer
	mu      sync.Mutex
	prompts []string
	reply   string
}

func startScripted(t *testing.T, reply string, size int) *scripted {
	t.Helper()
	s := &scripted{testServer: start(t, serve.Config{}, stages.Config{NCtx: 2048, NSeq: 2}), reply: reply}
	serve.SetScript(s.srv, func(prompt []int32) []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.prompts = append(s.prompts, s.bundle.Tokenizer.Decode(prompt, true))
		var out []string
		for r := s.reply; r != ""; {
			n := min(size, len(r))
			out = append(out, r[:n])
			r = r[n:]
		}
		return out
	})
	return s
}

func (s *scripted) lastPrompt() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prompts[len(s.prompts)-1]
}

const (
	weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	addTool     = `{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}}}`
	// the same in the Responses API's flat shape
	respWeatherTool = `{"type":"function","name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`
	respAddTool     = `{"type":"function","name":"add","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}}`
	// twoCalls is what a Qwen2.5 model writes for two parallel calls.
	twoCalls = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3.5}}\n</tool_call>"
)

var wantCalls = [][2]string{{"get_weather", `{"city":"Paris"}`}, {"add", `{"a":2,"b":3.5}`}}

func oaiToolReq(extra string) string {
	return `{"messages":[{"role":"user","content":"Weather in Paris, and 2+3.5?"}],"tools":[` + weatherTool + `,` + addTool + `]` + extra + `}`
}

// TestToolsOpenAI: tools reach the prompt; the reply's calls come back as
// message.tool_calls with finish_reason tool_calls, and streamed as
// delta.tool_calls (index, id, type and name first, then the arguments)
// that accumulate, as the openai SDK's stream helper does, to the same
// message.
func TestToolsOpenAI(t *testing.T) {
	for _, size := range []int{1, 3, 1000} {
		ts := startScripted(t, twoCalls, size)
		r := ts.post(t, "/v1/chat/completions", oaiToolReq(""))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		p := ts.lastPrompt()
		if !strings.Contains(p, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") || !strings.Contains(p, "<tool_call>\n{\"name\": <function-name>") {
			t.Errorf("prompt without the tools: %q", p)
		}
		m := r.json(t)
		if path(m, "choices.0.finish_reason") != "tool_calls" || path(m, "choices.0.message.content") != "Let me check." {
			t.Errorf("response %s", r.body)
		}
		calls, _ := path(m, "choices.0.message.tool_calls").([]any)
		if len(calls) != 2 {
			t.Fatalf("tool_calls %v", calls)
		}
		ids := map[string]bool{}
		for i, c := range calls {
			id, _ := path(c, "id").(string)
			if !strings.HasPrefix(id, "call_") || ids[id] || path(c, "type") != "function" ||
				path(c, "function.name") != wantCalls[i][0] || path(c, "function.arguments") != wantCalls[i][1] {
				t.Errorf("call %d: %v", i, c)
			}
			ids[id] = true
		}

		// streamed
		r = ts.post(t, "/v1/chat/completions", oaiToolReq(`,"stream":true`))
		var content strings.Builder
		type acc struct{ id, typ, name, args string }
		var acced []acc
		finish := ""
		for _, ev := range parseSSE(t, r.body) {
			if ev.data == "[DONE]" {
				continue
			}
			d := decodeJSON(t, ev.data)
			if f, ok := path(d, "choices.0.finish_reason").(string); ok {
				finish = f
			}
			if c, ok := path(d, "choices.0.delta.content").(string); ok {
				if strings.Contains(c, "<") {
					t.Errorf("content delta %q shows call text", c)
				}
				content.WriteString(c)
			}
			tcs, _ := path(d, "choices.0.delta.tool_calls").([]any)
			for _, tc := range tcs {
				i := num(path(tc, "index"))
				if i == len(acced) { // a new call: id, type and name first
					if path(tc, "id") == nil || path(tc, "type") != "function" || path(tc, "function.name") == nil {
						t.Errorf("first delta of call %d: %v", i, tc)
					}
					acced = append(acced, acc{})
				}
				if i >= len(acced) {
					t.Fatalf("call index %d skips ahead: %s", i, ev.data)
				}
				a := &acced[i]
				if s, ok := path(tc, "id").(string); ok {
					a.id = s
				}
				if s, ok := path(tc, "type").(string); ok {
					a.typ = s
				}
				if s, ok := path(tc, "function.name").(string); ok {
					a.name += s
				}
				if s, ok := path(tc, "function.arguments").(string); ok {
					a.args += s
				}
			}
		}
		if content.String() != "Let me check." || finish != "tool_calls" || len(acced) != 2 {
			t.Fatalf("size %d: streamed content %q finish %q calls %+v", size, content.String(), finish, acced)
		}
		for i, a := range acced {
			if !strings.HasPrefix(a.id, "call_") || a.typ != "function" || a.name != wantCalls[i][0] || a.args != wantCalls[i][1] {
				t.Errorf("size %d: streamed call %d: %+v", size, i, a)
			}
		}
	}
}

// TestToolsOpenAIOptions: parallel_tool_calls false keeps the first call;
// tool_choice none hides the tools and leaves the reply as content; a
// malformed call is content; forced choices and strict schemas are 400s.
func TestToolsOpenAIOptions(t *testing.T) {
	ts := startScripted(t, twoCalls, 4)
	m := ts.post(t, "/v1/chat/completions", oaiToolReq(`,"parallel_tool_calls":false`)).json(t)
	if calls, _ := path(m, "choices.0.message.tool_calls").([]any); len(calls) != 1 || path(calls[0], "function.name") != "get_weather" {
		t.Errorf("parallel_tool_calls false: %v", m)
	}
	m = ts.post(t, "/v1/chat/completions", oaiToolReq(`,"tool_choice":"none"`)).json(t)
	if strings.Contains(ts.lastPrompt(), "<tools>") || path(m, "choices.0.message.content") != twoCalls || path(m, "choices.0.finish_reason") != "stop" || path(m, "choices.0.message.tool_calls") != nil {
		t.Errorf("tool_choice none: %v (prompt %q)", m, ts.lastPrompt())
	}
	ts.reply = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"
	for _, stream := range []string{"", `,"stream":true`} {
		r := ts.post(t, "/v1/chat/completions", oaiToolReq(stream))
		if r.status != 200 || strings.Contains(string(r.body), `"tool_calls"`) || !strings.Contains(string(r.body), `"stop"`) {
			t.Errorf("malformed call%s: %s", stream, r.body)
		}
	}
	// forced choices are constrained by a grammar (structured_test.go
	// samples them); a name that is not a tool is a 400
	for _, c := range []struct{ extra, param string }{
		{`,"tool_choice":{"type":"function","function":{"name":"nope"}}`, "tool_choice.function.name"},
		{`,"tool_choice":"sometimes"`, "tool_choice"},
	} {
		r := ts.post(t, "/v1/chat/completions", oaiToolReq(c.extra))
		if r.status != 400 || path(r.json(t), "error.param") != c.param {
			t.Errorf("%s: %d %s", c.extra, r.status, r.body)
		}
	}
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","custom":{"name":"f"}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"parameters":{}}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`,
		`{"messages":[{"role":"user","content":"x","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
	} {
		if r := ts.post(t, "/v1/chat/completions", body); r.status != 400 || !strings.Contains(string(r.body), "tool") {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}
}

// TestToolsConversation: assistant tool_calls and tool results of earlier
// turns are rendered through the template, in every API.
func TestToolsConversation(t *testing.T) {
	ts := startScripted(t, "It is sunny.", 5)
	want := "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"sunny"}],"tools":[` + weatherTool + `]}`},
		{"/v1/messages", `{"model":"stories260K","max_tokens":20,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"Weather?"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]}]}]}`},
		{"/api/chat", `{"model":"stories260K","stream":false,"tools":[` + weatherTool + `],"messages":[{"role":"user","content":"Weather?"},
			{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
			{"role":"tool","tool_name":"get_weather","content":"sunny"}]}`},
	} {
		r := ts.post(t, c.path, c.body)
		if r.status != 200 {
			t.Errorf("%s: %d %s", c.path, r.status, r.body)
			continue
		}
		if p := ts.lastPrompt(); !strings.HasSuffix(p, want) {
			t.Errorf("%s: prompt %q\ndoes not end with %q", c.path, p, want)
		}
		if !strings.Contains(string(r.body), "It is sunny.") {
			t.Errorf("%s: %s", c.path, r.body)
		}
	}
}

func antToolReq(extra string) string {
	return `{"model":"stories260K","max_tokens":1000,"tools":[{"name":"get_weather","description":"Get the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},{"name":"add","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"Weather in Paris, and 2+3.5?"}]` + extra + `}`
}

// TestToolsAnthropic: tool_use blocks with stop_reason tool_use; streamed
// as content_block_start (tool_use, id, name, input {}), input_json_delta,
// content_block_stop, after the text block.
func TestToolsAnthropic(t *testing.T) {
	ts := startScripted(t, twoCalls, 3)
	r := ts.post(t, "/v1/messages", antToolReq(""))
	m := r.json(t)
	content, _ := m["content"].([]any)
	if m["stop_reason"] != "tool_use" || len(content) != 3 || path(m, "content.0.text") != "Let me check." {
		t.Fatalf("response %s", r.body)
	}
	for i, b := range content[1:] {
		args, _ := json.Marshal(path(b, "input"))
		if path(b, "type") != "tool_use" || !strings.HasPrefix(path(b, "id").(string), "toolu_") || path(b, "name") != wantCalls[i][0] || string(args) != wantCalls[i][1] {
			t.Errorf("block %d: %v", i+1, b)
		}
	}

	r = ts.post(t, "/v1/messages", antToolReq(`,"stream":true`))
	var names []string
	var text strings.Builder
	type block struct {
		typ, id, name string
		json          strings.Builder
	}
	blocks := map[int]*block{}
	for _, ev := range parseSSE(t, r.body) {
		d := decodeJSON(t, ev.data)
		names = append(names, ev.event)
		i := num(d["index"])
		switch ev.event {
		case "content_block_start":
			b := &block{typ: path(d, "content_block.type").(string)}
			if b.typ == "tool_use" {
				b.id, b.name = path(d, "content_block.id").(string), path(d, "content_block.name").(string)
				if !reflect.DeepEqual(path(d, "content_block.input"), map[string]any{}) {
					t.Errorf("tool_use start %s", ev.data)
				}
			}
			blocks[i] = b
		case "content_block_delta":
			switch path(d, "delta.type") {
			case "text_delta":
				text.WriteString(path(d, "delta.text").(string))
			case "input_json_delta":
				blocks[i].json.WriteString(path(d, "delta.partial_json").(string))
			}
		case "message_delta":
			if path(d, "delta.stop_reason") != "tool_use" {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	var compact []string
	for _, n := range names {
		if len(compact) == 0 || compact[len(compact)-1] != n || n != "content_block_delta" {
			compact = append(compact, n)
		}
	}
	wantNames := []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if !reflect.DeepEqual(compact, wantNames) {
		t.Errorf("events %v\nwant   %v", compact, wantNames)
	}
	if text.String() != "Let me check." || len(blocks) != 3 || blocks[0].typ != "text" {
		t.Fatalf("text %q blocks %v", text.String(), blocks)
	}
	for i := 1; i <= 2; i++ {
		b := blocks[i]
		if b.typ != "tool_use" || !strings.HasPrefix(b.id, "toolu_") || b.name != wantCalls[i-1][0] || b.json.String() != wantCalls[i-1][1] {
			t.Errorf("streamed block %d: %+v %q", i, b, b.json.String())
		}
	}

	// count_tokens counts the tools too
	with := num(ts.post(t, "/v1/messages/count_tokens", antToolReq("")).json(t)["input_tokens"])
	without := num(ts.post(t, "/v1/messages/count_tokens", `{"model":"stories260K","messages":[{"role":"user","content":"Weather in Paris, and 2+3.5?"}]}`).json(t)["input_tokens"])
	if with <= without+20 {
		t.Errorf("count_tokens with tools %d, without %d", with, without)
	}

	for _, c := range []struct{ body, param string }{
		{antToolReq(`,"tool_choice":{"type":"tool","name":"nope"}`), "tool_choice.name"},
		{`{"model":"stories260K","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"x"}]}`, "tools.0.type"},
		{`{"model":"stories260K","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"x"}]}]}`, "tool_use_id"},
		{`{"model":"stories260K","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, "messages.0.content.0"},
	} {
		r := ts.post(t, "/v1/messages", c.body)
		if r.status != 400 || !strings.Contains(string(r.body), c.param) {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}
	// disable_parallel_tool_use keeps the first call
	m = ts.post(t, "/v1/messages", antToolReq(`,"tool_choice":{"type":"auto","disable_parallel_tool_use":true}`)).json(t)
	if content, _ := m["content"].([]any); len(content) != 2 {
		t.Errorf("disable_parallel_tool_use: %v", m)
	}
}

// TestToolsOllama: message.tool_calls with arguments as objects, streamed
// as a chunk per call.
func TestToolsOllama(t *testing.T) {
	ts := startScripted(t, twoCalls, 2)
	body := `{"model":"stories260K","tools":[` + weatherTool + `,` + addTool + `],"messages":[{"role":"user","content":"Weather in Paris, and 2+3.5?"}]`
	m := ts.post(t, "/api/chat", body+`,"stream":false}`).json(t)
	calls, _ := path(m, "message.tool_calls").([]any)
	if path(m, "message.content") != "Let me check." || len(calls) != 2 || m["done_reason"] != "stop" {
		t.Fatalf("response %v", m)
	}
	check := func(i int, c any) {
		args, _ := json.Marshal(path(c, "function.arguments"))
		if path(c, "function.name") != wantCalls[i][0] || string(args) != wantCalls[i][1] || num(path(c, "function.index")) != i {
			t.Errorf("call %d: %v", i, c)
		}
	}
	for i, c := range calls {
		check(i, c)
	}
	r := ts.post(t, "/api/chat", body+`}`)
	var content strings.Builder
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
		d := decodeJSON(t, line)
		content.WriteString(path(d, "message.content").(string))
		tcs, _ := path(d, "message.tool_calls").([]any)
		for _, c := range tcs {
			check(n, c)
			n++
		}
	}
	if content.String() != "Let me check." || n != 2 {
		t.Errorf("streamed content %q, %d calls", content.String(), n)
	}
}

// TestToolCallCut: a reply the token limit cuts inside a call keeps its
// content and its complete calls, and drops the cut call: no raw markup
// reaches the client as text, in any API, streamed or not, and the
// answer says it was cut (finish_reason length, status incomplete with
// max_output_tokens, stop_reason max_tokens, done_reason length), or
// tool_calls / tool_use when a complete call came before the cut one, as
// a reply with calls always says.
func TestToolCallCut(t *testing.T) {
	const size = 4 // bytes per scripted token
	ts := startScripted(t, twoCalls, size)
	second := strings.LastIndex(twoCalls, "<tool_call>")
	cuts := []struct {
		name   string
		tokens int // where the limit cuts
		calls  int // complete calls before the cut
	}{
		{"in the first call", (strings.Index(twoCalls, "get_weather") + 2) / size, 0},
		{"in the second call", (second + 20) / size, 1},
	}
	msgs := `"messages":[{"role":"user","content":"Weather in Paris, and 2+3.5?"}]`
	tools := `[` + weatherTool + `,` + addTool + `]`
	antTools := `[{"name":"get_weather","input_schema":{"type":"object"}},{"name":"add","input_schema":{"type":"object"}}]`
	for _, cut := range cuts {
		for _, stream := range []bool{false, true} {
			for _, c := range []struct {
				api, path, body string
				finish          []string // said with no complete call, with one
				call            string   // in an answer with a call
			}{
				{"openai chat", "/v1/chat/completions", fmt.Sprintf(`{%s,"tools":%s,"max_tokens":%d,"stream":%v}`, msgs, tools, cut.tokens, stream),
					[]string{`"finish_reason":"length"`, `"finish_reason":"tool_calls"`}, `"tool_calls":[{`},
				{"responses", "/v1/responses", fmt.Sprintf(`{"input":"Weather in Paris, and 2+3.5?","tools":[%s,%s],"max_output_tokens":%d,"stream":%v}`,
					respWeatherTool, respAddTool, cut.tokens, stream),
					[]string{`"incomplete_details":{"reason":"max_output_tokens"}`, `"incomplete_details":{"reason":"max_output_tokens"}`}, `"type":"function_call"`},
				{"anthropic", "/v1/messages", fmt.Sprintf(`{"model":"stories260K",%s,"tools":%s,"max_tokens":%d,"stream":%v}`, msgs, antTools, cut.tokens, stream),
					[]string{`"stop_reason":"max_tokens"`, `"stop_reason":"tool_use"`}, `"type":"tool_use"`},
				{"ollama chat", "/api/chat", fmt.Sprintf(`{"model":"stories260K",%s,"tools":%s,"options":{"num_predict":%d},"stream":%v}`, msgs, tools, cut.tokens, stream),
					[]string{`"done_reason":"length"`, `"done_reason":"length"`}, `"tool_calls":[{`},
			} {
				t.Run(fmt.Sprintf("%s/%s/stream=%v", cut.name, c.api, stream), func(t *testing.T) {
					r := ts.post(t, c.path, c.body)
					body := string(r.body)
					if r.status != 200 {
						t.Fatalf("%d %s", r.status, body)
					}
					// as they are, or JSON-escaped; the model writes
					// "name": with a space, encoders write calls compactly
					for _, raw := range []string{"<tool_call", "tool_call>", `\u003ctool_call`, `tool_call\u003e`, `\"name\": `} {
						if strings.Contains(body, raw) {
							t.Errorf("the cut call's markup %q reaches the client: %s", raw, body)
						}
					}
					if !strings.Contains(body, "Let me check.") {
						t.Errorf("the content before the calls is lost: %s", body)
					}
					if !strings.Contains(body, c.finish[cut.calls]) {
						t.Errorf("no %s: %s", c.finish[cut.calls], body)
					}
					if got := strings.Contains(body, c.call); got != (cut.calls == 1) {
						t.Errorf("the complete call is in the answer: %v, want %v: %s", got, cut.calls == 1, body)
					}
				})
			}
		}
	}
}

// TestToolCallCutForced: the case on the engine: a forced call
// (its grammar makes the reply a call from the first token) cut by a small
// limit is an incomplete answer with no call and no markup.
func TestToolCallCutForced(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 2048})
	for _, stream := range []bool{false, true} {
		for _, c := range []struct{ path, body, want string }{
			{"/v1/responses", `{"input":"Weather in Paris?","tools":[` + respWeatherTool + `],"tool_choice":"required","max_output_tokens":12,"stream":%v}`,
				`"incomplete_details":{"reason":"max_output_tokens"}`},
			{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + weatherTool + `],"tool_choice":"required","max_tokens":12,"stream":%v}`,
				`"finish_reason":"length"`},
		} {
			r := ts.post(t, c.path, fmt.Sprintf(c.body, stream))
			body := string(r.body)
			if r.status != 200 || !strings.Contains(body, c.want) || strings.Contains(body, `\u003ctool`) || strings.Contains(body, `"type":"function_call"`) || strings.Contains(body, `"tool_calls":[{`) {
				t.Errorf("%s stream %v: %d %s", c.path, stream, r.status, body)
			}
		}
	}
}

// TestToolsFamilies: with the chat template of a Llama 3.1, Mistral Nemo
// or Qwen2.5 model in place of the ChatML default, the prompt carries the
// tools that template's way and the reply is parsed in that family's
// format, streamed and not.
func TestToolsFamilies(t *testing.T) {
	ts := startScripted(t, "", 4)
	for _, c := range []struct {
		template, bos, eos string
		reply, inPrompt    string
		idLen              int // 0: call_...
	}{
		{"meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>",
			"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
			`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}`, 0},
		{"mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>",
			"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}]",
			`[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather"`, 9},
		{"Qwen-Qwen2.5-7B-Instruct", "", "<|im_end|>",
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools", 0},
	} {
		src, err := os.ReadFile(filepath.Join("..", "model", "chat", "testdata", "templates", c.template+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := chat.New(string(src), c.bos, c.eos)
		if err != nil {
			t.Fatal(err)
		}
		ts.bundle.Template = tpl
		ts.reply = c.reply
		for _, stream := range []bool{false, true} {
			req := `{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + weatherTool + `],"stream":` + strconv.FormatBool(stream) + `}`
			r := ts.post(t, "/v1/chat/completions", req)
			if !strings.Contains(ts.lastPrompt(), c.inPrompt) {
				t.Errorf("%s: prompt %q lacks %q", c.template, ts.lastPrompt(), c.inPrompt)
			}
			var id, name, args, finish string
			if !stream {
				m := r.json(t)
				id, _ = path(m, "choices.0.message.tool_calls.0.id").(string)
				name, _ = path(m, "choices.0.message.tool_calls.0.function.name").(string)
				args, _ = path(m, "choices.0.message.tool_calls.0.function.arguments").(string)
				finish, _ = path(m, "choices.0.finish_reason").(string)
			} else {
				for _, ev := range parseSSE(t, r.body) {
					if ev.data == "[DONE]" {
						continue
					}
					d := decodeJSON(t, ev.data)
					if s, ok := path(d, "choices.0.delta.tool_calls.0.id").(string); ok {
						id = s
					}
					if s, ok := path(d, "choices.0.delta.tool_calls.0.function.name").(string); ok {
						name += s
					}
					if s, ok := path(d, "choices.0.delta.tool_calls.0.function.arguments").(string); ok {
						args += s
					}
					if s, ok := path(d, "choices.0.finish_reason").(string); ok {
						finish = s
					}
					if s, ok := path(d, "choices.0.delta.content").(string); ok && s != "" {
						t.Errorf("%s: content delta %q", c.template, s)
					}
				}
			}
			okID := strings.HasPrefix(id, "call_")
			if c.idLen > 0 {
				okID = len(id) == c.idLen
			}
			if !okID || name != "get_weather" || args != `{"city":"Paris"}` || finish != "tool_calls" {
				t.Errorf("%s stream=%v: id %q name %q args %q finish %q: %s", c.template, stream, id, name, args, finish, r.body)
			}
		}
	}
}
