// This file turns the APIs' structured-output fields into a grammar that
// constrains sampling (stages/sample/grammar): OpenAI's response_format
// (json_object, json_schema), llama-server's grammar (GBNF) and json_schema
// extensions, Ollama's format ("json" or a schema), and forced tool calls
// (OpenAI tool_choice required or a named function, Anthropic any or tool):
// the call, in the syntax of the template's family, with arguments valid
// against the function's parameters schema.

package serve

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/toolcall"
	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// constrain sets the grammar of a forced tool call (gr.tools.force), in
// the syntax of the template's family.
func (s *Server) constrain(b *Backend, gr *genRequest) *apiError {
	fc := gr.tools.forced()
	if fc == nil {
		return nil
	}
	if gr.params.Grammar != nil {
		return badRequest("tool_choice", "a forced tool call and a response format (or grammar) cannot both constrain the reply")
	}
	t := b.Bundle.Template
	if t == nil {
		return badRequest("tools", "tools: the model has no chat template to render them")
	}
	g, e := fc.grammar(toolcall.Detect(t.Source(), t.Family() == chat.ChatML))
	if e != nil {
		return e
	}
	gr.params.Grammar = g
	return nil
}

// oaiResponseFormat is OpenAI's response_format.
type oaiResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// structuredFields are the constraint fields OpenAI's endpoints take:
// response_format, and llama-server's grammar and json_schema.
type structuredFields struct {
	ResponseFormat json.RawMessage `json:"response_format"`
	Grammar        *string         `json:"grammar"`
	JSONSchema     json.RawMessage `json:"json_schema"`
}

// grammarOf compiles the constraint the fields ask for (nil: none).
func (f *structuredFields) grammarOf() (*grammar.Grammar, *apiError) {
	set := 0
	if !isNull(f.ResponseFormat) {
		set++
	}
	if f.Grammar != nil {
		set++
	}
	if !isNull(f.JSONSchema) {
		set++
	}
	if set > 1 {
		return nil, badRequest("response_format", "response_format, grammar and json_schema: set at most one")
	}
	switch {
	case f.Grammar != nil:
		g, err := grammar.Parse(*f.Grammar)
		if err != nil {
			return nil, badRequest("grammar", "grammar: %v", err)
		}
		return g, nil
	case !isNull(f.JSONSchema):
		return schemaGrammar(f.JSONSchema, "json_schema")
	case isNull(f.ResponseFormat):
		return nil, nil
	}
	var rf oaiResponseFormat
	if err := json.Unmarshal(f.ResponseFormat, &rf); err != nil {
		return nil, badRequest("response_format", "response_format: expected an object with a type, got %s", f.ResponseFormat)
	}
	var schema json.RawMessage
	if rf.JSONSchema != nil {
		schema = rf.JSONSchema.Schema
	}
	return formatGrammar("response_format", rf.Type, schema, "response_format.json_schema.schema")
}

// formatGrammar compiles an output format object (field: its path) of type
// typ: text (no constraint), json_object, or json_schema with schema (at
// schemaField).
func formatGrammar(field, typ string, schema json.RawMessage, schemaField string) (*grammar.Grammar, *apiError) {
	switch typ {
	case "text":
		return nil, nil
	case "json_object":
		return grammar.MustParse(grammar.JSONObjectGBNF), nil
	case "json_schema":
		if isNull(schema) {
			return nil, badRequest(schemaField, "%s is required", schemaField)
		}
		return schemaGrammar(schema, schemaField)
	}
	return nil, badRequest(field+".type", "%s.type %q is not one of text, json_object, json_schema", field, typ)
}

// schemaGrammar compiles a JSON schema; its errors name field.
func schemaGrammar(schema json.RawMessage, field string) (*grammar.Grammar, *apiError) {
	g, err := grammar.FromSchema(schema)
	if err != nil {
		return nil, badRequest(field, "%s: %v", field, err)
	}
	return g, nil
}

// ollamaFormat compiles Ollama's format: "json" (any JSON object), a JSON
// schema object, or "" / null for none.
func ollamaFormat(raw json.RawMessage) (*grammar.Grammar, *apiError) {
	if isNull(raw) || string(raw) == `""` {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "json" {
			return nil, badRequest("format", "format: %q is not \"json\" or a JSON schema object", s)
		}
		return grammar.MustParse(grammar.JSONObjectGBNF), nil
	}
	if !strings.HasPrefix(strings.TrimSpace(string(raw)), "{") {
		return nil, badRequest("format", "format: expected \"json\" or a JSON schema object")
	}
	return schemaGrammar(raw, "format")
}

// forcedCall describes a forced tool call: the functions one of which
// must be called (one: a named choice), and whether several calls may
// follow each other.
type forcedCall struct {
	tools    []forcedTool
	parallel bool
}

type forcedTool struct {
	name   string
	params json.RawMessage // JSON schema; empty: any object
}

var ruleName = regexp.MustCompile(`(?m)^([a-zA-Z0-9-]+) ::=`)

// grammar returns the GBNF of the calls in format f's syntax: each call's
// arguments follow its function's parameters schema.
func (fc *forcedCall) grammar(f toolcall.Format) (*grammar.Grammar, *apiError) {
	switch f {
	case toolcall.XML, toolcall.Gemma4Calls, toolcall.HarmonyCalls:
		// their arguments are not a JSON value (XML parameters, Gemma 4's
		// own syntax) or sit behind channel tokens: no grammar is built
		return nil, badRequest("tool_choice", "tool_choice: forcing a call is not implemented for this model's tool-call format (%s); use \"auto\"", f)
	}
	var b strings.Builder
	var alts []string
	for i, t := range fc.tools {
		params := t.params
		if isNull(params) {
			params = json.RawMessage(`{"type":"object"}`)
		}
		src, err := grammar.SchemaToGBNF(params)
		if err != nil {
			return nil, badRequest("tools", "tools: function %q: parameters: %v", t.name, err)
		}
		// the schema's rules, renamed apart per function
		prefix := fmt.Sprintf("f%d-", i)
		src = ruleName.ReplaceAllString(src, prefix+"$1 ::=")
		src = renameRefs(src, prefix)
		b.WriteString(src)
		b.WriteByte('\n')
		name := strconv.Quote(t.name) // a JSON string, quoted again as a GBNF literal
		fmt.Fprintf(&b, "call%d ::= %s\n", i, callSyntax(f, gbnfLiteral(name), prefix+"root"))
		alts = append(alts, fmt.Sprintf("call%d", i))
	}
	fmt.Fprintf(&b, "call ::= %s\n", strings.Join(alts, " | "))
	b.WriteString("ws ::= [ \\n]{0,2}\n")
	switch {
	case f == toolcall.Mistral && fc.parallel:
		b.WriteString(`root ::= "[TOOL_CALLS][" call ("," ws call){0,7} "]"` + "\n")
	case f == toolcall.Mistral:
		b.WriteString(`root ::= "[TOOL_CALLS][" call "]"` + "\n")
	case fc.parallel:
		b.WriteString("root ::= call (ws call){0,7}\n")
	default:
		b.WriteString("root ::= call\n")
	}
	g, err := grammar.Parse(b.String())
	if err != nil {
		return nil, &apiError{status: 500, kind: "server_error", message: "forced tool call grammar: " + err.Error()}
	}
	return g, nil
}

// renameRefs prefixes every rule reference in GBNF rule bodies (outside
// string literals and character classes) with prefix.
func renameRefs(src, prefix string) string {
	var out strings.Builder
	for _, line := range strings.Split(src, "\n") {
		head, body, ok := strings.Cut(line, " ::= ")
		if !ok {
			out.WriteString(line + "\n")
			continue
		}
		out.WriteString(head + " ::= ")
		var end byte // what closes the literal being copied: '"' or ']' (0: none)
		for i := 0; i < len(body); i++ {
			c := body[i]
			switch {
			case end != 0:
				out.WriteByte(c)
				if c == '\\' && i+1 < len(body) {
					i++
					out.WriteByte(body[i])
				} else if c == end {
					end = 0
				}
			case c == '"':
				end = '"'
				out.WriteByte(c)
			case c == '[':
				end = ']'
				out.WriteByte(c)
			case isNameByte(c) && (i == 0 || !isNameByte(body[i-1])) && !(c >= '0' && c <= '9'):
				j := i
				for j < len(body) && isNameByte(body[j]) {
					j++
				}
				out.WriteString(prefix + body[i:j])
				i = j - 1
			default:
				out.WriteByte(c)
			}
		}
		out.WriteByte('\n')
	}
	return out.String()
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// gbnfLiteral quotes s (already JSON text) as a GBNF string literal.
func gbnfLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// callSyntax is one call of function name (a GBNF literal of its JSON
// string) with arguments args (a rule), in format f.
func callSyntax(f toolcall.Format, name, args string) string {
	obj := func(key string) string {
		return fmt.Sprintf(`"{\"name\": " %s ", \"%s\": " %s "}"`, name, key, args)
	}
	switch f {
	case toolcall.Llama3:
		return obj("parameters")
	case toolcall.Mistral:
		return obj("arguments")
	case toolcall.Hermes:
		return `"<tool_call>\n" ` + obj("arguments") + ` "\n</tool_call>"`
	}
	return `"{\"tool_call\": " ` + obj("arguments") + ` "}"`
}
