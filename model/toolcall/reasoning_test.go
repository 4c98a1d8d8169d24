package toolcall

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type splitCase struct {
	name        string
	r           Reasoning
	inReasoning bool
	inline      bool
	tools       Format // with tools offered when not Generic
	text        string
	reasoning   string
	content     string
	calls       []Call
}

var weatherCall = Call{Name: "get_weather", Arguments: `{"city":"Paris"}`}

// Real-looking outputs of each reasoning format, including unclosed,
// malformed and plain ones.
var splitCases = []splitCase{
	// Qwen3: the model opens <think> itself
	{"think/qwen3", Think, false, false, Generic, "<think>\nThe user asks 2+2.\nThat is 4.\n</think>\n\n2 + 2 = 4.", "The user asks 2+2.\nThat is 4.", "2 + 2 = 4.", nil},
	{"think/qwen3-no-think", Think, false, false, Generic, "Hello there, <think> is a tag.", "", "Hello there, <think> is a tag.", nil},
	{"think/leading-space", Think, false, false, Generic, "\n <think>a</think>b", "a", "b", nil},
	{"think/empty", Think, false, false, Generic, "<think>\n\n</think>\n\nAnswer", "", "Answer", nil},
	// Qwen3.5 / Nemotron 3 / QwQ: the prompt opened <think>
	{"think/opened", Think, true, false, Generic, "Let me think.\n</think>\n\nParis.", "Let me think.", "Paris.", nil},
	{"think/never-closed", Think, true, false, Generic, "Still thinking about </thin", "Still thinking about </thin", "", nil},
	{"think/inline", Think, false, true, Generic, "<think>\nhmm\n</think>\n\nok", "", "<think>\nhmm\n</think>\n\nok", nil},
	{"think/inline-opened", Think, true, true, Generic, "hmm\n</think>\n\nok", "", "hmm\n</think>\n\nok", nil},
	{"think/tool-call-ends", Think, true, false, XML, "I need the weather.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
		"I need the weather.", "", []Call{weatherCall}},
	{"think/hermes-tag-inside", Think, false, false, Hermes, "<think>I could write <tool_call> here.</think>ok", "I could write <tool_call> here.", "ok", nil},
	{"think/then-hermes", Think, false, false, Hermes, "<think>check</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"check", "", []Call{weatherCall}},
	// Ministral 3 / Magistral
	{"mistral/think", MistralThink, false, false, Generic, "[THINK]Simple: 4.[/THINK]The answer is 4.", "Simple: 4.", "The answer is 4.", nil},
	{"mistral/think-call", MistralThink, false, false, Mistral, "[THINK]Need weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
		"Need weather.", "", []Call{weatherCall}},
	{"mistral/no-think", MistralThink, false, false, Generic, "Plain [THINK answer", "", "Plain [THINK answer", nil},
	// Gemma 4
	{"gemma4/thought", Gemma4, false, false, Generic, "<|channel>thought\nThinking hard.<channel|>The answer.", "Thinking hard.", "The answer.", nil},
	{"gemma4/two-thoughts", Gemma4, false, false, Generic, "<|channel>thought\nfirst<channel|>A<|channel>thought second<channel|>B", "firstsecond", "AB", nil},
	{"gemma4/stray", Gemma4, false, false, Generic, "Answer<channel|> more<|channel>x", "", "Answer morex", nil},
	{"gemma4/call", Gemma4, false, false, Gemma4Calls, "<|channel>thought\nweather?<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
		"weather?", "", []Call{weatherCall}},
	// gpt-oss harmony (the prompt ends with <|start|>assistant)
	{"harmony/final", Harmony, false, false, Generic, "<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
		"User greets. Reply.", "Hello!", nil},
	{"harmony/final-return", Harmony, false, false, Generic, "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>Hi<|return|>", "x", "Hi", nil},
	{"harmony/call", Harmony, false, false, HarmonyCalls, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
		"Need weather.", "", []Call{weatherCall}},
	{"harmony/call-in-role", Harmony, false, false, HarmonyCalls, "<|channel|>analysis<|message|>w<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
		"w", "", []Call{weatherCall}},
	{"harmony/preamble", Harmony, false, false, HarmonyCalls, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}",
		"", "Checking.", []Call{weatherCall}},
	{"harmony/call-no-tools", Harmony, false, false, Generic, "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}<|call|>",
		"", "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}<|call|>", nil},
	{"harmony/bad-args", Harmony, false, false, HarmonyCalls, "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":<|call|>",
		"", "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":<|call|>", nil},
	{"harmony/builtin", Harmony, false, false, HarmonyCalls, "<|channel|>analysis to=browser.search<|message|>{\"q\":1}<|call|>",
		"", "<|channel|>analysis to=browser.search<|message|>{\"q\":1}<|call|>", nil},
	{"harmony/unclosed-analysis", Harmony, false, false, Generic, "<|channel|>analysis<|message|>thinking and thinking", "thinking and thinking", "", nil},
	{"harmony/plain", Harmony, false, false, Generic, "Just an answer, no channels.", "", "Just an answer, no channels.", nil},
	{"harmony/inline", Harmony, false, true, Generic, "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>c",
		"", "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>c", nil},
	{"harmony/header-only", Harmony, false, false, Generic, "<|channel|>analysis<|message|>r<|end|><|start|>assistant", "r", "", nil},
	// no reasoning format: all content
	{"none", NoReasoning, false, false, Generic, "<think>x</think>y", "", "<think>x</think>y", nil},
}

func (c splitCase) output() *Output {
	cfg := OutputConfig{Reasoning: c.r, InReasoning: c.inReasoning, Inline: c.inline, Format: c.tools}
	if c.tools != Generic {
		cfg.Tools, cfg.Names = true, tools
	}
	return NewOutput(cfg)
}

type collected struct {
	reasoning, content strings.Builder
	calls              []Call
}

func (cl *collected) add(t *testing.T, evs []Event) {
	t.Helper()
	for _, e := range evs {
		n := 0
		if e.Reasoning != "" {
			n++
			cl.reasoning.WriteString(e.Reasoning)
		}
		if e.Content != "" {
			n++
			cl.content.WriteString(e.Content)
		}
		if e.Call != nil {
			n++
			cl.calls = append(cl.calls, *e.Call)
		}
		if n != 1 {
			t.Fatalf("event %+v: want exactly one of reasoning, content, call", e)
		}
	}
}

// TestSplit feeds each case whole, byte by byte and split in two at every
// byte: every way gives the same reasoning, content and calls.
func TestSplit(t *testing.T) {
	for _, c := range splitCases {
		t.Run(c.name, func(t *testing.T) {
			var cuts [][]int
			cuts = append(cuts, nil)
			var bytewise []int
			for i := 1; i < len(c.text); i++ {
				cuts = append(cuts, []int{i})
				bytewise = append(bytewise, i)
			}
			cuts = append(cuts, bytewise)
			for _, at := range cuts {
				o := c.output()
				var cl collected
				prev := 0
				for _, i := range append(at, len(c.text)) {
					cl.add(t, o.Push(c.text[prev:i]))
					prev = i
				}
				cl.add(t, o.Finish())
				if cl.reasoning.String() != c.reasoning || cl.content.String() != c.content || !reflect.DeepEqual(cl.calls, c.calls) {
					t.Fatalf("split at %v:\n got reasoning %q content %q calls %+v\nwant reasoning %q content %q calls %+v",
						at, cl.reasoning.String(), cl.content.String(), cl.calls, c.reasoning, c.content, c.calls)
				}
			}
		})
	}
}

// TestSplitHoldsLittle: reasoning streams as it comes; only what may be
// the start of a marker is held back.
func TestSplitHoldsLittle(t *testing.T) {
	s := NewSplitter(Think, true, false)
	if got := s.Push("abc </th"); len(got) != 1 || got[0].Reasoning != "abc" {
		t.Fatalf("segments %+v, want reasoning \"abc\" (\" </th\" held)", got)
	}
	if got := s.Push("x"); len(got) != 1 || got[0].Reasoning != " </thx" {
		t.Fatalf("segments %+v, want the held text released", got)
	}
	s = NewSplitter(Harmony, false, false)
	if got := s.Push("<|channel|>analysis<|message|>deep "); len(got) != 1 || got[0].Reasoning != "deep" {
		t.Fatalf("segments %+v", got)
	}
	if got := s.Push("thought<|e"); len(got) != 1 || got[0].Reasoning != " thought" {
		t.Fatalf("segments %+v", got)
	}
}

// TestSplitCut: a reply cut inside a harmony call drops the call's markup;
// open reasoning is kept as reasoning.
func TestSplitCut(t *testing.T) {
	o := NewOutput(OutputConfig{Reasoning: Harmony, Tools: true, Format: HarmonyCalls, Names: tools})
	var cl collected
	cl.add(t, o.Push("<|channel|>analysis<|message|>need it<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"ci"))
	cl.add(t, o.Cut())
	if cl.reasoning.String() != "need it" || cl.content.String() != "" || cl.calls != nil {
		t.Errorf("reasoning %q content %q calls %v", cl.reasoning.String(), cl.content.String(), cl.calls)
	}
	o = NewOutput(OutputConfig{Reasoning: Think, InReasoning: true})
	cl = collected{}
	cl.add(t, o.Push("half a thou"))
	cl.add(t, o.Cut())
	if cl.reasoning.String() != "half a thou" || cl.content.String() != "" {
		t.Errorf("reasoning %q content %q", cl.reasoning.String(), cl.content.String())
	}
}

func TestInReasoning(t *testing.T) {
	for _, c := range []struct {
		r      Reasoning
		prompt string
		want   bool
	}{
		{Think, "<|im_start|>assistant\n<think>\n", true},
		{Think, "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{Think, "<|im_start|>assistant\n<think></think>", false},
		{Think, "<|im_start|>assistant\n", false},
		{Harmony, "<|start|>assistant", false},
		{Gemma4, "<|turn>model\n", false},
		{NoReasoning, "<think>\n", false},
	} {
		if got := c.r.InReasoning(c.prompt); got != c.want {
			t.Errorf("%v.InReasoning(%q) = %v", c.r, c.prompt, got)
		}
	}
}

// TestDetectReasoningRealTemplates: the reasoning formats of the real
// templates in model/chat/testdata.
func TestDetectReasoningRealTemplates(t *testing.T) {
	for name, want := range map[string]Reasoning{
		"openai-gpt-oss-120b":                      Harmony,
		"google-gemma-4-31B-it":                    Gemma4,
		"mistralai-Ministral-3-14B-Reasoning-2512": MistralThink,
		"Qwen3.5-4B":                               Think,
		"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16":      Think,
		"Qwen-Qwen3-0.6B":                          Think,
		"Qwen-QwQ-32B":                             Think,
		"Qwen-Qwen2.5-7B-Instruct":                 NoReasoning,
		"Mistral-Small-3.2-24B-Instruct-2506":      NoReasoning,
		"google-gemma-3-it":                        NoReasoning,
		"meta-llama-Llama-3.1-8B-Instruct":         NoReasoning,
	} {
		src, err := os.ReadFile(filepath.Join("..", "chat", "testdata", "templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		if got := DetectReasoning(string(src)); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// FuzzSplit: any text, in any pieces, in any format: no panic, every event
// is one thing, and the pieces give what the whole gives.
func FuzzSplit(f *testing.F) {
	for _, c := range splitCases {
		f.Add(int(c.r), int(c.tools), c.inReasoning, c.inline, c.text, 3)
	}
	f.Fuzz(func(t *testing.T, r, tf int, inReasoning, inline bool, text string, step int) {
		c := splitCase{r: Reasoning(uint(r) % uint(len(reasoningNames))), tools: Format(uint(tf) % uint(len(formatNames))), inReasoning: inReasoning, inline: inline}
		whole := c.output()
		var w collected
		w.add(t, whole.Push(text))
		w.add(t, whole.Finish())
		o := c.output()
		var cl collected
		step = 1 + int(uint(step)%16)
		for s := text; s != ""; s = s[min(step, len(s)):] {
			cl.add(t, o.Push(s[:min(step, len(s))]))
		}
		cl.add(t, o.Finish())
		if cl.reasoning.String() != w.reasoning.String() || cl.content.String() != w.content.String() || !reflect.DeepEqual(cl.calls, w.calls) {
			t.Fatalf("pieces of %d: reasoning %q content %q calls %v; whole: %q %q %v", step,
				cl.reasoning.String(), cl.content.String(), cl.calls, w.reasoning.String(), w.content.String(), w.calls)
		}
	})
}

// BenchmarkSplitterLong: 64 KiB of reasoning, and a harmony call with 64
// KiB of arguments, streamed in 4-byte pieces (about a token each): the
// cost must stay linear in the text.
func BenchmarkSplitterLong(b *testing.B) {
	long := strings.Repeat("x", 64<<10)
	for _, c := range []struct {
		name  string
		r     Reasoning
		in    bool
		text  string
		calls int
	}{
		{"think", Think, true, long + "</think>answer", 0},
		{"harmony-call", Harmony, false, "<|channel|>commentary to=functions.add<|message|>{\"a\": \"" + long + "\"}<|call|>", 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				o := NewOutput(OutputConfig{Reasoning: c.r, InReasoning: c.in, Tools: true, Format: HarmonyCalls, Names: tools})
				n := 0
				count := func(evs []Event) {
					for _, e := range evs {
						if e.Call != nil {
							n++
						}
					}
				}
				for s := c.text; s != ""; s = s[min(4, len(s)):] {
					count(o.Push(s[:min(4, len(s))]))
				}
				count(o.Finish())
				if n != c.calls {
					b.Fatalf("%d calls", n)
				}
			}
		})
	}
}
