package stages_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

const personSchema = `{
  "type": "object",
  "properties": {
    "name":  {"type": "string", "minLength": 1, "maxLength": 12},
    "age":   {"type": "integer", "minimum": 0, "maximum": 120},
    "color": {"enum": ["red", "green", "blue"]},
    "tags":  {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    "pet":   {"type": "boolean"}
  },
  "required": ["name", "age", "color", "tags"],
  "additionalProperties": false
}`

// checkPerson validates text against personSchema by hand.
func checkPerson(t *testing.T, text string) {
	t.Helper()
	var p struct {
		Name  *string  `json:"name"`
		Age   *float64 `json:"age"`
		Color *string  `json:"color"`
		Tags  []string `json:"tags"`
		Pet   *bool    `json:"pet"`
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("output %q is not valid: %v", text, err)
	}
	if rest, _ := buffered(dec); strings.TrimSpace(rest) != "" {
		t.Fatalf("output %q: text after the object", text)
	}
	switch {
	case p.Name == nil || utf8.RuneCountInString(*p.Name) < 1 || utf8.RuneCountInString(*p.Name) > 12:
		t.Fatalf("output %q: bad name", text)
	case p.Age == nil || *p.Age != float64(int(*p.Age)) || *p.Age < 0 || *p.Age > 120:
		t.Fatalf("output %q: bad age", text)
	case p.Color == nil || !slices.Contains([]string{"red", "green", "blue"}, *p.Color):
		t.Fatalf("output %q: bad color", text)
	case p.Tags == nil || len(p.Tags) > 3:
		t.Fatalf("output %q: bad tags", text)
	}
	for _, tag := range p.Tags {
		if utf8.RuneCountInString(tag) > 8 {
			t.Fatalf("output %q: tag too long", text)
		}
	}
}

// buffered returns what the decoder read past the value.
func buffered(dec *json.Decoder) (string, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(dec.Buffered())
	return b.String(), err
}

// TestGrammarConstrainedJSON: stories260K, which knows nothing of JSON,
// produces a valid object of the schema, greedy and at temperature 1 with
// several seeds, and stops at end of generation (not at max tokens).
func TestGrammarConstrainedJSON(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	g, err := grammar.FromSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512, NSeq: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt := fx.tok.Encode("Once upon a time", true, true)
	var reqs []*stages.Request
	var cols []*collector
	for i := range 5 {
		p := greedy()
		if i > 0 {
			p = sample.DefaultParams()
			p.Temperature, p.TopK, p.TopP, p.MinP, p.Seed = 1, 0, 1, 0, uint64(i)
		}
		p.Grammar = g
		col := newCollector()
		cols = append(cols, col)
		reqs = append(reqs, &stages.Request{ID: uint64(i + 1), Prompt: prompt, Params: p, MaxTokens: 400, Emit: col.emit})
	}
	if err := runEngine(t, e, reqs...); err != nil {
		t.Fatal(err)
	}
	for i, col := range cols {
		text := col.text.String()
		t.Logf("request %d: %q", i, text)
		if col.final.Finish != stages.FinishStop {
			t.Errorf("request %d finished with %q (%v), want stop", i, col.final.Finish, col.final.Err)
		}
		checkPerson(t, text)
	}
}

// TestGrammarDeadEnd: when the grammar allows no token (here: it has
// ended, and IgnoreEOG asks for more), the request ends with an error
// naming the cause, not a panic or a bogus token.
func TestGrammarDeadEnd(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := greedy()
	p.Grammar = grammar.MustParse(`root ::= "ab"`)
	col := newCollector()
	r := &stages.Request{ID: 1, Prompt: fx.tok.Encode("Hi", true, true), Params: p, MaxTokens: 20, IgnoreEOG: true, Emit: col.emit}
	if err := runEngine(t, e, r); err != nil {
		t.Fatal(err)
	}
	if col.final.Finish != stages.FinishError || col.final.Err == nil || !strings.Contains(col.final.Err.Error(), "grammar allows no further token") || col.text.String() != "ab" {
		t.Errorf("text %q, final %+v", col.text.String(), col.final)
	}
}

// TestGrammarSubmitTooComplex: a grammar the engine cannot run is refused
// by Submit, naming the cause.
func TestGrammarSubmitTooComplex(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := greedy()
	p.Grammar = grammar.MustParse(`root ::= (("a"?){1000}){1000}`)
	err = e.Submit(&stages.Request{ID: 1, Prompt: fx.tok.Encode("Hi", true, true), Params: p, Emit: newCollector().emit})
	if !errors.Is(err, grammar.ErrTooComplex) {
		t.Errorf("Submit: %v, want ErrTooComplex", err)
	}
}
