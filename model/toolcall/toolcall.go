// Package toolcall turns a model's generated text into tool calls, for the
// output formats of the chat template families that llama.cpp's
// common/chat.cpp recognises (Detect):
//
//   - Hermes (Hermes 2 Pro, Qwen 2.5/3, and the ChatML default):
//     <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one or more;
//   - Llama 3.x: a JSON object {"name": ..., "parameters": {...}} as the
//     whole reply (several separated by ";" or newlines), or after
//     <|python_tag|> (also a built-in tool's name.call(k="v", ...));
//   - Mistral: [TOOL_CALLS] followed by a JSON array of {"name",
//     "arguments", "id"} (Nemo), or by name[ARGS]{...} (Small 3.2,
//     Magistral);
//   - Generic: a reply that is one JSON object {"tool_call": {...}},
//     {"tool_calls": [...]} or {"name": ..., "arguments": ...}, and
//     <tool_call> tags;
//   - XML (Qwen3.5, Qwen3-Coder, Nemotron 3): <tool_call>\n<function=NAME>
//     \n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>,
//     a value being a JSON value unless the function's schema makes the
//     parameter a string (common_chat_params_init_qwen3_coder);
//   - Gemma4: <|tool_call>call:NAME{key:VALUE,...}<tool_call|>, strings
//     quoted with <|"|> and keys bare (common_chat_params_init_gemma4,
//     gemma4_to_json);
//   - Harmony (gpt-oss): a message to functions.NAME whose body is the JSON
//     arguments; those are parsed with the reasoning, by Splitter
//     (reasoning.go), and Output joins the two.
//
// A Parser is fed text as it is generated and says which text is content
// and which calls are complete, holding back text that may be the start of
// a call until it knows (so a stream never shows a half call as content).
// Text before a call stays content; a call that does not parse is
// returned as content, never an error. Calls come out whole: the
// arguments of a call are known once its closing marker (or the end of
// the reply) is seen.
//
// It does not constrain what the model generates (that is the grammar's
// job) and does not check the arguments against the function's schema.
package toolcall

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"
)

// Format is the way a model family writes tool calls.
type Format int

const (
	Generic Format = iota
	Hermes
	Llama3
	Mistral
	XML
	Gemma4Calls
	HarmonyCalls
)

var formatNames = [...]string{"generic", "hermes", "llama3", "mistral", "xml", "gemma4", "harmony"}

func (f Format) String() string {
	if f < 0 || int(f) >= len(formatNames) {
		return "unknown"
	}
	return formatNames[f]
}

// Detect picks the format from a chat template's source, as llama.cpp's
// common_chat_templates_apply_jinja does. chatML reports a ChatML template
// rendered without Jinja tool support (the built-in renderer writes
// Qwen2.5's Hermes instructions).
func Detect(source string, chatML bool) Format {
	has := func(s string) bool { return strings.Contains(source, s) }
	switch {
	case has("<|channel|>"):
		return HarmonyCalls
	case has("<|tool_call>"):
		return Gemma4Calls
	case has("<tool_call>") && has("<function=") && has("<parameter="):
		return XML
	case has("<tool_call>"):
		return Hermes
	case has("[TOOL_CALLS]"):
		return Mistral
	case has("<|start_header_id|>") && (has("ipython<|end_header_id|>") || has("<|python_tag|>")):
		return Llama3
	case chatML && !has("tools"):
		return Hermes
	}
	return Generic
}

// Markers are the texts of special tokens a format's calls start with:
// the engine must render them (they are control tokens in Llama 3 and
// Mistral vocabularies, dropped from the text otherwise).
func (f Format) Markers() []string {
	switch f {
	case Hermes, Generic, XML:
		return []string{"<tool_call>", "</tool_call>"}
	case Gemma4Calls:
		return []string{gemmaOpen, gemmaClose, gemmaQuote}
	case HarmonyCalls:
		return Harmony.Markers()
	case Llama3:
		return []string{"<|python_tag|>"}
	case Mistral:
		return []string{"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}
	}
	return nil
}

// Call is one tool call.
type Call struct {
	// ID is the id the model wrote (Mistral), else "".
	ID   string
	Name string
	// Arguments is the JSON text of the arguments object, compact.
	Arguments string
}

// Event is a piece of content, of reasoning (Output only) or a complete call.
type Event struct {
	Content   string
	Reasoning string
	Call      *Call
}

// NewID returns a fresh call id in the format's style: Mistral templates
// require 9 alphanumeric characters; others get OpenAI's "call_..." form.
func NewID(f Format) string {
	if f == Mistral {
		return rand.Text()[:9]
	}
	return "call_" + rand.Text()[:24]
}

// Parse splits a complete reply into content and calls.
func Parse(f Format, names []string, text string) (content string, calls []Call) {
	p := NewParser(f, names)
	var b strings.Builder
	for _, evs := range [][]Event{p.Push(text), p.Finish()} {
		for _, e := range evs {
			if e.Call != nil {
				calls = append(calls, *e.Call)
			} else {
				b.WriteString(e.Content)
			}
		}
	}
	return b.String(), calls
}

// callJSON is the object a call is written as, in the formats' variants.
type callJSON struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
	ID         string          `json:"id"`
	Function   *callJSON       `json:"function"` // {"type":"function","function":{...}}
}

// decodeCall reads one call object; ok is false when raw is not one.
func decodeCall(raw []byte) (Call, bool) {
	var c callJSON
	if json.Unmarshal(raw, &c) != nil {
		return Call{}, false
	}
	if c.Function != nil && c.Name == "" {
		id := c.ID
		c = *c.Function
		if c.ID == "" {
			c.ID = id
		}
	}
	if c.Name == "" {
		return Call{}, false
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	a, ok := normalizeArgs(args)
	if !ok {
		return Call{}, false
	}
	return Call{ID: c.ID, Name: c.Name, Arguments: a}, true
}

// normalizeArgs returns the arguments object compacted: absent or null is
// {}, a string holding a JSON object is unwrapped, anything else that is
// not an object is refused.
func normalizeArgs(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 {
			return "{}", true
		}
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

// decodeCalls reads a call object or an array of them.
func decodeCalls(raw []byte) ([]Call, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
			return nil, false
		}
		calls := make([]Call, 0, len(list))
		for _, r := range list {
			c, ok := decodeCall(r)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		}
		return calls, true
	}
	c, ok := decodeCall(raw)
	if !ok {
		return nil, false
	}
	return []Call{c}, true
}

// decodeGeneric reads llama.cpp's generic forms: {"tool_call": {...}},
// {"tool_calls": [...]}, or a bare call object or array.
func decodeGeneric(raw []byte) ([]Call, bool) {
	var w struct {
		ToolCall  json.RawMessage `json:"tool_call"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	}
	if json.Unmarshal(raw, &w) == nil {
		switch {
		case len(w.ToolCall) > 0:
			return decodeCalls(w.ToolCall)
		case len(w.ToolCalls) > 0:
			return decodeCalls(w.ToolCalls)
		}
	}
	return decodeCalls(raw)
}

// scanJSON finds the end of the JSON object or array s starts with,
// skipping strings. It returns the length of the value, or -1 while the
// value is not closed yet.
func scanJSON(s string) int {
	depth := 0
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
