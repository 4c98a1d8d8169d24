package serve_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// personSchema is the schema of the structured-output tests: a string
// with a length bound, an integer range, an optional array of an enum.
const personSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]},"maxItems":3}},"required":["name","age"],"additionalProperties":false}`

// validPerson checks a JSON text against personSchema.
func validPerson(text string) error {
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	for k := range m {
		if k != "name" && k != "age" && k != "tags" {
			return fmt.Errorf("extra property %q", k)
		}
	}
	name, ok := m["name"].(string)
	if !ok || utf8.RuneCountInString(name) > 12 {
		return fmt.Errorf("name %v", m["name"])
	}
	age, ok := m["age"].(float64)
	if !ok || age != float64(int(age)) || age < 0 || age > 120 {
		return fmt.Errorf("age %v", m["age"])
	}
	if tags, ok := m["tags"]; ok {
		l, ok := tags.([]any)
		if !ok || len(l) > 3 {
			return fmt.Errorf("tags %v", tags)
		}
		for _, t := range l {
			if t != "a" && t != "b" && t != "c" {
				return fmt.Errorf("tag %v", t)
			}
		}
	}
	return nil
}

// TestStructuredOutput: forced tool calls and schema-constrained replies
// are valid against their schema every time, at temperature 1 with random
// seeds, in the three APIs, streamed and not (200 requests in all).
func TestStructuredOutput(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 1024, NSeq: 4})
	msgs := `[{"role":"user","content":"Tell me about a person."}]`
	tool := `{"type":"function","function":{"name":"add_person","parameters":` + personSchema + `}}`
	antTool := `{"name":"add_person","input_schema":` + personSchema + `}`
	type kase struct {
		name, path, body string
		stream           bool
		extract          func(t *testing.T, body []byte) (string, error)
	}
	var cases []kase
	for _, stream := range []bool{false, true} {
		s := fmt.Sprint(stream)
		cases = append(cases,
			kase{"openai json_schema", "/v1/chat/completions", `{"messages":` + msgs + `,"max_tokens":400,"temperature":1,"stream":` + s +
				`,"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":` + personSchema + `}}}`, stream, openaiContent},
			kase{"openai forced tool", "/v1/chat/completions", `{"messages":` + msgs + `,"max_tokens":400,"temperature":1,"stream":` + s +
				`,"tools":[` + tool + `],"tool_choice":"required","parallel_tool_calls":false}`, stream, openaiCall},
			kase{"anthropic forced tool", "/v1/messages", `{"model":"stories260K","messages":` + msgs + `,"max_tokens":400,"temperature":1,"stream":` + s +
				`,"tools":[` + antTool + `],"tool_choice":{"type":"tool","name":"add_person"}}`, stream, anthropicCall},
			kase{"ollama format", "/api/chat", `{"model":"stories260K","messages":` + msgs + `,"stream":` + s +
				`,"format":` + personSchema + `,"options":{"num_predict":400,"temperature":1}}`, stream, ollamaContent},
		)
	}
	const total = 200
	var mu sync.Mutex
	valid := map[string]int{}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c := cases[i%len(cases)]
				r := ts.post(t, c.path, c.body)
				if r.status != 200 {
					t.Errorf("%s (stream %v): %d %s", c.name, c.stream, r.status, r.body)
					continue
				}
				text, err := c.extract(t, r.body)
				if err == nil {
					err = validPerson(text)
				}
				if err != nil {
					t.Errorf("%s (stream %v): %v: %q", c.name, c.stream, err, text)
					continue
				}
				mu.Lock()
				valid[c.name+fmt.Sprint(c.stream)]++
				mu.Unlock()
			}
		}()
	}
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("valid replies per case: %v", valid)
}

func openaiContent(t *testing.T, body []byte) (string, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) || bytes.Contains(body, []byte("data: ")) {
		var b strings.Builder
		for _, ev := range parseSSE(t, body) {
			if ev.data == "[DONE]" {
				continue
			}
			if s, ok := path(decodeJSON(t, ev.data), "choices.0.delta.content").(string); ok {
				b.WriteString(s)
			}
		}
		return b.String(), nil
	}
	m := decodeJSON(t, string(body))
	if f := path(m, "choices.0.finish_reason"); f != "stop" {
		return "", fmt.Errorf("finish_reason %v", f)
	}
	s, _ := path(m, "choices.0.message.content").(string)
	return s, nil
}

func openaiCall(t *testing.T, body []byte) (string, error) {
	if bytes.Contains(body, []byte("data: ")) {
		var args strings.Builder
		calls := 0
		for _, ev := range parseSSE(t, body) {
			if ev.data == "[DONE]" {
				continue
			}
			c := decodeJSON(t, ev.data)
			for _, tc := range asList(path(c, "choices.0.delta.tool_calls")) {
				if path(tc, "id") != nil {
					calls++
				}
				if a, ok := path(tc, "function.arguments").(string); ok {
					args.WriteString(a)
				}
			}
			if f := path(c, "choices.0.finish_reason"); f != nil && f != "tool_calls" {
				return "", fmt.Errorf("finish_reason %v", f)
			}
		}
		if calls != 1 {
			return "", fmt.Errorf("%d calls", calls)
		}
		return args.String(), nil
	}
	m := decodeJSON(t, string(body))
	if f := path(m, "choices.0.finish_reason"); f != "tool_calls" {
		return "", fmt.Errorf("finish_reason %v: %s", f, body)
	}
	calls := asList(path(m, "choices.0.message.tool_calls"))
	if len(calls) != 1 || path(calls[0], "function.name") != "add_person" {
		return "", fmt.Errorf("tool_calls %v", calls)
	}
	s, _ := path(calls[0], "function.arguments").(string)
	return s, nil
}

func anthropicCall(t *testing.T, body []byte) (string, error) {
	if bytes.Contains(body, []byte("event: ")) {
		var input strings.Builder
		uses := 0
		for _, ev := range parseSSE(t, body) {
			d := decodeJSON(t, ev.data)
			switch ev.event {
			case "content_block_start":
				if path(d, "content_block.type") == "tool_use" {
					uses++
				}
			case "content_block_delta":
				if s, ok := path(d, "delta.partial_json").(string); ok {
					input.WriteString(s)
				}
			case "message_delta":
				if r := path(d, "delta.stop_reason"); r != "tool_use" {
					return "", fmt.Errorf("stop_reason %v", r)
				}
			}
		}
		if uses != 1 {
			return "", fmt.Errorf("%d tool_use blocks", uses)
		}
		return input.String(), nil
	}
	m := decodeJSON(t, string(body))
	if r := path(m, "stop_reason"); r != "tool_use" {
		return "", fmt.Errorf("stop_reason %v: %s", r, body)
	}
	for _, b := range asList(path(m, "content")) {
		if path(b, "type") == "tool_use" {
			in, err := json.Marshal(path(b, "input"))
			return string(in), err
		}
	}
	return "", fmt.Errorf("no tool_use block: %s", body)
}

func ollamaContent(t *testing.T, body []byte) (string, error) {
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		m := decodeJSON(t, sc.Text())
		if s, ok := path(m, "message.content").(string); ok {
			b.WriteString(s)
		}
		if path(m, "done") == true && path(m, "done_reason") != "stop" {
			return "", fmt.Errorf("done_reason %v", path(m, "done_reason"))
		}
	}
	return b.String(), nil
}
