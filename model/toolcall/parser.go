// This file is the streaming parser: a state machine over the text
// generated so far that emits content as soon as it cannot be part of a
// call, and calls once they are complete.

package toolcall

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

type mode int

const (
	modeLead  mode = iota // reply start, only whitespace so far
	modeText              // content, watching for the start marker
	modeJSON              // a leading JSON value (Llama 3, Generic)
	modeAfter             // after a leading JSON call: another may follow
	modeTag               // inside <tool_call>...</tool_call>
	modeTail              // after <|python_tag|> or [TOOL_CALLS], to the end
)

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"
	mistralTag  = "[TOOL_CALLS]"
	gemmaOpen   = "<|tool_call>"
	gemmaClose  = "<tool_call|>"
	gemmaQuote  = `<|"|>`
)

// Parser splits a reply into content and calls as it is generated. It is
// not safe for concurrent use.
type Parser struct {
	f      Format
	names  []string
	mode   mode
	buf    string // text not yet decided
	leadWS string // whitespace before a leading JSON value
	ws     string // trailing whitespace of the content so far, held
	calls  int
	// cut: the reply ends at the token limit (Cut): held text that may be
	// a call is dropped, not content
	cut bool
	// afterCall: nothing shown since the last call; whitespace that
	// separates calls from what follows is not content
	afterCall bool
	out       []Event

	// While a call is open, text is only appended to pending and checked
	// for what could end the call (the close tag across the boundary, the
	// JSON value closing), so a long call costs linear time.
	pending strings.Builder
	tagTail string   // modeTag: the last bytes seen, for a split close tag
	js      jsonScan // modeJSON: the leading value scanned so far

	// strParam reports the parameters whose schema type is string (XML:
	// their values are text, not JSON); nil: decide by the value.
	strParam func(fn, param string) bool
}

// SetStringParams tells an XML parser which parameters are strings (from
// the functions' schemas): their values are taken as text even when they
// read as JSON ("42" stays "42").
func (p *Parser) SetStringParams(f func(fn, param string) bool) { p.strParam = f }

// jsonScan follows a JSON value's nesting, skipping strings.
type jsonScan struct {
	depth        int
	inStr, esc   bool
	opened, done bool
}

// feed scans b and reports whether the value has closed.
func (s *jsonScan) feed(b string) bool {
	for i := 0; i < len(b) && !s.done; i++ {
		c := b[i]
		switch {
		case s.inStr:
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
		case c == '"':
			s.inStr = true
		case c == '{' || c == '[':
			s.depth++
			s.opened = true
		case c == '}' || c == ']':
			s.depth--
			s.done = s.opened && s.depth <= 0
		}
	}
	return s.done
}

// NewParser returns a parser for format f. names are the declared
// functions: a reply that merely is a JSON object (Llama 3, Generic) counts
// as a call only when it names one of them (all names when empty); calls
// after an explicit marker are taken whatever their name.
func NewParser(f Format, names []string) *Parser {
	return &Parser{f: f, names: names}
}

// Calls is the number of calls emitted so far.
func (p *Parser) Calls() int { return p.calls }

// Push consumes newly generated text and returns what is now decided.
func (p *Parser) Push(text string) []Event {
	switch p.mode {
	case modeTail:
		p.pending.WriteString(text)
		return nil
	case modeTag:
		w := p.tagTail + text
		closeTag := p.closeTag()
		p.tagTail = w[max(0, len(w)-len(closeTag)+1):]
		if !strings.Contains(w, closeTag) {
			p.pending.WriteString(text)
			return nil
		}
	case modeJSON:
		if !p.js.feed(text) {
			p.pending.WriteString(text)
			return nil
		}
	}
	p.take()
	p.buf += text
	evs := p.step(false)
	p.prime()
	return evs
}

// take moves pending text into buf.
func (p *Parser) take() {
	if p.pending.Len() > 0 {
		p.buf += p.pending.String()
		p.pending.Reset()
	}
}

// prime sets up the checks of Push for the mode step left the parser in.
func (p *Parser) prime() {
	switch p.mode {
	case modeTag:
		p.tagTail = p.buf[max(0, len(p.buf)-len(p.closeTag())+1):]
	case modeJSON:
		p.js = jsonScan{}
		p.js.feed(p.buf)
	}
}

// Finish ends the reply: whatever is held is decided (an unclosed call
// that parses is a call, anything else is content).
func (p *Parser) Finish() []Event {
	p.take()
	evs := p.step(true)
	if p.ws != "" && p.calls == 0 && !p.cut { // cut: the whitespace before a cut call goes with it
		evs = append(evs, Event{Content: p.ws})
	}
	p.ws = ""
	return evs
}

// Cut ends a reply that the token limit cut short. A call complete in the
// text is a call, as with Finish; but what was held back because it may
// be a call (an open call that does not parse, a leading JSON value not
// closed, the start of a marker) is dropped: the markup of a cut call is
// not content.
func (p *Parser) Cut() []Event {
	p.cut = true
	return p.Finish()
}

func (p *Parser) leadingJSON() bool { return p.f == Llama3 || p.f == Generic }

func (p *Parser) marker() string {
	switch p.f {
	case Llama3:
		return pythonTag
	case Mistral:
		return mistralTag
	case Gemma4Calls:
		return gemmaOpen
	}
	return hermesOpen
}

// tagged reports a format whose calls are enclosed in an open and a close tag.
func (p *Parser) tagged() bool {
	return p.f == Hermes || p.f == Generic || p.f == XML || p.f == Gemma4Calls
}

func (p *Parser) closeTag() string {
	if p.f == Gemma4Calls {
		return gemmaClose
	}
	return hermesClose
}

func (p *Parser) step(final bool) []Event {
	p.out = p.out[:0:0] // a fresh slice: the caller keeps the events
	for {
		switch p.mode {
		case modeLead:
			if !p.leadingJSON() {
				p.mode = modeText
				continue
			}
			rest := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
			if rest == "" {
				if final {
					p.content(p.buf)
					p.buf = ""
				}
				return p.out
			}
			if rest[0] == '{' || p.f == Generic && rest[0] == '[' {
				p.leadWS = p.buf[:len(p.buf)-len(rest)]
				p.buf = rest
				p.mode = modeJSON
				continue
			}
			p.mode = modeText
		case modeJSON:
			n := scanJSON(p.buf)
			if n < 0 {
				if final && !p.cut {
					p.content(p.leadWS + p.buf)
				}
				if final {
					p.buf, p.mode = "", modeText
				}
				return p.out
			}
			calls, ok := p.leadCalls(p.buf[:n])
			if resp, isResp := genericResponse(p.f, p.buf[:n]); !ok && isResp {
				p.content(resp) // Generic's {"response": "..."}
				p.mode = modeText
			} else if ok {
				p.emit(calls)
				p.mode = modeAfter
			} else {
				p.content(p.leadWS + p.buf[:n])
				p.mode = modeText
			}
			p.leadWS, p.buf = "", p.buf[n:]
		case modeAfter:
			rest := strings.TrimLeftFunc(p.buf, func(r rune) bool { return unicode.IsSpace(r) || r == ';' })
			switch {
			case rest == "":
				p.buf = "" // separators between calls are not content
				return p.out
			case rest[0] == '{':
				p.buf, p.mode = rest, modeJSON
			default:
				p.buf, p.mode = rest, modeText
			}
		case modeText:
			if p.f == HarmonyCalls { // calls come from the Splitter
				p.content(p.buf)
				p.buf = ""
				return p.out
			}
			m := p.marker()
			if i := strings.Index(p.buf, m); i >= 0 {
				p.content(p.buf[:i])
				p.buf = p.buf[i+len(m):]
				if p.tagged() {
					p.mode = modeTag
				} else {
					p.mode = modeTail
				}
				continue
			}
			keep := 0
			if !final || p.cut {
				keep = partialSuffix(p.buf, m)
			}
			p.content(p.buf[:len(p.buf)-keep])
			p.buf = p.buf[len(p.buf)-keep:]
			if final {
				p.buf = "" // a cut marker's start
			}
			return p.out
		case modeTag:
			body, rest, closed := strings.Cut(p.buf, p.closeTag())
			if !closed && !final {
				return p.out
			}
			var calls []Call
			ok := false
			switch p.f {
			case Generic:
				calls, ok = decodeGeneric([]byte(body))
			case XML:
				calls, ok = decodeXML(body, p.strParam)
			case Gemma4Calls:
				calls, ok = decodeGemma4(body)
			default:
				calls, ok = decodeCalls([]byte(body))
			}
			if ok {
				p.emit(calls)
			} else if closed || !p.cut {
				raw := p.marker() + body
				if closed {
					raw += p.closeTag()
				}
				p.content(raw)
			}
			p.buf, p.mode = rest, modeText
			if !closed {
				return p.out
			}
		case modeTail:
			if !final {
				return p.out
			}
			var calls []Call
			ok := false
			if p.f == Mistral {
				calls, ok = parseMistral(p.buf)
			} else {
				calls, ok = parsePythonTag(p.buf)
			}
			if ok {
				p.emit(calls)
			} else if !p.cut {
				p.content(p.marker() + p.buf)
			}
			p.buf = ""
			return p.out
		}
	}
}

// genericResponse reads the Generic format's {"response": "text"}.
func genericResponse(f Format, raw string) (string, bool) {
	if f != Generic {
		return "", false
	}
	var r struct {
		Response *string `json:"response"`
	}
	if json.Unmarshal([]byte(raw), &r) != nil || r.Response == nil {
		return "", false
	}
	return *r.Response, true
}

// leadCalls decides whether a leading JSON value is a call.
func (p *Parser) leadCalls(raw string) ([]Call, bool) {
	var calls []Call
	var ok bool
	if p.f == Generic {
		calls, ok = decodeGeneric([]byte(raw))
	} else {
		calls, ok = decodeCalls([]byte(raw))
	}
	if !ok {
		return nil, false
	}
	if len(p.names) > 0 {
		for _, c := range calls {
			if !slices.Contains(p.names, c.Name) {
				return nil, false
			}
		}
	}
	return calls, true
}

// content emits text as content, holding back its trailing whitespace
// (dropped if a call follows).
func (p *Parser) content(s string) {
	s = p.ws + s
	if p.afterCall {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	t := strings.TrimRightFunc(s, unicode.IsSpace)
	p.ws = s[len(t):]
	if t != "" {
		p.out = append(p.out, Event{Content: t})
		p.afterCall = false
	}
}

// external emits a call another parser found (harmony's, by the Splitter),
// as if this parser had: the whitespace around it is dropped likewise.
func (p *Parser) external(c Call) []Event {
	p.out = p.out[:0:0]
	p.emit([]Call{c})
	return p.out
}

func (p *Parser) emit(calls []Call) {
	p.ws, p.afterCall = "", true
	for i := range calls {
		c := calls[i]
		p.out = append(p.out, Event{Call: &c})
		p.calls++
	}
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of m.
func partialSuffix(s, m string) int {
	for k := min(len(s), len(m)-1); k > 0; k-- {
		if strings.HasSuffix(s, m[:k]) {
			return k
		}
	}
	return 0
}

// parseMistral reads what follows [TOOL_CALLS]: a JSON array of calls
// (Nemo), or name[ARGS]{...} (with an optional [CALL_ID]id), repeated
// after further [TOOL_CALLS] markers.
func parseMistral(s string) ([]Call, bool) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{") {
		n := scanJSON(s)
		if n < 0 || strings.TrimSpace(s[n:]) != "" {
			return nil, false
		}
		return decodeCalls([]byte(s[:n]))
	}
	var calls []Call
	for part := range strings.SplitSeq(s, mistralTag) {
		part = strings.TrimSpace(part)
		name, args, ok := strings.Cut(part, "[ARGS]")
		if !ok {
			return nil, false
		}
		id := ""
		name, id, _ = strings.Cut(name, "[CALL_ID]")
		name = strings.TrimSpace(name)
		a, ok := normalizeArgs(json.RawMessage(args))
		if !ok || name == "" {
			return nil, false
		}
		calls = append(calls, Call{ID: strings.TrimSpace(id), Name: name, Arguments: a})
	}
	return calls, len(calls) > 0
}

// parsePythonTag reads what follows <|python_tag|>: JSON call objects
// separated by ";" or whitespace, or a built-in tool's name.call(k=v, ...).
func parsePythonTag(s string) ([]Call, bool) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		var calls []Call
		for s != "" {
			n := scanJSON(s)
			if n < 0 {
				return nil, false
			}
			c, ok := decodeCall([]byte(s[:n]))
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
			s = strings.TrimLeftFunc(s[n:], func(r rune) bool { return unicode.IsSpace(r) || r == ';' })
		}
		return calls, true
	}
	name, args, ok := strings.Cut(s, ".call(")
	if !ok || !strings.HasSuffix(args, ")") || !isIdent(name) {
		return nil, false
	}
	a, ok := pythonKwargs(strings.TrimSuffix(args, ")"))
	if !ok {
		return nil, false
	}
	return []Call{{Name: name, Arguments: a}}, true
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// pythonKwargs turns k="v", n=1, b=True into a JSON object.
func pythonKwargs(s string) (string, bool) {
	var b bytes.Buffer
	b.WriteByte('{')
	for first := true; ; first = false {
		s = strings.TrimSpace(s)
		if s == "" {
			break
		}
		if !first {
			if s[0] != ',' {
				return "", false
			}
			s = strings.TrimSpace(s[1:])
		}
		key, rest, ok := strings.Cut(s, "=")
		key = strings.TrimSpace(key)
		if !ok || !isIdent(key) {
			return "", false
		}
		s = strings.TrimSpace(rest)
		var val []byte
		switch {
		case s == "":
			return "", false
		case s[0] == '"' || s[0] == '\'':
			q := s[0]
			i, esc := 1, false
			var str strings.Builder
			for ; i < len(s); i++ {
				c := s[i]
				if esc {
					switch c {
					case 'n':
						c = '\n'
					case 't':
						c = '\t'
					}
					str.WriteByte(c)
					esc = false
					continue
				}
				if c == '\\' {
					esc = true
					continue
				}
				if c == q {
					break
				}
				str.WriteByte(c)
			}
			if i >= len(s) {
				return "", false
			}
			val, _ = json.Marshal(str.String())
			s = s[i+1:]
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			lit := strings.TrimSpace(s[:end])
			switch lit {
			case "True":
				val = []byte("true")
			case "False":
				val = []byte("false")
			case "None":
				val = []byte("null")
			default:
				if _, err := strconv.ParseFloat(lit, 64); err != nil {
					return "", false
				}
				val = []byte(lit)
			}
			s = s[end:]
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.String(), true
}

// Names are the declared functions the parser was given.
func (p *Parser) Names() []string { return p.names }
