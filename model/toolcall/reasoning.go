// This file separates a model's reasoning ("thinking") from its answer, in
// the formats of the chat templates that declare one (DetectReasoning), as
// llama.cpp's common/chat.cpp does:
//
//   - Think: <think>...</think> (Qwen3, QwQ, DeepSeek-R1, Qwen3.5, Nemotron
//     3). Templates that open <think> in the generation prompt leave the
//     output inside reasoning from its first token
//     (common_chat_params_init_qwen3_coder, and the auto-parser for Qwen3,
//     parse the generation prompt and the output together); with the XML
//     tool-call format a <tool_call> also ends the reasoning (Qwen3.5,
//     Nemotron 3: qwen3_coder's thinking_end_tags).
//   - MistralThink: [THINK]...[/THINK] at the start of the reply (Ministral
//     3, Magistral; common_chat_params_init_ministral_3).
//   - Gemma4: <|channel>thought ... <channel|> blocks, possibly several,
//     between pieces of the answer; an empty channel or a stray <channel|>
//     is dropped (common_chat_params_init_gemma4).
//   - Harmony: gpt-oss's channels: each message is a header
//     ([<|start|>assistant][ to=RECIPIENT]<|channel|>NAME[ to=RECIPIENT][
//     [<|constrain|>]TYPE]) and <|message|>BODY ended by <|end|>, <|call|>
//     or <|return|>. The analysis channel is reasoning, final and a
//     commentary without recipient are content, and a message to
//     functions.NAME is a tool call whose body is the JSON arguments
//     (common_chat_params_init_gpt_oss).
//
// A Splitter is fed text as it is generated and never holds back more than
// what may be the start of a marker (or, in a harmony header, the header
// itself, which is markup). Reasoning that is never closed (the model
// stopped, the client left, the token limit) is reasoning: Finish emits it.
// Leading whitespace of reasoning and of the answer that follows it, and
// trailing whitespace of reasoning, are dropped, as llama.cpp's parsers
// (p.space() around the reasoning) drop them.

package toolcall

import (
	"strings"
	"unicode"
)

// Reasoning is the way a model family marks its reasoning.
type Reasoning int

const (
	NoReasoning Reasoning = iota
	Think
	MistralThink
	Gemma4
	Harmony
)

var reasoningNames = [...]string{"none", "think", "mistral-think", "gemma4", "harmony"}

func (r Reasoning) String() string {
	if r < 0 || int(r) >= len(reasoningNames) {
		return "unknown"
	}
	return reasoningNames[r]
}

// DetectReasoning picks the reasoning format from a chat template's
// source, with the markers llama.cpp's common_chat_try_specialized_template
// and its auto-parser key on; NoReasoning when the template has none.
func DetectReasoning(source string) Reasoning {
	has := func(s string) bool { return strings.Contains(source, s) }
	switch {
	case has("<|channel|>"):
		return Harmony
	case has("<|channel>") && has("<channel|>"):
		return Gemma4
	case has("[THINK]") && has("[/THINK]"):
		return MistralThink
	case has("<think>") && has("</think>"):
		return Think
	}
	return NoReasoning
}

// Markers are the texts of the special tokens of the format, which the
// engine must render as text (they are control tokens in most vocabularies).
func (r Reasoning) Markers() []string {
	switch r {
	case Think:
		return []string{"<think>", "</think>"}
	case MistralThink:
		return []string{"[THINK]", "[/THINK]"}
	case Gemma4:
		return []string{"<|channel>", "<channel|>"}
	case Harmony:
		return []string{harmonyStart, harmonyChannel, harmonyMessage, harmonyEnd, harmonyCall, harmonyReturn, harmonyConstrain}
	}
	return nil
}

// Open and close tags of the tag formats.
func (r Reasoning) tags() (open string, closes []string) {
	switch r {
	case Think:
		return "<think>", []string{"</think>"}
	case MistralThink:
		return "[THINK]", []string{"[/THINK]"}
	case Gemma4:
		return "<|channel>thought", []string{"<channel|>"}
	}
	return "", nil
}

// InReasoning reports whether a rendered prompt leaves the model inside its
// reasoning: the generation prompt ends with the opening tag (Qwen3.5,
// Nemotron 3, QwQ, DeepSeek-R1: "<think>\n"). A prompt that opens and
// closes it ("<think>\n\n</think>\n\n", thinking off) does not.
func (r Reasoning) InReasoning(prompt string) bool {
	open, _ := r.tags()
	if open == "" || r == Gemma4 {
		return false
	}
	return strings.HasSuffix(strings.TrimRightFunc(prompt, unicode.IsSpace), open)
}

// Segment is a piece of reasoning, of content, or a complete call (harmony).
type Segment struct {
	Reasoning string
	Content   string
	Call      *Call
	// Raw is the call's markup (harmony), for a reply whose calls are not
	// wanted (no tools were offered).
	Raw string
}

type splitMode int

const (
	splitLead   splitMode = iota // reply start: the opening tag may come
	splitThink                   // inside reasoning
	splitText                    // the answer
	splitHeader                  // harmony: a message header
	splitBody                    // harmony: a message body
)

// Harmony's special tokens.
const (
	harmonyStart     = "<|start|>"
	harmonyChannel   = "<|channel|>"
	harmonyMessage   = "<|message|>"
	harmonyEnd       = "<|end|>"
	harmonyCall      = "<|call|>"
	harmonyReturn    = "<|return|>"
	harmonyConstrain = "<|constrain|>"
)

// maxHeader bounds a harmony header: longer text without <|message|> is not
// a header (the model wrote plain text), and is content.
const maxHeader = 256

// Splitter separates reasoning from content as text is generated. It is
// not safe for concurrent use.
type Splitter struct {
	f      Reasoning
	inline bool
	mode   splitMode
	buf    string
	ws     string // trailing whitespace of the reasoning, held
	trim   bool   // drop the leading whitespace of what comes next
	out    []Segment

	// toolEnds: a <tool_call> ends the reasoning too (not consumed)
	toolEnds bool

	// harmony: a call's body is appended to pend (pending), and only the
	// new text with the tail before it is searched for the end marker, so
	// that a long call costs linear time
	pend    []byte
	pending bool

	// harmony: the current message's kind and recipient
	kind      msgKind
	recipient string
	header    string // the raw header, for inline output and raw calls
}

type msgKind int

const (
	msgContent msgKind = iota
	msgReasoning
	msgCall
	msgOther // a recipient that is not a function (built-in tools)
)

// NewSplitter returns a splitter for format f. inReasoning: the prompt
// left the model inside its reasoning (InReasoning). inline keeps the
// reasoning in the content, markers included, as llama-server's
// reasoning_format "none" does; harmony calls are still parsed.
func NewSplitter(f Reasoning, inReasoning, inline bool) *Splitter {
	s := &Splitter{f: f, inline: inline}
	switch {
	case f == Harmony:
		s.mode = splitHeader
	case inReasoning:
		s.mode, s.trim = splitThink, true
	default:
		s.mode = splitLead
	}
	return s
}

// Push consumes newly generated text and returns what is now decided.
func (s *Splitter) Push(text string) []Segment {
	s.out = nil
	if s.f == NoReasoning {
		s.content(text)
		return s.out
	}
	if s.mode == splitBody && (s.kind == msgCall || s.kind == msgOther) {
		if !s.pending {
			s.pend, s.pending = append(s.pend[:0], s.buf...), true
			s.buf = ""
		}
		from := max(0, len(s.pend)-maxEnd+1)
		s.pend = append(s.pend, text...)
		if i, _ := firstOf(string(s.pend[from:]), harmonyEnds); i < 0 {
			return nil
		}
		s.takePending()
		s.step(false, false)
		return s.out
	}
	s.buf += text
	s.step(false, false)
	return s.out
}

// takePending moves a call body's pending text into buf.
func (s *Splitter) takePending() {
	if s.pending {
		s.buf = string(s.pend) + s.buf
		s.pend, s.pending = s.pend[:0], false
	}
}

// harmonyEnds end a harmony message; maxEnd is the longest.
var harmonyEnds = []string{harmonyEnd, harmonyCall, harmonyReturn, harmonyStart}

const maxEnd = len(harmonyReturn)

// InReasoning reports whether the text pushed so far leaves the reply
// inside its reasoning (an opened reasoning block, or harmony's analysis
// message, not closed yet).
func (s *Splitter) InReasoning() bool {
	return s.mode == splitThink || s.mode == splitBody && s.kind == msgReasoning
}

// Finish ends the reply: held text is decided (an open reasoning is
// reasoning; an open harmony call whose arguments parse is a call).
func (s *Splitter) Finish() []Segment { return s.end(false) }

// Cut ends a reply cut by the token limit: as Finish, but an open harmony
// call is dropped (its arguments are incomplete), as Parser.Cut does.
func (s *Splitter) Cut() []Segment { return s.end(true) }

func (s *Splitter) end(cut bool) []Segment {
	s.out = nil
	s.takePending()
	s.step(true, cut)
	return s.out
}

func (s *Splitter) content(t string) {
	if s.trim && !s.inline {
		t = strings.TrimLeftFunc(t, unicode.IsSpace)
	}
	if t == "" {
		return
	}
	s.trim = false
	if n := len(s.out); n > 0 && s.out[n-1].Call == nil && s.out[n-1].Reasoning == "" {
		s.out[n-1].Content += t
		return
	}
	s.out = append(s.out, Segment{Content: t})
}

// markup is format text: dropped, or content when inline.
func (s *Splitter) markup(t string) {
	if s.inline && t != "" {
		trim := s.trim
		s.trim = false
		s.content(t)
		s.trim = trim
	}
}

// reasoning emits reasoning text, holding back its trailing whitespace.
func (s *Splitter) reasoning(t string) {
	if s.inline {
		s.content(t)
		return
	}
	if s.trim {
		t = strings.TrimLeftFunc(t, unicode.IsSpace)
		if t == "" {
			return
		}
		s.trim = false
	}
	t = s.ws + t
	body := strings.TrimRightFunc(t, unicode.IsSpace)
	s.ws = t[len(body):]
	if body == "" {
		return
	}
	if n := len(s.out); n > 0 && s.out[n-1].Reasoning != "" {
		s.out[n-1].Reasoning += body
		return
	}
	s.out = append(s.out, Segment{Reasoning: body})
}

// endReasoning closes a reasoning block: its trailing whitespace goes, and
// so does the leading whitespace of what follows.
func (s *Splitter) endReasoning() {
	if s.inline {
		return
	}
	s.ws, s.trim = "", true
}

func (s *Splitter) step(final, cut bool) {
	for {
		switch s.mode {
		case splitLead:
			open, _ := s.f.tags()
			rest := strings.TrimLeftFunc(s.buf, unicode.IsSpace)
			switch {
			case strings.HasPrefix(rest, open):
				s.markup(s.buf[:len(s.buf)-len(rest)+len(open)])
				s.buf = rest[len(open):]
				s.mode, s.trim = splitThink, true
				continue
			case !final && strings.HasPrefix(open, rest):
				return // whitespace, or the start of the tag
			}
			s.mode = splitText
		case splitThink:
			_, closes := s.f.tags()
			if s.toolEnds {
				closes = append(closes[:len(closes):len(closes)], hermesOpen)
			}
			i, tag := firstOf(s.buf, closes)
			if i < 0 {
				keep := 0
				if !final {
					keep = partialAny(s.buf, closes)
				}
				s.reasoning(s.buf[:len(s.buf)-keep])
				s.buf = s.buf[len(s.buf)-keep:]
				if final {
					s.buf = ""
				}
				return
			}
			s.reasoning(s.buf[:i])
			s.endReasoning()
			if tag == hermesOpen { // a tool call ends the reasoning: it is content
				s.buf = s.buf[i:]
			} else {
				s.markup(tag)
				s.buf = s.buf[i+len(tag):]
			}
			s.mode = splitText
		case splitText:
			if s.f != Gemma4 {
				s.content(s.buf)
				s.buf = ""
				return
			}
			if !s.gemmaText(final) {
				return
			}
		case splitHeader:
			if !s.harmonyHeader(final) {
				return
			}
		case splitBody:
			if !s.harmonyBody(final, cut) {
				return
			}
		}
	}
}

// gemmaText passes Gemma 4's answer through, watching for another thought
// block, an empty channel or a stray <channel|>. It returns true when the
// mode changed.
func (s *Splitter) gemmaText(final bool) bool {
	const thought = "<|channel>thought"
	const channel, closeTag = "<|channel>", "<channel|>"
	i, tag := firstOf(s.buf, []string{channel, closeTag})
	if i < 0 {
		keep := 0
		if !final {
			keep = partialAny(s.buf, []string{channel, closeTag})
		}
		s.content(s.buf[:len(s.buf)-keep])
		s.buf = s.buf[len(s.buf)-keep:]
		if final {
			s.buf = ""
		}
		return false
	}
	s.content(s.buf[:i])
	rest := s.buf[i:]
	switch {
	case tag == closeTag: // stray: dropped
		s.markup(closeTag)
		s.buf = rest[len(closeTag):]
	case strings.HasPrefix(rest, thought):
		s.markup(thought)
		s.buf = rest[len(thought):]
		s.mode, s.trim = splitThink, true
	case !final && strings.HasPrefix(thought, rest):
		s.buf = rest // "<|channel>th...": wait
		return false
	default: // an empty channel: dropped
		s.markup(channel)
		s.buf = rest[len(channel):]
	}
	return true
}

// harmonyHeader reads a message header up to <|message|>. It returns true
// when the mode changed.
func (s *Splitter) harmonyHeader(final bool) bool {
	i := strings.Index(s.buf, harmonyMessage)
	if i > maxHeader || i >= 0 && !headerStarts(s.buf[:i]) {
		i = -1 // too far, or not markup: not this message's header
	}
	if i < 0 {
		if !final && mayBeHeader(s.buf) && len(s.buf) <= maxHeader+len(harmonyMessage) {
			return false
		}
		if final && headerStarts(s.buf) {
			s.markup(s.buf) // a header the reply ended in: nothing said
			s.buf = ""
			return false
		}
		// not a header: a model that left the format; the rest is content
		s.content(s.buf)
		s.buf = ""
		s.mode, s.f = splitText, NoReasoning
		return !final
	}
	h := s.buf[:i]
	s.header = h + harmonyMessage
	s.buf = s.buf[i+len(harmonyMessage):]
	s.kind, s.recipient = parseHeader(h)
	s.mode = splitBody
	switch s.kind {
	case msgReasoning:
		s.markup(s.header)
		s.trim = !s.inline
	case msgContent:
		s.markup(s.header)
		s.trim = !s.inline
	}
	return true
}

// harmonyBody reads a message body up to its end marker. It returns true
// when the mode changed.
func (s *Splitter) harmonyBody(final, cut bool) bool {
	ends := harmonyEnds
	i, tag := firstOf(s.buf, ends)
	if s.kind == msgCall || s.kind == msgOther {
		if i < 0 && !final {
			return false // a call comes out whole
		}
		body, marker := s.buf, ""
		if i >= 0 {
			body, marker = s.buf[:i], tag
		}
		if i < 0 && cut {
			s.buf = ""
			return false // a cut call is dropped
		}
		raw := s.header + body
		if marker != harmonyStart {
			raw += marker
		}
		if args, ok := normalizeArgs([]byte(body)); ok && s.kind == msgCall {
			s.out = append(s.out, Segment{Call: &Call{Name: s.recipient, Arguments: args}, Raw: raw})
		} else {
			s.content(raw) // malformed, or a built-in tool's call: shown, not run
		}
		s.afterMessage(i, tag)
		return true
	}
	if i < 0 {
		keep := 0
		if !final {
			keep = partialAny(s.buf, ends)
		}
		s.body(s.buf[:len(s.buf)-keep])
		s.buf = s.buf[len(s.buf)-keep:]
		if final {
			s.buf = ""
		}
		return false
	}
	s.body(s.buf[:i])
	if s.kind == msgReasoning {
		s.endReasoning()
	}
	if tag != harmonyStart {
		s.markup(tag)
	}
	s.afterMessage(i, tag)
	return true
}

func (s *Splitter) body(t string) {
	if s.kind == msgReasoning {
		s.reasoning(t)
	} else {
		s.content(t)
	}
}

// afterMessage moves past the end marker at i (a <|start|> is left for the
// next header).
func (s *Splitter) afterMessage(i int, tag string) {
	switch {
	case i < 0:
		s.buf = ""
	case tag == harmonyStart:
		s.buf = s.buf[i:]
	default:
		s.buf = s.buf[i+len(tag):]
	}
	s.mode, s.kind, s.recipient, s.header = splitHeader, msgContent, "", ""
}

// parseHeader reads a harmony header: its channel and recipient.
func parseHeader(h string) (msgKind, string) {
	channel, recipient := "", ""
	for _, f := range strings.FieldsFunc(strings.NewReplacer(harmonyStart, " ", harmonyChannel, " \x00", harmonyConstrain, " ").Replace(h), unicode.IsSpace) {
		switch {
		case strings.HasPrefix(f, "\x00"):
			channel = f[1:]
		case strings.HasPrefix(f, "to="):
			recipient = f[3:]
		}
	}
	switch {
	case strings.HasPrefix(recipient, "functions."):
		return msgCall, strings.TrimPrefix(recipient, "functions.")
	case recipient != "" && recipient != "assistant" && recipient != "user":
		return msgOther, recipient
	case channel == "analysis":
		return msgReasoning, ""
	}
	return msgContent, "" // final, commentary preambles, or no channel
}

// headerPatterns are what a harmony header starts with.
var headerPatterns = [...]string{harmonyStart, harmonyChannel, "to=", "assistant"}

// headerStarts reports whether s starts like a harmony header (or is
// empty: the header of a message that starts at <|message|>).
func headerStarts(s string) bool {
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	if t == "" {
		return true
	}
	for _, p := range headerPatterns {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// mayBeHeader reports whether s may still become a header: it starts like
// one, or is the start of one of the patterns or of <|message|>.
func mayBeHeader(s string) bool {
	if headerStarts(s) {
		return true
	}
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	for _, p := range append(headerPatterns[:], harmonyMessage) {
		if strings.HasPrefix(p, t) {
			return true
		}
	}
	return false
}

// firstOf returns the earliest position of any of tags in s, and the tag.
func firstOf(s string, tags []string) (int, string) {
	best, tag := -1, ""
	for _, t := range tags {
		if i := strings.Index(s, t); i >= 0 && (best < 0 || i < best) {
			best, tag = i, t
		}
	}
	return best, tag
}

// partialAny is the longest suffix of s that is a proper prefix of one of tags.
func partialAny(s string, tags []string) int {
	n := 0
	for _, t := range tags {
		n = max(n, partialSuffix(s, t))
	}
	return n
}
