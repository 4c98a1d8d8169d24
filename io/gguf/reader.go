// Package gguf reads and writes GGUF files, llama.cpp's model format.
//
// Open memory-maps a file and parses its header; tensor data stays in the
// mapping and each Tensor.Data is a slice of it (tensor data is never
// copied at load; metadata is, so it outlives the mapping). A mapping
// faults (SIGBUS) where the file was truncated under it, which no Go code
// can recover from inside a C kernel: File.Own (own.go) replaces the pages
// a caller keeps using with memory the process owns, read from the file
// while it is still the one opened (its identity, io/fileid).
// The parser treats the file as hostile, like llama.cpp's gguf.cpp: it checks
// the remaining bytes before every allocation, caps string and array
// lengths, checks every size computation for overflow, and rejects bad
// magic, unknown versions, duplicate keys or tensor names, bad alignment,
// more than four dimensions, unknown tensor types, rows that are not a whole
// number of blocks and tensor data outside the file. Every rejection is a
// *FormatError naming what was wrong and where; nothing panics. Tensor
// shapes follow one rule, TensorBytes, in the reader and the Writer alike:
// every partial product of the dimensions, in elements and in bytes, fits
// in an int64.
//
// It does not interpret model metadata (that is package model's job) and
// does not support big-endian files or GGUF v1.
package gguf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/flowinfer/flowinfer/io/fileid"
	"github.com/flowinfer/flowinfer/quant"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// Limits on header fields. They are far above what real models use and keep
// a hostile header from asking for absurd work.
const (
	MaxStringLen  = 1 << 30 // as llama.cpp's GGUF_MAX_STRING_LENGTH
	MaxArrayLen   = 1 << 30 // as GGUF_MAX_ARRAY_ELEMENTS
	MaxKeyLen     = 1 << 16
	MaxNameLen    = 63 // ggml's GGML_MAX_NAME is 64 including the NUL
	MaxDims       = 4
	MaxArrayDepth = 8
)

// ErrMalformed is matched (errors.Is) by every *FormatError.
var ErrMalformed = errors.New("malformed GGUF")

// FormatError reports a malformed file: what was wrong and at which byte
// offset (-1 when the problem is not at one place).
type FormatError struct {
	Offset int64
	What   string
}

func (e *FormatError) Error() string {
	if e.Offset < 0 {
		return "gguf: " + e.What
	}
	return fmt.Sprintf("gguf: offset %d: %s", e.Offset, e.What)
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *FormatError) Is(target error) bool { return target == ErrMalformed }

// KV is one metadata key-value pair, in file order.
type KV struct {
	Key   string
	Value Value
}

// Tensor describes one tensor and holds its bytes.
type Tensor struct {
	Name string
	Type quant.Type
	// Dims are the element counts per dimension in ggml order: Dims[0] is
	// the number of elements in a row (the contiguous dimension).
	Dims []uint64
	// Offset is the data offset relative to the start of the data section.
	Offset uint64
	// Size is the number of bytes of the tensor's data.
	Size uint64
	// Data is the tensor's bytes: a slice of the file mapping (zero-copy).
	// It is valid until the File is closed.
	Data []byte
}

// Elements returns the total number of elements.
func (t *Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Rows returns the number of rows (elements / Dims[0]).
func (t *Tensor) Rows() uint64 {
	if len(t.Dims) == 0 || t.Dims[0] == 0 {
		return 0
	}
	return t.Elements() / t.Dims[0]
}

// File is a parsed GGUF file.
type File struct {
	Version    uint32
	Alignment  uint64
	DataOffset uint64 // file offset of the data section
	KVs        []KV
	Tensors    []*Tensor

	kvIndex     map[string]int
	tensorIndex map[string]int
	data        []byte // the whole file (a mapping when opened with Open)
	unmap       func() error
	file        *os.File  // Open's file, kept for Own; nil from Parse
	id          fileid.ID // its identity at Open
}

// Open memory-maps and parses the file at path.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			fd.Close()
		}
	}()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	id, err := fileid.Of(fd)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	size := st.Size()
	if size < 4 {
		return nil, fmt.Errorf("%s: %w", path, &FormatError{0, fmt.Sprintf("file is %d bytes, too short for a GGUF header", size)})
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: file too large to map", path)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		syscall.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.unmap = func() error { return syscall.Munmap(data) }
	f.file, f.id, keep = fd, id, true
	return f, nil
}

// Close releases the mapping. Tensor data slices must not be used after;
// metadata (KVs and the Values taken from them) was copied at parse time
// and stays valid.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	u := f.unmap
	f.unmap = nil
	f.data = nil
	for _, t := range f.Tensors {
		t.Data = nil
	}
	err := u()
	if f.file != nil {
		err = errors.Join(err, f.file.Close())
		f.file = nil
	}
	return err
}

// Bytes returns the whole file (the mapping).
func (f *File) Bytes() []byte { return f.data }

// Get returns the value of a metadata key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// GetString returns a string-valued key.
func (f *File) GetString(key string) (string, bool) {
	v, ok := f.Get(key)
	if !ok {
		return "", false
	}
	return v.Str()
}

// GetUint returns a non-negative integer key of any width.
func (f *File) GetUint(key string) (uint64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	return v.Uint()
}

// GetFloat returns a float (or integer) key.
func (f *File) GetFloat(key string) (float64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	return v.Float()
}

// GetBool returns a bool key.
func (f *File) GetBool(key string) (bool, bool) {
	v, ok := f.Get(key)
	if !ok {
		return false, false
	}
	return v.Bool()
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	i, ok := f.tensorIndex[name]
	if !ok {
		return nil, false
	}
	return f.Tensors[i], true
}

// decoder reads little-endian fields from a byte slice, tracking the offset
// for error messages.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) errf(format string, args ...any) error {
	return &FormatError{int64(d.off), fmt.Sprintf(format, args...)}
}

func (d *decoder) remain() int { return len(d.b) - d.off }

// The what arguments below describe the field for an error message. They
// are functions so that nothing is formatted unless the field is bad: a
// vocabulary holds hundreds of thousands of strings.

func (d *decoder) need(n int, what func() string) error {
	if n < 0 || d.remain() < n {
		return d.errf("truncated: %s needs %d bytes, %d remain", what(), n, d.remain())
	}
	return nil
}

func (d *decoder) u32(what func() string) (uint32, error) {
	if err := d.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v, nil
}

func (d *decoder) u64(what func() string) (uint64, error) {
	if err := d.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v, nil
}

// strBytes reads a length-prefixed string and returns its bytes, a slice
// of the input.
func (d *decoder) strBytes(max uint64, what func() string) ([]byte, error) {
	start := d.off
	n, err := d.u64(func() string { return what() + " length" })
	if err != nil {
		return nil, err
	}
	if n > max {
		d.off = start
		return nil, d.errf("%s length %d exceeds the limit %d", what(), n, max)
	}
	if rem := d.remain(); n > uint64(rem) {
		d.off = start
		return nil, d.errf("truncated: %s of %d bytes, %d remain", what(), n, rem)
	}
	b := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return b, nil
}

// str reads a length-prefixed string and copies it out of the input, so
// that metadata stays valid after the file is closed.
func (d *decoder) str(max uint64, what func() string) (string, error) {
	b, err := d.strBytes(max, what)
	return string(b), err
}

// describe returns a what function for a fixed description.
func describe(s string) func() string { return func() string { return s } }

// prealloc caps a capacity hint taken from the file: a count the file
// claims is only trusted as far as the elements actually parse, so slices
// and maps grow with what is read instead of being sized by a hostile
// header (the remaining-bytes checks alone would still let a large file
// ask for many times its size).
func prealloc(n uint64) int { return int(min(n, 1024)) }

// value reads a value of type t. depth counts array nesting.
func (d *decoder) value(key string, t ValueType, depth int) (Value, error) {
	if !t.valid() {
		return Value{}, d.errf("key %q: invalid value type %d", key, uint32(t))
	}
	if sz := t.size(); sz > 0 {
		if err := d.need(sz, func() string { return fmt.Sprintf("value of key %q", key) }); err != nil {
			return Value{}, err
		}
		var b uint64
		switch sz {
		case 1:
			b = uint64(d.b[d.off])
		case 2:
			b = uint64(binary.LittleEndian.Uint16(d.b[d.off:]))
		case 4:
			b = uint64(binary.LittleEndian.Uint32(d.b[d.off:]))
		case 8:
			b = binary.LittleEndian.Uint64(d.b[d.off:])
		}
		if t == TypeBool && b > 1 {
			return Value{}, d.errf("key %q: bool value %d is neither 0 nor 1", key, b)
		}
		d.off += sz
		return Value{typ: t, bits: b}, nil
	}
	if t == TypeString {
		s, err := d.str(MaxStringLen, func() string { return fmt.Sprintf("string value of key %q", key) })
		if err != nil {
			return Value{}, err
		}
		return Value{typ: TypeString, str: s}, nil
	}
	// Array.
	if depth >= MaxArrayDepth {
		return Value{}, d.errf("key %q: arrays nested deeper than %d", key, MaxArrayDepth)
	}
	et32, err := d.u32(func() string { return fmt.Sprintf("array element type of key %q", key) })
	if err != nil {
		return Value{}, err
	}
	et := ValueType(et32)
	if !et.valid() {
		return Value{}, d.errf("key %q: invalid array element type %d", key, et32)
	}
	at := d.off
	n, err := d.u64(func() string { return fmt.Sprintf("array length of key %q", key) })
	if err != nil {
		return Value{}, err
	}
	if n > MaxArrayLen {
		d.off = at
		return Value{}, d.errf("key %q: array length %d exceeds the limit %d", key, n, MaxArrayLen)
	}
	// Each element needs at least minSize bytes: check before allocating.
	minSize := uint64(et.size())
	switch et {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	if rem := d.remain(); n*minSize > uint64(rem) {
		d.off = at
		return Value{}, d.errf("truncated: key %q: array of %d %s needs at least %d bytes, %d remain", key, n, et, n*minSize, rem)
	}
	v := Value{typ: TypeArray, elem: et, n: int(n)}
	switch et {
	case TypeString:
		strs, err := d.strArray(key, int(n))
		if err != nil {
			return Value{}, err
		}
		v.strs = strs
	case TypeArray:
		v.vals = make([]Value, 0, prealloc(n))
		for range int(n) {
			e, err := d.value(key, TypeArray, depth+1)
			if err != nil {
				return Value{}, err
			}
			v.vals = append(v.vals, e)
		}
	case TypeBool:
		for i := range int(n) {
			if d.b[d.off+i] > 1 {
				return Value{}, &FormatError{int64(d.off + i), fmt.Sprintf("key %q: bool element %d is %d, neither 0 nor 1", key, i, d.b[d.off+i])}
			}
		}
		fallthrough
	default:
		// Copied, like strings, so that metadata outlives the mapping.
		v.raw = slices.Clone(d.b[d.off : d.off+int(n*minSize)])
		d.off += int(n * minSize)
	}
	return v, nil
}

// strArray reads n length-prefixed strings in two passes: the first checks
// every length and allocates nothing (so a hostile count costs nothing), the
// second copies the bytes into one buffer and cuts the elements from it. A
// vocabulary of 150k tokens is then two allocations, not 150k.
func (d *decoder) strArray(key string, n int) ([]string, error) {
	start := d.off
	total := 0
	for i := range n {
		b, err := d.strBytes(MaxStringLen, func() string { return fmt.Sprintf("element %d of key %q", i, key) })
		if err != nil {
			return nil, err
		}
		total += len(b)
	}
	var sb strings.Builder
	sb.Grow(total) // no reallocation below: each String() shares this buffer
	strs := make([]string, n)
	d.off = start
	for i := range strs {
		l := int(binary.LittleEndian.Uint64(d.b[d.off:])) // checked above
		d.off += 8
		pos := sb.Len()
		sb.Write(d.b[d.off : d.off+l])
		d.off += l
		strs[i] = sb.String()[pos:]
	}
	return strs, nil
}

// Parse parses a GGUF file held in data. Tensor data slices alias data.
func Parse(data []byte) (*File, error) {
	d := &decoder{b: data}
	if len(data) < 4 || string(data[:4]) != Magic {
		n := min(len(data), 4)
		return nil, d.errf("bad magic %q, want %q", data[:n], Magic)
	}
	d.off = 4
	version, err := d.u32(describe("version"))
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, &FormatError{4, "GGUF v1 is not supported (only v2 and v3)"}
	case version&0xFFFF == 0 && version != 0:
		return nil, &FormatError{4, fmt.Sprintf("version %#x looks byte-swapped: big-endian GGUF is not supported", version)}
	case version != 2 && version != 3:
		return nil, &FormatError{4, fmt.Sprintf("unknown GGUF version %d (supported: 2, 3)", version)}
	}
	nTensors, err := d.u64(describe("tensor count"))
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64(describe("metadata count"))
	if err != nil {
		return nil, err
	}
	// A key-value pair needs at least 8+1+4+1 bytes, a tensor info 8+1+4+4+8
	// (a name of one byte, no dimensions).
	if nKV > uint64(d.remain())/14 {
		return nil, &FormatError{16, fmt.Sprintf("metadata count %d cannot fit in the %d bytes that remain", nKV, d.remain())}
	}
	if nTensors > uint64(d.remain())/25 {
		return nil, &FormatError{8, fmt.Sprintf("tensor count %d cannot fit in the %d bytes that remain", nTensors, d.remain())}
	}
	f := &File{
		Version:     version,
		Alignment:   DefaultAlignment,
		KVs:         make([]KV, 0, prealloc(nKV)),
		kvIndex:     make(map[string]int, prealloc(nKV)),
		Tensors:     make([]*Tensor, 0, prealloc(nTensors)),
		tensorIndex: make(map[string]int, prealloc(nTensors)),
		data:        data,
	}
	for i := uint64(0); i < nKV; i++ {
		at := d.off
		key, err := d.str(MaxKeyLen, func() string { return fmt.Sprintf("key of metadata pair %d", i) })
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, &FormatError{int64(at), fmt.Sprintf("metadata pair %d has an empty key", i)}
		}
		if _, dup := f.kvIndex[key]; dup {
			return nil, &FormatError{int64(at), fmt.Sprintf("duplicate key %q", key)}
		}
		t, err := d.u32(func() string { return fmt.Sprintf("value type of key %q", key) })
		if err != nil {
			return nil, err
		}
		v, err := d.value(key, ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		f.kvIndex[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{key, v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		if v.Type() != TypeUint32 {
			return nil, &FormatError{-1, fmt.Sprintf("general.alignment has type %s, want u32", v.Type())}
		}
		a, _ := v.Uint()
		if a == 0 || a&(a-1) != 0 {
			return nil, &FormatError{-1, fmt.Sprintf("general.alignment %d is not a power of two", a)}
		}
		f.Alignment = a
	}
	for i := uint64(0); i < nTensors; i++ {
		at := d.off
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tensorIndex[t.Name]; dup {
			return nil, &FormatError{int64(at), fmt.Sprintf("duplicate tensor name %q", t.Name)}
		}
		f.tensorIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	// The data section starts at the next multiple of the alignment.
	off := uint64(d.off)
	if r := off % f.Alignment; r != 0 {
		off += f.Alignment - r
	}
	f.DataOffset = off
	if err := f.placeTensors(); err != nil {
		return nil, err
	}
	return f, nil
}

func (d *decoder) tensorInfo(i uint64) (*Tensor, error) {
	at := d.off
	// MaxNameLen as the string limit: an overlong name is rejected before
	// it is copied.
	name, err := d.str(MaxNameLen, func() string { return fmt.Sprintf("name of tensor %d", i) })
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, &FormatError{int64(at), fmt.Sprintf("tensor %d has an empty name", i)}
	}
	t := &Tensor{Name: name}
	nDims, err := d.u32(func() string { return fmt.Sprintf("tensor %q dimension count", name) })
	if err != nil {
		return nil, err
	}
	if nDims > MaxDims {
		return nil, d.errf("tensor %q has %d dimensions, at most %d allowed", name, nDims, MaxDims)
	}
	t.Dims = make([]uint64, nDims)
	for j := range t.Dims {
		if t.Dims[j], err = d.u64(func() string { return fmt.Sprintf("tensor %q dimension %d", name, j) }); err != nil {
			return nil, err
		}
	}
	typ, err := d.u32(func() string { return fmt.Sprintf("tensor %q type", name) })
	if err != nil {
		return nil, err
	}
	t.Type = quant.Type(typ)
	if !t.Type.Known() {
		return nil, d.errf("tensor %q has unknown tensor type %d", name, typ)
	}
	size, err := TensorBytes(t.Type, t.Dims)
	if err != nil {
		return nil, d.errf("tensor %q: %v", name, err)
	}
	t.Size = size
	if t.Offset, err = d.u64(func() string { return fmt.Sprintf("tensor %q data offset", name) }); err != nil {
		return nil, err
	}
	return t, nil
}

// placeTensors checks every tensor's data lies inside the file, aligned and
// without overlapping another, and points Data into the file.
func (f *File) placeTensors() error {
	if len(f.Tensors) == 0 {
		return nil
	}
	fileSize := uint64(len(f.data))
	if f.DataOffset > fileSize {
		return &FormatError{-1, fmt.Sprintf("data section starts at %d, beyond the end of the file (size %d)", f.DataOffset, fileSize)}
	}
	avail := fileSize - f.DataOffset
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return &FormatError{-1, fmt.Sprintf("tensor %q: data offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)}
		}
		if t.Offset > avail || t.Size > avail-t.Offset {
			return &FormatError{-1, fmt.Sprintf("tensor %q: data [%d, +%d) beyond the end of the file (data section has %d bytes)", t.Name, t.Offset, t.Size, avail)}
		}
		start := f.DataOffset + t.Offset
		t.Data = f.data[start : start+t.Size : start+t.Size]
	}
	// Overlap check on tensors sorted by offset: each non-empty tensor must
	// start at or after the end of every non-empty tensor before it (not
	// just its neighbour, which may be empty).
	order := slices.Clone(f.Tensors)
	slices.SortStableFunc(order, func(a, b *Tensor) int { return cmp.Compare(a.Offset, b.Offset) })
	var last *Tensor // the non-empty tensor that ends furthest so far
	for _, t := range order {
		if t.Size == 0 {
			continue
		}
		if last != nil && last.Offset+last.Size > t.Offset {
			return &FormatError{-1, fmt.Sprintf("tensors %q [%d, +%d) and %q [%d, +%d) overlap", last.Name, last.Offset, last.Size, t.Name, t.Offset, t.Size)}
		}
		last = t
	}
	return nil
}
