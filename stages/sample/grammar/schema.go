// schema.go: JSON Schema -> GBNF, after llama.cpp's json-schema-to-grammar.
//
// Supported: type (object, array, string, number, integer, boolean, null,
// or a list of them), properties (generated in the order written),
// required (required properties first, then the optional ones, any subset
// in order), additionalProperties (false; absent with properties: none,
// as llama.cpp; true or a schema: extra properties after the declared
// ones; absent without properties: any object), enum, const, items,
// prefixItems, minItems/maxItems, anyOf/oneOf (alternatives), allOf with
// one member, string minLength/maxLength, pattern (see regex.go), integer
// minimum/maximum/exclusiveMinimum/exclusiveMaximum (exact digit-range
// rules), number minimum/maximum when they are integers, string format
// date, time, date-time and uuid (as llama.cpp writes them), $ref to
// "#", "#/$defs/..." and "#/definitions/...". Annotations (title,
// description, default, examples, other formats, ...) are ignored, as JSON
// Schema treats them. Every other keyword is refused with an error naming
// it.
//
// Whitespace between tokens is bounded: at most one newline and 20 spaces
// or tabs, so output can always end within a bounded number of tokens.

package grammar

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ErrSchema is wrapped by every error for a schema that cannot be
// converted.
var ErrSchema = errors.New("unsupported JSON schema")

// jsonPrimitives are llama.cpp's primitive rules, with whitespace bounded.
var jsonPrimitives = []struct{ name, body string }{
	{"space", `| " " | "\n" [ \t]{0,20}`},
	{"boolean", `("true" | "false") space`},
	{"null", `"null" space`},
	{"char", `[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})`},
	{"string", `"\"" char* "\"" space`},
	{"decimal-part", `[0-9]{1,16}`},
	{"integral-part", `[0] | [1-9] [0-9]{0,15}`},
	{"number", `("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space`},
	{"integer", `("-"? integral-part) space`},
	{"value", `object | array | string | number | boolean | null`},
	{"object", `"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space`},
	{"array", `"[" space ( value ("," space value)* )? "]" space`},
}

// primitiveDeps lists the rules each primitive uses.
var primitiveDeps = map[string][]string{
	"boolean": {"space"}, "null": {"space"}, "string": {"char", "space"},
	"number": {"integral-part", "decimal-part", "space"}, "integer": {"integral-part", "space"},
	"value":  {"object", "array", "string", "number", "boolean", "null"},
	"object": {"space", "string", "value"}, "array": {"space", "value"},
}

// JSONObjectGBNF is the grammar of any JSON object (OpenAI's json_object
// response format).
var JSONObjectGBNF = func() string {
	c := newSchemaConv(nil)
	c.use("object")
	c.add("root", "object")
	return c.text()
}()

// SchemaToGBNF converts a JSON schema (JSON text) to GBNF.
func SchemaToGBNF(schema []byte) (string, error) {
	v, err := decodeOrdered(schema)
	if err != nil {
		return "", fmt.Errorf("grammar: %w: schema is not valid JSON: %v", ErrSchema, err)
	}
	c := newSchemaConv(v)
	body, err := c.visit(v, "root", "#")
	if err != nil {
		return "", err
	}
	if body != "root" {
		c.add("root", body)
	}
	src := c.text()
	// a schema can describe no finite value ({"$ref": "#"}, a definition
	// that only refers to itself): that is the schema's error, not an
	// internal one (fuzz finding, testdata/fuzz/FuzzSchemaToGBNF)
	if _, err := Parse(src); err != nil {
		return "", fmt.Errorf("grammar: %w: the schema describes no finite JSON value (a $ref cycle without a way out?): %v", ErrSchema, err)
	}
	return src, nil
}

// FromSchema compiles a JSON schema to a Grammar.
func FromSchema(schema []byte) (*Grammar, error) {
	src, err := SchemaToGBNF(schema)
	if err != nil {
		return nil, err
	}
	g, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("grammar: internal error compiling the schema's grammar: %w", err)
	}
	return g, nil
}

type schemaConv struct {
	root   any
	rules  map[string]string // name -> body
	order  []string
	byBody map[string]string // body -> name (generated rules only)
	refs   map[string]string // $ref -> rule name
	depth  int
}

func newSchemaConv(root any) *schemaConv {
	return &schemaConv{root: root, rules: map[string]string{}, byBody: map[string]string{}, refs: map[string]string{}}
}

func (c *schemaConv) add(name, body string) {
	if _, ok := c.rules[name]; !ok {
		c.order = append(c.order, name)
	}
	c.rules[name] = body
}

// use adds a primitive rule and its dependencies.
func (c *schemaConv) use(name string) string {
	if _, ok := c.rules[name]; ok {
		return name
	}
	for _, p := range jsonPrimitives {
		if p.name == name {
			c.add(name, p.body)
		}
	}
	for _, d := range primitiveDeps[name] {
		c.use(d)
	}
	return name
}

var notNameChar = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// rule adds a generated rule with body, named after hint, reusing an
// identical rule, and returns its name.
func (c *schemaConv) rule(hint, body string) string {
	if n, ok := c.byBody[body]; ok {
		return n
	}
	base := strings.Trim(notNameChar.ReplaceAllString(hint, "-"), "-")
	if base == "" {
		base = "r"
	}
	name := base
	for i := 1; ; i++ {
		_, taken := c.rules[name]
		isPrim := slices.ContainsFunc(jsonPrimitives, func(p struct{ name, body string }) bool { return p.name == name })
		if !taken && !isPrim && name != "root" {
			break
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
	c.add(name, body)
	c.byBody[body] = name
	return name
}

func (c *schemaConv) text() string {
	var b strings.Builder
	for _, n := range c.order {
		fmt.Fprintf(&b, "%s ::= %s\n", n, c.rules[n])
	}
	return b.String()
}

func schemaErr(path, format string, args ...any) error {
	if path == "" {
		path = "#"
	}
	return fmt.Errorf("grammar: %w at %s: %s", ErrSchema, path, fmt.Sprintf(format, args...))
}

// annotations are keywords that do not constrain a value.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"format": true, "$defs": true, "definitions": true, "contentMediaType": true,
	"contentEncoding": true, "strict": true, "name": true,
}

// keywords each type understands.
var typeKeywords = map[string][]string{
	"object":  {"properties", "required", "additionalProperties"},
	"array":   {"items", "prefixItems", "minItems", "maxItems"},
	"string":  {"minLength", "maxLength", "pattern"},
	"integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
	"number":  {"minimum", "maximum"},
	"boolean": {}, "null": {},
}

// visit returns a GBNF expression (usually a rule name) for schema s;
// name hints the rule names, path locates s in errors.
func (c *schemaConv) visit(s any, name, path string) (string, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxJSONDepth {
		return "", schemaErr(path, "schema nested deeper than %d", maxJSONDepth)
	}
	switch s := s.(type) {
	case bool:
		if !s {
			return "", schemaErr(path, "schema false matches nothing")
		}
		return c.use("value"), nil
	case *jobj:
		return c.visitObj(s, name, path)
	}
	return "", schemaErr(path, "a schema must be an object or a boolean")
}

func (c *schemaConv) visitObj(s *jobj, name, path string) (string, error) {
	if ref, ok := s.get("$ref"); ok {
		if len(s.keys) > 1 && !onlyAnnotations(s, "$ref") {
			return "", schemaErr(path, "$ref with sibling keywords is not supported")
		}
		r, _ := ref.(string)
		return c.ref(r, path)
	}
	if v, ok := s.get("const"); ok {
		var b strings.Builder
		encodeJSON(&b, v)
		return c.rule(name, gbnfLiteral(b.String())+" "+c.use("space")), nil
	}
	if v, ok := s.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok || len(vals) == 0 {
			return "", schemaErr(path+"/enum", "enum must be a non-empty array")
		}
		var alts []string
		for _, e := range vals {
			var b strings.Builder
			encodeJSON(&b, e)
			alts = append(alts, gbnfLiteral(b.String()))
		}
		return c.rule(name, "("+strings.Join(alts, " | ")+") "+c.use("space")), nil
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		v, ok := s.get(k)
		if !ok {
			continue
		}
		subs, ok := v.([]any)
		if !ok || len(subs) == 0 {
			return "", schemaErr(path+"/"+k, "%s must be a non-empty array", k)
		}
		for _, other := range s.keys {
			if other != k && !annotations[other] {
				return "", schemaErr(path, "%s together with %q is not supported", k, other)
			}
		}
		if k == "allOf" && len(subs) > 1 {
			return "", schemaErr(path+"/allOf", "allOf with more than one schema is not supported")
		}
		var alts []string
		for i, sub := range subs {
			a, err := c.visit(sub, fmt.Sprintf("%s-%d", name, i), fmt.Sprintf("%s/%s/%d", path, k, i))
			if err != nil {
				return "", err
			}
			alts = append(alts, a)
		}
		return c.rule(name, strings.Join(alts, " | ")), nil
	}

	var types []string
	switch t, _ := s.get("type"); t := t.(type) {
	case nil:
		switch {
		case has(s, "properties") || has(s, "additionalProperties") || has(s, "required"):
			types = []string{"object"}
		case has(s, "items") || has(s, "prefixItems") || has(s, "minItems") || has(s, "maxItems"):
			types = []string{"array"}
		case has(s, "minLength") || has(s, "maxLength") || has(s, "pattern"):
			types = []string{"string"}
		}
	case string:
		types = []string{t}
	case []any:
		for _, e := range t {
			es, ok := e.(string)
			if !ok {
				return "", schemaErr(path+"/type", "type list holds a non-string")
			}
			types = append(types, es)
		}
	default:
		return "", schemaErr(path+"/type", "type must be a string or a list of strings")
	}
	for _, t := range types {
		if _, ok := typeKeywords[t]; !ok {
			return "", schemaErr(path+"/type", "unknown type %q", t)
		}
	}
	// every keyword must be understood by one of the types
	for _, k := range s.keys {
		if annotations[k] || k == "type" {
			continue
		}
		known := false
		for _, t := range types {
			known = known || slices.Contains(typeKeywords[t], k)
		}
		if !known {
			return "", schemaErr(path, "keyword %q is not supported%s", k, forTypes(types))
		}
	}
	if len(types) == 0 {
		return c.use("value"), nil
	}
	var alts []string
	for _, t := range types {
		n := name
		if len(types) > 1 {
			n = name + "-" + t
		}
		a, err := c.visitType(s, t, n, path)
		if err != nil {
			return "", err
		}
		alts = append(alts, a)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.rule(name, strings.Join(alts, " | ")), nil
}

func forTypes(types []string) string {
	if len(types) == 0 {
		return " (no type given)"
	}
	return " for type " + strings.Join(types, "/")
}

func has(s *jobj, k string) bool { _, ok := s.get(k); return ok }

func onlyAnnotations(s *jobj, except string) bool {
	for _, k := range s.keys {
		if k != except && !annotations[k] {
			return false
		}
	}
	return true
}

func (c *schemaConv) ref(r, path string) (string, error) {
	if n, ok := c.refs[r]; ok {
		return n, nil
	}
	var target any
	var hint string
	switch {
	case r == "#":
		target, hint = c.root, "root-ref"
	case strings.HasPrefix(r, "#/$defs/") || strings.HasPrefix(r, "#/definitions/"):
		parts := strings.SplitN(strings.TrimPrefix(r, "#/"), "/", 2)
		defs, _ := c.root.(*jobj).get(parts[0])
		do, _ := defs.(*jobj)
		key := strings.ReplaceAll(strings.ReplaceAll(parts[1], "~1", "/"), "~0", "~")
		t, ok := do.get(key)
		if !ok {
			return "", schemaErr(path+"/$ref", "%q not found", r)
		}
		target, hint = t, "ref-"+key
	default:
		return "", schemaErr(path+"/$ref", "only local references (#, #/$defs/..., #/definitions/...) are supported, not %q", r)
	}
	// reserve the name first so that recursive references resolve to it
	name := c.rule(hint, "\x00pending "+r)
	c.refs[r] = name
	body, err := c.visit(target, name+"-body", r)
	if err != nil {
		return "", err
	}
	delete(c.byBody, "\x00pending "+r)
	c.rules[name] = body
	return name, nil
}

func (c *schemaConv) visitType(s *jobj, t, name, path string) (string, error) {
	switch t {
	case "boolean", "null":
		return c.use(t), nil
	case "object":
		return c.object(s, name, path)
	case "array":
		return c.array(s, name, path)
	case "string":
		return c.str(s, name, path)
	case "integer":
		return c.integer(s, name, path)
	case "number":
		return c.number(s, name, path)
	}
	return "", schemaErr(path, "unknown type %q", t)
}
