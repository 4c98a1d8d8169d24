package model

import (
	"fmt"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/quant"
)

// Weight is a 2-D weight matrix (or one expert of a 3-D one) in its GGUF
// type. Data is a slice of the file mapping: weights are never dequantized
// whole. Row r (an output feature) is Data[r*RowBytes : (r+1)*RowBytes] and
// holds Cols elements.
type Weight struct {
	Name     string
	Type     quant.Type
	Cols     int // elements per row (ggml ne0)
	Rows     int // ggml ne1
	RowBytes int
	Data     []byte
	// Packed says Data holds the backend's packed layout of the matrix
	// (Packer.PackInto), not the file's: a streamed expert packed by the
	// weight path.
	Packed bool
}

// Row returns the bytes of row r.
func (w *Weight) Row(r int) []byte { return w.Data[r*w.RowBytes : (r+1)*w.RowBytes] }

// Vector is a 1-D parameter (norm weight, bias) as float32.
type Vector []float32

// loader looks up tensors by name and checks their shapes, collecting the
// first error so an architecture's table reads as a list.
type loader struct {
	f   *gguf.File
	err error
	// Supported reports whether the backend can multiply by this type.
	supported func(quant.Type) bool
}

func (l *loader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

func shapeString(dims []uint64) string {
	s := make([]string, len(dims))
	for i, d := range dims {
		s[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func (l *loader) tensor(name string, required bool, dims ...int) *gguf.Tensor {
	t, ok := l.f.Tensor(name)
	if !ok {
		if required {
			want := make([]uint64, len(dims))
			for i, d := range dims {
				want[i] = uint64(d)
			}
			l.fail(fmt.Errorf("model: missing required tensor %q (expected shape %s)", name, shapeString(want)))
		}
		return nil
	}
	match := len(t.Dims) == len(dims)
	for i := 0; match && i < len(dims); i++ {
		match = t.Dims[i] == uint64(dims[i])
	}
	if !match {
		want := make([]uint64, len(dims))
		for i, d := range dims {
			want[i] = uint64(d)
		}
		l.fail(fmt.Errorf("model: tensor %q has shape %s, expected %s", name, shapeString(t.Dims), shapeString(want)))
		return nil
	}
	return t
}

// matrix loads a [cols, rows] weight.
func (l *loader) matrix(name string, cols, rows int, required bool) *Weight {
	t := l.tensor(name, required, cols, rows)
	if t == nil {
		return nil
	}
	return l.weight(t, cols, rows, t.Data)
}

func (l *loader) weight(t *gguf.Tensor, cols, rows int, data []byte) *Weight {
	if !l.supported(t.Type) {
		l.fail(fmt.Errorf("model: tensor %q has type %s, which is not supported: %w", t.Name, t.Type, quant.ErrUnsupportedType))
		return nil
	}
	rb, err := quant.RowBytes(t.Type, cols)
	if err != nil {
		l.fail(fmt.Errorf("model: tensor %q: %w", t.Name, err))
		return nil
	}
	return &Weight{Name: t.Name, Type: t.Type, Cols: cols, Rows: rows, RowBytes: rb, Data: data}
}

// experts loads a [cols, rows, n] weight as n per-expert views.
func (l *loader) experts(name string, cols, rows, n int) []Weight {
	t := l.tensor(name, true, cols, rows, n)
	if t == nil {
		return nil
	}
	w := l.weight(t, cols, rows, t.Data)
	if w == nil {
		return nil
	}
	per := w.RowBytes * rows
	out := make([]Weight, n)
	for e := range out {
		out[e] = *w
		out[e].Name = fmt.Sprintf("%s[%d]", name, e)
		out[e].Data = t.Data[e*per : (e+1)*per]
	}
	return out
}

// vector loads a 1-D parameter of n elements as float32 (norms and biases
// are tiny; converting them once is not dequantizing the model).
func (l *loader) vector(name string, n int, required bool) Vector {
	t := l.tensor(name, required, n)
	if t == nil {
		return nil
	}
	v := make(Vector, n)
	if err := quant.DequantizeRow(t.Type, t.Data, v); err != nil {
		l.fail(fmt.Errorf("model: tensor %q: %w", name, err))
		return nil
	}
	return v
}
