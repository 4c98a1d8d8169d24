package model

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/quant"
)

// Bundle is everything loaded from one GGUF file: the mapping, the model,
// its tokenizer and its chat template.
type Bundle struct {
	File      *gguf.File
	Model     *Model
	Tokenizer *tokenizer.Tokenizer
	// Template is the file's tokenizer.chat_template, or ChatML (as
	// llama-server uses) when the file has none; DefaultTemplate says which.
	Template        *chat.Template
	DefaultTemplate bool
	Name            string // general.name
	Description     string // general.description (e.g. "random weights")
}

// Open maps the GGUF at path and loads its model, tokenizer and chat
// template. supports is the backend's weight-type check. log may be nil.
func Open(path string, supports func(quant.Type) bool, log *zap.Logger) (*Bundle, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	b, err := load(f, supports, log)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// OpenTokenizer maps the GGUF at path and loads only its tokenizer: for
// tools that need no weights (tokenize), and for vocab-only files such as
// llama.cpp's tokenizer test vocabularies. Close the returned file when done
// with the tokenizer.
func OpenTokenizer(path string) (*gguf.File, *tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, tok, nil
}

func load(f *gguf.File, supports func(quant.Type) bool, log *zap.Logger) (*Bundle, error) {
	m, err := Load(f, supports)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		return nil, err
	}
	if tok.NVocab() != m.NVocab {
		return nil, fmt.Errorf("model: tokenizer has %d tokens, the model %d", tok.NVocab(), m.NVocab)
	}
	b := &Bundle{File: f, Model: m, Tokenizer: tok}
	b.Name, _ = f.GetString("general.name")
	b.Description, _ = f.GetString("general.description")
	text := func(id int32) string {
		if id < 0 {
			return ""
		}
		return tok.Token(id)
	}
	src, ok := f.GetString("tokenizer.chat_template")
	if !ok || src == "" {
		b.Template, b.DefaultTemplate = chat.Default(), true
		return b, nil
	}
	b.Template, err = chat.New(src, text(tok.BOS()), text(tok.EOS()), chat.WithLogger(log))
	if errors.Is(err, chat.ErrUnsupported) {
		// A template we cannot render must not silently become a wrong
		// prompt: the model still loads (raw prompts work) and chat use
		// reports the error.
		log.Warn("chat template not supported; --chat and chat endpoints will fail", zap.Error(err))
		b.Template = nil
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Close releases the mapping.
func (b *Bundle) Close() error { return b.File.Close() }
