package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// toolCases is testdata/tool_cases.json: conversations with tools, tool
// calls and tool results in Hugging Face's format, and their renders by
// Python's Jinja2 (oracle.py).
type toolCases struct {
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	Conversations map[string]struct {
		Messages []hfMessage `json:"messages"`
	} `json:"conversations"`
	Cases []struct {
		File         string `json:"file"`
		BOS          string `json:"bos"`
		EOS          string `json:"eos"`
		Conversation string `json:"conversation"`
		Expected     string `json:"expected"`
		Raised       string `json:"raised"`
	} `json:"cases"`
}

type hfMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
	Name       string `json:"name"`
}

func loadToolCases(t *testing.T) (toolCases, []Tool) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "tool_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tc toolCases
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	var tools []Tool
	for _, x := range tc.Tools {
		tools = append(tools, Tool{Name: x.Function.Name, Description: x.Function.Description, Parameters: x.Function.Parameters})
	}
	return tc, tools
}

func toMessages(hf []hfMessage) []Message {
	var out []Message
	for _, m := range hf {
		msg := Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: string(c.Function.Arguments)})
		}
		out = append(out, msg)
	}
	return out
}

// TestToolTemplates renders conversations with tools through real
// templates (Qwen2.5, Qwen3, Llama 3.1/3.2, Mistral Nemo, Mistral Small
// 3.2) and compares with transformers' rendering.
func TestToolTemplates(t *testing.T) {
	tc, tools := loadToolCases(t)
	clock := loadCases(t).clock(t)
	for _, c := range tc.Cases {
		t.Run(strings.TrimSuffix(filepath.Base(c.File), ".jinja")+"/"+c.Conversation, func(t *testing.T) {
			tpl, err := New(readFile(t, filepath.Join("testdata", c.File)), c.BOS, c.EOS, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			if !tpl.SupportsTools() {
				t.Fatal("SupportsTools is false")
			}
			r, err := tpl.RenderTools(toMessages(tc.Conversations[c.Conversation].Messages), tools, true)
			if c.Raised != "" {
				if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), c.Raised) {
					t.Fatalf("got %v, want the template to raise %q", err, c.Raised)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Fallback {
				t.Error("rendered by the fallback")
			}
			if r.Prompt != c.Expected {
				t.Errorf("prompt differs from transformers'\n got: %q\nwant: %q", r.Prompt, c.Expected)
			}
		})
	}
}

// TestBuiltinChatMLTools: the built-in ChatML rendering of tools is
// Qwen2.5's template's, and a template without tool support is refused.
func TestBuiltinChatMLTools(t *testing.T) {
	tc, tools := loadToolCases(t)
	for _, c := range tc.Cases {
		if !strings.Contains(c.File, "Qwen2.5") {
			continue
		}
		t.Run(c.Conversation, func(t *testing.T) {
			tpl, err := New(readFile(t, filepath.Join("testdata", c.File)), c.BOS, c.EOS)
			if err != nil {
				t.Fatal(err)
			}
			tpl.jinja = nil // as if gonja had failed on it
			r, err := tpl.RenderTools(toMessages(tc.Conversations[c.Conversation].Messages), tools, true)
			if err != nil {
				t.Fatal(err)
			}
			if r.Prompt != c.Expected {
				t.Errorf("built-in prompt differs from the template's\n got: %q\nwant: %q", r.Prompt, c.Expected)
			}
		})
	}
	// The ChatML default (no template) renders tools the same way, without
	// Qwen's default system prompt.
	msgs := []Message{{Role: "user", Content: "hi"}}
	r, err := Default().RenderTools(msgs, tools[:1], true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Prompt, "<|im_start|>system\n# Tools\n\n") || !strings.Contains(r.Prompt, `"name": "get_weather"`) || !strings.HasSuffix(r.Prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("default ChatML with tools: %q", r.Prompt)
	}
	// Gemma 2's template has no tools: refused, not dropped.
	gemma, err := New(readFile(t, filepath.Join("testdata", "templates", "google-gemma-2-2b-it.jinja")), "<bos>", "<eos>")
	if err != nil {
		t.Fatal(err)
	}
	if gemma.SupportsTools() {
		t.Error("gemma 2 SupportsTools")
	}
	if _, err := gemma.RenderTools(msgs, tools, true); !errors.Is(err, ErrNoToolSupport) {
		t.Errorf("gemma 2 with tools: %v, want ErrNoToolSupport", err)
	}
	// Bad arguments JSON is an error, not a panic.
	bad := []Message{{Role: "user", Content: "x"}, {Role: "assistant", ToolCalls: []ToolCall{{ID: "a", Name: "f", Arguments: "{"}}}}
	if _, err := Default().RenderTools(bad, nil, true); err == nil {
		t.Error("malformed arguments accepted")
	}
}
