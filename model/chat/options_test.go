package chat

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderOptions: enable_thinking and reasoning_effort reach the
// templates that read them, and an assistant turn's reasoning reaches the
// template as reasoning_content (gpt-oss: thinking).
func TestRenderOptions(t *testing.T) {
	c := loadCases(t)
	off := false
	user := []Message{{Role: "user", Content: "2+2?"}}
	for _, tc := range []struct {
		file       string
		msgs       []Message
		opts       RenderOptions
		suffix     string // the prompt ends with it
		contains   string
		notContain string
	}{
		{"Qwen3.5-4B", user, RenderOptions{}, "<|im_start|>assistant\n<think>\n", "", ""},
		{"Qwen3.5-4B", user, RenderOptions{Thinking: &off}, "<|im_start|>assistant\n<think>\n\n</think>\n\n", "", ""},
		{"Qwen-Qwen3-0.6B", user, RenderOptions{Thinking: &off}, "<|im_start|>assistant\n<think>\n\n</think>\n\n", "", ""},
		{"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", user, RenderOptions{Thinking: &off}, "<|im_start|>assistant\n<think></think>", "", ""},
		{"google-gemma-4-31B-it", user, RenderOptions{}, "<|turn>model\n", "<|think|>", ""},
		{"google-gemma-4-31B-it", user, RenderOptions{Thinking: &off}, "<|turn>model\n<|channel>thought\n<channel|>", "", "<|think|>"},
		{"openai-gpt-oss-120b", user, RenderOptions{ReasoningEffort: "low"}, "<|start|>assistant", "Reasoning: low\n", "Reasoning: medium"},
		{"openai-gpt-oss-120b", user, RenderOptions{}, "<|start|>assistant", "Reasoning: medium\n", ""},
		// the reasoning of a tool-call turn after the last user message is kept
		{"Qwen3.5-4B", []Message{user[0], {Role: "assistant", Reasoning: "need the tool", ToolCalls: []ToolCall{{ID: "c1", Name: "add", Arguments: `{"a":1}`}}}, {Role: "tool", Content: "2", ToolCallID: "c1"}},
			RenderOptions{}, "<think>\n", "<think>\nneed the tool\n</think>\n\n<tool_call>", ""},
		{"mistralai-Ministral-3-14B-Reasoning-2512", []Message{user[0], {Role: "assistant", Content: "4.", Reasoning: "Simple sum."}, {Role: "user", Content: "3+3?"}},
			RenderOptions{}, "[INST]3+3?[/INST]", "[INST]2+2?[/INST][THINK]Simple sum.[/THINK]4.</s>", ""},
		{"openai-gpt-oss-120b", []Message{user[0], {Role: "assistant", Content: "ignored", Reasoning: "need the tool", ToolCalls: []ToolCall{{ID: "c1", Name: "add", Arguments: `{"a":1}`}}}, {Role: "tool", Content: "2", ToolCallID: "c1"}},
			RenderOptions{}, "<|start|>assistant", "<|channel|>analysis<|message|>need the tool<|end|>", "ignored"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var tt testTemplate
			for _, x := range c.Templates {
				if x.stem() == tc.file {
					tt = x
				}
			}
			tpl := newFromFile(t, c, tt)
			var tools []Tool
			if len(tc.msgs) > 1 && len(tc.msgs[1].ToolCalls) > 0 {
				tools = []Tool{{Name: "add", Parameters: []byte(`{"type":"object","properties":{"a":{"type":"number"}}}`)}}
			}
			r, err := tpl.RenderWith(tc.msgs, tools, true, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(r.Prompt, tc.suffix) || !strings.Contains(r.Prompt, tc.contains) || tc.notContain != "" && strings.Contains(r.Prompt, tc.notContain) {
				t.Errorf("%s %+v: prompt %q; want suffix %q, containing %q, not %q", filepath.Base(tt.File), tc.opts, r.Prompt, tc.suffix, tc.contains, tc.notContain)
			}
		})
	}
}
