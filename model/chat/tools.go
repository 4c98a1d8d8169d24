// This file passes tool definitions, assistant tool calls and tool results
// to templates the way Hugging Face's apply_chat_template does: tools as a
// list of {"type": "function", "function": {name, description, parameters}},
// an assistant turn's calls as message.tool_calls (each {id, type,
// function: {name, arguments}}, arguments as a mapping, as transformers and
// llama.cpp's minja pass them), and a tool result as a "tool" message with
// tool_call_id and name. JSON objects become ordered dicts, so that tojson
// writes keys in the order the client sent them, as Python does.
//
// A template that does not mention tools cannot show them to the model:
// RenderTools refuses tools then (ErrNoToolSupport) rather than drop them,
// except for ChatML without Jinja tool support (the ChatML default of a
// model without a template, or the built-in renderer), which renders them
// the way Qwen2.5's template does (<tools></tools> in the system turn,
// <tool_call> and <tool_response> blocks).

package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the function's JSON Schema (a JSON object; empty: none).
	Parameters json.RawMessage
}

// ToolCall is one call an assistant turn made.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the JSON text of the arguments object.
	Arguments string
}

// ErrNoToolSupport: the template cannot render tools or tool calls.
var ErrNoToolSupport = errors.New("chat: the model's chat template does not support tools")

// SupportsTools reports whether a conversation with tools renders: the
// Jinja template mentions tools, or the ChatML rendering of Qwen2.5 is
// used.
func (t *Template) SupportsTools() bool {
	return t.jinjaTools() || t.family == ChatML
}

// jinjaTools reports that the Jinja template renders tools itself.
func (t *Template) jinjaTools() bool {
	return t.jinja != nil && strings.Contains(t.source, "tools")
}

// hasToolTurns reports whether msgs hold tool calls. (A tool result alone
// renders through any template, as a message of role "tool".)
func hasToolTurns(msgs []Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// jinjaMessage is the template's view of a message.
// harmony: the template is gpt-oss's, which reads reasoning as "thinking"
// and refuses content beside thinking in a tool-call turn (llama.cpp's
// common_chat_params_init_gpt_oss drops the content then). thinkBlocks:
// the template reads reasoning as a {"type": "thinking"} block of the
// content (Ministral 3, as common_chat_params_init_ministral_3 passes it).
func jinjaMessage(m Message, harmony, thinkBlocks bool) (*exec.Dict, error) {
	d := &exec.Dict{Pairs: []*exec.Pair{
		{Key: exec.AsValue("role"), Value: exec.AsValue(m.Role)},
	}}
	switch {
	case harmony && m.Reasoning != "" && len(m.ToolCalls) > 0:
	case thinkBlocks && m.Reasoning != "":
		block := func(typ, key, text string) *exec.Dict {
			return &exec.Dict{Pairs: []*exec.Pair{
				{Key: exec.AsValue("type"), Value: exec.AsValue(typ)},
				{Key: exec.AsValue(key), Value: exec.AsValue(text)},
			}}
		}
		blocks := pyList{block("thinking", "thinking", m.Reasoning)}
		if m.Content != "" {
			blocks = append(blocks, block("text", "text", m.Content))
		}
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue("content"), Value: exec.AsValue(blocks)})
	default:
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue("content"), Value: exec.AsValue(m.Content)})
	}
	add := func(k string, v any) {
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
	}
	if len(m.ToolCalls) > 0 {
		calls := make(pyList, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			args, err := jsonValue([]byte(c.Arguments))
			if err != nil {
				return nil, fmt.Errorf("chat: tool call %q: arguments: %w", c.Name, err)
			}
			calls[i] = &exec.Dict{Pairs: []*exec.Pair{
				{Key: exec.AsValue("id"), Value: exec.AsValue(c.ID)},
				{Key: exec.AsValue("type"), Value: exec.AsValue("function")},
				{Key: exec.AsValue("function"), Value: exec.AsValue(&exec.Dict{Pairs: []*exec.Pair{
					{Key: exec.AsValue("name"), Value: exec.AsValue(c.Name)},
					{Key: exec.AsValue("arguments"), Value: exec.AsValue(args)},
				}})},
			}}
		}
		add("tool_calls", calls)
	}
	if m.ToolCallID != "" {
		add("tool_call_id", m.ToolCallID)
	}
	if m.Reasoning != "" {
		add("reasoning_content", m.Reasoning)
		if harmony {
			add("thinking", m.Reasoning)
		}
	}
	if m.Name != "" {
		add("name", m.Name)
	}
	return d, nil
}

// jinjaTools converts tools to the template's list.
func jinjaToolList(tools []Tool) (pyList, error) {
	out := make(pyList, len(tools))
	for i, t := range tools {
		fn := &exec.Dict{Pairs: []*exec.Pair{
			{Key: exec.AsValue("name"), Value: exec.AsValue(t.Name)},
		}}
		if t.Description != "" {
			fn.Pairs = append(fn.Pairs, &exec.Pair{Key: exec.AsValue("description"), Value: exec.AsValue(t.Description)})
		}
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage(`{"type": "object", "properties": {}}`)
		}
		p, err := jsonValue(params)
		if err != nil {
			return nil, fmt.Errorf("chat: tool %q: parameters: %w", t.Name, err)
		}
		fn.Pairs = append(fn.Pairs, &exec.Pair{Key: exec.AsValue("parameters"), Value: exec.AsValue(p)})
		out[i] = &exec.Dict{Pairs: []*exec.Pair{
			{Key: exec.AsValue("type"), Value: exec.AsValue("function")},
			{Key: exec.AsValue("function"), Value: exec.AsValue(fn)},
		}}
	}
	return out, nil
}

// maxValueDepth bounds the nesting of JSON handed to a template.
const maxValueDepth = 64

// jsonValue decodes JSON into template values: objects as ordered dicts,
// arrays as pyLists, integers as int, other numbers as float64.
func jsonValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := &exec.Dict{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k.(string)), Value: exec.AsValue(v)})
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			l := pyList{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token() // ']'
			return l, err
		}
		return nil, fmt.Errorf("unexpected %v", x)
	case json.Number:
		if i, err := strconv.Atoi(string(x)); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		return f, err
	}
	return tok, nil // string, bool, nil
}

// chatMLTools renders a conversation with tools the way Qwen2.5's template
// does.
func (t *Template) chatMLTools(b *strings.Builder, msgs []Message, tools []Tool, addGen bool) error {
	if t.variant.leadingBOS {
		b.WriteString(t.bos)
	}
	system, hasSystem, rest := splitSystem(msgs)
	if len(tools) > 0 {
		if !hasSystem {
			system = t.variant.chatMLDefaultSystem
		}
		b.WriteString("<|im_start|>system\n")
		if system != "" {
			b.WriteString(system + "\n\n")
		}
		b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
		list, err := jinjaToolList(tools)
		if err != nil {
			return err
		}
		for _, tool := range list {
			s, err := toJSON(tool, jsonOptions{itemSep: ", ", keySep: ": "})
			if err != nil {
				return err
			}
			b.WriteString("\n" + s)
		}
		b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
	} else if hasSystem {
		b.WriteString("<|im_start|>system\n" + system + "<|im_end|>\n")
	} else if t.variant.chatMLDefaultSystem != "" {
		b.WriteString("<|im_start|>system\n" + t.variant.chatMLDefaultSystem + "<|im_end|>\n")
	}
	for i, m := range rest {
		switch {
		case m.Role == "tool":
			if i == 0 || rest[i-1].Role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(rest)-1 || rest[i+1].Role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			b.WriteString("<|im_start|>assistant")
			if m.Content != "" {
				b.WriteString("\n" + m.Content)
			}
			for _, c := range m.ToolCalls {
				args, err := jsonValue([]byte(c.Arguments))
				if err != nil {
					return fmt.Errorf("chat: tool call %q: arguments: %w", c.Name, err)
				}
				s, err := toJSON(args, jsonOptions{itemSep: ", ", keySep: ": "})
				if err != nil {
					return err
				}
				b.WriteString("\n<tool_call>\n{\"name\": \"" + c.Name + "\", \"arguments\": " + s + "}\n</tool_call>")
			}
			b.WriteString("<|im_end|>\n")
		default:
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
	}
	if addGen {
		b.WriteString("<|im_start|>assistant\n")
	}
	return nil
}
