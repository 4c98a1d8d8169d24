// This file holds what a model file says about itself, as plain Go values,
// for a server to show (Ollama's /api/show, /api/tags and /api/ps): every
// metadata pair in file order, the chat template and license as written,
// and the parameter count and main weight type counted from the tensors.
// It does not interpret the keys (hparams.go does, for the forward pass)
// and does not choose a wire format: the server decides how to encode the
// values (NaN, for one, has no JSON).

package model

import (
	"github.com/flowinfer/flowinfer/io/gguf"
)

// Info describes a model file.
type Info struct {
	Template string // tokenizer.chat_template as written; "" when the file has none
	License  string // general.license; "" when absent
	// Params counts the elements of every tensor; WeightType names the
	// tensor type holding the most bytes ("q4_K", the smaller name on a
	// tie), "" in a file without tensors.
	Params     uint64
	WeightType string
	// Metadata is every key-value pair, in file order, its value as
	// MetaValue converts it.
	Metadata []Meta
}

// Meta is one metadata pair.
type Meta struct {
	Key   string
	Value any
}

// NewInfo describes f. An array longer than maxArray elements (maxArray
// >= 0) is left out as a nil value, so that describing a file does not
// copy its whole vocabulary; maxArray < 0 keeps every array.
func NewInfo(f *gguf.File, maxArray int) Info {
	in := Info{Metadata: make([]Meta, len(f.KVs))}
	in.Template, _ = f.GetString("tokenizer.chat_template")
	in.License, _ = f.GetString("general.license")
	for i, kv := range f.KVs {
		in.Metadata[i] = Meta{Key: kv.Key, Value: MetaValue(kv.Value, maxArray)}
	}
	bytesOf := map[string]uint64{} // type name -> bytes of its tensors
	for _, t := range f.Tensors {
		in.Params += t.Elements()
		bytesOf[t.Type.String()] += t.Size
	}
	var most uint64
	for name, n := range bytesOf {
		if n > most || n == most && name < in.WeightType {
			in.WeightType, most = name, n
		}
	}
	return in
}

// Info describes the bundle's file (NewInfo).
func (b *Bundle) Info(maxArray int) Info { return NewInfo(b.File, maxArray) }

// MetaValue converts a metadata value: a string, a bool, a float32 or
// float64 (as stored, NaN and infinities included), an integer of any
// width as int64 (a uint64 above math.MaxInt64 as uint64), an array as
// []any of its converted elements, or nil for an array longer than
// maxArray (when maxArray >= 0) and for a value of no known type.
func MetaValue(v gguf.Value, maxArray int) any {
	switch v.Type() {
	case gguf.TypeString:
		s, _ := v.Str()
		return s
	case gguf.TypeBool:
		x, _ := v.Bool()
		return x
	case gguf.TypeFloat32:
		x, _ := v.Float()
		return float32(x)
	case gguf.TypeFloat64:
		x, _ := v.Float()
		return x
	case gguf.TypeArray:
		if maxArray >= 0 && v.Len() > maxArray {
			return nil
		}
		vals, _ := v.Array()
		out := make([]any, len(vals))
		for i, e := range vals {
			out[i] = MetaValue(e, maxArray)
		}
		return out
	}
	if i, ok := v.Int(); ok {
		return i
	}
	if u, ok := v.Uint(); ok {
		return u
	}
	return nil
}
