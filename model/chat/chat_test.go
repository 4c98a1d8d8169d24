// Tests of rendering real chat templates against expected prompts: our
// fixtures in testdata/expected (made by testdata/oracle.py with Python's
// Jinja2 set up as transformers and llama-server do) and the expected
// outputs of llama.cpp's tests/test-chat-template.cpp.

package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testCases struct {
	Now           string                      `json:"now"`
	Conversations map[string]testConversation `json:"conversations"`
	Templates     []testTemplate              `json:"templates"`
}

type testConversation struct {
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
	Messages            []Message `json:"messages"`
}

type testTemplate struct {
	File     string `json:"file"`
	BOS      string `json:"bos"`
	EOS      string `json:"eos"`
	Family   string `json:"family"`
	EmitsBOS bool   `json:"emits_bos"`
}

func (tt testTemplate) stem() string {
	return strings.TrimSuffix(filepath.Base(tt.File), ".jinja")
}

func loadCases(t *testing.T) testCases {
	t.Helper()
	b, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var c testCases
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("testdata/cases.json: %v", err)
	}
	return c
}

func (c testCases) clock(t *testing.T) func() time.Time {
	t.Helper()
	now, err := time.Parse("2006-01-02T15:04:05", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	return func() time.Time { return now }
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	return readFileB(t, path)
}

func readFileB(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// newFromFile parses a testdata template with the fixed test clock.
func newFromFile(t *testing.T, c testCases, tt testTemplate) *Template {
	t.Helper()
	tpl, err := New(readFile(t, filepath.Join("testdata", tt.File)), tt.BOS, tt.EOS, WithClock(c.clock(t)))
	if err != nil {
		t.Fatalf("New(%s): %v", tt.File, err)
	}
	return tpl
}

// expected returns the oracle's prompt, or raised=true when the template
// refuses the conversation.
func expected(t *testing.T, tt testTemplate, conv string) (prompt string, raised bool) {
	t.Helper()
	s := readFile(t, filepath.Join("testdata", "expected", tt.stem(), conv+".txt"))
	if rest, ok := strings.CutPrefix(s, "RAISED: "); ok {
		return rest, true
	}
	return s, false
}

func TestRealTemplates(t *testing.T) {
	c := loadCases(t)
	for _, tt := range c.Templates {
		t.Run(tt.stem(), func(t *testing.T) {
			tpl := newFromFile(t, c, tt)
			if got := tpl.Family().String(); got != tt.Family {
				t.Errorf("Family() = %s, want %s", got, tt.Family)
			}
			if tpl.UsedFallback() {
				t.Errorf("UsedFallback() = true, want Jinja rendering")
			}
			if got := tpl.EmitsBOS(); got != tt.EmitsBOS {
				t.Errorf("EmitsBOS() = %v, want %v", got, tt.EmitsBOS)
			}
			for name, conv := range c.Conversations {
				t.Run(name, func(t *testing.T) {
					want, raised := expected(t, tt, name)
					r, err := tpl.RenderDetailed(conv.Messages, conv.AddGenerationPrompt)
					if raised {
						if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), want) {
							t.Fatalf("err = %v, want ErrRejected %q", err, want)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if r.Fallback {
						t.Errorf("rendered by the fallback")
					}
					if r.Prompt != want {
						t.Errorf("prompt mismatch\n got: %q\nwant: %q", r.Prompt, want)
					}
				})
			}
		})
	}
}

// builtinDiffers lists, per template, the conversations on which the
// built-in renderer is known not to reproduce the real template, and why.
var builtinDiffers = map[string]map[string]string{
	"Qwen-Qwen3-0.6B": {
		"thinking":            "the template drops the reasoning of earlier assistant turns",
		"ends_with_assistant": "the template gives an answer after the last user turn an empty <think></think>",
	},
	"Qwen-QwQ-32B": {
		"*": "the generation prompt opens a <think> block and history reasoning is dropped",
	},
	"Qwen3.5-4B": {
		"*": "the generation prompt opens a <think> block and history reasoning is dropped",
	},
	"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": {
		"*": "the generation prompt opens a <think> block and answers get an empty <think></think>",
	},
	"mistralai-Ministral-3-14B-Reasoning-2512": {
		"*": "the template inserts its long default system prompt (thinking instructions)",
	},
	"openai-gpt-oss-120b": {
		"*": "harmony format: no built-in renderer",
	},
	"google-gemma-4-31B-it": {
		"*": "Gemma 4's <|turn> format: no built-in renderer",
	},
	"Mistral-Small-3.2-24B-Instruct-2506": {
		"no_system": "the template inserts its long default system prompt",
		"single":    "the template inserts its long default system prompt",
		"unicode":   "the template inserts its long default system prompt",
		"thinking":  "the template inserts its long default system prompt",
	},
}

// TestBuiltinMatchesTemplate renders every real template's conversations
// with the built-in renderer of its family and compares with the template.
func TestBuiltinMatchesTemplate(t *testing.T) {
	c := loadCases(t)
	for _, tt := range c.Templates {
		t.Run(tt.stem(), func(t *testing.T) {
			tpl := newFromFile(t, c, tt)
			builtin := *tpl
			builtin.jinja = nil // force the built-in renderer
			skip := builtinDiffers[tt.stem()]
			for name, conv := range c.Conversations {
				t.Run(name, func(t *testing.T) {
					if why, ok := skip["*"]; ok {
						t.Skip(why)
					}
					if why, ok := skip[name]; ok {
						t.Skip(why)
					}
					want, raised := expected(t, tt, name)
					if raised {
						t.Skip("the template rejects this conversation; the built-in renderer does not check roles")
					}
					got, err := builtin.Render(conv.Messages, conv.AddGenerationPrompt)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Errorf("built-in %s renderer differs from the template\n got: %q\nwant: %q", tpl.Family(), got, want)
					}
				})
			}
		})
	}
}

// llamaCppConversation is the conversation of llama.cpp's test-chat-template.cpp.
var llamaCppConversation = []Message{
	{Role: "system", Content: "You are a helpful assistant"},
	{Role: "user", Content: "Hello"},
	{Role: "assistant", Content: "Hi there"},
	{Role: "user", Content: "Who are you"},
	{Role: "assistant", Content: "   I am an assistant   "},
	{Role: "user", Content: "Another question"},
}

// TestLlamaCppCases checks the templates of llama.cpp's
// tests/test-chat-template.cpp against its expected Jinja outputs.
func TestLlamaCppCases(t *testing.T) {
	var cases []struct {
		Name          string    `json:"name"`
		BOS           string    `json:"bos"`
		EOS           string    `json:"eos"`
		ExtraMessages []Message `json:"extra_messages"`
		Template      string    `json:"template"`
		Expected      string    `json:"expected"`
	}
	if err := json.Unmarshal([]byte(readFile(t, "testdata/llamacpp_cases.json")), &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			tpl, err := New(tc.Template, tc.BOS, tc.EOS)
			if err != nil {
				t.Fatal(err)
			}
			msgs := append(append([]Message(nil), llamaCppConversation...), tc.ExtraMessages...)
			r, err := tpl.RenderDetailed(msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			if r.Fallback {
				t.Errorf("rendered by the fallback")
			}
			if r.Prompt != tc.Expected {
				t.Errorf("prompt mismatch\n got: %q\nwant: %q", r.Prompt, tc.Expected)
			}
		})
	}
}
