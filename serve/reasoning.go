// This file holds reasoning ("thinking") shared by the chat APIs: what a
// request asks (thinking on or off, gpt-oss's effort level, reasoning kept
// inline), checked against the model's chat template, and the job's
// parser that separates the reasoning from the answer (model/toolcall's
// Output, which finds the tool calls too). Each API names the fields its
// users know: OpenAI chat_template_kwargs.enable_thinking,
// reasoning_effort and llama-server's reasoning_format; Ollama think;
// Anthropic thinking; the Responses API reasoning.effort.
//
// Thinking cannot be bounded: a budget (Anthropic's budget_tokens,
// llama-server's --reasoning-budget) needs the sampler to force the end
// of the reasoning once the budget is spent, which the engine does not
// do, so a budget is refused with a 400 naming it.

package serve

import (
	"bufio"
	"encoding/json"
	"strings"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/toolcall"
)

// thinkSettings is what a request asks of reasoning.
type thinkSettings struct {
	// on: nil keeps the template's default (enable_thinking true, as
	// llama-server passes it); field names the request field that set it.
	on    *bool
	field string
	// effort: gpt-oss's reasoning_effort ("": the template's default).
	effort      string
	effortField string
	// inline: the reasoning stays in the content (reasoning_format none).
	inline bool
}

// setOn records a request's thinking switch from field.
func (t *thinkSettings) setOn(on bool, field string) {
	t.on, t.field = &on, field
}

// effortLevel translates an OpenAI effort (reasoning_effort, the
// Responses API's reasoning.effort): "none" turns thinking off; "low",
// "medium" and "high" are gpt-oss's levels (checkThinking refuses them
// for other models but "medium", the default); others are refused.
func (t *thinkSettings) effortLevel(effort, field string) *apiError {
	switch effort {
	case "none":
		t.setOn(false, field)
	case "low", "medium", "high":
		t.effort, t.effortField = effort, field
	default:
		return badRequest(field, `%s: %q is not supported (none, low, medium, high)`, field, effort)
	}
	return nil
}

// reasoningFormat reads llama-server's reasoning_format.
func (t *thinkSettings) reasoningFormat(v string) *apiError {
	switch v {
	case "", "auto", "deepseek":
	case "none":
		t.inline = true
	default:
		return badRequest("reasoning_format", `reasoning_format: %q is not supported ("none" keeps the reasoning in the content; "auto" or "deepseek" separate it)`, v)
	}
	return nil
}

// templateReasoning is the reasoning format of the model's template.
func templateReasoning(t *chat.Template) toolcall.Reasoning {
	if t == nil {
		return toolcall.NoReasoning
	}
	return toolcall.DetectReasoning(t.Source())
}

// checkThinking checks the request's reasoning settings against the
// model's template and returns the render options.
func (t *thinkSettings) checkThinking(tpl *chat.Template) (chat.RenderOptions, *apiError) {
	r := templateReasoning(tpl)
	opts := chat.RenderOptions{Thinking: t.on}
	switch {
	case t.on != nil && *t.on && r == toolcall.NoReasoning:
		return opts, badRequest(t.field, "%s: the model cannot think: its chat template has no reasoning (thinking) format", t.field)
	case t.on != nil && !*t.on && r != toolcall.NoReasoning && !strings.Contains(tpl.Source(), "enable_thinking"):
		return opts, badRequest(t.field, "%s: the model always thinks: its chat template (%s reasoning) has no switch to turn thinking off", t.field, r)
	case t.effort == "":
	case r == toolcall.Harmony:
		opts.ReasoningEffort = t.effort
	case t.effort == "medium" && r != toolcall.NoReasoning:
		// the default level of a model without levels
	case r == toolcall.NoReasoning:
		return opts, badRequest(t.effortField, "%s: the model cannot think: its chat template has no reasoning (thinking) format", t.effortField)
	default:
		return opts, badRequest(t.effortField, "%s: %q: this model's chat template has no reasoning effort levels (gpt-oss's have): use \"none\" to turn thinking off, or \"medium\"", t.effortField, t.effort)
	}
	return opts, nil
}

// reasoningEncoder is implemented by the encoders of chat endpoints.
type reasoningEncoder interface {
	// reasoning writes reasoning text to a stream.
	reasoning(w *bufio.Writer, j *job, text string)
}

// newOutput makes the job's parser of the reply when the reply has
// reasoning to separate or tools were offered (nil otherwise).
func newOutput(tpl *chat.Template, gr *genRequest, f toolcall.Format) *toolcall.Output {
	r := toolcall.NoReasoning
	if gr.chat {
		r = templateReasoning(tpl)
	}
	tools := gr.toolList()
	if r == toolcall.NoReasoning && len(tools) == 0 {
		return nil
	}
	names := make([]string, len(tools))
	str := map[[2]string]bool{}
	for i, x := range tools {
		names[i] = x.Name
		for _, p := range stringParams(x.Parameters) {
			str[[2]string{x.Name, p}] = true
		}
	}
	// A grammar (a response format, a forced call) constrains the reply
	// from its first token: it does not continue a reasoning the prompt
	// opened.
	in := gr.inReasoning && gr.params.Grammar == nil
	return toolcall.NewOutput(toolcall.OutputConfig{
		Reasoning: r, InReasoning: in, Inline: gr.think.inline,
		Tools: len(tools) > 0, Format: f, Names: names,
		StringParam: func(fn, param string) bool { return str[[2]string{fn, param}] },
	})
}

// stringParams are the properties of a function's JSON Schema whose type
// is "string" (the XML call format writes their values as plain text).
func stringParams(schema json.RawMessage) []string {
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	var out []string
	for name, p := range s.Properties {
		var one string
		var many []string
		switch {
		case json.Unmarshal(p.Type, &one) == nil && one == "string":
			out = append(out, name)
		case json.Unmarshal(p.Type, &many) == nil && len(many) > 0 && many[0] == "string":
			out = append(out, name)
		}
	}
	return out
}
