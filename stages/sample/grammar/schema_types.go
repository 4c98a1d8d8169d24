// schema_types.go: the JSON schema types with structure: objects, arrays
// and strings.

package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

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
