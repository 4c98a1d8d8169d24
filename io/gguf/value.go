package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ValueType is the type tag of a metadata value, numbered as in the GGUF
// specification (enum gguf_type).
type ValueType uint32

// Metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var typeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"}

func (t ValueType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size returns the encoded size of a fixed-size scalar type, or 0 for
// strings, arrays and unknown types.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

func (t ValueType) valid() bool { return t <= TypeFloat64 }

// Value is one metadata value. Scalars hold their bits; numeric arrays keep
// their little-endian encoding (decoded on access), string arrays their
// strings, and arrays of arrays their elements.
type Value struct {
	typ  ValueType
	elem ValueType // element type, for arrays
	n    int       // element count, for arrays
	bits uint64    // scalar payload: integer, float bits or bool
	str  string
	raw  []byte   // numeric array payload
	strs []string // string array payload
	vals []Value  // nested array payload
}

// Type returns the value's type tag.
func (v Value) Type() ValueType { return v.typ }

// ElemType returns the element type of an array value.
func (v Value) ElemType() ValueType { return v.elem }

// Len returns the number of elements of an array value, 0 otherwise.
func (v Value) Len() int { return v.n }

func signExtend(bits uint64, t ValueType) int64 {
	switch t {
	case TypeInt8:
		return int64(int8(bits))
	case TypeInt16:
		return int64(int16(bits))
	case TypeInt32:
		return int64(int32(bits))
	}
	return int64(bits)
}

func isInt(t ValueType) bool {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		return true
	}
	return false
}

func isSigned(t ValueType) bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

// Int returns an integer value of any width as int64. It fails for
// non-integers and for a uint64 above math.MaxInt64.
func (v Value) Int() (int64, bool) {
	if !isInt(v.typ) {
		return 0, false
	}
	if isSigned(v.typ) {
		return signExtend(v.bits, v.typ), true
	}
	if v.bits > math.MaxInt64 {
		return 0, false
	}
	return int64(v.bits), true
}

// Uint returns a non-negative integer value of any width as uint64.
func (v Value) Uint() (uint64, bool) {
	if !isInt(v.typ) {
		return 0, false
	}
	if isSigned(v.typ) {
		i := signExtend(v.bits, v.typ)
		if i < 0 {
			return 0, false
		}
		return uint64(i), true
	}
	return v.bits, true
}

// Float returns a float32 or float64 value (or an integer, converted).
func (v Value) Float() (float64, bool) {
	switch v.typ {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.bits))), true
	case TypeFloat64:
		return math.Float64frombits(v.bits), true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	if u, ok := v.Uint(); ok {
		return float64(u), true
	}
	return 0, false
}

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) {
	if v.typ != TypeBool {
		return false, false
	}
	return v.bits != 0, true
}

// Str returns a string value.
func (v Value) Str() (string, bool) {
	if v.typ != TypeString {
		return "", false
	}
	return v.str, true
}

// Strings returns the elements of an array of strings. The slice is shared;
// do not modify it.
func (v Value) Strings() ([]string, bool) {
	if v.typ != TypeArray || v.elem != TypeString {
		return nil, false
	}
	return v.strs, true
}

// elemBits returns the raw bits of numeric array element i.
func (v Value) elemBits(i int) uint64 {
	switch sz := v.elem.size(); sz {
	case 1:
		return uint64(v.raw[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(v.raw[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(v.raw[4*i:]))
	default:
		return binary.LittleEndian.Uint64(v.raw[8*i:])
	}
}

// Index returns element i of an array as a Value.
func (v Value) Index(i int) (Value, bool) {
	if v.typ != TypeArray || i < 0 || i >= v.n {
		return Value{}, false
	}
	switch v.elem {
	case TypeString:
		return Value{typ: TypeString, str: v.strs[i]}, true
	case TypeArray:
		return v.vals[i], true
	}
	return Value{typ: v.elem, bits: v.elemBits(i)}, true
}

// Float32s returns a numeric array converted to float32.
func (v Value) Float32s() ([]float32, bool) {
	if v.typ != TypeArray || v.elem.size() == 0 || v.elem == TypeBool {
		return nil, false
	}
	out := make([]float32, v.n)
	for i := range out {
		f, _ := Value{typ: v.elem, bits: v.elemBits(i)}.Float()
		out[i] = float32(f)
	}
	return out, true
}

// Int32s returns an integer array converted to int32. It fails if an element
// does not fit.
func (v Value) Int32s() ([]int32, bool) {
	if v.typ != TypeArray || !isInt(v.elem) {
		return nil, false
	}
	out := make([]int32, v.n)
	for i := range out {
		x, ok := Value{typ: v.elem, bits: v.elemBits(i)}.Int()
		if !ok || x < math.MinInt32 || x > math.MaxInt32 {
			return nil, false
		}
		out[i] = int32(x)
	}
	return out, true
}

// Array returns the elements of any array as Values.
func (v Value) Array() ([]Value, bool) {
	if v.typ != TypeArray {
		return nil, false
	}
	if v.elem == TypeArray {
		return v.vals, true
	}
	out := make([]Value, v.n)
	for i := range out {
		out[i], _ = v.Index(i)
	}
	return out, true
}

// String formats the value for display (arrays abbreviated).
func (v Value) String() string {
	switch v.typ {
	case TypeString:
		return fmt.Sprintf("%q", v.str)
	case TypeBool:
		return fmt.Sprint(v.bits != 0)
	case TypeFloat32, TypeFloat64:
		f, _ := v.Float()
		return fmt.Sprint(f)
	case TypeArray:
		return fmt.Sprintf("[%s x %d]", v.elem, v.n)
	}
	if i, ok := v.Int(); ok {
		return fmt.Sprint(i)
	}
	return fmt.Sprint(v.bits)
}

// Constructors, for the writer and for tests.

func Uint8(x uint8) Value     { return Value{typ: TypeUint8, bits: uint64(x)} }
func Int8(x int8) Value       { return Value{typ: TypeInt8, bits: uint64(uint8(x))} }
func Uint16(x uint16) Value   { return Value{typ: TypeUint16, bits: uint64(x)} }
func Int16(x int16) Value     { return Value{typ: TypeInt16, bits: uint64(uint16(x))} }
func Uint32(x uint32) Value   { return Value{typ: TypeUint32, bits: uint64(x)} }
func Int32(x int32) Value     { return Value{typ: TypeInt32, bits: uint64(uint32(x))} }
func Uint64(x uint64) Value   { return Value{typ: TypeUint64, bits: x} }
func Int64(x int64) Value     { return Value{typ: TypeInt64, bits: uint64(x)} }
func Float32(x float32) Value { return Value{typ: TypeFloat32, bits: uint64(math.Float32bits(x))} }
func Float64(x float64) Value { return Value{typ: TypeFloat64, bits: math.Float64bits(x)} }
func String(s string) Value   { return Value{typ: TypeString, str: s} }
func Bool(b bool) Value {
	if b {
		return Value{typ: TypeBool, bits: 1}
	}
	return Value{typ: TypeBool}
}

// Strings builds an array of strings.
func Strings(s []string) Value {
	return Value{typ: TypeArray, elem: TypeString, n: len(s), strs: s}
}

// Float32s builds an array of float32.
func Float32s(f []float32) Value {
	raw := make([]byte, 4*len(f))
	for i, x := range f {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return Value{typ: TypeArray, elem: TypeFloat32, n: len(f), raw: raw}
}

// Int32s builds an array of int32.
func Int32s(x []int32) Value {
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return Value{typ: TypeArray, elem: TypeInt32, n: len(x), raw: raw}
}

// Array builds an array from values that must all have type elem (scalars,
// strings, or arrays for nested arrays).
func Array(elem ValueType, vals []Value) (Value, error) {
	v := Value{typ: TypeArray, elem: elem, n: len(vals)}
	switch {
	case elem == TypeString:
		v.strs = make([]string, len(vals))
	case elem == TypeArray:
		v.vals = vals
	case elem.size() > 0:
		v.raw = make([]byte, 0, elem.size()*len(vals))
	default:
		return Value{}, fmt.Errorf("gguf: invalid array element type %s", elem)
	}
	for i, e := range vals {
		if e.typ != elem {
			return Value{}, fmt.Errorf("gguf: array element %d has type %s, want %s", i, e.typ, elem)
		}
		switch {
		case elem == TypeString:
			v.strs[i] = e.str
		case elem != TypeArray:
			v.raw = binary.LittleEndian.AppendUint64(v.raw, e.bits)[:len(v.raw)+elem.size()]
		}
	}
	return v, nil
}
