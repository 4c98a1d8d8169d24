// gguf.go: reading the tokenizer metadata of a GGUF file into a Vocab.

package tokenizer

import (
	"fmt"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// New builds the tokenizer described by a GGUF file's metadata.
func New(f *gguf.File) (*Tokenizer, error) {
	v, err := ReadVocab(f)
	if err != nil {
		return nil, err
	}
	return NewFromVocab(v)
}

// ReadVocab extracts the tokenizer.ggml.* metadata. Array keys must have
// the element types llama.cpp requires; the strings are shared with f
// (copies owned by the File, valid after Close).
func ReadVocab(f *gguf.File) (*Vocab, error) {
	v := &Vocab{IDs: map[Special]uint64{}}
	var ok bool
	if v.Model, ok = f.GetString("tokenizer.ggml.model"); !ok {
		return nil, fmt.Errorf("tokenizer: missing or non-string tokenizer.ggml.model")
	}
	v.Pre, _ = f.GetString("tokenizer.ggml.pre")
	v.Name, _ = f.GetString("general.name")
	v.Arch, _ = f.GetString("general.architecture")

	val, ok := f.Get("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("tokenizer: missing tokenizer.ggml.tokens")
	}
	if v.Tokens, ok = val.Strings(); !ok {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.tokens is %s, want an array of strings", val)
	}
	if val, ok := f.Get("tokenizer.ggml.scores"); ok {
		if val.Type() != gguf.TypeArray || val.ElemType() != gguf.TypeFloat32 {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.scores is %s, want an array of f32", val)
		}
		v.Scores, _ = val.Float32s()
	}
	if val, ok := f.Get("tokenizer.ggml.token_type"); ok {
		if val.Type() != gguf.TypeArray || val.ElemType() != gguf.TypeInt32 {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.token_type is %s, want an array of i32", val)
		}
		v.Types, _ = val.Int32s()
	}
	if val, ok := f.Get("tokenizer.ggml.merges"); ok {
		if v.Merges, ok = val.Strings(); !ok {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.merges is %s, want an array of strings", val)
		}
	}
	for k, key := range specialKeys {
		val, ok := f.Get("tokenizer.ggml." + key)
		if !ok {
			continue
		}
		id, ok := val.Uint()
		if !ok {
			if _, isInt := val.Int(); !isInt {
				return nil, fmt.Errorf("tokenizer: tokenizer.ggml.%s is %s, want an integer", key, val)
			}
			id = 1<<64 - 1 // negative: out of range, default kept
		}
		v.IDs[Special(k)] = id
	}
	for key, dst := range map[string]**bool{
		"tokenizer.ggml.add_bos_token":    &v.AddBOS,
		"tokenizer.ggml.add_eos_token":    &v.AddEOS,
		"tokenizer.ggml.add_space_prefix": &v.AddSpacePrefix,
	} {
		val, ok := f.Get(key)
		if !ok {
			continue
		}
		b, ok := val.Bool()
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s is %s, want a bool", key, val)
		}
		*dst = &b
	}
	return v, nil
}
