// This file extends the render limits (limits.go) to every operation: a
// statement, a filter, a method call and an output each check the time, and
// none may take or make a value larger than the byte limit. Without it one
// statement could run for as long as it liked (fifty `{% set x =
// range(1000000)|join %}` took 28 s) and one call could allocate without
// bound (`x.replace('', x)` on a 1 MB x asks for a terabyte, which no
// recover catches).
//
// The size of a value (valueSize) is the length of a string, and for a
// list or dict the sizes of its elements plus one per element; calls whose
// result can be much larger than their operands (replace, join, indent,
// expandtabs, batch, slice, tojson's indentation) have it
// predicted from the operands and are refused before they run. Every other
// filter and method makes at most a small multiple of its operands, which
// are within the limit, and its result is checked after it runs.

package chat

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Names only this file uses; no template identifier can spell them.
const (
	methodFilter  = "\x00method"
	outputFilter  = "\x00output"
	iterFilter    = "\x00iterable"
	acyclicFilter = "\x00acyclic"
	methodSelf    = "\x00self"
)

// valueSize is the size of x (see the file comment), counted up to limit:
// any result above limit means "too large", and so does nesting deeper than
// maxJSONDepth (a list that contains itself).
func valueSize(x any, limit int) int {
	return sizeOf(reflect.ValueOf(x), limit, 0)
}

func sizeOf(v reflect.Value, limit, depth int) int {
	if depth > maxJSONDepth {
		return limit + 1
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			return 4
		}
		if gv, ok := v.Interface().(*exec.Value); ok {
			v = gv.Val
			continue
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return 4
	}
	switch v.Kind() {
	case reflect.String:
		return v.Len()
	case reflect.Slice, reflect.Array:
		n := v.Len()
		for i := 0; i < v.Len() && n <= limit; i++ {
			n += sizeOf(v.Index(i), limit, depth+1)
		}
		return n
	case reflect.Map:
		n := v.Len()
		iter := v.MapRange()
		for n <= limit && iter.Next() {
			n += sizeOf(iter.Key(), limit, depth+1) + sizeOf(iter.Value(), limit, depth+1)
		}
		return n
	}
	return 8
}

// checkSize fails when x is larger than the byte limit.
func (b *budget) checkSize(x any, what string) error {
	if n := valueSize(x, b.maxBytes); n > b.maxBytes {
		return b.fail("%s larger than the limit of %d bytes", what, b.maxBytes)
	}
	return nil
}

// checkOperands checks the time and the sizes of a call's operands.
func (b *budget) checkOperands(name string, in *exec.Value, params *exec.VarArgs) error {
	if err := b.checkTime(); err != nil {
		return err
	}
	if in != nil {
		if err := b.checkSize(in, name+" operand"); err != nil {
			return err
		}
	}
	for _, a := range params.Args {
		if err := b.checkSize(a, name+" argument"); err != nil {
			return err
		}
	}
	for _, a := range params.KwArgs {
		if err := b.checkSize(a, name+" argument"); err != nil {
			return err
		}
	}
	return nil
}

// checkResult checks a call's result and counts the strings it built.
func (b *budget) checkResult(name string, out *exec.Value) error {
	if out == nil || out.IsError() {
		return nil
	}
	if err := b.checkSize(out, name+" result"); err != nil {
		return err
	}
	if out.IsString() {
		if b.built += len(out.String()); b.built > MaxRenderAlloc {
			return b.fail("more than %d bytes of strings built", MaxRenderAlloc)
		}
	}
	return b.checkTime()
}

// arg is positional argument i, else keyword argument kw, else nil.
func arg(params *exec.VarArgs, i int, kw string) *exec.Value {
	if i < len(params.Args) {
		return params.Args[i]
	}
	if v, ok := params.KwArgs[kw]; ok {
		return v
	}
	return nil
}

// intArg is an integer argument, or def.
func intArg(params *exec.VarArgs, i int, kw string, def int) int {
	if v := arg(params, i, kw); v != nil && v.IsInteger() {
		return v.Integer()
	}
	return def
}

// strArg is a string argument, or def.
func strArg(params *exec.VarArgs, i int, kw, def string) string {
	if v := arg(params, i, kw); v != nil && v.IsString() {
		return v.String()
	}
	return def
}

// replacedLen is the length of s with old replaced by new (count times at
// most, all when negative), as Python counts an empty old: before every
// character and at the end.
func replacedLen(s, old, new string, count int) int {
	n := strings.Count(s, old)
	if old == "" {
		n = utf8.RuneCountInString(s) + 1
	}
	if count >= 0 && count < n {
		n = count
	}
	return len(s) + n*(len(new)-len(old))
}

// joinedLen is the size of the elements of list joined with sep.
func (b *budget) joinedLen(list *exec.Value, sep string) int {
	n := list.Len()
	if n == 0 {
		return 0
	}
	if len(sep) > 0 && n-1 > b.maxBytes/len(sep) {
		return b.maxBytes + 1
	}
	return valueSize(list, b.maxBytes) - n + len(sep)*(n-1)
}

// predictFilter fails when filter name would make a result beyond the byte
// limit from operands within it.
func (b *budget) predictFilter(name string, in *exec.Value, params *exec.VarArgs) error {
	n := 0
	switch name {
	case "replace":
		n = replacedLen(in.String(), strArg(params, 0, "old", ""), strArg(params, 1, "new", ""), intArg(params, 2, "count", -1))
	case "join":
		if in.IsList() || in.IsDict() {
			n = b.joinedLen(in, strArg(params, 0, "d", ""))
		}
	case "indent":
		w := intArg(params, 0, "width", 4)
		if s := arg(params, 0, "width"); s != nil && s.IsString() {
			w = len(s.String())
		}
		n = len(in.String()) + (strings.Count(in.String(), "\n")+1)*max(w, 0)
	case "tojson":
		n = intArg(params, 0, "indent", 0)
	case "batch":
		n = intArg(params, 0, "linecount", 0)
	case "slice":
		n = intArg(params, 0, "slices", 0)
	}
	if n < 0 || n > b.maxBytes {
		return b.fail("%s would make %d bytes, beyond the limit of %d", name, n, b.maxBytes)
	}
	return nil
}

// predictMethod is predictFilter for str methods.
func (b *budget) predictMethod(name string, self *exec.Value, params *exec.VarArgs) error {
	if !self.IsString() {
		return nil
	}
	s := self.String()
	n := 0
	switch name {
	case "replace":
		n = replacedLen(s, strArg(params, 0, "old", ""), strArg(params, 1, "new", ""), intArg(params, 2, "count", -1))
	case "join":
		if v := arg(params, 0, "iterable"); v != nil && (v.IsList() || v.IsDict()) {
			n = b.joinedLen(v, s)
		}
	case "expandtabs":
		n = len(s) + strings.Count(s, "\t")*max(intArg(params, 0, "tabsize", 8), 0)
	}
	if n < 0 || n > b.maxBytes {
		return b.fail("%s would make %d bytes, beyond the limit of %d", name, n, b.maxBytes)
	}
	return nil
}

// limitedFilter wraps a filter with the checks of this file.
func limitedFilter(name string, fn exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		b := budgetOf(e.Environment.Context)
		if b == nil || in.IsError() {
			return fn(e, in, params)
		}
		if err := b.checkOperands(name, in, params); err != nil {
			return exec.AsValue(err)
		}
		if err := b.predictFilter(name, in, params); err != nil {
			return exec.AsValue(err)
		}
		out := fn(e, in, params)
		if err := b.checkResult(name, out); err != nil {
			return exec.AsValue(err)
		}
		return out
	}
}

// outputCheck is the filter every {{ }} output goes through: the value's
// string form must fit the byte limit before it is built.
func outputCheck(e *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if b := budgetOf(e.Environment.Context); b != nil && !in.IsError() {
		if err := b.checkTime(); err != nil {
			return exec.AsValue(err)
		}
		if err := b.checkSize(in, "output value"); err != nil {
			return exec.AsValue(err)
		}
	}
	return in
}

// iterableCheck is the filter every for loop's iterable goes through: its
// items count as loop iterations before gonja prepares them all.
func iterableCheck(e *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if b := budgetOf(e.Environment.Context); b != nil && !in.IsError() {
		if err := b.checkTime(); err != nil {
			return exec.AsValue(err)
		}
		if n := in.Len(); n > b.maxItems {
			return exec.AsValue(b.fail("a loop over %d items, beyond the limit of %d", n, b.maxItems))
		}
		if b.steps += in.Len(); b.steps > MaxLoopIterations {
			return exec.AsValue(b.fail("more than %d loop iterations", MaxLoopIterations))
		}
	}
	return in
}

// guardIterable is e|\x00iterable.
func guardIterable(e nodes.Expression) nodes.Expression {
	loc := e.Position()
	if loc == nil {
		loc = &tokens.Token{}
	}
	return &nodes.FilteredExpression{Expression: e, Filters: []*nodes.FilterCall{{Token: loc, Name: iterFilter}}}
}

// methodCall is the filter every method call x.name(args) becomes:
// x|\x00method("name", "x" when x is a variable, args): it checks the operands, then calls the
// method as gonja would, then checks the result.
func methodCall(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args) < 2 || !params.Args[0].IsString() || !params.Args[1].IsString() {
		return exec.AsValue(fmt.Errorf("internal: bad method call"))
	}
	name, variable := params.Args[0].String(), params.Args[1].String()
	args := &exec.VarArgs{Args: params.Args[2:], KwArgs: params.KwArgs}
	b := budgetOf(e.Environment.Context)
	if b != nil {
		if err := b.checkOperands(name, in, args); err != nil {
			return exec.AsValue(err)
		}
		if err := b.predictMethod(name, in, args); err != nil {
			return exec.AsValue(err)
		}
	}
	ctx := e.Environment.Context.Inherit()
	ctx.Set(methodSelf, in)
	loc := &tokens.Token{Type: tokens.Name, Val: name}
	self := nameNode(methodSelf)
	call := &nodes.Call{Location: loc, Func: &nodes.GetAttribute{Location: loc, Node: self, Attribute: name}, Parent: self}
	for i, a := range args.Args {
		n := fmt.Sprintf("\x00arg%d", i)
		ctx.Set(n, a)
		call.Args = append(call.Args, nameNode(n))
	}
	if len(args.KwArgs) > 0 {
		call.Kwargs = map[string]nodes.Expression{}
		for k, a := range args.KwArgs {
			n := "\x00kwarg" + k
			ctx.Set(n, a)
			call.Kwargs[k] = nameNode(n)
		}
	}
	sub := &exec.Evaluator{Config: e.Config, Loader: e.Loader, Environment: &exec.Environment{
		Context: ctx, Filters: e.Environment.Filters, Tests: e.Environment.Tests,
		ControlStructures: e.Environment.ControlStructures, Methods: e.Environment.Methods,
	}}
	out := sub.Eval(call)
	// gonja stores a method's receiver back into the variable it was
	// called on (that is how l.append(x) changes l).
	if variable != "" && !out.IsError() && e.Environment.Context.Has(variable) {
		e.Environment.Context.Set(variable, in.Interface())
	}
	if b != nil {
		if err := b.checkResult(name, out); err != nil {
			return exec.AsValue(err)
		}
	}
	return out
}

func nameNode(name string) *nodes.Name {
	return &nodes.Name{Name: &tokens.Token{Type: tokens.Name, Val: name}}
}

// guardMethodCall is c, a call of a method of obj, as obj|\x00method(...).
func guardMethodCall(c *nodes.Call, ga *nodes.GetAttribute, obj nodes.Expression) nodes.Expression {
	loc := c.Location
	if loc == nil {
		loc = &tokens.Token{}
	}
	variable := ""
	if n, ok := ga.Node.(*nodes.Name); ok && n.Name != nil {
		variable = n.Name.Val
	}
	args := append([]nodes.Expression{&nodes.String{Location: loc, Val: ga.Attribute}, &nodes.String{Location: loc, Val: variable}}, c.Args...)
	return &nodes.FilteredExpression{
		Expression: obj,
		Filters:    []*nodes.FilterCall{{Token: loc, Name: methodFilter, Args: args, Kwargs: c.Kwargs}},
	}
}

// guardOutput is e|\x00output.
func guardOutput(e nodes.Expression) nodes.Expression {
	loc := e.Position()
	if loc == nil {
		loc = &tokens.Token{}
	}
	return &nodes.FilteredExpression{Expression: e, Filters: []*nodes.FilterCall{{Token: loc, Name: outputFilter}}}
}

// withTicks puts a statement check before every node of a body.
func withTicks(ns []nodes.Node) []nodes.Node {
	out := make([]nodes.Node, 0, 2*len(ns))
	for _, n := range ns {
		if blk, ok := n.(*nodes.ControlStructureBlock); ok {
			if _, isTick := blk.ControlStructure.(*tick); isTick {
				out = append(out, n)
				continue
			}
		}
		out = append(out, tickNode("stmt"), n)
	}
	return out
}

// guardSetCycle wraps the value of {% set obj.attr = value %} (s is the
// gonja SetControlStructure) in acyclicFilter with obj as its argument:
// storing a namespace (or a list or dict holding it) into itself makes a
// cycle, and gonja's Value.String, which its arithmetic calls on a
// non-number ({{ ns.x % 2 }}), then recurses until the goroutine stack
// overflows, a fatal error no recover catches (FuzzNew found it).
func guardSetCycle(s reflect.Value) {
	field := func(name string) reflect.Value {
		f := s.FieldByName(name)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	ga, ok := field("target").Interface().(*nodes.GetAttribute)
	if !ok || ga.Node == nil {
		return
	}
	obj, ok := ga.Node.(nodes.Expression)
	if !ok {
		return
	}
	for _, name := range []string{"expression", "alternative"} {
		f := field(name)
		e, ok := f.Interface().(nodes.Expression)
		if !ok || e == nil {
			continue
		}
		loc := e.Position()
		if loc == nil {
			loc = &tokens.Token{}
		}
		f.Set(reflect.ValueOf(nodes.Expression(&nodes.FilteredExpression{Expression: e,
			Filters: []*nodes.FilterCall{{Token: loc, Name: acyclicFilter, Args: []nodes.Expression{obj}}}})))
	}
}

// acyclicCheck passes the value through unless it is, or holds within
// maxJSONDepth levels, the map, slice or pointer its argument is (the
// object the set statement stores into).
func acyclicCheck(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() || len(params.Args) != 1 {
		return in
	}
	target := reflect.ValueOf(params.Args[0].Interface())
	switch target.Kind() {
	case reflect.Map, reflect.Slice, reflect.Pointer:
	default:
		return in
	}
	if target.IsNil() {
		return in
	}
	if holds(reflect.ValueOf(in.Interface()), target.Pointer(), 0) {
		return exec.AsValue(fmt.Errorf("chat template: an object cannot be stored inside itself"))
	}
	return in
}

// holds reports whether v is, or contains, the map, slice or pointer at p
// (or nests deeper than maxJSONDepth, which counts as holding it).
func holds(v reflect.Value, p uintptr, depth int) bool {
	if depth > maxJSONDepth {
		return true
	}
	for v.Kind() == reflect.Interface {
		if v.IsNil() {
			return false
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Map:
		if v.IsNil() {
			return false
		}
		if v.Pointer() == p {
			return true
		}
		iter := v.MapRange()
		for iter.Next() {
			if holds(iter.Value(), p, depth+1) {
				return true
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return false
		}
		if v.Pointer() == p && v.Len() > 0 {
			return true
		}
		for i := range v.Len() {
			if holds(v.Index(i), p, depth+1) {
				return true
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			return false
		}
		if v.Pointer() == p {
			return true
		}
		if ev, ok := v.Interface().(*exec.Value); ok {
			return holds(reflect.ValueOf(ev.Interface()), p, depth+1)
		}
		return holds(v.Elem(), p, depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanInterface() && holds(f, p, depth+1) {
				return true
			}
		}
	}
	return false
}
