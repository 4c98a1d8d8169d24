package toolcall

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var tools = []string{"get_weather", "add"}

type parseCase struct {
	name    string
	f       Format
	text    string
	content string
	calls   []Call
}

// Real-looking model outputs per family, including partial and malformed
// ones.
var parseCases = []parseCase{
	// Hermes / Qwen 2.5
	{"hermes/one", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}},
	{"hermes/two", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
	{"hermes/content-first", Hermes, "Let me check the weather for you.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"Let me check the weather for you.", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"hermes/unclosed", Hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3.5}}\n",
		"", []Call{{Name: "add", Arguments: `{"a":2,"b":3.5}`}}},
	{"hermes/string-args", Hermes, "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
		"", []Call{{Name: "add", Arguments: `{"a":1}`}}},
	{"hermes/no-args", Hermes, "<tool_call>{\"name\": \"get_time\"}</tool_call>",
		"", []Call{{Name: "get_time", Arguments: `{}`}}},
	{"hermes/malformed", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", nil},
	{"hermes/truncated", Hermes, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argu",
		"Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argu", nil},
	{"hermes/args-not-object", Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
		"<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", nil},
	{"hermes/plain", Hermes, "Hello, <b>world</b>: 1 < 2 and <tool is not a tag.\n\n",
		"Hello, <b>world</b>: 1 < 2 and <tool is not a tag.\n\n", nil},
	{"hermes/text-after", Hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>\nDone.",
		"Done.", []Call{{Name: "add", Arguments: `{}`}}},
	// Llama 3.x
	{"llama3/json", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"llama3/typed", Llama3, "\n{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"llama3/two", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "add", Arguments: `{"a":1,"b":2}`}}},
	{"llama3/python-tag-json", Llama3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"llama3/builtin", Llama3, "<|python_tag|>brave_search.call(query=\"weather in \\\"Paris\\\"\", count=3)",
		"", []Call{{Name: "brave_search", Arguments: `{"query":"weather in \"Paris\"","count":3}`}}},
	{"llama3/escapes", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa\\\"}ris\\\\\"}}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Pa\"}ris\\"}`}}},
	{"llama3/answer-json", Llama3, "{\"answer\": 42}", "{\"answer\": 42}", nil},
	{"llama3/unknown-name", Llama3, "{\"name\": \"Bob\", \"parameters\": {}}", "{\"name\": \"Bob\", \"parameters\": {}}", nil},
	{"llama3/truncated", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"ci", "{\"name\": \"get_weather\", \"parameters\": {\"ci", nil},
	{"llama3/text", Llama3, "The weather in Paris is {usually} mild.", "The weather in Paris is {usually} mild.", nil},
	{"llama3/bad-python", Llama3, "<|python_tag|>print(1)", "<|python_tag|>print(1)", nil},
	// Mistral
	{"mistral/nemo", Mistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}]",
		"", []Call{{ID: "a1b2c3d4e", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"mistral/nemo-two", Mistral, " [TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "add", Arguments: `{"a":1,"b":2}`}}},
	{"mistral/args", Mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "add", Arguments: `{"a":1,"b":2}`}}},
	{"mistral/call-id", Mistral, "[TOOL_CALLS]get_weather[CALL_ID]Xy12Ab34c[ARGS]{\"city\": \"Paris\"}",
		"", []Call{{ID: "Xy12Ab34c", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"mistral/content-first", Mistral, "I will look it up.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
		"I will look it up.", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"mistral/truncated", Mistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": ",
		"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": ", nil},
	{"mistral/plain", Mistral, "Use [brackets] freely [TOOL", "Use [brackets] freely [TOOL", nil},
	// Ministral 3 / Magistral (v11+): name[ARGS]{...}, no id
	{"mistral/ministral", Mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}},
	{"mistral/ministral-bad-args", Mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
		"[TOOL_CALLS]get_weather[ARGS]{\"city\": ", nil},
	// XML (Qwen3.5, Nemotron 3)
	{"xml/one", XML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}},
	{"xml/json-values", XML, "Let me add.\n\n<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3.5\n</parameter>\n<parameter=opts>\n{\"exact\": true}\n</parameter>\n</function>\n</tool_call>",
		"Let me add.", []Call{{Name: "add", Arguments: `{"a":2,"b":3.5,"opts":{"exact":true}}`}}},
	{"xml/multiline", XML, "<tool_call>\n<function=write>\n<parameter=text>\nline one\n  line <two>\n</parameter>\n</function>\n</tool_call>",
		"", []Call{{Name: "write", Arguments: `{"text":"line one\n  line <two>"}`}}},
	{"xml/two", XML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
	{"xml/no-params", XML, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", "", []Call{{Name: "get_time", Arguments: `{}`}}},
	{"xml/malformed", XML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>", nil},
	{"xml/json-body", XML, "<tool_call>{\"name\": \"add\"}</tool_call>", "<tool_call>{\"name\": \"add\"}</tool_call>", nil},
	// Gemma 4
	{"gemma4/one", Gemma4Calls, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}},
	{"gemma4/values", Gemma4Calls, "Adding.<|tool_call>call:add{a:2,b:-3.5e1,flags:[true,null,<|\"|>x, y}<|\"|>],opts:{deep:{k:false}}}<tool_call|>",
		"Adding.", []Call{{Name: "add", Arguments: `{"a":2,"b":-3.5e1,"flags":[true,null,"x, y}"],"opts":{"deep":{"k":false}}}`}}},
	{"gemma4/empty", Gemma4Calls, "<|tool_call>call:get_time{}<tool_call|>", "", []Call{{Name: "get_time", Arguments: `{}`}}},
	{"gemma4/two", Gemma4Calls, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|>",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
	{"gemma4/malformed", Gemma4Calls, "<|tool_call>call:add{a:}<tool_call|>", "<|tool_call>call:add{a:}<tool_call|>", nil},
	{"gemma4/unquoted-string", Gemma4Calls, "<|tool_call>call:get_weather{city:Paris}<tool_call|>", "<|tool_call>call:get_weather{city:Paris}<tool_call|>", nil},
	// Generic
	{"generic/tool_call", Generic, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{"generic/tool_calls", Generic, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 1}}]}",
		"", []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "add", Arguments: `{"a":1}`}}},
	{"generic/openai-shape", Generic, "[{\"type\": \"function\", \"function\": {\"name\": \"add\", \"arguments\": \"{\\\"a\\\":1}\"}}]",
		"", []Call{{Name: "add", Arguments: `{"a":1}`}}},
	{"generic/response", Generic, "{\"response\": \"Hello there\"}", "Hello there", nil},
	{"generic/tags", Generic, "ok <tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>", "ok", []Call{{Name: "add", Arguments: `{}`}}},
	{"generic/plain", Generic, "  Just text.", "  Just text.", nil},
}

func TestParse(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			content, calls := Parse(c.f, tools, c.text)
			if content != c.content || !reflect.DeepEqual(calls, c.calls) {
				t.Errorf("Parse(%q)\n got content %q calls %+v\nwant content %q calls %+v", c.text, content, calls, c.content, c.calls)
			}
		})
	}
}

// TestParseStreaming feeds each case in random pieces (and byte by byte):
// the events must add up to Parse's result, and no content event may show
// a marker of a call that is later parsed.
func TestParseStreaming(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			for trial := range 20 {
				p := NewParser(c.f, tools)
				var content strings.Builder
				var calls []Call
				collect := func(evs []Event) {
					for _, e := range evs {
						switch {
						case e.Call != nil:
							calls = append(calls, *e.Call)
						case e.Content == "":
							t.Fatal("empty content event")
						default:
							if len(c.calls) > 0 && (strings.Contains(e.Content, "<tool_call>") || strings.Contains(e.Content, "[TOOL_CALLS]") || strings.Contains(e.Content, "<|python_tag|>") || strings.Contains(e.Content, "<|tool_call>")) {
								t.Fatalf("content event %q shows a call marker", e.Content)
							}
							content.WriteString(e.Content)
						}
					}
				}
				for s := c.text; s != ""; {
					n := 1
					if trial > 0 {
						n = 1 + rng.IntN(8)
					}
					n = min(n, len(s))
					collect(p.Push(s[:n]))
					s = s[n:]
				}
				collect(p.Finish())
				if content.String() != c.content || !reflect.DeepEqual(calls, c.calls) {
					t.Fatalf("trial %d: got content %q calls %+v, want %q %+v", trial, content.String(), calls, c.content, c.calls)
				}
			}
		})
	}
}

// TestHoldBack: text that may start a call is not shown until known.
func TestHoldBack(t *testing.T) {
	p := NewParser(Hermes, tools)
	if evs := p.Push("Checking <tool_"); len(evs) != 1 || evs[0].Content != "Checking" {
		t.Fatalf("events %+v, want only \"Checking\"", evs)
	}
	if evs := p.Push("call>{\"name\": \"add\", "); len(evs) != 0 {
		t.Fatalf("events %+v inside a call", evs)
	}
	evs := p.Push("\"arguments\": {\"a\": 1}}</tool_call>")
	if len(evs) != 1 || evs[0].Call == nil || evs[0].Call.Name != "add" {
		t.Fatalf("events %+v, want the call", evs)
	}
	p = NewParser(Hermes, tools)
	if evs := p.Push("a <tool"); len(evs) != 1 || evs[0].Content != "a" {
		t.Fatalf("events %+v", evs)
	}
	if evs := p.Push("box> b"); len(evs) != 1 || evs[0].Content != " <toolbox> b" {
		t.Fatalf("events %+v, want the held text released", evs)
	}
}

// TestCut: a reply cut by the token limit keeps its content and its
// complete calls; the markup of the call it was cut in (or of a marker's
// start) is dropped, where Finish would show it as content.
func TestCut(t *testing.T) {
	weather := Call{Name: "get_weather", Arguments: `{"city":"Paris"}`}
	for _, c := range []struct {
		name    string
		f       Format
		text    string
		content string
		calls   []Call
	}{
		{"hermes/open call", Hermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"argu", "Let me check.", nil},
		{"hermes/marker start", Hermes, "Let me check.\n<tool_ca", "Let me check.", nil},
		{"hermes/second call open", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\"", "", []Call{weather}},
		// complete but for its close tag: a call, as with Finish
		{"hermes/unclosed complete", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n", "", []Call{weather}},
		{"hermes/plain text", Hermes, "Just text, cut", "Just text, cut", nil},
		{"llama3/open json", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"ci", "", nil},
		{"llama3/python tag", Llama3, "Sure <|python_tag|>get_weather(ci", "Sure", nil},
		{"mistral/open", Mistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"argu", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, size := range []int{1, 3, len(c.text)} {
				p := NewParser(c.f, tools)
				var content strings.Builder
				var calls []Call
				var evs []Event
				for s := c.text; s != ""; s = s[min(size, len(s)):] {
					evs = append(evs, p.Push(s[:min(size, len(s))])...)
				}
				for _, e := range append(evs, p.Cut()...) {
					if e.Call != nil {
						calls = append(calls, *e.Call)
					} else {
						content.WriteString(e.Content)
					}
				}
				if content.String() != c.content || !reflect.DeepEqual(calls, c.calls) {
					t.Errorf("pieces of %d: content %q calls %+v, want %q %+v", size, content.String(), calls, c.content, c.calls)
				}
			}
			// Finish shows the held text as content, for contrast
			if c.name == "hermes/open call" {
				if content, _ := Parse(c.f, tools, c.text); !strings.Contains(content, "<tool_call>") {
					t.Errorf("Finish: content %q", content)
				}
			}
		})
	}
}

// TestXMLStringParams: with the schemas' string parameters known, a value
// that reads as JSON stays text; without, it is the JSON value.
func TestXMLStringParams(t *testing.T) {
	text := "<tool_call>\n<function=set>\n<parameter=code>\n42\n</parameter>\n<parameter=n>\n42\n</parameter>\n</function>\n</tool_call>"
	for _, c := range []struct {
		str  func(fn, param string) bool
		want string
	}{
		{nil, `{"code":42,"n":42}`},
		{func(fn, param string) bool { return fn == "set" && param == "code" }, `{"code":"42","n":42}`},
	} {
		p := NewParser(XML, nil)
		p.SetStringParams(c.str)
		evs := append(p.Push(text), p.Finish()...)
		if len(evs) != 1 || evs[0].Call == nil || evs[0].Call.Arguments != c.want {
			t.Errorf("events %+v, want arguments %s", evs, c.want)
		}
	}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		src    string
		chatML bool
		want   Format
	}{
		{"... <tool_call>\\n{\"name\": ...", true, Hermes},
		{"[AVAILABLE_TOOLS] ... [TOOL_CALLS]", false, Mistral},
		{"<|start_header_id|>ipython<|end_header_id|> ... tools", false, Llama3},
		{"{{'<|im_start|>' + message.role}}", true, Hermes},
		{"{% if tools %}<|im_start|> ... <|tool_call|>", true, Generic},
		{"{% if tools %}<start_of_turn>", false, Generic},
		{"<tool_call>\n<function=' + name + '>\n<parameter=", true, XML},
		{"{{- '<|tool_call>call:' + function['name'] }}", false, Gemma4Calls},
		{"<|start|>assistant<|channel|>commentary to=functions.", false, HarmonyCalls},
	} {
		if got := Detect(c.src, c.chatML); got != c.want {
			t.Errorf("Detect(%q) = %v, want %v", c.src, got, c.want)
		}
	}
	if id := NewID(Mistral); len(id) != 9 {
		t.Errorf("Mistral id %q", id)
	}
	if id := NewID(Hermes); !strings.HasPrefix(id, "call_") {
		t.Errorf("id %q", id)
	}
}

func FuzzParser(f *testing.F) {
	for _, c := range parseCases {
		f.Add(int(c.f), c.text, 3)
	}
	f.Fuzz(func(t *testing.T, format int, text string, step int) {
		fm := Format(uint(format) % uint(len(formatNames)))
		whole, calls := Parse(fm, tools, text)
		p := NewParser(fm, tools)
		var b strings.Builder
		var n int
		step = 1 + int(uint(step)%16)
		for s := text; s != ""; {
			k := min(step, len(s))
			for _, e := range p.Push(s[:k]) {
				b.WriteString(e.Content)
				if e.Call != nil {
					n++
				}
			}
			s = s[k:]
		}
		for _, e := range p.Finish() {
			b.WriteString(e.Content)
			if e.Call != nil {
				n++
			}
		}
		if b.String() != whole || n != len(calls) {
			t.Fatalf("streamed %q (%d calls) != whole %q (%d calls)", b.String(), n, whole, len(calls))
		}
	})
}

// BenchmarkParserLongCall: a call with 64 KiB of arguments streamed in
// 4-byte pieces (about a token each).
func BenchmarkParserLongCall(b *testing.B) {
	for _, f := range []Format{Hermes, Llama3, XML, Gemma4Calls} {
		arg := strings.Repeat("x", 64<<10)
		text := `{"name": "add", "arguments": {"a": "` + arg + `"}}`
		switch f {
		case Hermes:
			text = "<tool_call>\n" + text + "\n</tool_call>"
		case XML:
			text = "<tool_call>\n<function=add>\n<parameter=a>\n" + arg + "\n</parameter>\n</function>\n</tool_call>"
		case Gemma4Calls:
			text = "<|tool_call>call:add{a:<|\"|>" + arg + "<|\"|>}<tool_call|>"
		}
		b.Run(f.String(), func(b *testing.B) {
			for b.Loop() {
				p := NewParser(f, tools)
				n := 0
				for s := text; s != ""; {
					k := min(4, len(s))
					n += len(p.Push(s[:k]))
					s = s[k:]
				}
				n += len(p.Finish())
				if n != 1 {
					b.Fatalf("%d events", n)
				}
			}
		})
	}
}

// TestDetectRealTemplates: the formats of the real templates in
// model/chat/testdata.
func TestDetectRealTemplates(t *testing.T) {
	for name, want := range map[string]Format{
		"Qwen-Qwen2.5-7B-Instruct":                 Hermes,
		"Qwen-Qwen3-0.6B":                          Hermes,
		"Qwen-QwQ-32B":                             Hermes,
		"meta-llama-Llama-3.1-8B-Instruct":         Llama3,
		"meta-llama-Llama-3.2-3B-Instruct":         Llama3,
		"meta-llama-Llama-3.3-70B-Instruct":        Llama3,
		"mistralai-Mistral-Nemo-Instruct-2407":     Mistral,
		"Mistral-Small-3.2-24B-Instruct-2506":      Mistral,
		"LFM2-8B-A1B":                              Generic, // <|tool_call_start|>[f(x=1)]: not parsed
		"openai-gpt-oss-120b":                      HarmonyCalls,
		"google-gemma-4-31B-it":                    Gemma4Calls,
		"mistralai-Ministral-3-14B-Reasoning-2512": Mistral,
		"Qwen3.5-4B":                               XML,
		"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16":      XML,
	} {
		src, err := os.ReadFile(filepath.Join("..", "chat", "testdata", "templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		chatML := strings.Contains(string(src), "<|im_start|>")
		if got := Detect(string(src), chatML); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
