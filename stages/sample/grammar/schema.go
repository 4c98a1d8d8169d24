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
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
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
	return c.text(), nil
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

func (c *schemaConv) object(s *jobj, name, path string) (string, error) {
	propsV, hasProps := s.get("properties")
	props, _ := propsV.(*jobj)
	if hasProps && props == nil {
		return "", schemaErr(path+"/properties", "properties must be an object")
	}
	addV, hasAdd := s.get("additionalProperties")
	if !hasProps && !has(s, "required") && (!hasAdd || addV == true) {
		return c.use("object"), nil
	}
	var required []string
	if rv, ok := s.get("required"); ok {
		ra, ok := rv.([]any)
		if !ok {
			return "", schemaErr(path+"/required", "required must be an array of strings")
		}
		for _, e := range ra {
			es, ok := e.(string)
			if !ok {
				return "", schemaErr(path+"/required", "required must be an array of strings")
			}
			required = append(required, es)
		}
	}
	sp := c.use("space")
	kv := func(key string, sub any) (string, error) {
		v, err := c.visit(sub, name+"-"+key, path+"/properties/"+key)
		if err != nil {
			return "", err
		}
		return c.rule(name+"-"+key+"-kv", gbnfLiteral(jsonString(key))+" "+sp+" \":\" "+sp+" "+v), nil
	}
	var req, opt []string
	var keys []string
	if props != nil {
		keys = props.keys
	}
	for _, k := range required {
		if !slices.Contains(keys, k) {
			keys = append(keys, k) // required without a schema: any value
		}
	}
	for _, k := range keys {
		sub, ok := props.get(k)
		if !ok {
			sub = true
		}
		r, err := kv(k, sub)
		if err != nil {
			return "", err
		}
		if slices.Contains(required, k) {
			req = append(req, r)
		} else {
			opt = append(opt, r)
		}
	}
	extra := ""
	if hasAdd && addV != false {
		v, err := c.visit(addV, name+"-additional", path+"/additionalProperties")
		if err != nil {
			return "", err
		}
		extra = c.rule(name+"-additional-kv", c.use("string")+" \":\" "+sp+" "+v)
	}
	comma := `"," ` + sp + " "
	var b strings.Builder
	b.WriteString(`"{" ` + sp + " ")
	if len(req) > 0 {
		for i, r := range req {
			if i > 0 {
				b.WriteString(comma)
			}
			b.WriteString(r + " ")
		}
		for _, o := range opt {
			b.WriteString("(" + comma + o + ")? ")
		}
		if extra != "" {
			b.WriteString("(" + comma + extra + ")* ")
		}
	} else if len(opt) > 0 || extra != "" {
		// any subset in order: the first present one, then the rest each
		// with a comma; rest_i ::= ("," o_i)? rest_{i+1}
		rest, restExtra := "", ""
		if extra != "" {
			restExtra = c.rule(name+"-rest-extra", "("+comma+extra+")*")
			rest = restExtra
		}
		var firsts []string
		for i := len(opt) - 1; i >= 0; i-- {
			firsts = append(firsts, strings.TrimSpace(opt[i]+" "+rest))
			body := "(" + comma + opt[i] + ")? " + rest
			rest = c.rule(fmt.Sprintf("%s-rest-%d", name, i), strings.TrimSpace(body))
		}
		slices.Reverse(firsts)
		if extra != "" {
			firsts = append(firsts, extra+" "+restExtra)
		}
		b.WriteString("(" + strings.Join(firsts, " | ") + ")? ")
	}
	b.WriteString(`"}" ` + sp)
	return c.rule(name, b.String()), nil
}

// jsonString returns s encoded as a JSON string (with its quotes).
func jsonString(s string) string {
	var b strings.Builder
	encodeJSON(&b, s)
	return b.String()
}

// count reads a non-negative integer keyword.
func count(s *jobj, k, path string) (int, bool, error) {
	v, ok := s.get(k)
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	i, err := strconv.Atoi(n.String())
	if !isNum || err != nil || i < 0 {
		return 0, false, schemaErr(path+"/"+k, "%s must be a non-negative integer", k)
	}
	return i, true, nil
}

func (c *schemaConv) array(s *jobj, name, path string) (string, error) {
	sp := c.use("space")
	comma := `"," ` + sp + " "
	minN, _, err := count(s, "minItems", path)
	if err != nil {
		return "", err
	}
	maxN, hasMax, err := count(s, "maxItems", path)
	if err != nil {
		return "", err
	}
	if hasMax && maxN < minN {
		return "", schemaErr(path, "maxItems %d below minItems %d", maxN, minN)
	}
	if minN > maxRepeat || hasMax && maxN > maxRepeat {
		return "", schemaErr(path, "minItems/maxItems above %d are not supported", maxRepeat)
	}
	if pv, ok := s.get("prefixItems"); ok {
		pa, ok := pv.([]any)
		if !ok {
			return "", schemaErr(path+"/prefixItems", "prefixItems must be an array")
		}
		if has(s, "minItems") || has(s, "maxItems") {
			return "", schemaErr(path, "prefixItems together with minItems/maxItems is not supported")
		}
		var parts []string
		for i, sub := range pa {
			v, err := c.visit(sub, fmt.Sprintf("%s-%d", name, i), fmt.Sprintf("%s/prefixItems/%d", path, i))
			if err != nil {
				return "", err
			}
			parts = append(parts, v)
		}
		body := `"[" ` + sp + " " + strings.Join(parts, " "+comma) + " "
		if iv, ok := s.get("items"); ok && iv != false {
			v, err := c.visit(iv, name+"-item", path+"/items")
			if err != nil {
				return "", err
			}
			body += "(" + comma + v + ")* "
		}
		return c.rule(name, body+`"]" `+sp), nil
	}
	item := c.use("value")
	if iv, ok := s.get("items"); ok {
		if item, err = c.visit(iv, name+"-item", path+"/items"); err != nil {
			return "", err
		}
	}
	var list string
	switch {
	case hasMax && maxN == 0:
		list = ""
	case minN == 0:
		rep := "*"
		if hasMax {
			rep = fmt.Sprintf("{0,%d}", maxN-1)
		}
		list = "(" + item + " (" + comma + item + ")" + rep + ")? "
	default:
		rep := fmt.Sprintf("{%d,}", minN-1)
		if hasMax {
			rep = fmt.Sprintf("{%d,%d}", minN-1, maxN-1)
		}
		list = item + " (" + comma + item + ")" + rep + " "
	}
	return c.rule(name, `"[" `+sp+" "+list+`"]" `+sp), nil
}

// stringFormats are the string formats enforced, as llama.cpp's
// json-schema-to-grammar writes them; other formats are annotations.
var stringFormats = map[string]string{
	"date":      `[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])`,
	"time":      `([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])`,
	"date-time": `[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1]) "T" ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])`,
	"uuid":      `[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}`,
}

func (c *schemaConv) str(s *jobj, name, path string) (string, error) {
	sp := c.use("space")
	if fv, ok := s.get("format"); ok {
		if f, _ := fv.(string); stringFormats[f] != "" {
			if has(s, "pattern") || has(s, "minLength") || has(s, "maxLength") {
				return "", schemaErr(path, "format %q together with pattern/minLength/maxLength is not supported", f)
			}
			return c.rule(name, `"\"" `+c.rule(f, stringFormats[f])+` "\"" `+sp), nil
		}
	}
	if pv, ok := s.get("pattern"); ok {
		p, ok := pv.(string)
		if !ok {
			return "", schemaErr(path+"/pattern", "pattern must be a string")
		}
		if has(s, "minLength") || has(s, "maxLength") {
			return "", schemaErr(path, "pattern together with minLength/maxLength is not supported")
		}
		body, err := regexToGBNF(p, c)
		if err != nil {
			return "", schemaErr(path+"/pattern", "%v", err)
		}
		return c.rule(name, `"\"" `+body+` "\"" `+sp), nil
	}
	minN, _, err := count(s, "minLength", path)
	if err != nil {
		return "", err
	}
	maxN, hasMax, err := count(s, "maxLength", path)
	if err != nil {
		return "", err
	}
	if !has(s, "minLength") && !hasMax {
		return c.use("string"), nil
	}
	if hasMax && maxN < minN {
		return "", schemaErr(path, "maxLength %d below minLength %d", maxN, minN)
	}
	if minN > maxRepeat || hasMax && maxN > maxRepeat {
		return "", schemaErr(path, "minLength/maxLength above %d are not supported", maxRepeat)
	}
	rep := fmt.Sprintf("{%d,}", minN)
	if hasMax {
		rep = fmt.Sprintf("{%d,%d}", minN, maxN)
	}
	return c.rule(name, `"\"" `+c.use("char")+rep+` "\"" `+sp), nil
}

// bound reads a numeric keyword as an exact rational.
func bound(s *jobj, k, path string) (*big.Rat, error) {
	v, ok := s.get(k)
	if !ok {
		return nil, nil
	}
	n, isNum := v.(json.Number)
	r, ok2 := new(big.Rat).SetString(n.String())
	if !isNum || !ok2 {
		return nil, schemaErr(path+"/"+k, "%s must be a number", k)
	}
	return r, nil
}

// maxDigits is the longest integer the number rules produce (as llama.cpp's
// integral-part).
const maxDigits = 16

var intLimit = new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(maxDigits), nil), big.NewInt(1))

func (c *schemaConv) integer(s *jobj, name, path string) (string, error) {
	var lo, hi *big.Int
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		r, err := bound(s, k, path)
		if err != nil || r == nil {
			if err != nil {
				return "", err
			}
			continue
		}
		var v *big.Int
		switch k {
		case "minimum": // ceil
			v = ceil(r)
		case "exclusiveMinimum": // floor + 1
			v = new(big.Int).Add(floor(r), big.NewInt(1))
		case "maximum":
			v = floor(r)
		case "exclusiveMaximum": // ceil - 1
			v = new(big.Int).Sub(ceil(r), big.NewInt(1))
		}
		if strings.HasSuffix(k, "inimum") {
			if lo == nil || v.Cmp(lo) > 0 {
				lo = v
			}
		} else if hi == nil || v.Cmp(hi) < 0 {
			hi = v
		}
	}
	if lo == nil && hi == nil {
		return c.use("integer"), nil
	}
	for _, v := range []*big.Int{lo, hi} {
		if v != nil && new(big.Int).Abs(v).Cmp(intLimit) > 0 {
			return "", schemaErr(path, "integer bound %v has more than %d digits", v, maxDigits)
		}
	}
	if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
		return "", schemaErr(path, "no integer between the minimum and the maximum")
	}
	body := intRange(lo, hi)
	return c.rule(name, "("+body+") "+c.use("space")), nil
}

func (c *schemaConv) number(s *jobj, name, path string) (string, error) {
	lo, err := bound(s, "minimum", path)
	if err != nil {
		return "", err
	}
	hi, err := bound(s, "maximum", path)
	if err != nil {
		return "", err
	}
	if lo == nil && hi == nil {
		return c.use("number"), nil
	}
	if lo != nil && !lo.IsInt() || hi != nil && !hi.IsInt() {
		return "", schemaErr(path, "number minimum/maximum are supported only as integers (use integer bounds, or drop them)")
	}
	var l, h *big.Int
	if lo != nil {
		l = lo.Num()
	}
	if hi != nil {
		h = hi.Num()
	}
	for _, v := range []*big.Int{l, h} {
		if v != nil && new(big.Int).Abs(v).Cmp(intLimit) > 0 {
			return "", schemaErr(path, "number bound %v has more than %d digits", v, maxDigits)
		}
	}
	if l != nil && h != nil && l.Cmp(h) > 0 {
		return "", schemaErr(path, "minimum above maximum")
	}
	neg := func(v *big.Int) *big.Int { return new(big.Int).Neg(v) }
	var alts []string
	switch {
	case l != nil && l.Sign() >= 0: // [l, h]
		alts = append(alts, c.magnitude(l, h))
	case h != nil && h.Sign() <= 0: // -[|h|, |l|]
		var ml *big.Int
		if l != nil {
			ml = neg(l)
		}
		alts = append(alts, `"-" `+c.magnitude(neg(h), ml))
	default: // l < 0 (or none) < h (or none): -[0, |l|] or [0, h]
		var ml *big.Int
		if l != nil {
			ml = neg(l)
		}
		alts = append(alts, `"-" `+c.magnitude(big.NewInt(0), ml), c.magnitude(big.NewInt(0), h))
	}
	return c.rule(name, "("+strings.Join(alts, " | ")+") "+c.use("space")), nil
}

// magnitude matches the unsigned decimals (no exponent) in [a, b], a >= 0
// and b (nil: unbounded) integers: an integral part in [a, b-1] with any
// fraction, or b with a zero fraction.
func (c *schemaConv) magnitude(a, b *big.Int) string {
	frac := `("." ` + c.use("decimal-part") + `)?`
	if b == nil {
		return "(" + intRange(a, nil) + ") " + frac
	}
	top := gbnfLiteral(b.String()) + ` ("." "0"{1,16})?`
	if a.Cmp(b) == 0 {
		return "(" + top + ")"
	}
	return "((" + intRange(a, new(big.Int).Sub(b, big.NewInt(1))) + ") " + frac + " | " + top + ")"
}

func floor(r *big.Rat) *big.Int {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	_ = m
	return q // DivMod rounds toward -inf for positive divisors
}

func ceil(r *big.Rat) *big.Int {
	f := floor(r)
	if !r.IsInt() {
		f.Add(f, big.NewInt(1))
	}
	return f
}

// intRange returns GBNF alternatives matching exactly the decimal
// integers in [lo, hi] (nil: unbounded, up to maxDigits digits).
func intRange(lo, hi *big.Int) string {
	zero := big.NewInt(0)
	switch {
	case lo != nil && lo.Sign() >= 0:
		return nonNeg(lo, hi)
	case hi != nil && hi.Sign() < 0: // all negative: "-" |hi|..|lo|
		var nlo *big.Int
		if lo != nil {
			nlo = new(big.Int).Neg(lo)
		}
		return `"-" (` + nonNeg(new(big.Int).Neg(hi), nlo) + ")"
	default: // lo < 0 (or none) <= hi (or none)
		var nlo *big.Int
		if lo != nil {
			nlo = new(big.Int).Neg(lo)
		}
		return `"-" (` + nonNeg(big.NewInt(1), nlo) + ") | " + nonNeg(zero, hi)
	}
}

// nonNeg matches the integers in [lo, hi], 0 <= lo, hi nil = up to
// maxDigits digits, written without leading zeros.
func nonNeg(lo, hi *big.Int) string {
	if hi == nil {
		hi = intLimit
	}
	a, b := lo.String(), hi.String()
	var alts []string
	for d := len(a); d <= len(b); d++ {
		from, to := a, b
		if d > len(a) {
			from = "1" + strings.Repeat("0", d-1)
		}
		if d < len(b) {
			to = strings.Repeat("9", d)
		}
		alts = append(alts, sameLen(from, to)...)
	}
	return strings.Join(alts, " | ")
}

// sameLen matches the digit strings of one length between a and b.
func sameLen(a, b string) []string {
	if a == b {
		return []string{gbnfLiteral(a)}
	}
	if len(a) == 1 {
		return []string{"[" + a + "-" + b + "]"}
	}
	if a[0] == b[0] {
		var out []string
		for _, s := range sameLen(a[1:], b[1:]) {
			out = append(out, gbnfLiteral(a[:1])+" ("+s+")")
		}
		return []string{strings.Join(out, " | ")}
	}
	n := len(a) - 1
	allZero := strings.Trim(a[1:], "0") == ""
	allNine := strings.Trim(b[1:], "9") == ""
	var out []string
	lo, hi := a[0], b[0]
	if !allZero {
		out = append(out, gbnfLiteral(a[:1])+" ("+strings.Join(sameLen(a[1:], strings.Repeat("9", n)), " | ")+")")
		lo++
	}
	if !allNine {
		hi--
	}
	if lo <= hi {
		out = append(out, fmt.Sprintf("[%c-%c] [0-9]{%d}", lo, hi, n))
	}
	if !allNine {
		out = append(out, gbnfLiteral(b[:1])+" ("+strings.Join(sameLen(strings.Repeat("0", n), b[1:]), " | ")+")")
	}
	return out
}
