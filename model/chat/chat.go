// Package chat turns a conversation into the prompt text a model was trained
// on, using the model's Hugging Face chat template (GGUF key
// tokenizer.chat_template) the way llama-server does.
//
// Rendering goes through a Jinja engine (gonja v2, extended with what chat
// templates need: raise_exception, strftime_now, transformers' tojson,
// Python indexing and str methods). New parses the template, detects its
// family from distinctive markers (as llama.cpp's llm_chat_detect_template
// does) and test-renders a few probe conversations. If gonja cannot parse or
// render a template of a known family (ChatML, Llama 3, Llama 2, Mistral,
// Gemma, Phi-3), a built-in Go renderer of that family is used instead and
// UsedFallback reports it; a template of no known family that gonja cannot
// render is an error from New, never a silently wrong prompt.
//
// What llama-server does around the template is done here too: the
// "developer" role becomes "system"; a template that drops or rejects the
// system message (Gemma 2, Mistral v0.x) gets it merged into the next
// message as "system\ncontent"; the variables enable_thinking (true),
// date_string and datetime are set; strftime_now uses the clock.
//
// A model without a template gets ChatML (Default), as in llama-server.
//
// The template is untrusted (it comes with a downloaded model), so a render is
// bounded: RenderTimeout, MaxLoopIterations, MaxLoopItems, MaxMacroDepth, an
// output, value and string size limit of MaxRenderBytes plus
// RenderBytesPerInput times the conversation's bytes (for every operand and
// result of a filter or method too), and MaxRenderAlloc bytes of strings
// built in all (limits.go, limitops.go). A render beyond them fails with ErrRenderLimit.
//
// BOS: llama-server tokenizes the rendered prompt with add_special=true and
// parse_special=true, after removing a leading bos_token text when the
// vocabulary adds BOS itself (and a trailing eos_token text when it adds EOS).
// Callers do the same with TrimForTokenizer; EmitsBOS tells whether the
// template writes the BOS text itself (Llama 3, Gemma, Mistral do).
//
// Tools, assistant tool calls and tool results reach the template as
// Hugging Face's apply_chat_template passes them (tools.go); the model's
// output is parsed into calls by model/toolcall, not here. This package does
// not tokenize and does not handle images or typed content parts.
package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Message is one turn of a conversation. Role is "system", "user",
// "assistant" (also "developer", mapped to "system", and "tool").
type Message struct {
	Role    string
	Content string
	// ToolCalls are the calls an assistant turn made (tools.go).
	ToolCalls []ToolCall
	// ToolCallID and Name: a "tool" turn is the result of the call with
	// this id, to the function Name (either may be empty).
	ToolCallID string
	Name       string
	// Reasoning is an assistant turn's reasoning, passed to the template as
	// reasoning_content (and as thinking to gpt-oss's), as llama-server
	// passes it; templates drop it from earlier turns or keep it as they
	// were trained to.
	Reasoning string
}

// RenderOptions are the per-request variables of a render.
type RenderOptions struct {
	// Thinking is enable_thinking (nil: true, as llama-server passes it).
	Thinking *bool
	// ReasoningEffort is reasoning_effort (gpt-oss's template: low, medium
	// or high in the harmony system message); "": not passed.
	ReasoningEffort string
}

// Family is the prompt format a template belongs to.
type Family int

// Template families with a built-in renderer, and Unknown for the rest.
const (
	Unknown Family = iota
	ChatML         // <|im_start|>role\n...<|im_end|> (Qwen 2/2.5/3, Hermes, ...)
	Llama3         // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
	Llama2         // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
	Mistral        // [INST]...[/INST] without <<SYS>> (v0.x, v1, v3, v3-tekken, v7)
	Gemma          // <start_of_turn>user\n...<end_of_turn>
	Phi3           // <|user|>\n...<|end|>\n<|assistant|>
)

var familyNames = [...]string{"unknown", "chatml", "llama3", "llama2", "mistral", "gemma", "phi3"}

func (f Family) String() string {
	if f < 0 || int(f) >= len(familyNames) {
		return fmt.Sprintf("Family(%d)", int(f))
	}
	return familyNames[f]
}

// Errors callers can match with errors.Is.
var (
	// ErrNoMessages: Render was given an empty conversation.
	ErrNoMessages = errors.New("chat: no messages")
	// ErrUnsupported: the template cannot be rendered and belongs to no
	// family with a built-in renderer.
	ErrUnsupported = errors.New("chat: unsupported chat template")
	// ErrRejected: the template refused the conversation with
	// raise_exception (e.g. roles that do not alternate). A client error.
	ErrRejected = errors.New("chat: template rejected the conversation")
)

// Option configures New.
type Option func(*Template)

// WithClock sets the clock behind strftime_now and date_string (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(t *Template) {
		if now != nil {
			t.now = now
		}
	}
}

// WithLogger sets where fallbacks are reported (default: nowhere).
func WithLogger(l *zap.Logger) Option {
	return func(t *Template) {
		if l != nil {
			t.log = l
		}
	}
}

// Template is a parsed chat template. It is immutable after New and safe for
// concurrent use.
type Template struct {
	source   string
	bos, eos string
	family   Family
	variant  variant

	jinja      *jinjaTemplate // nil when the built-in renderer is used
	fallback   bool           // jinja could not handle this template
	systemRole bool           // the jinja template renders a system message
	emitsBOS   bool
	rawRoles   bool // keep "developer" (gpt-oss templates handle it)

	now func() time.Time
	log *zap.Logger
}

// chatMLSource is the default template: llama-server's CHATML_TEMPLATE_SRC.
const chatMLSource = "{%- for message in messages -%}\n" +
	"  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n" +
	"{%- endfor -%}\n" +
	"{%- if add_generation_prompt -%}\n" +
	"  {{- '<|im_start|>assistant\\n' -}}\n" +
	"{%- endif -%}"

// Probe conversation contents: distinctive so that no template prints them
// by itself.
const (
	probeSystem    = "flowinfer probe: system prompt"
	probeUser      = "flowinfer probe: first user turn"
	probeAssistant = "flowinfer probe: assistant turn"
	probeUser2     = "flowinfer probe: second user turn"
)

// New parses source (a Jinja chat template, or the name of a built-in format:
// "chatml", "llama2", "llama3", "mistral-v1", "mistral-v3",
// "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "gemma", "phi3"),
// detects its family and checks that it renders. bosToken and eosToken are
// the texts of the model's BOS and EOS tokens ("" when the vocabulary has
// none). An empty source gives the ChatML default.
func New(source, bosToken, eosToken string, opts ...Option) (*Template, error) {
	t := &Template{source: source, bos: bosToken, eos: eosToken, now: time.Now, log: zap.NewNop()}
	for _, o := range opts {
		o(t)
	}
	if strings.TrimSpace(source) == "" {
		t.source = chatMLSource
	}
	if f, v, ok := builtinByName(t.source); ok {
		t.family, t.variant = f, v
		t.emitsBOS = t.probeBOS()
		return t, nil
	}
	t.family, t.variant = detect(t.source)
	t.rawRoles = strings.Contains(t.source, "<|channel|>")

	jt, err := parseJinja(t.source)
	if err == nil {
		err = t.probe(jt)
	}
	if err != nil {
		// gonja rejects (or misparses) conditional expressions nested in
		// brackets; retry with those rewritten.
		// (Not after a render limit: the rewrite would not make it cheaper.)
		if rw, changed := rewriteInlineIfs(t.source); changed && !errors.Is(err, ErrRenderLimit) {
			jt2, err2 := parseJinja(rw)
			if err2 == nil {
				err2 = t.probe(jt2)
			}
			if err2 == nil {
				jt, err = jt2, nil
				t.log.Debug("chat template: rewrote conditional expressions for gonja")
			} else {
				err = fmt.Errorf("%w; with nested conditionals rewritten: %v", err, err2)
			}
		}
	}
	if err != nil {
		if t.family == Unknown {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		t.fallback = true
		t.log.Warn("chat template: Jinja rendering failed, using the built-in renderer",
			zap.Stringer("family", t.family), zap.Error(err))
	} else {
		t.jinja = jt
	}
	t.emitsBOS = t.probeBOS()
	return t, nil
}

// Default is the template for a model without one: ChatML, as llama-server
// uses. It has no BOS or EOS text.
func Default() *Template {
	t, err := New(chatMLSource, "", "")
	if err != nil {
		// Cannot happen (the source is fixed and tested); stay usable anyway.
		return &Template{source: "chatml", family: ChatML, now: time.Now, log: zap.NewNop()}
	}
	return t
}

// probe renders probe conversations: the template must render a single user
// turn and a user/assistant/user exchange, keeping their contents; whether it
// keeps a system message decides if system messages get merged (as
// llama-server's system-role capability check does).
func (t *Template) probe(jt *jinjaTemplate) error {
	v := jinjaVars{bosToken: t.bos, eosToken: t.eos, addGenerationPrompt: true, now: t.now()}
	checks := []struct {
		name string
		msgs []Message
	}{
		{"single user turn", []Message{{Role: "user", Content: probeUser}}},
		{"user/assistant/user", []Message{{Role: "user", Content: probeUser}, {Role: "assistant", Content: probeAssistant}, {Role: "user", Content: probeUser2}}},
	}
	for _, c := range checks {
		v.messages = c.msgs
		out, err := jt.render(v)
		if err != nil {
			return fmt.Errorf("probe %s: %w", c.name, err)
		}
		for _, m := range c.msgs {
			if !strings.Contains(out, m.Content) {
				return fmt.Errorf("probe %s: output does not contain the %s message", c.name, m.Role)
			}
		}
	}
	v.messages = []Message{{Role: "system", Content: probeSystem}, {Role: "user", Content: probeUser}}
	out, err := jt.render(v)
	t.systemRole = err == nil && strings.Contains(out, probeSystem)
	return nil
}

// probeBOS reports whether a rendered single-turn prompt starts with the BOS text.
func (t *Template) probeBOS() bool {
	if t.bos == "" {
		return false
	}
	out, err := t.Render([]Message{{Role: "user", Content: probeUser}}, true)
	return err == nil && strings.HasPrefix(out, t.bos)
}

// Render renders msgs; with addGenerationPrompt the prompt ends with the
// opening of an assistant turn. The result is the full template output,
// including any BOS text the template writes (see TrimForTokenizer).
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	r, err := t.RenderDetailed(msgs, addGenerationPrompt)
	return r.Prompt, err
}

// Rendered is a prompt and how it was produced.
type Rendered struct {
	Prompt string
	// Fallback: the built-in renderer produced the prompt, either because
	// the template was set to it at New (UsedFallback) or because Jinja
	// failed on this conversation.
	Fallback bool
}

// RenderDetailed is Render that also reports whether the fallback was used.
func (t *Template) RenderDetailed(msgs []Message, addGenerationPrompt bool) (Rendered, error) {
	return t.RenderTools(msgs, nil, addGenerationPrompt)
}

// RenderTools is RenderDetailed with tools the model may call; msgs may
// hold assistant tool calls and tool results (tools.go). A template that
// cannot render them gives ErrNoToolSupport.
func (t *Template) RenderTools(msgs []Message, tools []Tool, addGenerationPrompt bool) (Rendered, error) {
	return t.RenderWith(msgs, tools, addGenerationPrompt, RenderOptions{})
}

// RenderWith is RenderTools with per-request variables. The built-in
// renderers have no variables: a fallback render ignores opts.
func (t *Template) RenderWith(msgs []Message, tools []Tool, addGenerationPrompt bool, opts RenderOptions) (Rendered, error) {
	if len(msgs) == 0 {
		return Rendered{}, ErrNoMessages
	}
	msgs = t.mapRoles(msgs)
	withTools := len(tools) > 0 || hasToolTurns(msgs)
	switch {
	case !withTools:
	case !t.SupportsTools():
		return Rendered{}, fmt.Errorf("%w (family %s)", ErrNoToolSupport, t.family)
	case !t.jinjaTools():
		var b strings.Builder
		err := t.chatMLTools(&b, msgs, tools, addGenerationPrompt)
		return Rendered{Prompt: b.String(), Fallback: t.jinja == nil && t.fallback}, err
	}
	if t.jinja == nil {
		out, err := t.renderBuiltin(msgs, addGenerationPrompt)
		return Rendered{Prompt: out, Fallback: t.fallback}, err
	}
	jmsgs := msgs
	if !t.systemRole {
		jmsgs = mergeSystem(msgs)
	}
	out, err := t.jinja.render(jinjaVars{
		messages:            jmsgs,
		bosToken:            t.bos,
		eosToken:            t.eos,
		addGenerationPrompt: addGenerationPrompt,
		now:                 t.now(),
		tools:               tools,
		opts:                opts,
		harmony:             t.rawRoles,
		thinkBlocks:         strings.Contains(t.source, "[THINK]") && strings.Contains(t.source, "'thinking'"),
	})
	if err == nil {
		return Rendered{Prompt: out}, nil
	}
	var raised *raisedError
	if errors.As(err, &raised) {
		return Rendered{}, fmt.Errorf("%w: %s", ErrRejected, raised.msg)
	}
	if t.family == Unknown {
		return Rendered{}, fmt.Errorf("chat: rendering template: %w", err)
	}
	if withTools && t.family != ChatML {
		return Rendered{}, fmt.Errorf("chat: rendering template with tools: %w", err)
	}
	t.log.Warn("chat template: Jinja rendering failed for this conversation, using the built-in renderer",
		zap.Stringer("family", t.family), zap.Error(err))
	if withTools {
		var b strings.Builder
		berr := t.chatMLTools(&b, msgs, tools, addGenerationPrompt)
		if berr != nil {
			return Rendered{}, fmt.Errorf("chat: rendering template: %w (built-in %s renderer: %v)", err, t.family, berr)
		}
		return Rendered{Prompt: b.String(), Fallback: true}, nil
	}
	out, berr := t.renderBuiltin(msgs, addGenerationPrompt)
	if berr != nil {
		return Rendered{}, fmt.Errorf("chat: rendering template: %w (built-in %s renderer: %v)", err, t.family, berr)
	}
	return Rendered{Prompt: out, Fallback: true}, nil
}

// mapRoles maps "developer" to "system", as llama-server does for every
// template but gpt-oss's.
func (t *Template) mapRoles(msgs []Message) []Message {
	if t.rawRoles {
		return msgs
	}
	var out []Message
	for i, m := range msgs {
		if m.Role == "developer" {
			if out == nil {
				out = append([]Message(nil), msgs...)
			}
			out[i].Role = "system"
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// mergeSystem folds a leading system message into the next message
// ("system\nnext"), or drops it when it is alone: llama-server's workaround
// for templates without a system role.
func mergeSystem(msgs []Message) []Message {
	if len(msgs) == 0 || msgs[0].Role != "system" {
		return msgs
	}
	if len(msgs) == 1 {
		return nil
	}
	out := append([]Message(nil), msgs[1:]...)
	out[0].Content = msgs[0].Content + "\n" + out[0].Content
	return out
}

// TrimForTokenizer prepares a rendered prompt for tokenization the way
// llama-server does: when the tokenizer adds BOS itself (addBOS, the GGUF
// tokenizer.ggml.add_bos_token), a leading bos_token text is removed so the
// prompt does not get two; likewise a trailing eos_token text when it adds
// EOS. Then tokenize with special tokens added and parsed.
func (t *Template) TrimForTokenizer(prompt string, addBOS, addEOS bool) string {
	if addBOS && t.bos != "" {
		prompt = strings.TrimPrefix(prompt, t.bos)
	}
	if addEOS && t.eos != "" {
		prompt = strings.TrimSuffix(prompt, t.eos)
	}
	return prompt
}

// Family is the detected template family (Unknown when none matched).
func (t *Template) Family() Family { return t.family }

// Source is the template text (or built-in name) New was given; for an
// empty source, the ChatML default's Jinja text.
func (t *Template) Source() string { return t.source }

// UsedFallback reports that Jinja could not render this template and the
// built-in renderer of its family is used for every conversation.
func (t *Template) UsedFallback() bool { return t.fallback }

// EmitsBOS reports whether rendered prompts start with the BOS text.
func (t *Template) EmitsBOS() bool { return t.emitsBOS }

// SupportsSystemRole reports whether the template renders a system message
// itself; when false, Render merges it into the next message.
func (t *Template) SupportsSystemRole() bool {
	if t.jinja == nil {
		return !t.variant.noSystem
	}
	return t.systemRole
}

// StopStrings are end-of-turn texts of the family, useful as extra stop
// sequences for models whose end-of-generation metadata is incomplete.
func (t *Template) StopStrings() []string {
	switch t.family {
	case ChatML:
		return []string{"<|im_end|>"}
	case Llama3:
		return []string{"<|eot_id|>", "<|eom_id|>"}
	case Llama2, Mistral:
		return []string{"</s>"}
	case Gemma:
		return []string{"<end_of_turn>"}
	case Phi3:
		return []string{"<|end|>"}
	}
	return nil
}
