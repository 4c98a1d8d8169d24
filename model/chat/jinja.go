// This file runs a Hugging Face chat template through gonja, set up the way
// transformers and llama-server render chat templates: trim_blocks and
// lstrip_blocks on, raise_exception, strftime_now, transformers' tojson,
// Python list indexing and str methods, the {% generation %} tag, and no
// file system access ({% include %} of anything but the template fails).

package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// templateName is the in-memory path of the chat template inside gonja.
const templateName = "/chat_template.jinja"

// jinjaTemplate is a parsed chat template, safe for concurrent renders.
type jinjaTemplate struct {
	tpl *exec.Template
}

// jinjaVars are the variables a render sees, as llama-server passes them.
type jinjaVars struct {
	messages            []Message
	bosToken, eosToken  string
	addGenerationPrompt bool
	now                 time.Time
	tools               []Tool // passed only when there are some
	opts                RenderOptions
	harmony             bool // gpt-oss's template (jinjaMessage)
	thinkBlocks         bool // reasoning as a thinking content block (jinjaMessage)
}

// raisedError is what the template's raise_exception produced.
type raisedError struct{ msg string }

func (e *raisedError) Error() string { return e.msg }

// parseJinja parses source with our gonja environment.
func parseJinja(source string) (jt *jinjaTemplate, err error) {
	defer func() {
		if r := recover(); r != nil {
			jt, err = nil, fmt.Errorf("jinja parser panicked: %v", r)
		}
	}()
	if err := checkGonjaLexable(source); err != nil {
		return nil, err
	}
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	loader, err := loaders.NewMemoryLoader(map[string]string{templateName: source})
	if err != nil {
		return nil, err
	}
	env, err := newEnvironment()
	if err != nil {
		return nil, err
	}
	tpl, err := exec.NewTemplate(templateName, cfg, loader, env)
	if err != nil {
		return nil, trimParseError(err, source)
	}
	limitTemplate(tpl.Root())
	return &jinjaTemplate{tpl: tpl}, nil
}

// trimParseError drops the full template source gonja embeds in its message.
func trimParseError(err error, source string) error {
	msg := err.Error()
	if i := strings.Index(msg, source); i >= 0 && source != "" {
		msg = msg[:i] + "<template>" + msg[i+len(source):]
	}
	return errors.New(msg)
}

// render executes the template. A raise_exception call comes back as a
// *raisedError; engine failures come back as other errors.
func (j *jinjaTemplate) render(v jinjaVars) (out string, err error) {
	var raised *raisedError
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("jinja renderer panicked: %v", r)
		}
	}()
	msgs := make(pyList, len(v.messages))
	input := len(v.bosToken) + len(v.eosToken)
	for i, m := range v.messages {
		// An ordered dict, so that tojson keeps role before content as Python does.
		d, err := jinjaMessage(m, v.harmony, v.thinkBlocks)
		if err != nil {
			return "", err
		}
		msgs[i] = d
		input += len(m.Role) + len(m.Content) + len(m.Reasoning)
		for _, c := range m.ToolCalls {
			input += len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	vars := map[string]any{}
	if len(v.tools) > 0 {
		tools, err := jinjaToolList(v.tools)
		if err != nil {
			return "", err
		}
		vars["tools"] = tools
		for _, t := range v.tools {
			input += len(t.Name) + len(t.Description) + len(t.Parameters)
		}
	}
	b := newBudget(input, len(v.messages)+len(v.tools))
	for k, val := range map[string]any{
		budgetKey:               b,
		"messages":              msgs,
		"bos_token":             v.bosToken,
		"eos_token":             v.eosToken,
		"add_generation_prompt": v.addGenerationPrompt,
		// llama-server always passes enable_thinking (true by default) and
		// the date variables of common_chat_extra_context.
		"enable_thinking": v.opts.Thinking == nil || *v.opts.Thinking,
		"date_string":     strftime("%d %b %Y", v.now),
		"datetime":        strftime("%b %d %Y", v.now),
		"raise_exception": func(args *exec.VarArgs) (string, error) {
			msg := "raise_exception called"
			if len(args.Args) > 0 {
				msg = args.Args[0].String()
			}
			raised = &raisedError{msg: msg}
			return "", raised
		},
		"strftime_now": func(args *exec.VarArgs) (string, error) {
			if len(args.Args) != 1 || !args.Args[0].IsString() {
				return "", exec.ErrInvalidCall(errors.New("strftime_now(format) needs one string"))
			}
			return strftime(args.Args[0].String(), v.now), nil
		},
	} {
		vars[k] = val
	}
	if v.opts.ReasoningEffort != "" {
		vars["reasoning_effort"] = v.opts.ReasoningEffort
	}
	ctx := exec.NewContext(vars)
	if err = j.tpl.Execute(b, ctx); err != nil {
		if raised != nil {
			return "", raised
		}
		if b.err != nil {
			return "", b.err
		}
		// str methods do not see the budget, and gonja flattens their errors.
		if strings.Contains(err.Error(), ErrRenderLimit.Error()) {
			return "", fmt.Errorf("%w: %v", ErrRenderLimit, err)
		}
		return "", err
	}
	return b.out.String(), nil
}

// newEnvironment builds a private gonja environment: gonja's builtins plus
// our fixes, without touching gonja's package-level sets.
func newEnvironment() (*exec.Environment, error) {
	globals := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	// gonja's range feeds a channel from a goroutine that leaks when a loop
	// breaks early; ours returns a list.
	globals.Set("range", rangeFunction)

	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	for _, name := range listFilters {
		fn, ok := filters.Get(name)
		if !ok {
			continue
		}
		if name == "items" || name == "dictsort" {
			fn = orderedDictFilter(name, fn)
		}
		if err := filters.Replace(name, listifyFilter(fn)); err != nil {
			return nil, err
		}
	}
	if err := filters.Replace("tojson", tojsonFilter); err != nil {
		return nil, err
	}
	if err := filters.Replace("trim", trimFilter); err != nil {
		return nil, err
	}
	for _, name := range widthFilters {
		if fn, ok := filters.Get(name); ok {
			if err := filters.Replace(name, widthLimited(name, fn)); err != nil {
				return nil, err
			}
		}
	}
	// Every filter checks the time and the sizes of its operands and result
	// (limitops.go).
	for _, name := range gonjaFilterNames {
		if fn, ok := filters.Get(name); ok {
			if err := filters.Replace(name, limitedFilter(name, fn)); err != nil {
				return nil, err
			}
		}
	}
	if err := filters.Register(binopFilter, binop); err != nil {
		return nil, err
	}
	if err := filters.Register(methodFilter, methodCall); err != nil {
		return nil, err
	}
	if err := filters.Register(outputFilter, outputCheck); err != nil {
		return nil, err
	}
	if err := filters.Register(iterFilter, iterableCheck); err != nil {
		return nil, err
	}
	if err := filters.Register(acyclicFilter, acyclicCheck); err != nil {
		return nil, err
	}

	structures := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	if err := structures.Register("generation", generationParser); err != nil {
		return nil, err
	}

	tests := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)

	return &exec.Environment{
		Context:           globals,
		Filters:           filters,
		Tests:             tests,
		ControlStructures: structures,
		Methods:           newMethods(),
	}, nil
}

// listFilters are gonja filters that return lists: their results become
// pyLists so that [-1] works on them.
var listFilters = [...]string{
	"batch", "dictsort", "groupby", "items", "list", "map", "reject",
	"rejectattr", "reverse", "select", "selectattr", "slice", "sort", "unique",
}

// orderedDictFilter makes the items and dictsort filters see an ordered
// dict (a JSON object from tools.go): gonja's read only Go maps, so
// `for k, v in arguments|items` (Qwen3.5, Nemotron 3) or `|dictsort`
// (Gemma 4) would loop over nothing. items keeps insertion order, as
// Python's dict.items() does; dictsort gets a map and sorts it itself.
func orderedDictFilter(name string, fn exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		d, ok := in.Interface().(*exec.Dict)
		if !ok {
			return fn(e, in, params)
		}
		if name == "items" {
			if err := params.Take(); err != nil {
				return exec.AsValue(exec.ErrInvalidCall(err))
			}
			out := make(pyList, len(d.Pairs))
			for i, p := range d.Pairs {
				out[i] = pyList{p.Key.Interface(), p.Value.Interface()}
			}
			return exec.AsValue(out)
		}
		m := make(map[string]any, len(d.Pairs))
		for _, p := range d.Pairs {
			m[p.Key.String()] = p.Value.Interface()
		}
		return fn(e, exec.AsValue(m), params)
	}
}

func listifyFilter(fn exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		return listifyValue(fn(e, in, params))
	}
}

// tojsonFilter is transformers' tojson: json.dumps with ensure_ascii=False,
// ", " and ": " separators, no HTML escaping.
func tojsonFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	o, err := parseJSONOptions(params)
	if err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	if b := budgetOf(e.Environment.Context); b != nil {
		o.limit = b.maxBytes
	}
	s, err := toJSON(in.Interface(), o)
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(s)
}

// trimFilter is Jinja's trim: str.strip(chars) on the string form.
func trimFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	chars, err := optString(params, 0, "chars")
	if err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	return exec.AsValue(pyStrip(in.String(), chars, true, true))
}

// rangeFunction is Python's range(stop) / range(start, stop[, step]).
func rangeFunction(args *exec.VarArgs) (pyList, error) {
	var start, stop, step = 0, 0, 1
	for _, a := range args.Args {
		if !a.IsInteger() {
			return nil, exec.ErrInvalidCall(errors.New("range arguments must be integers"))
		}
	}
	switch len(args.Args) {
	case 1:
		stop = args.Args[0].Integer()
	case 2:
		start, stop = args.Args[0].Integer(), args.Args[1].Integer()
	case 3:
		start, stop, step = args.Args[0].Integer(), args.Args[1].Integer(), args.Args[2].Integer()
	default:
		return nil, exec.ErrInvalidCall(errors.New("range takes 1 to 3 arguments"))
	}
	if step == 0 {
		return nil, exec.ErrInvalidCall(errors.New("range step cannot be 0"))
	}
	const maxRange = 1 << 20
	var out pyList
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if len(out) >= maxRange {
			return nil, exec.ErrInvalidCall(fmt.Errorf("range longer than %d", maxRange))
		}
		out = append(out, i)
	}
	return out, nil
}

// newMethods wraps gonja's methods so list results are pyLists, and replaces
// the str methods whose defaults differ from Python.
func newMethods() exec.Methods {
	base := builtins.Methods
	str := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		if m, ok := base.Str.Get(name); ok {
			str[name] = listifyMethod(m)
		}
	}
	for name, m := range stringMethods() {
		str[name] = m
	}
	for _, name := range widthMethods {
		if m, ok := str[name]; ok {
			str[name] = widthLimitedMethod(name, m)
		}
	}
	dict := map[string]exec.Method[map[string]any]{}
	for _, name := range dictMethodNames {
		if m, ok := base.Dict.Get(name); ok {
			dict[name] = listifyMethod(orderedDictMethod(name, m))
		}
	}
	list := map[string]exec.Method[[]any]{}
	for _, name := range listMethodNames {
		if m, ok := base.List.Get(name); ok {
			list[name] = listifyMethod(m)
		}
	}
	return exec.Methods{
		Bool:  base.Bool,
		Int:   base.Int,
		Float: base.Float,
		Str:   exec.NewMethodSet(str),
		Dict:  exec.NewMethodSet(dict),
		List:  exec.NewMethodSet(list),
	}
}

// gonja keeps its method and filter tables private, so the names are
// listed here.
var (
	gonjaFilterNames = [...]string{
		"abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
		"escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
		"int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
		"random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
		"selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
		"truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
	}
	strMethodNames = [...]string{
		"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith",
		"expandtabs", "find", "format", "format_map", "isalnum", "isalpha", "isascii",
		"isdecimal", "isdigit", "islower", "isnumeric", "isprintable", "isspace",
		"istitle", "isupper", "join", "ljust", "lower", "partition", "removeprefix",
		"removesuffix", "rfind", "rjust", "rpartition", "splitlines", "startswith",
		"swapcase", "title", "upper", "zfill",
	}
	dictMethodNames = [...]string{"keys", "values", "items", "get", "pop", "setdefault", "update", "copy", "clear"}
	listMethodNames = [...]string{"append", "reverse", "copy"}
)

// orderedDictMethod makes keys, values and items of an ordered dict (JSON
// objects from tools.go) follow insertion order, as Python's do; gonja
// hands dict methods a Go map and sorts its keys.
func orderedDictMethod(name string, m exec.Method[map[string]any]) exec.Method[map[string]any] {
	if name != "keys" && name != "values" && name != "items" {
		return m
	}
	return func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		d, ok := selfValue.Interface().(*exec.Dict)
		if !ok || len(args.Args) > 0 || len(args.KwArgs) > 0 {
			return m(self, selfValue, args)
		}
		out := make(pyList, len(d.Pairs))
		for i, p := range d.Pairs {
			switch name {
			case "keys":
				out[i] = p.Key.Interface()
			case "values":
				out[i] = p.Value.Interface()
			default:
				out[i] = pyList{p.Key.Interface(), p.Value.Interface()}
			}
		}
		return out, nil
	}
}

func listifyMethod[T any](m exec.Method[T]) exec.Method[T] {
	return func(self T, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		out, err := m(self, selfValue, args)
		if err != nil {
			return out, err
		}
		return listify(out), nil
	}
}

// generationControlStructure is transformers' {% generation %} tag, which
// marks assistant text for training masks; for rendering it is a plain block.
type generationControlStructure struct {
	body *nodes.Wrapper
}

func (g *generationControlStructure) Position() *tokens.Token { return g.body.Location }
func (g *generationControlStructure) String() string          { return "GenerationControlStructure" }

func (g *generationControlStructure) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteWrapper(g.body)
}

func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	if !args.End() {
		return nil, args.Error("generation takes no arguments", args.Current())
	}
	wrapper, endargs, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !endargs.End() {
		return nil, endargs.Error("endgeneration takes no arguments", endargs.Current())
	}
	return &generationControlStructure{body: wrapper}, nil
}
