// This file joins the two parsers of a reply: the Splitter takes out the
// reasoning (and harmony's calls), and the Parser finds the calls in what
// is left, so that an API sees one stream of reasoning, content and calls.

package toolcall

// OutputConfig says how to parse a reply.
type OutputConfig struct {
	// Reasoning is the template's reasoning format; InReasoning: the
	// prompt left the model inside it; Inline: keep reasoning in the
	// content (reasoning_format "none").
	Reasoning   Reasoning
	InReasoning bool
	Inline      bool
	// Tools: whether tools were offered; Format (the template's, offered
	// or not) and Names as NewParser's. Without tools, harmony calls are
	// content (their raw markup).
	Tools  bool
	Format Format
	Names  []string
	// StringParam: see Parser.SetStringParams.
	StringParam func(fn, param string) bool
}

// Output parses a reply into reasoning, content and calls as it is
// generated. It is not safe for concurrent use.
type Output struct {
	split *Splitter
	tools *Parser // nil: no tools offered
}

// NewOutput returns the parser of a reply.
func NewOutput(c OutputConfig) *Output {
	o := &Output{split: NewSplitter(c.Reasoning, c.InReasoning, c.Inline)}
	// Qwen3.5 and Nemotron 3 may start a call without closing their
	// reasoning (llama.cpp's qwen3_coder parser ends it at <tool_call>)
	o.split.toolEnds = c.Reasoning == Think && c.Format == XML
	if c.Tools {
		o.tools = NewParser(c.Format, c.Names)
		o.tools.SetStringParams(c.StringParam)
	}
	return o
}

// Push consumes newly generated text.
func (o *Output) Push(text string) []Event { return o.pass(o.split.Push(text), nil) }

// Finish ends the reply (see Parser.Finish and Splitter.Finish).
func (o *Output) Finish() []Event {
	evs := o.pass(o.split.Finish(), nil)
	if o.tools != nil {
		evs = append(evs, o.tools.Finish()...)
	}
	return evs
}

// Cut ends a reply cut by the token limit (see Parser.Cut and Splitter.Cut).
func (o *Output) Cut() []Event {
	evs := o.pass(o.split.Cut(), nil)
	if o.tools != nil {
		evs = append(evs, o.tools.Cut()...)
	}
	return evs
}

// InReasoning reports whether the reply is inside its reasoning so far
// (Splitter.InReasoning).
func (o *Output) InReasoning() bool { return o.split.InReasoning() }

// Calls is the number of calls parsed so far.
func (o *Output) Calls() int {
	if o.tools == nil {
		return 0
	}
	return o.tools.Calls()
}

func (o *Output) pass(segs []Segment, evs []Event) []Event {
	for _, s := range segs {
		switch {
		case s.Reasoning != "":
			evs = append(evs, Event{Reasoning: s.Reasoning})
		case s.Call != nil && o.tools != nil:
			evs = append(evs, o.tools.external(*s.Call)...)
		case s.Call != nil:
			evs = append(evs, Event{Content: s.Raw})
		case o.tools != nil:
			evs = append(evs, o.tools.Push(s.Content)...)
		default:
			evs = append(evs, Event{Content: s.Content})
		}
	}
	return evs
}
