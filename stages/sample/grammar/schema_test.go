package grammar

import (
	"errors"
	"strings"
	"testing"
)

func TestSchemaAccepts(t *testing.T) {
	cases := []struct {
		name, schema string
		good, bad    []string
	}{
		{"object", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}`,
			[]string{`{"name":"Ann","age":31}`, "{ \"name\": \"A\\\"n\\u00e9\",\n  \"age\": -3 }"},
			[]string{`{"age":31,"name":"Ann"}`, `{"name":"Ann"}`, `{"name":"Ann","age":3.5}`, `{"name":"Ann","age":31,"x":1}`, `{"name":Ann,"age":1}`}},
		{"optional in order", `{"properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"null"}}}`,
			[]string{`{}`, `{"a":1}`, `{"b":true}`, `{"a":1,"c":null}`, `{"a":1,"b":false,"c":null}`, `{"c":null}`},
			[]string{`{"b":true,"a":1}`, `{,"a":1}`, `{"a":1,}`, `{"d":1}`}},
		{"required then optional", `{"properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["b"]}`,
			[]string{`{"b":true}`, `{"b":true,"a":1}`}, []string{`{"a":1,"b":true}`, `{}`}},
		{"additional true", `{"properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":true}`,
			[]string{`{"a":1}`, `{"a":1,"x":[1,{"y":null}]}`, `{"a":1,"x":1,"y":"z"}`}, []string{`{"x":1}`}},
		{"additional schema", `{"additionalProperties":{"type":"integer"}}`,
			[]string{`{}`, `{"x":1,"y":2}`}, []string{`{"x":"s"}`}},
		{"additional false", `{"type":"object","additionalProperties":false}`, []string{`{}`}, []string{`{"a":1}`}},
		{"any object", `{"type":"object"}`, []string{`{}`, `{"a":[1,2,{"b":"c"}]}`}, []string{`[]`, `{"a"}`}},
		{"enum const", `{"type":"object","properties":{"c":{"enum":["red","green",1,null]},"k":{"const":{"x":[1,"é"]}}},"required":["c","k"]}`,
			[]string{`{"c":"red","k":{"x":[1,"é"]}}`, `{"c":null,"k":{"x":[1,"é"]}}`, `{"c":1,"k":{"x":[1,"é"]}}`},
			[]string{`{"c":"blue","k":{"x":[1,"é"]}}`, `{"c":"red","k":{"x":[2,"é"]}}`}},
		{"array", `{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3}`,
			[]string{`[1,2]`, `[1, 2, 3]`}, []string{`[]`, `[1]`, `[1,2,3,4]`, `[1,"a"]`}},
		{"array any", `{"type":"array"}`, []string{`[]`, `[1,"a",null,[{}]]`}, []string{`[,]`}},
		{"array max0", `{"type":"array","maxItems":0}`, []string{`[]`}, []string{`[1]`}},
		{"tuple", `{"prefixItems":[{"type":"string"},{"type":"number"}],"items":false}`,
			[]string{`["a",1.5e3]`}, []string{`["a"]`, `["a",1,2]`}},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"array","items":{"type":"boolean"}}]}`,
			[]string{`"x"`, `[true]`}, []string{`1`, `[1]`}},
		{"type list", `{"type":["integer","null"]}`, []string{`1`, `null`}, []string{`"1"`, `1.5`}},
		{"string length", `{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"abc"`, `"a\n"`, `"éé"`}, []string{`"a"`, `"abcd"`}},
		{"pattern", `{"type":"string","pattern":"^[A-Z]{2}-\\d{3}(x|yz)?$"}`,
			[]string{`"AB-123"`, `"ZZ-000x"`, `"QQ-999yz"`}, []string{`"ab-123"`, `"AB-12"`, `"AB-123y"`, `"xAB-123"`}},
		{"pattern unanchored", `{"type":"string","pattern":"ab+"}`,
			[]string{`"ab"`, `"xxabbby"`}, []string{`"a"`, `"ba"`}},
		{"pattern quote", `{"type":"string","pattern":"^[\"\\\\a]+$"}`,
			[]string{`"a\"\\"`}, []string{`"b"`}},
		{"integer range", `{"type":"integer","minimum":-15,"maximum":120}`,
			[]string{`-15`, `-1`, `0`, `7`, `99`, `100`, `120`}, []string{`-16`, `121`, `200`, `-0`, `007`, `1000`}},
		{"integer exclusive", `{"type":"integer","exclusiveMinimum":10,"exclusiveMaximum":13}`,
			[]string{`11`, `12`}, []string{`10`, `13`}},
		{"integer min only", `{"type":"integer","minimum":250}`,
			[]string{`250`, `251`, `999`, `1000`, `123456789`}, []string{`249`, `25`, `-1`}},
		{"integer max only", `{"type":"integer","maximum":-5}`, []string{`-5`, `-100`}, []string{`-4`, `0`, `5`}},
		{"number range", `{"type":"number","minimum":0,"maximum":10}`,
			[]string{`0`, `3.25`, `9.999`, `10`, `10.0`}, []string{`-1`, `10.5`, `11`, `1e3`}},
		{"number negative", `{"type":"number","minimum":-90,"maximum":90}`,
			[]string{`-90`, `-89.5`, `-0.25`, `0`, `45.125`, `90`, `90.00`, `-90.0`}, []string{`-90.5`, `-91`, `90.5`, `91`, `1e2`}},
		{"number below zero", `{"type":"number","minimum":-5,"maximum":-2}`,
			[]string{`-5`, `-4.75`, `-2`, `-2.0`}, []string{`-1.5`, `-5.5`, `0`, `-6`}},
		{"number max only", `{"type":"number","maximum":3}`,
			[]string{`3`, `2.5`, `-100.5`, `0`}, []string{`3.5`, `4`}},
		{"number min only negative", `{"type":"number","minimum":-3}`,
			[]string{`-3`, `-2.5`, `0`, `123.5`}, []string{`-3.5`, `-4`}},
		{"formats", `{"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"date-time"},"u":{"format":"uuid","type":"string"},"e":{"type":"string","format":"email"}},"required":["d","t","u","e"]}`,
			[]string{`{"d":"2026-11-25","t":"2026-11-25T13:20:00Z","u":"123e4567-e89b-12d3-a456-426614174000","e":"anything"}`,
				`{"d":"1999-01-31","t":"2026-11-25T13:20:00.123+01:00","u":"123E4567-E89B-12D3-A456-426614174000","e":""}`},
			[]string{`{"d":"2026-13-25","t":"2026-11-25T13:20:00Z","u":"123e4567-e89b-12d3-a456-426614174000","e":""}`,
				`{"d":"2026-11-25","t":"2026-11-25 13:20:00","u":"123e4567-e89b-12d3-a456-426614174000","e":""}`,
				`{"d":"2026-11-25","t":"2026-11-25T13:20:00Z","u":"123e4567","e":""}`}},
		{"ref", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"}`,
			[]string{`{"v":1,"next":null}`, `{"v":1,"next":{"v":2,"next":null}}`}, []string{`{"v":1}`}},
		{"bool schema", `true`, []string{`1`, `{"a":[]}`}, []string{`{`}},
		{"no type", `{"description":"anything"}`, []string{`"x"`, `[1]`}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, err := SchemaToGBNF([]byte(c.schema))
			if err != nil {
				t.Fatal(err)
			}
			g, err := Parse(src)
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			for _, s := range c.good {
				if full, _ := matches(t, g, s); !full {
					t.Errorf("%s rejected\n%s", s, src)
				}
			}
			for _, s := range c.bad {
				if full, _ := matches(t, g, s); full {
					t.Errorf("%s accepted\n%s", s, src)
				}
			}
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	cases := []struct{ schema, want string }{
		{`{"type":"string","format":"email","minLength":1,"contentSchema":{}}`, `keyword "contentSchema" is not supported for type string`},
		{`{"type":"array","uniqueItems":true}`, `keyword "uniqueItems"`},
		{`{"type":"object","properties":{"a":{"type":"number","multipleOf":2}}}`, `at #/properties/a: keyword "multipleOf"`},
		{`{"type":"number","minimum":-1.5}`, "number minimum/maximum are supported only as integers"},
		{`{"type":"string","pattern":"(a)\\1"}`, "backreference"},
		{`{"type":"string","pattern":"a(?=b)"}`, "lookaround"},
		{`{"type":"string","pattern":"\\bword"}`, "word boundary"},
		{`{"type":"string","pattern":"\\p{L}"}`, "Unicode property"},
		{`{"type":"string","pattern":"a++"}`, "possessive"},
		{`{"type":"string","pattern":"a^b"}`, "anchor"},
		{`{"$ref":"http://example.com/s.json"}`, "only local references"},
		{`{"$ref":"#/$defs/missing"}`, "not found"},
		{`{"allOf":[{"type":"string"},{"minLength":1}]}`, "allOf with more than one"},
		{`{"type":"widget"}`, `unknown type "widget"`},
		{`false`, "matches nothing"},
		{`{"type":"integer","minimum":5,"maximum":4}`, "no integer"},
		{`{"type":"array","minItems":5000}`, "above 1000"},
		{`{"type":`, "not valid JSON"},
		{`{"not":{"type":"string"}}`, `keyword "not"`},
	}
	for _, c := range cases {
		_, err := SchemaToGBNF([]byte(c.schema))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrSchema) {
			t.Errorf("%s: error %v, want one containing %q wrapping ErrSchema", c.schema, err, c.want)
		}
	}
}

func TestJSONObjectGrammar(t *testing.T) {
	g, err := Parse(JSONObjectGBNF)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`{}`, `{"a": [1, -2.5e-3, true, null, {"b": "c\u00e9"}]}`, "{\n  \"x\": {}\n}"} {
		if full, _ := matches(t, g, s); !full {
			t.Errorf("%s rejected", s)
		}
	}
	for _, s := range []string{`[]`, `"x"`, `{"a" 1}`, `{"a":01}`, "{" + strings.Repeat(" ", 30) + "}"} {
		if full, _ := matches(t, g, s); full {
			t.Errorf("%s accepted", s)
		}
	}
}
