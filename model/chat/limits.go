// This file bounds what one render of a chat template may cost, since the
// template comes from a downloaded GGUF file and Jinja can loop, recurse and
// build strings without end. A render fails with ErrRenderLimit when it:
//
//   - runs longer than RenderTimeout (checked at every statement, loop
//     iteration, macro call, filter, method call, string operation and
//     write);
//   - runs more than MaxLoopIterations loop iterations in total (the items
//     of a loop count once when the loop starts, since gonja prepares them
//     all before the first iteration, and once per iteration), or one loop
//     over more than MaxLoopItems items plus the number of messages (gonja
//     prepares the items at about 0.5 us each, with no check between);
//   - nests macro calls deeper than MaxMacroDepth (an unbounded recursion
//     would otherwise overflow Go's stack, which no recover catches);
//   - writes more output, or builds one string (with +, ~, *, or a padding
//     filter or method such as center, ljust, indent, format) longer, than
//     its byte limit: MaxRenderBytes plus RenderBytesPerInput times the bytes
//     of the messages and special tokens, so a long conversation still
//     renders;
//   - builds more than MaxRenderAlloc bytes of strings with those operations
//     and with filters and methods in total (a peak-memory bound: a loop
//     cannot keep making new strings);
//   - passes a filter or a method an operand, or gets from one a result,
//     larger than the byte limit, or calls one whose result would be
//     (limitops.go: replace, join, indent, expandtabs, batch, slice and
//     tojson's indentation are predicted before they run), or outputs such
//     a value.
//
// The limits are applied by rewriting the parsed template once (parseJinja):
// every statement, for body and macro body gets a check node, every +, ~
// and * expression goes through a filter that checks the size of its result
// before computing it, every method call x.m(a) becomes a filter call that
// checks before and after calling it, and every output and loop iterable
// goes through a check filter; every gonja filter is wrapped with the
// checks.

package chat

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"

	controlstructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Render limits (see the file comment).
const (
	RenderTimeout       = time.Second
	MaxLoopIterations   = 1 << 22
	MaxLoopItems        = 1 << 16
	MaxMacroDepth       = 200
	MaxRenderBytes      = 1 << 20
	MaxRenderAlloc      = 1 << 30
	RenderBytesPerInput = 8
)

// ErrRenderLimit is matched (errors.Is) by the error of a render that
// exceeded a limit.
var ErrRenderLimit = errors.New("chat template exceeds a render limit")

// Names only this file uses; no template identifier can spell them.
const (
	budgetKey   = "\x00budget"
	binopFilter = "\x00binop"
	binopLeft   = "\x00left"
	binopRight  = "\x00right"
)

// budget is the state of one render.
type budget struct {
	deadline time.Time
	maxBytes int
	maxItems int // items of one loop
	steps    int
	depth    int
	written  int
	built    int // bytes of strings built by +, ~, *
	out      strings.Builder
	err      error
}

func newBudget(inputBytes, messages int) *budget {
	return &budget{deadline: time.Now().Add(RenderTimeout), maxBytes: MaxRenderBytes + RenderBytesPerInput*inputBytes,
		maxItems: MaxLoopItems + messages}
}

// fail records the first limit exceeded and returns it.
func (b *budget) fail(format string, args ...any) error {
	if b.err == nil {
		b.err = fmt.Errorf("%w: %s", ErrRenderLimit, fmt.Sprintf(format, args...))
	}
	return b.err
}

func (b *budget) checkTime() error {
	if b.err != nil {
		return b.err
	}
	if time.Now().After(b.deadline) {
		return b.fail("rendering took longer than %v", RenderTimeout)
	}
	return nil
}

// checkLen fails when a string of n bytes would exceed the byte limit.
func (b *budget) checkLen(n int, what string) error {
	if n < 0 || n > b.maxBytes {
		return b.fail("%s of %d bytes exceeds the limit of %d", what, n, b.maxBytes)
	}
	return b.checkTime()
}

// Write is the render's output, bounded by the byte limit.
func (b *budget) Write(p []byte) (int, error) {
	if err := b.checkLen(b.written+len(p), "output"); err != nil {
		return 0, err
	}
	b.written += len(p)
	return b.out.Write(p)
}

func budgetOf(ctx *exec.Context) *budget {
	v, _ := ctx.Get(budgetKey)
	b, _ := v.(*budget)
	return b
}

// tick is a check node: kind "loop" counts an iteration, "enter" and "exit"
// a macro call's nesting.
type tick struct{ kind string }

func (t *tick) Position() *tokens.Token { return &tokens.Token{} }
func (t *tick) String() string          { return "tick(" + t.kind + ")" }

func (t *tick) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	b := budgetOf(r.Environment.Context)
	if b == nil {
		return nil
	}
	switch t.kind {
	case "loop":
		if b.steps++; b.steps > MaxLoopIterations {
			return b.fail("more than %d loop iterations", MaxLoopIterations)
		}
	case "enter":
		if b.depth++; b.depth > MaxMacroDepth {
			return b.fail("macro calls nested deeper than %d", MaxMacroDepth)
		}
	case "exit":
		b.depth--
	}
	return b.checkTime()
}

func tickNode(kind string) nodes.Node {
	return &nodes.ControlStructureBlock{Location: &tokens.Token{}, Name: "tick", ControlStructure: &tick{kind}}
}

// limitTemplate rewrites a parsed template in place (see the file comment).
func limitTemplate(root nodes.Node) {
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			switch n := v.Interface().(type) {
			case *tokens.Token:
				return
			case *controlstructures.ForControlStructure:
				if n.BodyWrapper != nil {
					n.BodyWrapper.Nodes = append([]nodes.Node{tickNode("loop")}, n.BodyWrapper.Nodes...)
				}
				if n.ObjectEvaluator != nil {
					n.ObjectEvaluator = guardIterable(n.ObjectEvaluator)
				}
			case *controlstructures.SetControlStructure:
				guardSetCycle(v.Elem())
			case *nodes.Macro:
				if n.Wrapper != nil {
					n.Wrapper.Nodes = append(append([]nodes.Node{tickNode("enter")}, n.Wrapper.Nodes...), tickNode("exit"))
				}
			case *nodes.Output:
				walk(v.Elem())
				n.Expression = guardOutput(n.Expression)
				if n.Alternative != nil {
					n.Alternative = guardOutput(n.Alternative)
				}
				return
			}
			walk(v.Elem())
		case reflect.Interface:
			if v.IsNil() {
				return
			}
			if be, ok := v.Interface().(*nodes.BinaryExpression); ok && guarded(be) && v.CanSet() {
				walk(reflect.ValueOf(be))
				v.Set(reflect.ValueOf(guardBinop(be)))
				return
			}
			if c, ok := v.Interface().(*nodes.Call); ok && v.CanSet() {
				if ga, ok := c.Func.(*nodes.GetAttribute); ok && ga.Attribute != "" {
					// The receiver and arguments first (ga.Node may be
					// replaced: read it after).
					walk(reflect.ValueOf(c))
					if obj, ok := ga.Node.(nodes.Expression); ok {
						if g := guardMethodCall(c, ga, obj); reflect.TypeOf(g).AssignableTo(v.Type()) {
							v.Set(reflect.ValueOf(g))
						}
					}
					return
				}
			}
			walk(v.Elem())
		case reflect.Struct:
			if v.CanAddr() {
				switch n := v.Addr().Interface().(type) {
				case *nodes.Wrapper:
					n.Nodes = withTicks(n.Nodes)
				case *nodes.Template:
					n.Nodes = withTicks(n.Nodes)
				}
			}
			for i := range v.NumField() {
				f := v.Field(i)
				if !f.CanSet() && f.CanAddr() {
					f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
				}
				walk(f)
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			iter := v.MapRange()
			for iter.Next() {
				e := reflect.New(v.Type().Elem()).Elem()
				e.Set(iter.Value())
				walk(e)
				v.SetMapIndex(iter.Key(), e)
			}
		}
	}
	walk(reflect.ValueOf(root))
}

// guarded reports whether be can build a long string: +, ~ and *.
func guarded(be *nodes.BinaryExpression) bool {
	if be.Operator == nil || be.Operator.Token == nil {
		return false
	}
	switch be.Operator.Token.Type {
	case tokens.Addition, tokens.Tilde, tokens.Multiply:
		return true
	}
	return false
}

// guardBinop is [left, right] | binop(be): both operands evaluated once, in
// order, then checked and combined by gonja's own operator.
func guardBinop(be *nodes.BinaryExpression) nodes.Expression {
	loc := be.Operator.Token
	return &nodes.FilteredExpression{
		Expression: &nodes.List{Location: loc, Val: []nodes.Expression{be.Left, be.Right}},
		Filters: []*nodes.FilterCall{{
			Token: loc, Name: binopFilter,
			Args: []nodes.Expression{&nodes.Integer{Location: loc, Val: int(be.Operator.Token.Type)}},
		}},
	}
}

// binop checks the size of a +, ~ or * result and then computes it.
func binop(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	vals, ok := in.Interface().(exec.ValuesList)
	if !ok || len(vals) != 2 || len(params.Args) != 1 {
		return exec.AsValue(errors.New("internal: bad binop"))
	}
	l, r := vals[0], vals[1]
	if l.IsError() {
		return l
	}
	if r.IsError() {
		return r
	}
	op := tokens.Type(params.Args[0].Integer())
	// String concatenation, gonja's semantics for ~ and for + with a string
	// operand (and no list or float), done here without a sub-evaluator.
	concat := op == tokens.Tilde ||
		(op == tokens.Addition && !l.IsList() && !l.IsFloat() && !r.IsFloat() && (l.IsString() || r.IsString()))
	b := budgetOf(e.Environment.Context)
	if b != nil {
		n := 0
		switch {
		case concat:
			n = len(l.String()) + len(r.String())
		case op == tokens.Addition && l.IsList():
			n = l.Len() + r.Len()
		case op == tokens.Multiply && l.IsString() && !r.IsFloat():
			k := r.Integer()
			if k > 0 && len(l.String()) > 0 && k > b.maxBytes/len(l.String()) {
				return exec.AsValue(b.fail("string repeated %d times", k))
			}
			if k < 0 {
				return exec.AsValue(fmt.Errorf("cannot repeat a string %d times", k))
			}
			n = len(l.String()) * k
		}
		if err := b.checkLen(n, "value"); err != nil {
			return exec.AsValue(err)
		}
		if b.built += n; b.built > MaxRenderAlloc {
			return exec.AsValue(b.fail("more than %d bytes of strings built", MaxRenderAlloc))
		}
	}
	if concat {
		return exec.AsValue(l.String() + r.String())
	}
	ctx := e.Environment.Context.Inherit()
	ctx.Set(binopLeft, l)
	ctx.Set(binopRight, r)
	sub := &exec.Evaluator{Config: e.Config, Loader: e.Loader, Environment: &exec.Environment{
		Context: ctx, Filters: e.Environment.Filters, Tests: e.Environment.Tests,
		ControlStructures: e.Environment.ControlStructures, Methods: e.Environment.Methods,
	}}
	tok := &tokens.Token{Type: op, Val: opText(op)}
	return sub.Eval(&nodes.BinaryExpression{
		Left:     &nodes.Name{Name: &tokens.Token{Type: tokens.Name, Val: binopLeft}},
		Right:    &nodes.Name{Name: &tokens.Token{Type: tokens.Name, Val: binopRight}},
		Operator: &nodes.BinOperator{Token: tok},
	})
}

func opText(op tokens.Type) string {
	switch op {
	case tokens.Addition:
		return "+"
	case tokens.Tilde:
		return "~"
	}
	return "*"
}

// widthLimited wraps a filter whose integer arguments are output widths
// (center, indent, wordwrap, truncate) or whose format string may carry one
// (format): a width beyond the byte limit is an error, not an allocation.
func widthLimited(name string, fn exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		if b := budgetOf(e.Environment.Context); b != nil {
			if err := checkWidths(b, in, params, name == "format"); err != nil {
				return exec.AsValue(err)
			}
		}
		return fn(e, in, params)
	}
}

// widthLimitedMethod is widthLimited for str methods (center, ljust, rjust,
// zfill, expandtabs, format).
func widthLimitedMethod(name string, m exec.Method[string]) exec.Method[string] {
	return func(self string, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		// Methods do not see the render context: the absolute cap applies.
		b := &budget{maxBytes: MaxRenderBytes, deadline: time.Now().Add(time.Hour)}
		if err := checkWidths(b, exec.AsValue(self), args, name == "format"); err != nil {
			return nil, err
		}
		return m(self, selfValue, args)
	}
}

// checkWidths fails if an integer argument, or with format a number in the
// format string in (a width), exceeds the byte limit.
func checkWidths(b *budget, in *exec.Value, params *exec.VarArgs, format bool) error {
	vals := append([]*exec.Value(nil), params.Args...)
	for _, v := range params.KwArgs {
		vals = append(vals, v)
	}
	for _, v := range vals {
		if v != nil && v.IsInteger() {
			if err := b.checkLen(v.Integer(), "width"); err != nil {
				return err
			}
		}
	}
	if format && in != nil && in.IsString() {
		if w := largestNumber(in.String()); w > b.maxBytes {
			return b.fail("format width %d exceeds the limit of %d", w, b.maxBytes)
		}
	}
	return nil
}

// Filters and str methods whose arguments are widths (widthLimited).
var (
	widthFilters = [...]string{"center", "indent", "format"}
	widthMethods = [...]string{"center", "ljust", "rjust", "zfill", "expandtabs", "format"}
)

// largestNumber is the largest run of decimal digits in s (saturating).
func largestNumber(s string) int {
	best, n := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if n < 1<<40 {
				n = n*10 + int(s[i]-'0')
			}
			continue
		}
		best, n = max(best, n), 0
	}
	return best
}
