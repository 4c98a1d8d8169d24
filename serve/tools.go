// This file holds tool calling shared by the APIs: the declared tools of
// a request (genRequest.tools), the job's parser of the model's output
// (model/toolcall, in the format detected from the chat template), and the
// path that turns the text the engine emits into content and calls for the
// encoders, streamed or not.
//
// Calls come out whole: an encoder gets a call's id and name, then its
// arguments, once the call is complete in the generated text. Text that
// may be the start of a call is held back until the parser knows.
// tool_choice values that force a call (OpenAI "required" or a named
// function, Anthropic "any" or "tool") constrain the reply with a grammar
// of the call (structured.go); strict function schemas are accepted with a
// forced call only.

package serve

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/toolcall"
	"github.com/flowinfer/flowinfer/stages"
)

// toolSettings is what a request asks of tool calling.
type toolSettings struct {
	tools  []chat.Tool
	single bool // parallel_tool_calls false / disable_parallel_tool_use: at most one call
	// force: "" lets the model choose; "*" forces a call of one of the
	// tools (OpenAI required, Anthropic any); a name forces that function.
	// A grammar then constrains the reply to the call (structured.go).
	force string
	// idPrefix: "" for the format's style (toolcall.NewID), else this
	// prefix and random characters (Anthropic's toolu_).
	idPrefix string
}

// forceOf maps an OpenAI tool_choice (chat's or the Responses API's:
// "auto", "none", "required", or "function" with the named function) onto
// toolSettings.force; a choice that forces a call needs tools.
func forceOf(choice, named string, nTools int) (string, *apiError) {
	force := ""
	switch choice {
	case "auto", "none":
	case "required":
		force = "*"
	case "function":
		force = named
	default:
		return "", badRequest("tool_choice", `tool_choice: %q is not one of "none", "auto", "required"`, choice)
	}
	if force != "" && nTools == 0 {
		return "", badRequest("tool_choice", "tool_choice forces a call but there are no tools")
	}
	return force, nil
}

// checkForce checks that a forced function is one of the tools.
func (ts *toolSettings) checkForce(field string) *apiError {
	if ts.force == "" || ts.force == "*" {
		return nil
	}
	for _, t := range ts.tools {
		if t.Name == ts.force {
			return nil
		}
	}
	return badRequest(field, "%s: %q is not one of the tools", field, ts.force)
}

// toolSpec is a function tool as an OpenAI-style request declares it;
// field is its path ("tools[0].function" in chat, "tools[0]" in the
// Responses API), which its errors name.
type toolSpec struct {
	field       string
	name        string
	description string
	parameters  json.RawMessage
	strict      *bool
}

// offerTools builds the tools of a request (chat, Responses, Ollama's
// chat) offering n of them, spec(i) declaring the i-th or refusing it, with
// tool_choice choice (named: the function it names; forceField: where) and
// ts's single and idPrefix. nil: no tool is offered (none declared, or
// tool_choice "none").
func offerTools(choice, named string, n int, spec func(i int) (toolSpec, *apiError), ts toolSettings, forceField string) (*toolSettings, *apiError) {
	force, e := forceOf(choice, named, n)
	if e != nil {
		return nil, e
	}
	if n == 0 || choice == "none" {
		return nil, nil // tool_choice none: the model is not shown the tools
	}
	ts.force = force
	for i := range n {
		t, e := spec(i)
		if e != nil {
			return nil, e
		}
		if t.strict != nil && *t.strict && force == "" {
			// strict arguments are guaranteed only for a forced call (the
			// grammar constrains the whole reply); a call the model may or
			// may not make would need a grammar triggered mid-reply
			return nil, badRequest(t.field+".strict", "%s.strict: true with tool_choice %q: arguments are guaranteed to match the schema only when the call is forced (tool_choice \"required\" or a named function)", t.field, choice)
		}
		tool, e := functionTool(t.name, t.description, t.parameters, t.field)
		if e != nil {
			return nil, e
		}
		ts.tools = append(ts.tools, tool)
	}
	if e := ts.checkForce(forceField); e != nil {
		return nil, e
	}
	return &ts, nil
}

// forced returns the forced call's grammar settings (nil: not forced).
func (ts *toolSettings) forced() *forcedCall {
	if ts == nil || ts.force == "" {
		return nil
	}
	fc := &forcedCall{parallel: !ts.single}
	for _, t := range ts.tools {
		if ts.force == "*" || t.Name == ts.force {
			fc.tools = append(fc.tools, forcedTool{name: t.Name, params: t.Parameters})
		}
	}
	if ts.force != "*" {
		fc.parallel = false // a named function: one call of it
	}
	return fc
}

// outCall is a call as the encoders write it.
type outCall struct {
	index int
	id    string
	name  string
	args  string // JSON object text
}

// toolState is a job's tool calling: the calls parsed (by the job's
// parser, job.parse) and how they are numbered.
type toolState struct {
	format   toolcall.Format
	single   bool
	idPrefix string
	calls    []outCall
}

func newToolState(t *toolSettings, f toolcall.Format) *toolState {
	return &toolState{format: f, single: t.single, idPrefix: t.idPrefix}
}

// add records a parsed call and returns it, or nil when it is dropped.
func (ts *toolState) add(c *toolcall.Call) *outCall {
	if ts.single && len(ts.calls) > 0 {
		return nil // parallel calls were declined: the first one stands
	}
	id := c.ID
	switch {
	case ts.idPrefix != "" && ts.format != toolcall.Mistral:
		id = ts.idPrefix + rand.Text()
	case id == "" || ts.format == toolcall.Mistral && len(id) != 9:
		id = toolcall.NewID(ts.format)
	}
	ts.calls = append(ts.calls, outCall{index: len(ts.calls), id: id, name: c.Name, args: c.Arguments})
	return &ts.calls[len(ts.calls)-1]
}

// toolEncoder is implemented by the encoders of chat endpoints.
type toolEncoder interface {
	// toolCall writes a complete call to a stream.
	toolCall(w *bufio.Writer, j *job, c *outCall)
}

// streamText passes text the engine emitted to enc: straight to delta
// without tools or reasoning, else through the job's parser (content to
// delta, reasoning to reasoning, calls to toolCall). end, once the reply
// has ended (not failed), finishes it (endParser).
func streamText(w *bufio.Writer, j *job, enc encoder, text string, end *stages.Event) {
	p := j.parse
	final := end != nil
	if p == nil {
		if text != "" || j.hasLogprobs() {
			enc.delta(w, j, text)
		}
		return
	}
	evs := j.push(text)
	if final {
		evs = append(evs, endParser(p, end)...)
	}
	for _, e := range evs {
		switch {
		case e.Reasoning != "":
			if re, ok := enc.(reasoningEncoder); ok {
				re.reasoning(w, j, e.Reasoning)
			}
		case e.Call == nil:
			enc.delta(w, j, e.Content)
		case j.tools != nil:
			if c := j.tools.add(e.Call); c != nil {
				if te, ok := enc.(toolEncoder); ok {
					te.toolCall(w, j, c)
				}
			}
		}
	}
	if j.hasLogprobs() && (final || len(evs) == 0) {
		enc.delta(w, j, "") // the logprobs of tokens whose text is held back
	}
}

// splitCalls parses a whole reply (non-streamed) that ended with end: the
// content, the reasoning in j.reasoning and the calls in j.tools.
func splitCalls(j *job, text string, end *stages.Event) string {
	p := j.parse
	if p == nil {
		return text
	}
	var content strings.Builder
	for _, evs := range [][]toolcall.Event{j.push(text), endParser(p, end)} {
		for _, e := range evs {
			switch {
			case e.Reasoning != "":
				j.reasoning.WriteString(e.Reasoning)
			case e.Call == nil:
				content.WriteString(e.Content)
			case j.tools != nil:
				j.tools.add(e.Call)
			}
		}
	}
	return content.String()
}

// endParser ends the parse of a reply that ended with end. A reply cut by
// the token limit (or the full context) inside a call drops the call's
// markup (toolcall.Parser.Cut): calls come out whole or not at all, so a
// cut call is neither a call (its arguments are incomplete) nor content
// (raw markup the client would show as text); the answer's finish reason
// (length, max_tokens, incomplete: max_output_tokens) says what happened.
func endParser(p *toolcall.Output, end *stages.Event) []toolcall.Event {
	if end.Finish == stages.FinishLength {
		return p.Cut()
	}
	return p.Finish()
}

// hasCalls reports whether the job's reply made tool calls.
func (j *job) hasCalls() bool { return j.tools != nil && len(j.tools.calls) > 0 }

// markerTokens are the control tokens among markers (the texts a
// format's calls and reasoning are marked with), which the engine must
// render as text (tokenizer.Decoder.Preserve).
func markerTokens(b *Backend, markers []string) []int32 {
	tok := b.Bundle.Tokenizer
	var ids []int32
	for _, m := range markers {
		if id, ok := tok.Lookup(m); ok && tok.IsControl(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// runScript plays pieces as a request's generated text through the job's
// mailbox, as the engine's streamer would (tests: Server.script), one
// piece per token: a request's token limit cuts the script (finish
// length).
func runScript(j *job, pieces []string) {
	u := stages.Usage{PromptTokens: j.nPrompt}
	finish := stages.FinishStop
	if n := j.req.MaxTokens; n > 0 && len(pieces) > n {
		pieces, finish = pieces[:n], stages.FinishLength
	}
	for i, p := range pieces {
		u.GeneratedTokens = i + 1
		if j.emit(stages.Event{Text: p, Token: int32(i), Usage: u}) != nil {
			return
		}
	}
	j.emit(stages.Event{Token: -1, Finish: finish, Usage: u})
}

// functionTool decodes the {name, description, parameters} of a function
// (OpenAI's and Ollama's "function", Anthropic's tool with input_schema).
func functionTool(name, description string, params json.RawMessage, field string) (chat.Tool, *apiError) {
	if name == "" {
		return chat.Tool{}, badRequest(field, "%s.name: a function needs a name", field)
	}
	p := bytes.TrimSpace(params)
	if len(p) > 0 && string(p) != "null" {
		var obj map[string]json.RawMessage
		if json.Unmarshal(p, &obj) != nil {
			return chat.Tool{}, badRequest(field, "%s.parameters: a JSON Schema object is required", field)
		}
	} else {
		p = nil
	}
	return chat.Tool{Name: name, Description: description, Parameters: p}, nil
}

// renderError maps a template's refusal of tools to the client's 400.
func renderError(err error, param string) *apiError {
	if errors.Is(err, chat.ErrNoToolSupport) {
		return badRequest("tools", "tools: the model's chat template cannot render tools or tool calls (%v)", err)
	}
	return badRequest(param, "chat template: %v", err)
}
