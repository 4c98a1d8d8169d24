// This file holds the Python behaviour that Hugging Face chat templates rely
// on and that gonja v2.9.1 lacks or gets wrong: Python list indexing,
// str.strip/split/replace with their Python defaults, tojson as transformers
// defines it, and strftime. It does not try to be a general Python runtime:
// only what real chat templates use.

package chat

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyList is a template list with Python indexing. gonja v2.9.1 resolves a
// negative index only when the list is longer than its magnitude, so x[-1] of
// a one-element list (messages[-1] of a single-message chat, the last piece
// of a split that found no separator) is silently undefined. gonja asks a
// value implementing exec.ItemGetter first, so lists we hand to templates,
// and lists our filters and methods return, are pyLists.
type pyList []any

// GetItem implements exec.ItemGetter with Python semantics for int keys.
func (l pyList) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.ToValue(l[i]), true
}

// listify turns a slice result into a pyList; anything else passes through.
func listify(x any) any {
	if _, ok := x.(pyList); ok {
		return x
	}
	rv := reflect.ValueOf(x)
	if !rv.IsValid() {
		return x
	}
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return x
	}
	if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 {
		return x // bytes stay bytes
	}
	out := make(pyList, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out
}

// listifyValue is listify for a gonja value, keeping its safe flag.
func listifyValue(v *exec.Value) *exec.Value {
	if v == nil || v.IsError() || v.IsNil() || !v.IsList() {
		return v
	}
	if _, ok := v.Interface().(pyList); ok {
		return v
	}
	out := exec.AsValue(listify(v.Interface()))
	out.Safe = v.Safe
	return out
}

// pyIsSpace reports whether r is whitespace for Python's str.isspace.
func pyIsSpace(r rune) bool {
	switch r {
	case 0x1c, 0x1d, 0x1e, 0x1f:
		return true
	}
	return unicode.IsSpace(r)
}

// pyStrip implements str.strip/lstrip/rstrip: with chars == nil it removes
// whitespace, otherwise any of the given characters.
func pyStrip(s string, chars *string, left, right bool) string {
	cut := pyIsSpace
	if chars != nil {
		set := *chars
		cut = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s
}

// pySplit implements str.split (fromRight=false) and str.rsplit.
func pySplit(s string, sep *string, maxsplit int, fromRight bool) ([]string, error) {
	if sep == nil {
		fields := strings.FieldsFunc(s, pyIsSpace)
		if maxsplit < 0 || maxsplit >= len(fields)-1 || len(fields) == 0 {
			return fields, nil
		}
		// Rare: whitespace split with a limit. Keep the unsplit remainder as
		// Python does (remainder keeps its inner whitespace).
		return splitWhitespaceLimited(s, maxsplit, fromRight), nil
	}
	if *sep == "" {
		return nil, fmt.Errorf("empty separator")
	}
	if maxsplit < 0 {
		return strings.Split(s, *sep), nil
	}
	if !fromRight {
		return strings.SplitN(s, *sep, maxsplit+1), nil
	}
	var tail []string
	for range maxsplit {
		i := strings.LastIndex(s, *sep)
		if i < 0 {
			break
		}
		tail = append(tail, s[i+len(*sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(tail) - 1; i >= 0; i-- {
		out = append(out, tail[i])
	}
	return out, nil
}

func splitWhitespaceLimited(s string, maxsplit int, fromRight bool) []string {
	var out []string
	if !fromRight {
		s = strings.TrimLeftFunc(s, pyIsSpace)
		for len(out) < maxsplit && s != "" {
			i := strings.IndexFunc(s, pyIsSpace)
			if i < 0 {
				break
			}
			out = append(out, s[:i])
			s = strings.TrimLeftFunc(s[i:], pyIsSpace)
		}
		if s != "" {
			out = append(out, s)
		}
		return out
	}
	s = strings.TrimRightFunc(s, pyIsSpace)
	var tail []string
	for len(tail) < maxsplit && s != "" {
		i := strings.LastIndexFunc(s, pyIsSpace)
		if i < 0 {
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		tail = append(tail, s[i+size:])
		s = strings.TrimRightFunc(s[:i], pyIsSpace)
	}
	if s != "" {
		out = append(out, s)
	}
	for i := len(tail) - 1; i >= 0; i-- {
		out = append(out, tail[i])
	}
	return out
}

// pyReplace implements str.replace(old, new[, count]).
func pyReplace(s, old, new string, count int) string {
	if count < 0 {
		return strings.ReplaceAll(s, old, new)
	}
	return strings.Replace(s, old, new, count)
}

// optString reads an optional positional string argument (None means absent).
func optString(args *exec.VarArgs, i int, name string) (*string, error) {
	if len(args.Args) <= i || args.Args[i].IsNil() {
		if v, ok := args.KwArgs[name]; ok && !v.IsNil() {
			if !v.IsString() {
				return nil, fmt.Errorf("%s must be a string, got %s", name, v.String())
			}
			s := v.String()
			return &s, nil
		}
		return nil, nil
	}
	v := args.Args[i]
	if !v.IsString() {
		return nil, fmt.Errorf("%s must be a string, got %s", name, v.String())
	}
	s := v.String()
	return &s, nil
}

// optInt reads an optional positional or keyword int argument.
func optInt(args *exec.VarArgs, i int, name string, def int) (int, error) {
	v, ok := args.KwArgs[name]
	if len(args.Args) > i {
		v, ok = args.Args[i], true
	}
	if !ok || v.IsNil() {
		return def, nil
	}
	if !v.IsInteger() {
		return 0, fmt.Errorf("%s must be an integer, got %s", name, v.String())
	}
	return v.Integer(), nil
}

// stringMethods are the str methods we implement ourselves because gonja's
// defaults differ from Python's (lstrip() strips only spaces, split() without
// a separator splits on single spaces, replace() requires count).
func stringMethods() map[string]exec.Method[string] {
	strip := func(left, right bool) exec.Method[string] {
		return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			chars, err := optString(args, 0, "chars")
			if err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			return pyStrip(self, chars, left, right), nil
		}
	}
	split := func(fromRight bool) exec.Method[string] {
		return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			sep, err := optString(args, 0, "sep")
			if err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			maxsplit, err := optInt(args, 1, "maxsplit", -1)
			if err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			parts, err := pySplit(self, sep, maxsplit, fromRight)
			if err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			return listify(parts), nil
		}
	}
	return map[string]exec.Method[string]{
		"strip":  strip(true, true),
		"lstrip": strip(true, false),
		"rstrip": strip(false, true),
		"split":  split(false),
		"rsplit": split(true),
		"replace": func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) < 2 || !args.Args[0].IsString() || !args.Args[1].IsString() {
				return nil, exec.ErrInvalidCall(fmt.Errorf("replace(old, new[, count]) needs two strings"))
			}
			count, err := optInt(args, 2, "count", -1)
			if err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			return pyReplace(self, args.Args[0].String(), args.Args[1].String(), count), nil
		},
	}
}

// jsonOptions are the keyword arguments of transformers' tojson filter:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
type jsonOptions struct {
	ensureASCII bool
	indent      string // "" with hasIndent=false means no indentation
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
	// limit, when positive, is the most bytes the encoding may take; over
	// is set when it would take more (and the encoding fails).
	limit int
	over  *bool
}

// parseJSONOptions reads tojson's arguments (indent may also be positional).
func parseJSONOptions(args *exec.VarArgs) (jsonOptions, error) {
	o := jsonOptions{itemSep: ", ", keySep: ": "}
	indent, hasIndent := args.KwArgs["indent"]
	if len(args.Args) > 0 {
		indent, hasIndent = args.Args[0], true
	}
	if hasIndent && !indent.IsNil() {
		o.hasIndent = true
		o.itemSep = ","
		switch {
		case indent.IsInteger():
			o.indent = strings.Repeat(" ", max(0, indent.Integer()))
		case indent.IsString():
			o.indent = indent.String()
		default:
			return o, fmt.Errorf("tojson: indent must be an integer or a string, got %s", indent.String())
		}
	}
	if v, ok := args.KwArgs["ensure_ascii"]; ok {
		o.ensureASCII = v.IsTrue()
	}
	if v, ok := args.KwArgs["sort_keys"]; ok {
		o.sortKeys = v.IsTrue()
	}
	if v, ok := args.KwArgs["separators"]; ok && !v.IsNil() {
		seps, _ := listify(v.Interface()).(pyList)
		if len(seps) != 2 {
			return o, fmt.Errorf("tojson: separators must be a pair of strings")
		}
		a, okA := exec.ToValue(seps[0]).Interface().(string)
		b, okB := exec.ToValue(seps[1]).Interface().(string)
		if !okA || !okB {
			return o, fmt.Errorf("tojson: separators must be a pair of strings")
		}
		o.itemSep, o.keySep = a, b
	}
	return o, nil
}

// toJSON encodes x the way Python's json.dumps does with options o.
func toJSON(x any, o jsonOptions) (string, error) {
	var b strings.Builder
	o.over = new(bool)
	if err := writeJSON(&b, reflect.ValueOf(x), o, 0, 0); err != nil {
		return "", err
	}
	if *o.over || (o.limit > 0 && b.Len() > o.limit) {
		return "", errJSONLimit
	}
	return b.String(), nil
}

var errJSONLimit = fmt.Errorf("%w: tojson result beyond the byte limit", ErrRenderLimit)

const maxJSONDepth = 64

func writeJSON(b *strings.Builder, v reflect.Value, o jsonOptions, level, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("tojson: value nested deeper than %d levels", maxJSONDepth)
	}
	if *o.over || (o.limit > 0 && b.Len() > o.limit) {
		return errJSONLimit
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		if gv, ok := v.Interface().(*exec.Value); ok {
			v = gv.Val
			continue
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		b.WriteString("null")
		return nil
	}
	if v.CanInterface() {
		if rv, ok := v.Interface().(reflect.Value); ok {
			return writeJSON(b, rv, o, level, depth+1)
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(pyFloatRepr(v.Float()))
	case reflect.String:
		writeJSONString(b, v.String(), o.ensureASCII)
	case reflect.Slice, reflect.Array:
		n := v.Len()
		if n == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			writeIndent(b, o, level+1)
			if err := writeJSON(b, v.Index(i), o, level+1, depth+1); err != nil {
				return err
			}
		}
		writeIndent(b, o, level)
		b.WriteByte(']')
	case reflect.Map:
		type kv struct {
			k string
			v reflect.Value
		}
		pairs := make([]kv, 0, v.Len())
		iter := v.MapRange()
		for iter.Next() {
			k, err := jsonKey(iter.Key())
			if err != nil {
				return err
			}
			pairs = append(pairs, kv{k, iter.Value()})
		}
		// A Go map has no insertion order: sort for a stable output.
		sort.Slice(pairs, func(i, j int) bool { return pairs[i].k < pairs[j].k })
		keys := make([]string, len(pairs))
		vals := make([]reflect.Value, len(pairs))
		for i, p := range pairs {
			keys[i], vals[i] = p.k, p.v
		}
		return writeJSONObject(b, keys, vals, o, level, depth)
	case reflect.Struct:
		d, ok := v.Interface().(exec.Dict)
		if !ok {
			return fmt.Errorf("tojson: cannot encode a value of type %s", v.Type())
		}
		keys := make([]string, 0, len(d.Pairs))
		vals := make([]reflect.Value, 0, len(d.Pairs))
		for _, p := range d.Pairs {
			k, err := jsonKey(reflect.ValueOf(p.Key.Interface()))
			if err != nil {
				return err
			}
			keys = append(keys, k)
			vals = append(vals, reflect.ValueOf(p.Value))
		}
		return writeJSONObject(b, keys, vals, o, level, depth)
	default:
		return fmt.Errorf("tojson: cannot encode a value of kind %s", v.Kind())
	}
	return nil
}

func writeJSONObject(b *strings.Builder, keys []string, vals []reflect.Value, o jsonOptions, level, depth int) error {
	if len(keys) == 0 {
		b.WriteString("{}")
		return nil
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	if o.sortKeys {
		sort.SliceStable(order, func(i, j int) bool { return keys[order[i]] < keys[order[j]] })
	}
	b.WriteByte('{')
	for n, i := range order {
		if n > 0 {
			b.WriteString(o.itemSep)
		}
		writeIndent(b, o, level+1)
		writeJSONString(b, keys[i], o.ensureASCII)
		b.WriteString(o.keySep)
		if err := writeJSON(b, vals[i], o, level+1, depth+1); err != nil {
			return err
		}
	}
	writeIndent(b, o, level)
	b.WriteByte('}')
	return nil
}

// jsonKey converts a dict key the way json.dumps does (str, int, float, bool, None).
func jsonKey(k reflect.Value) (string, error) {
	for k.IsValid() && k.Kind() == reflect.Interface {
		k = k.Elem()
	}
	if gv, ok := k.Interface().(*exec.Value); ok {
		k = gv.Val
		for k.IsValid() && (k.Kind() == reflect.Interface || k.Kind() == reflect.Pointer) {
			k = k.Elem()
		}
	}
	switch k.Kind() {
	case reflect.String:
		return k.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Float32, reflect.Float64:
		return pyFloatRepr(k.Float()), nil
	case reflect.Bool:
		if k.Bool() {
			return "true", nil
		}
		return "false", nil
	case reflect.Invalid:
		return "null", nil
	}
	return "", fmt.Errorf("tojson: keys must be str, int, float or bool, not %s", k.Kind())
}

func writeIndent(b *strings.Builder, o jsonOptions, level int) {
	if !o.hasIndent {
		return
	}
	if o.limit > 0 && b.Len()+1+level*len(o.indent) > o.limit {
		*o.over = true
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(o.indent)
	}
}

// writeJSONString quotes s as json.dumps does: only '"', '\\' and control
// characters are escaped (plus everything outside ASCII when ensureASCII).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (ensureASCII && r == 0x7f):
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7f:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloatRepr formats f like Python's repr(float) (what json.dumps uses).
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+16, 1.5e-05
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[0]
		digits := strings.TrimLeft(exp[1:], "0")
		if len(digits) < 2 {
			digits = fmt.Sprintf("%02s", digits)
		}
		return mant + "e" + string(sign) + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// strftime formats t with a Python/C strftime format. It covers the
// directives chat templates use; a glibc "-" flag ("%-d") drops padding.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		pad := func(n, width int) string {
			if noPad {
				return strconv.Itoa(n)
			}
			return fmt.Sprintf("%0*d", width, n)
		}
		switch format[i] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			b.WriteString(pad(t.Day(), 2))
		case 'e':
			if noPad {
				b.WriteString(strconv.Itoa(t.Day()))
			} else {
				fmt.Fprintf(&b, "%2d", t.Day())
			}
		case 'H':
			b.WriteString(pad(t.Hour(), 2))
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			b.WriteString(pad(h, 2))
		case 'j':
			b.WriteString(pad(t.YearDay(), 3))
		case 'm':
			b.WriteString(pad(int(t.Month()), 2))
		case 'M':
			b.WriteString(pad(t.Minute(), 2))
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'S':
			b.WriteString(pad(t.Second(), 2))
		case 'y':
			b.WriteString(pad(t.Year()%100, 2))
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'c':
			fmt.Fprintf(&b, "%s %s %2d %s %d", t.Weekday().String()[:3], t.Month().String()[:3], t.Day(), t.Format("15:04:05"), t.Year())
		case 'x':
			b.WriteString(t.Format("01/02/06"))
		case 'X':
			b.WriteString(t.Format("15:04:05"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
