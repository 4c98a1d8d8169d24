package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/flowinfer/flowinfer/quant"
)

// Writer builds a GGUF v3 file: metadata in insertion order, then tensor
// infos, then tensor data, each tensor aligned. It validates what it is
// given (shapes against data sizes, unique names) so that what it writes
// always parses. Tests use it to build fixtures; flowinfer gen uses it to
// write models.
type Writer struct {
	Alignment uint64 // 0 means DefaultAlignment (or general.alignment if set)
	kvs       []KV
	kvIndex   map[string]int
	tensors   []wtensor
	names     map[string]bool
}

type wtensor struct {
	name string
	typ  quant.Type
	dims []uint64
	data []byte // nil with size > 0: written by a callback
	size uint64
	fill func(w io.Writer) error
}

// NewWriter returns an empty writer.
func NewWriter() *Writer {
	return &Writer{kvIndex: map[string]int{}, names: map[string]bool{}}
}

// Set adds or replaces a metadata key.
func (w *Writer) Set(key string, v Value) {
	if i, ok := w.kvIndex[key]; ok {
		w.kvs[i].Value = v
		return
	}
	w.kvIndex[key] = len(w.kvs)
	w.kvs = append(w.kvs, KV{key, v})
}

// CopyKVs copies every metadata pair of f whose key passes keep (nil: all).
func (w *Writer) CopyKVs(f *File, keep func(key string) bool) {
	for _, kv := range f.KVs {
		if keep == nil || keep(kv.Key) {
			w.Set(kv.Key, kv.Value)
		}
	}
}

func (w *Writer) check(name string, typ quant.Type, dims []uint64) (uint64, error) {
	if name == "" || len(name) > MaxNameLen {
		return 0, fmt.Errorf("gguf: writer: bad tensor name %q", name)
	}
	if w.names[name] {
		return 0, fmt.Errorf("gguf: writer: duplicate tensor %q", name)
	}
	if len(dims) == 0 || len(dims) > MaxDims {
		return 0, fmt.Errorf("gguf: writer: tensor %q has %d dims, want 1 to %d", name, len(dims), MaxDims)
	}
	// The reader's shape rule (TensorBytes), so a written file parses back.
	size, err := TensorBytes(typ, dims)
	if err != nil {
		return 0, fmt.Errorf("gguf: writer: tensor %q: %w", name, err)
	}
	return size, nil
}

// AddTensor adds a tensor whose bytes are data (already in type typ).
func (w *Writer) AddTensor(name string, typ quant.Type, dims []uint64, data []byte) error {
	size, err := w.check(name, typ, dims)
	if err != nil {
		return err
	}
	if uint64(len(data)) != size {
		return fmt.Errorf("gguf: writer: tensor %q: %d bytes given, shape %v of %s needs %d", name, len(data), dims, typ, size)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, wtensor{name: name, typ: typ, dims: append([]uint64(nil), dims...), data: data, size: size})
	return nil
}

// AddTensorFunc adds a tensor whose bytes are produced by fill at write
// time (so a large model need not be held in memory). fill must write
// exactly the tensor's size in bytes.
func (w *Writer) AddTensorFunc(name string, typ quant.Type, dims []uint64, fill func(io.Writer) error) error {
	size, err := w.check(name, typ, dims)
	if err != nil {
		return err
	}
	w.names[name] = true
	w.tensors = append(w.tensors, wtensor{name: name, typ: typ, dims: append([]uint64(nil), dims...), size: size, fill: fill})
	return nil
}

type countWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countWriter) u32(v uint32) { c.Write(binary.LittleEndian.AppendUint32(nil, v)) }
func (c *countWriter) u64(v uint64) { c.Write(binary.LittleEndian.AppendUint64(nil, v)) }
func (c *countWriter) str(s string) { c.u64(uint64(len(s))); c.w.WriteString(s); c.n += int64(len(s)) }

// zeros is what pad writes, a piece at a time: padding to a large
// general.alignment (up to 2 GiB) allocates nothing.
var zeros [64 << 10]byte

func (c *countWriter) pad(align uint64) {
	if r := uint64(c.n) % align; r != 0 {
		for n := align - r; n > 0; {
			k := min(n, uint64(len(zeros)))
			c.Write(zeros[:k])
			n -= k
		}
	}
}

func (c *countWriter) value(v Value) {
	switch {
	case v.typ == TypeString:
		c.str(v.str)
	case v.typ == TypeArray:
		c.u32(uint32(v.elem))
		c.u64(uint64(v.n))
		switch v.elem {
		case TypeString:
			for _, s := range v.strs {
				c.str(s)
			}
		case TypeArray:
			for _, e := range v.vals {
				c.value(e)
			}
		default:
			c.Write(v.raw[:v.n*v.elem.size()])
		}
	default:
		b := binary.LittleEndian.AppendUint64(nil, v.bits)
		c.Write(b[:v.typ.size()])
	}
}

// checkValue reports what the reader would reject in a value.
func checkValue(key string, v Value, depth int) error {
	switch {
	case !v.typ.valid():
		return fmt.Errorf("gguf: writer: key %q: invalid value type %d", key, uint32(v.typ))
	case v.typ == TypeString && len(v.str) > MaxStringLen:
		return fmt.Errorf("gguf: writer: key %q: string of %d bytes is too long", key, len(v.str))
	case v.typ != TypeArray:
		return nil
	case depth >= MaxArrayDepth:
		return fmt.Errorf("gguf: writer: key %q: arrays nested deeper than %d", key, MaxArrayDepth)
	case v.n > MaxArrayLen:
		return fmt.Errorf("gguf: writer: key %q: array of %d elements is too long", key, v.n)
	}
	for _, e := range v.vals {
		if err := checkValue(key, e, depth+1); err != nil {
			return err
		}
	}
	for _, s := range v.strs {
		if len(s) > MaxStringLen {
			return fmt.Errorf("gguf: writer: key %q: string of %d bytes is too long", key, len(s))
		}
	}
	return nil
}

// WriteTo writes the file. It fails before writing anything if the
// metadata would not parse (empty or overlong key, general.alignment not a
// u32 power of two, arrays nested too deep).
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align := w.Alignment
	i, hasKey := w.kvIndex["general.alignment"]
	if hasKey {
		val := w.kvs[i].Value
		if val.typ != TypeUint32 {
			return 0, fmt.Errorf("gguf: writer: general.alignment has type %s, want u32", val.typ)
		}
		align = val.bits
		if align == 0 {
			return 0, fmt.Errorf("gguf: writer: general.alignment 0 is not a power of two")
		}
	}
	if align == 0 {
		align = DefaultAlignment
	}
	if align&(align-1) != 0 || align > math.MaxUint32 {
		return 0, fmt.Errorf("gguf: writer: alignment %d is not a power of two that fits a u32", align)
	}
	if !hasKey && align != DefaultAlignment {
		w.Set("general.alignment", Uint32(uint32(align)))
	}
	for _, kv := range w.kvs {
		if kv.Key == "" || len(kv.Key) > MaxKeyLen {
			return 0, fmt.Errorf("gguf: writer: bad key %q", kv.Key)
		}
		if err := checkValue(kv.Key, kv.Value, 0); err != nil {
			return 0, err
		}
	}
	c := &countWriter{w: bufio.NewWriterSize(out, 1<<20)}
	c.w.WriteString(Magic)
	c.n += 4
	c.u32(3)
	c.u64(uint64(len(w.tensors)))
	c.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		c.str(kv.Key)
		c.u32(uint32(kv.Value.typ))
		c.value(kv.Value)
	}
	off := uint64(0)
	for _, t := range w.tensors {
		c.str(t.name)
		c.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			c.u64(d)
		}
		c.u32(uint32(t.typ))
		c.u64(off)
		off += t.size
		if r := off % align; r != 0 {
			off += align - r
		}
	}
	c.pad(align)
	for _, t := range w.tensors {
		start := c.n
		if t.fill != nil {
			if err := t.fill(c); err != nil {
				return c.n, fmt.Errorf("gguf: writer: tensor %q: %w", t.name, err)
			}
		} else {
			c.Write(t.data)
		}
		if got := uint64(c.n - start); got != t.size {
			return c.n, fmt.Errorf("gguf: writer: tensor %q: wrote %d bytes, want %d", t.name, got, t.size)
		}
		c.pad(align)
	}
	return c.n, c.w.Flush()
}
