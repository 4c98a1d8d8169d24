package serve_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// These tests play scripted replies (serve.SetScript) through the chat
// templates of reasoning models (model/chat/testdata) in place of
// stories260K's ChatML default: the prompt is rendered as the model's
// template renders it, and the reply is split into reasoning and content
// as each API shows it.

// useTemplate puts a testdata template in place of the model's.
func useTemplate(t *testing.T, b *model.Bundle, name, bos, eos string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "model", "chat", "testdata", "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := chat.New(string(src), bos, eos)
	if err != nil {
		t.Fatal(err)
	}
	b.Template = tpl
}

// split is what a client assembles from an answer.
type split struct{ reasoning, content string }

// apiReasoning reads reasoning and content from each API's answer,
// streamed (SSE or NDJSON) or not, as its users' clients assemble them.
var apiReasoning = []struct {
	api, path string
	body      func(stream bool, extra string) string
	read      func(t *testing.T, body []byte, stream bool) split
}{
	{"openai", "/v1/chat/completions",
		func(stream bool, extra string) string {
			return fmt.Sprintf(`{"messages":[{"role":"user","content":"Capital of France?"}],"stream":%v%s}`, stream, extra)
		},
		func(t *testing.T, body []byte, stream bool) split {
			if !stream {
				m := decodeJSON(t, string(body))
				r, _ := path(m, "choices.0.message.reasoning_content").(string)
				c, _ := path(m, "choices.0.message.content").(string)
				return split{r, c}
			}
			var s split
			for _, ev := range parseSSE(t, body) {
				if ev.data == "[DONE]" {
					continue
				}
				d := decodeJSON(t, ev.data)
				r, _ := path(d, "choices.0.delta.reasoning_content").(string)
				c, _ := path(d, "choices.0.delta.content").(string)
				s.reasoning += r
				s.content += c
			}
			return s
		}},
	{"ollama chat", "/api/chat",
		func(stream bool, extra string) string {
			return fmt.Sprintf(`{"model":"stories260K","messages":[{"role":"user","content":"Capital of France?"}],"stream":%v%s}`, stream, extra)
		},
		func(t *testing.T, body []byte, stream bool) split {
			var s split
			for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
				m := decodeJSON(t, string(line))
				r, _ := path(m, "message.thinking").(string)
				c, _ := path(m, "message.content").(string)
				s.reasoning += r
				s.content += c
			}
			return s
		}},
	{"ollama generate", "/api/generate",
		func(stream bool, extra string) string {
			return fmt.Sprintf(`{"model":"stories260K","prompt":"Capital of France?","stream":%v%s}`, stream, extra)
		},
		func(t *testing.T, body []byte, stream bool) split {
			var s split
			for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
				m := decodeJSON(t, string(line))
				r, _ := m["thinking"].(string)
				c, _ := m["response"].(string)
				s.reasoning += r
				s.content += c
			}
			return s
		}},
	{"anthropic", "/v1/messages",
		func(stream bool, extra string) string {
			return fmt.Sprintf(`{"model":"stories260K","max_tokens":1000,"messages":[{"role":"user","content":"Capital of France?"}],"stream":%v%s}`, stream, extra)
		},
		func(t *testing.T, body []byte, stream bool) split {
			var s split
			if !stream {
				blocks, _ := path(decodeJSON(t, string(body)), "content").([]any)
				for i, b := range blocks {
					switch path(b, "type") {
					case "thinking":
						if i != 0 {
							t.Errorf("thinking block at %d: %s", i, body)
						}
						s.reasoning += path(b, "thinking").(string)
					case "text":
						s.content += path(b, "text").(string)
					}
				}
				return s
			}
			types := map[int]string{}
			for _, ev := range parseSSE(t, body) {
				d := decodeJSON(t, ev.data)
				i := num(path(d, "index"))
				switch ev.event {
				case "content_block_start":
					types[i], _ = path(d, "content_block.type").(string)
				case "content_block_delta":
					switch path(d, "delta.type") {
					case "thinking_delta":
						if types[i] != "thinking" {
							t.Errorf("thinking_delta in a %q block", types[i])
						}
						s.reasoning += path(d, "delta.thinking").(string)
					case "text_delta":
						if types[i] != "text" {
							t.Errorf("text_delta in a %q block", types[i])
						}
						s.content += path(d, "delta.text").(string)
					}
				}
			}
			return s
		}},
	{"responses", "/v1/responses",
		func(stream bool, extra string) string {
			return fmt.Sprintf(`{"input":"Capital of France?","stream":%v%s}`, stream, extra)
		},
		func(t *testing.T, body []byte, stream bool) split {
			var s split
			if !stream {
				items, _ := path(decodeJSON(t, string(body)), "output").([]any)
				for _, it := range items {
					switch path(it, "type") {
					case "reasoning":
						s.reasoning += path(it, "content.0.text").(string)
					case "message":
						s.content += path(it, "content.0.text").(string)
					}
				}
				return s
			}
			done := ""
			for _, ev := range parseSSE(t, body) {
				d := decodeJSON(t, ev.data)
				switch ev.event {
				case "response.reasoning_text.delta":
					s.reasoning += path(d, "delta").(string)
				case "response.reasoning_text.done":
					done = path(d, "text").(string)
				case "response.output_text.delta":
					s.content += path(d, "delta").(string)
				}
			}
			if done != s.reasoning {
				t.Errorf("reasoning_text.done %q, deltas %q", done, s.reasoning)
			}
			return s
		}},
}

// TestReasoningAPIs: a Qwen3.5 reply (its template opens <think> in the
// prompt) comes back split, in every API's shape, streamed in pieces of 1
// and 4 bytes and not; a Qwen3 reply that opens <think> itself likewise.
func TestReasoningAPIs(t *testing.T) {
	ts := startScripted(t, "", 1)
	for _, tc := range []struct{ template, bos, eos, reply string }{
		{"Qwen3.5-4B", "", "<|im_end|>", "The capital of France\nis Paris.\n</think>\n\nParis."},
		{"Qwen-Qwen3-0.6B", "", "<|im_end|>", "<think>\nThe capital of France\nis Paris.\n</think>\n\nParis."},
	} {
		useTemplate(t, ts.bundle, tc.template, tc.bos, tc.eos)
		want := split{"The capital of France\nis Paris.", "Paris."}
		for _, size := range []int{1, 4} {
			ts.mu.Lock()
			ts.reply = tc.reply
			ts.mu.Unlock()
			serve.SetScript(ts.srv, func(prompt []int32) []string {
				p := ts.bundle.Tokenizer.Decode(prompt, true)
				ts.mu.Lock()
				ts.prompts = append(ts.prompts, p)
				ts.mu.Unlock()
				var out []string
				for r := tc.reply; r != ""; r = r[min(size, len(r)):] {
					out = append(out, r[:min(size, len(r))])
				}
				return out
			})
			for _, a := range apiReasoning {
				for _, stream := range []bool{false, true} {
					r := ts.post(t, a.path, a.body(stream, ""))
					if r.status != 200 {
						t.Fatalf("%s %s: %d %s", tc.template, a.api, r.status, r.body)
					}
					if got := a.read(t, r.body, stream); got != want {
						t.Errorf("%s %s stream=%v pieces %d: got %+v, want %+v\n%s", tc.template, a.api, stream, size, got, want, r.body)
					}
					if strings.Contains(string(r.body), "think>") {
						t.Errorf("%s %s stream=%v: a think tag in the answer: %s", tc.template, a.api, stream, r.body)
					}
					if a.api == "responses" && tc.template == "Qwen3.5-4B" {
						// the tokens before the one that completes </think>
						want := (strings.Index(tc.reply, "</think>") + len("</think>") - 1) / size
						var usage any
						if stream {
							evs := parseSSE(t, r.body)
							usage = path(decodeJSON(t, evs[len(evs)-1].data), "response.usage")
						} else {
							usage = path(decodeJSON(t, string(r.body)), "usage")
						}
						if got := num(path(usage, "output_tokens_details.reasoning_tokens")); got != want {
							t.Errorf("stream=%v pieces %d: reasoning_tokens %d, want %d", stream, size, got, want)
						}
					}
				}
			}
		}
	}
}

// TestReasoningSwitch: each API's switch turns thinking off in the prompt
// (Qwen3.5's template closes an empty <think> block), and the reply is
// all content.
func TestReasoningSwitch(t *testing.T) {
	ts := startScripted(t, "Paris.", 3)
	useTemplate(t, ts.bundle, "Qwen3.5-4B", "", "<|im_end|>")
	off := map[string]string{
		"openai":          `,"chat_template_kwargs":{"enable_thinking":false}`,
		"ollama chat":     `,"think":false`,
		"ollama generate": `,"think":false`,
		"anthropic":       `,"thinking":{"type":"disabled"}`,
		"responses":       `,"reasoning":{"effort":"none"}`,
	}
	for _, a := range apiReasoning {
		for _, stream := range []bool{false, true} {
			r := ts.post(t, a.path, a.body(stream, off[a.api]))
			if r.status != 200 {
				t.Fatalf("%s: %d %s", a.api, r.status, r.body)
			}
			if p := ts.lastPrompt(); !strings.HasSuffix(p, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
				t.Errorf("%s: prompt %q does not switch thinking off", a.api, p)
			}
			if got := a.read(t, r.body, stream); got != (split{"", "Paris."}) {
				t.Errorf("%s stream=%v: %+v", a.api, stream, got)
			}
		}
		// and on again: the prompt opens <think>
		on := strings.NewReplacer("false", "true", `"disabled"`, `"enabled"`, `"none"`, `"medium"`).Replace(off[a.api])
		if r := ts.post(t, a.path, a.body(false, on)); r.status != 200 || !strings.HasSuffix(ts.lastPrompt(), "<|im_start|>assistant\n<think>\n") {
			t.Errorf("%s %s: %d %s; prompt %q", a.api, on, r.status, r.body, ts.lastPrompt())
		}
	}
}

// TestReasoningRefused: asking a model without reasoning to think, a
// model that always thinks not to, for a budget, or an unknown
// reasoning_format, is a 400 naming the field, in each API.
func TestReasoningRefused(t *testing.T) {
	ts := startScripted(t, "x", 3)
	for _, c := range []struct {
		template string // "": stories260K's ChatML default
		path     string
		body     string
		param    string
	}{
		{"", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":true}}`, "chat_template_kwargs.enable_thinking"},
		{"", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"}`, "reasoning_effort"},
		{"", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"xhigh"}`, "reasoning_effort"},
		{"", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_format":"deepseek-legacy"}`, "reasoning_format"},
		{"", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"custom_var":1}}`, "chat_template_kwargs.custom_var"},
		{"", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"yes"}}`, "chat_template_kwargs.enable_thinking"},
		{"", "/api/chat", `{"model":"stories260K","messages":[{"role":"user","content":"x"}],"think":true}`, "think"},
		{"", "/api/generate", `{"model":"stories260K","prompt":"x","think":true}`, "think"},
		{"", "/api/generate", `{"model":"stories260K","prompt":"x","raw":true,"think":false}`, "think"},
		{"", "/v1/messages", `{"model":"stories260K","max_tokens":10,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled"}}`, "thinking"},
		{"", "/v1/responses", `{"input":"x","reasoning":{"effort":"low"}}`, "reasoning.effort"},
		{"Qwen3.5-4B", "/v1/messages", `{"model":"stories260K","max_tokens":2000,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":1024}}`, "thinking.budget_tokens"},
		{"Qwen3.5-4B", "/v1/messages", `{"model":"stories260K","max_tokens":2000,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"sometimes"}}`, "thinking.type"},
		{"Qwen3.5-4B", "/v1/messages", `{"model":"stories260K","max_tokens":2000,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"adaptive","display":"verbose"}}`, "thinking.display"},
		{"Qwen3.5-4B", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"}`, "reasoning_effort"},
		{"Qwen3.5-4B", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x","reasoning_content":"no"}]}`, "messages[0].reasoning_content"},
		{"mistralai-Ministral-3-14B-Reasoning-2512", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}`, "chat_template_kwargs.enable_thinking"},
		{"openai-gpt-oss-120b", "/api/chat", `{"model":"stories260K","messages":[{"role":"user","content":"x"}],"think":false}`, "think"},
		{"openai-gpt-oss-120b", "/v1/responses", `{"input":"x","reasoning":{"effort":"none"}}`, "reasoning.effort"},
		{"openai-gpt-oss-120b", "/v1/responses", `{"input":"x","reasoning":{"summary":"auto"}}`, "reasoning.summary"},
		// no grammar of a forced call in these formats
		{"Qwen3.5-4B", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[` + weatherTool + `],"tool_choice":"required"}`, "tool_choice"},
		{"google-gemma-4-31B-it", "/v1/messages", `{"model":"stories260K","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`, "tool_choice"},
		{"openai-gpt-oss-120b", "/v1/responses", `{"input":"x","tools":[` + respWeatherTool + `],"tool_choice":"required"}`, "tool_choice"},
	} {
		ts.bundle.Template = chat.Default()
		if c.template != "" {
			useTemplate(t, ts.bundle, c.template, "", "")
		}
		r := ts.post(t, c.path, c.body)
		if r.status != 400 || !strings.Contains(string(r.body), `"`+c.param+`"`) && !strings.Contains(string(r.body), c.param+":") {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", c.template, c.path, c.body, r.status, r.body, c.param)
		}
	}
}

// TestReasoningFormatNone: reasoning_format "none" keeps the reasoning in
// the content, as generated.
func TestReasoningFormatNone(t *testing.T) {
	reply := "Thinking.\n</think>\n\nParis."
	ts := startScripted(t, reply, 2)
	useTemplate(t, ts.bundle, "Qwen3.5-4B", "", "<|im_end|>")
	for _, stream := range []bool{false, true} {
		r := ts.post(t, "/v1/chat/completions", apiReasoning[0].body(stream, `,"reasoning_format":"none"`))
		if got := apiReasoning[0].read(t, r.body, stream); got != (split{"", reply}) {
			t.Errorf("stream=%v: %+v", stream, got)
		}
	}
}

// TestReasoningFamilies: the reasoning and tool calls of gpt-oss (harmony,
// with reasoning_effort in its system message), Gemma 4, Ministral 3 and
// Qwen3.5 come back as reasoning_content and tool_calls, streamed and not.
func TestReasoningFamilies(t *testing.T) {
	ts := startScripted(t, "", 3)
	for _, c := range []struct {
		template, bos, eos string
		extra, inPrompt    string
		reply              string
		reasoning, content string
		call               bool
	}{
		{"openai-gpt-oss-120b", "<|startoftext|>", "<|return|>", `,"reasoning_effort":"low"`, "Reasoning: low",
			"<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
			"Need the weather.", "", true},
		{"openai-gpt-oss-120b", "<|startoftext|>", "<|return|>", "", "Reasoning: medium",
			"<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.",
			"Easy.", "It is sunny.", false},
		{"google-gemma-4-31B-it", "<bos>", "<eos>", "", "<|think|>",
			"<|channel>thought\nNeed the weather.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
			"Need the weather.", "", true},
		{"mistralai-Ministral-3-14B-Reasoning-2512", "<s>", "</s>", "", "[AVAILABLE_TOOLS]",
			"[THINK]Need the weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
			"Need the weather.", "", true},
		{"Qwen3.5-4B", "", "<|im_end|>", "", "<function=example_function_name>",
			"Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
			"Need the weather.", "", true},
		{"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "", "<|im_end|>", "", "<name>city</name>",
			"Need the weather.</think><tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
			"Need the weather.", "", true},
	} {
		useTemplate(t, ts.bundle, c.template, c.bos, c.eos)
		ts.mu.Lock()
		ts.reply = c.reply
		ts.mu.Unlock()
		for _, stream := range []bool{false, true} {
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + weatherTool + `],"stream":` + fmt.Sprint(stream) + c.extra + `}`
			r := ts.post(t, "/v1/chat/completions", body)
			if r.status != 200 {
				t.Fatalf("%s: %d %s", c.template, r.status, r.body)
			}
			if !strings.Contains(ts.lastPrompt(), c.inPrompt) {
				t.Errorf("%s: prompt lacks %q: %q", c.template, c.inPrompt, ts.lastPrompt())
			}
			got := apiReasoning[0].read(t, r.body, stream)
			var name, args, finish string
			if !stream {
				m := r.json(t)
				name, _ = path(m, "choices.0.message.tool_calls.0.function.name").(string)
				args, _ = path(m, "choices.0.message.tool_calls.0.function.arguments").(string)
				finish, _ = path(m, "choices.0.finish_reason").(string)
			} else {
				for _, ev := range parseSSE(t, r.body) {
					if ev.data == "[DONE]" {
						continue
					}
					d := decodeJSON(t, ev.data)
					if s, ok := path(d, "choices.0.delta.tool_calls.0.function.name").(string); ok {
						name += s
					}
					if s, ok := path(d, "choices.0.delta.tool_calls.0.function.arguments").(string); ok {
						args += s
					}
					if s, ok := path(d, "choices.0.finish_reason").(string); ok {
						finish = s
					}
				}
			}
			if got != (split{c.reasoning, c.content}) {
				t.Errorf("%s stream=%v: %+v, want reasoning %q content %q\n%s", c.template, stream, got, c.reasoning, c.content, r.body)
			}
			wantFinish := "stop"
			if c.call {
				wantFinish = "tool_calls"
				if name != "get_weather" || args != `{"city":"Paris"}` {
					t.Errorf("%s stream=%v: call %q %q: %s", c.template, stream, name, args, r.body)
				}
			}
			if finish != wantFinish {
				t.Errorf("%s stream=%v: finish %q, want %q", c.template, stream, finish, wantFinish)
			}
		}
	}
}

// TestReasoningHistory: reasoning sent back with an assistant turn
// reaches the template (gpt-oss renders it in the analysis channel of a
// tool-call turn), from OpenAI's reasoning_content, Ollama's thinking,
// Anthropic's thinking blocks and the Responses API's reasoning items.
func TestReasoningHistory(t *testing.T) {
	ts := startScripted(t, "<|channel|>final<|message|>Done.", 3)
	useTemplate(t, ts.bundle, "openai-gpt-oss-120b", "<|startoftext|>", "<|return|>")
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"reasoning_content":"Prior thought.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}],"tools":[` + weatherTool + `]}`},
		{"/api/chat", `{"model":"stories260K","stream":false,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","thinking":"Prior thought.","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","tool_name":"get_weather","content":"sunny"}],"tools":[` + weatherTool + `]}`},
		{"/v1/messages", `{"model":"stories260K","max_tokens":100,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"thinking","thinking":"Prior thought.","signature":""},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}`},
		{"/v1/responses", `{"input":[{"role":"user","content":"Weather?"},{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"Prior thought."}]},{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call_output","call_id":"c1","output":"sunny"}],"tools":[` + respWeatherTool + `]}`},
	} {
		r := ts.post(t, c.path, c.body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
		if p := ts.lastPrompt(); !strings.Contains(p, "<|start|>assistant<|channel|>analysis<|message|>Prior thought.<|end|>") {
			t.Errorf("%s: the prompt lacks the reasoning: %q", c.path, p)
		}
	}
}

// TestDisconnectMidThought: a client that leaves while the model is still
// inside its reasoning (Qwen3.5's template opens it; stories260K never
// closes it) stops the request, in every chat API, streamed or not.
func TestDisconnectMidThought(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	t.Cleanup(be.Close)
	ts := startOn(t, modelPath(t), serve.Config{}, stages.Config{NCtx: 4096, NSeq: 4, MaxBatch: 64}, slowOps{be, 2 * time.Millisecond}, false)
	useTemplate(t, ts.bundle, "Qwen3.5-4B", "", "<|im_end|>")
	bias := neverEnding(t, ts)
	for _, a := range apiReasoning {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", a.api, stream), func(t *testing.T) {
				waitFor(t, "the engine to be idle", func() bool {
					st := ts.engine.Stats()
					return st.Running == 0 && st.Queued == 0 && st.KVBlocksUsed == 0
				})
				body := a.body(stream, `,"logit_bias":`+bias)
				if strings.HasPrefix(a.path, "/api/") {
					body = a.body(stream, `,"options":{"num_predict":-1,"logit_bias":`+bias+`}`)
				}
				conn := ts.startRaw(t, a.path, body)
				defer conn.Close()
				if stream {
					conn.firstBytes(t)
				}
				waitFor(t, "the sequence to run", func() bool { return ts.engine.Stats().Running >= 1 })
				time.Sleep(50 * time.Millisecond)
				if stream { // what came so far is reasoning only
					conn.SetReadDeadline(time.Now().Add(time.Second))
					rd := bufio.NewReader(conn.rd)
					line, _ := rd.ReadString('\n')
					for i := 0; i < 20 && !strings.Contains(line, "ink") && !strings.Contains(line, "reasoning"); i++ {
						line, _ = rd.ReadString('\n')
					}
					if !strings.Contains(line, "ink") && !strings.Contains(line, "reasoning") {
						t.Errorf("no reasoning streamed: %q", line)
					}
				}
				if st := ts.engine.Stats(); st.Running == 0 {
					t.Fatalf("the request ended by itself: %+v", st)
				}
				conn.Close()
				t.Logf("stopped %v after the client left", drained(t, ts))
			})
		}
	}
}

// TestReasoningGrammar: a constrained reply (a response format, a forced
// call) starts with what the grammar allows, not inside the reasoning the
// prompt opened: it is content (or the call), not reasoning.
func TestReasoningGrammar(t *testing.T) {
	ts := startScripted(t, `{"city": "Paris"}`, 3)
	useTemplate(t, ts.bundle, "Qwen-QwQ-32B", "", "<|im_end|>")
	for _, stream := range []bool{false, true} {
		r := ts.post(t, "/v1/chat/completions", apiReasoning[0].body(stream, `,"response_format":{"type":"json_object"}`))
		if got := apiReasoning[0].read(t, r.body, stream); got != (split{"", `{"city": "Paris"}`}) {
			t.Errorf("stream=%v: %+v (%s)", stream, got, r.body)
		}
	}
	ts.mu.Lock()
	ts.reply = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	ts.mu.Unlock()
	r := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[`+weatherTool+`],"tool_choice":"required"}`)
	m := r.json(t)
	if !strings.HasSuffix(ts.lastPrompt(), "<think>\n") || path(m, "choices.0.message.tool_calls.0.function.name") != "get_weather" || path(m, "choices.0.message.reasoning_content") != nil {
		t.Errorf("forced call: %s", r.body)
	}
}

// TestAnthropicThinkingOmitted: thinking.display "omitted" keeps the
// thinking block and drops its text.
func TestAnthropicThinkingOmitted(t *testing.T) {
	ts := startScripted(t, "Secret plan.\n</think>\n\nParis.", 3)
	useTemplate(t, ts.bundle, "Qwen3.5-4B", "", "<|im_end|>")
	for _, stream := range []bool{false, true} {
		r := ts.post(t, "/v1/messages", apiReasoning[3].body(stream, `,"thinking":{"type":"adaptive","display":"omitted"}`))
		body := string(r.body)
		if r.status != 200 || strings.Contains(body, "Secr") || !strings.Contains(body, `"type":"thinking"`) || apiReasoning[3].read(t, r.body, stream) != (split{"", "Paris."}) {
			t.Errorf("stream=%v: %d %s", stream, r.status, body)
		}
	}
}

// TestReasoningChoices: with n choices, each one's reasoning is separated
// by its own parser, streamed (with its index) and not.
func TestReasoningChoices(t *testing.T) {
	ts := startScripted(t, "Hmm.\n</think>\n\nParis.", 2)
	useTemplate(t, ts.bundle, "Qwen3.5-4B", "", "<|im_end|>")
	r := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2}`)
	m := r.json(t)
	for i := range 2 {
		if path(m, fmt.Sprintf("choices.%d.message.reasoning_content", i)) != "Hmm." || path(m, fmt.Sprintf("choices.%d.message.content", i)) != "Paris." {
			t.Errorf("choice %d: %s", i, r.body)
		}
	}
	r = ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2,"stream":true}`)
	got := map[int]*split{0: {}, 1: {}}
	for _, ev := range parseSSE(t, r.body) {
		if ev.data == "[DONE]" {
			continue
		}
		d := decodeJSON(t, ev.data)
		if _, ok := path(d, "choices.0").(map[string]any); !ok {
			continue
		}
		s := got[num(path(d, "choices.0.index"))]
		rs, _ := path(d, "choices.0.delta.reasoning_content").(string)
		c, _ := path(d, "choices.0.delta.content").(string)
		s.reasoning += rs
		s.content += c
	}
	for i, s := range got {
		if *s != (split{"Hmm.", "Paris."}) {
			t.Errorf("streamed choice %d: %+v", i, *s)
		}
	}
}

// TestOllamaShowThinking: /api/show lists "thinking" among the
// capabilities of a model whose template has a reasoning format.
func TestOllamaShowThinking(t *testing.T) {
	ts := startScripted(t, "x", 3)
	has := func() bool {
		caps, _ := path(ts.post(t, "/api/show", map[string]any{"model": "stories260K"}).json(t), "capabilities").([]any)
		for _, c := range caps {
			if c == "thinking" {
				return true
			}
		}
		return false
	}
	if has() {
		t.Error("thinking listed for ChatML")
	}
	useTemplate(t, ts.bundle, "Qwen3.5-4B", "", "<|im_end|>")
	if !has() {
		t.Error("thinking not listed for Qwen3.5's template")
	}
}
