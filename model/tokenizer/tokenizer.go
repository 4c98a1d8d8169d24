// Package tokenizer reproduces llama.cpp's tokenization (src/llama-vocab.cpp)
// from GGUF metadata: the SentencePiece-style "llama" model (score-driven
// bigram merging with <0xXX> byte fallback) and the byte-level BPE "gpt2"
// model with the pre-tokenizer chosen by tokenizer.ggml.pre.
//
// Encode matches llama_tokenize, Piece matches llama_token_to_piece and
// Decode matches llama_detokenize (see their docs for the details). Special
// token ids, token attributes and the end-of-generation set are derived the
// way llama.cpp's vocab loader derives them, including its text-based
// detection of tokens such as <|im_end|> and <|eot_id|>.
//
// Not replicated: the WPM (BERT), UGM (T5), RWKV, PLaMo-2, gemma4, hybriddna
// and whitespace tokenizer models, and the pre-tokenizers kimi-k2, afmoe and
// tiny_aya/cohere2moe, which llama.cpp splits with custom code.
package tokenizer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Token types as stored in tokenizer.ggml.token_type.
const (
	TypeUndefined   = 0
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Token attributes (llama_token_attr bits).
type attr uint16

const (
	attrUnknown     attr = 1 << 0
	attrUnused      attr = 1 << 1
	attrNormal      attr = 1 << 2
	attrControl     attr = 1 << 3
	attrUserDefined attr = 1 << 4
	attrByte        attr = 1 << 5
	attrLStrip      attr = 1 << 7
	attrRStrip      attr = 1 << 8
)

// Special names a special-token role read from tokenizer.ggml.*_token_id.
type Special int

// Special-token roles, in the order llama.cpp reads their keys.
const (
	SpecialBOS Special = iota
	SpecialEOS
	SpecialEOT
	SpecialEOM
	SpecialUNK
	SpecialSEP
	SpecialPAD
	SpecialMask
	SpecialFIMPre
	SpecialFIMSuf
	SpecialFIMMid
	SpecialFIMPad
	SpecialFIMRep
	SpecialFIMSep
	SpecialPrefix // deprecated key, overrides FIMPre
	SpecialSuffix // deprecated key, overrides FIMSuf
	SpecialMiddle // deprecated key, overrides FIMMid
	numSpecial
)

// specialKeys are the GGUF key suffixes after "tokenizer.ggml.".
var specialKeys = [numSpecial]string{
	"bos_token_id", "eos_token_id", "eot_token_id", "eom_token_id",
	"unknown_token_id", "seperator_token_id", "padding_token_id", "mask_token_id",
	"fim_pre_token_id", "fim_suf_token_id", "fim_mid_token_id",
	"fim_pad_token_id", "fim_rep_token_id", "fim_sep_token_id",
	"prefix_token_id", "suffix_token_id", "middle_token_id",
}

// Vocab is the tokenizer metadata of a GGUF file, as plain data. ReadVocab
// fills it from a file; tests build it by hand.
type Vocab struct {
	Model string // tokenizer.ggml.model: "llama" or "gpt2"
	Pre   string // tokenizer.ggml.pre ("" = absent)
	Name  string // general.name (llama.cpp derives per-token strip flags from it)
	Arch  string // general.architecture

	Tokens []string  // tokenizer.ggml.tokens
	Scores []float32 // tokenizer.ggml.scores; nil = all 0
	Types  []int32   // tokenizer.ggml.token_type; nil = all normal
	Merges []string  // tokenizer.ggml.merges (gpt2)

	// IDs holds the special-token ids present in the metadata, as stored
	// (4294967295 or any other id outside the vocabulary means "use the
	// default", as in llama.cpp).
	IDs map[Special]uint64

	// Optional flags; nil = key absent (model-type defaults apply).
	AddBOS         *bool // tokenizer.ggml.add_bos_token
	AddEOS         *bool // tokenizer.ggml.add_eos_token
	AddSpacePrefix *bool // tokenizer.ggml.add_space_prefix
}

type modelType int

const (
	modelSPM modelType = iota
	modelBPE
)

// Tokenizer encodes text to token ids and back. It is immutable and safe
// for concurrent use.
type Tokenizer struct {
	typ    modelType
	pre    preConfig
	split  *splitter // BPE only
	tokens []string
	scores []float32
	attrs  []attr
	ids    map[string]int32
	ranks  map[string]int32 // BPE merges: "left right" -> rank

	special [numSpecial]int32 // -1 = none
	eog     map[int32]bool

	addBOS, addEOS, addSpacePrefix bool
	clean                          bool // clean_up_tokenization_spaces

	specials    []int32 // control/user-defined/unknown tokens, longest first
	specialTrie trie

	pieceData []byte  // every token's piece with specials rendered
	pieceOff  []int32 // len(tokens)+1 offsets into pieceData

	byteTok [256]int32 // byte-fallback token per byte, -1 = none
	spmCuts bool       // SPM may cut fragments before runs of U+2581

	scratch sync.Pool // *encodeScratch
}

// ErrUnsupported is matched by errors for tokenizer models and
// pre-tokenizers this package does not implement.
var ErrUnsupported = errors.New("tokenizer: unsupported")

// NewFromVocab builds a tokenizer from vocabulary metadata, with
// llama.cpp's defaults and fix-ups (llama_vocab::impl::load).
func NewFromVocab(v *Vocab) (*Tokenizer, error) {
	t := &Tokenizer{}
	n := len(v.Tokens)
	if n == 0 {
		return nil, errors.New("tokenizer: empty vocabulary")
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: vocabulary of %d tokens is too large", n)
	}

	// model type and its defaults
	def := [numSpecial]int32{}
	for i := range def {
		def[i] = -1
	}
	switch v.Model {
	case "llama":
		t.typ = modelSPM
		def[SpecialBOS], def[SpecialEOS], def[SpecialUNK] = 1, 2, 0
		t.addSpacePrefix, t.addBOS = true, true
	case "gpt2":
		t.typ = modelBPE
		def[SpecialBOS], def[SpecialEOS] = 11, 11
		pre, ok := preConfigFor(v.Pre)
		if !ok {
			return nil, fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, v.Pre)
		}
		t.pre = pre
		t.clean = pre.clean
		t.addBOS = pre.addBOS
		if pre.noBOS {
			def[SpecialBOS] = -1
		}
		sp, err := newSplitter(pre.kind.regexes())
		if err != nil {
			return nil, fmt.Errorf("tokenizer: pre-tokenizer %q: %w", v.Pre, err)
		}
		t.split = sp
		if v.Merges == nil {
			return nil, errors.New("tokenizer: gpt2 vocabulary without tokenizer.ggml.merges")
		}
		t.ranks = make(map[string]int32, len(v.Merges))
		for i, m := range v.Merges {
			// llama.cpp splits at the first space after the first byte; a
			// merge without one never matches a pair.
			if len(m) < 2 || strings.IndexByte(m[1:], ' ') < 0 {
				continue
			}
			if _, dup := t.ranks[m]; !dup {
				t.ranks[m] = int32(i)
			}
		}
	case "":
		return nil, errors.New("tokenizer: missing tokenizer.ggml.model")
	default:
		return nil, fmt.Errorf("%w: tokenizer model %q", ErrUnsupported, v.Model)
	}
	if v.AddSpacePrefix != nil {
		t.addSpacePrefix = *v.AddSpacePrefix
	}

	// tokens, scores, attributes
	if v.Scores != nil && len(v.Scores) < n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) < n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	t.tokens = make([]string, n)
	t.scores = make([]float32, n)
	t.attrs = make([]attr, n)
	t.ids = make(map[string]int32, n)
	for i, w := range v.Tokens {
		if w == "" {
			w = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		if j, dup := t.ids[w]; dup {
			// llama.cpp aborts on this (id_to_token/token_to_id size check).
			return nil, fmt.Errorf("tokenizer: token %d %q duplicates token %d", i, w, j)
		}
		t.ids[w] = int32(i)
		t.tokens[i] = w
		if v.Scores != nil {
			t.scores[i] = v.Scores[i]
		}
		t.attrs[i] = attrNormal
		if v.Types != nil {
			t.attrs[i] = typeAttr(v.Types[i])
		}
	}

	// special token ids: defaults outside the vocabulary are dropped; a key
	// outside the vocabulary is an error (llama.cpp warns and keeps the
	// default, which silently makes another token the BOS or EOS), except
	// "none" (-1, or 0xFFFFFFFF as converters write it as a uint32), which
	// keeps the default as llama.cpp does
	none := func(x uint64) bool { return x == 1<<64-1 || x == 1<<32-1 }
	for k := range numSpecial {
		if x, ok := v.IDs[k]; ok && x >= uint64(n) && !none(x) {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.%s is %d, outside the vocabulary of %d tokens", specialKeys[k], x, n)
		}
	}
	for k := range numSpecial {
		id := int64(-1)
		switch k {
		case SpecialPrefix, SpecialSuffix, SpecialMiddle:
			id = int64(t.special[k-SpecialPrefix+SpecialFIMPre])
		default:
			id = int64(def[k])
		}
		if id >= int64(n) {
			id = -1
		}
		if x, ok := v.IDs[k]; ok && x < uint64(n) {
			id = int64(x)
		}
		switch k {
		case SpecialPrefix, SpecialSuffix, SpecialMiddle:
			t.special[k-SpecialPrefix+SpecialFIMPre] = int32(id)
			t.special[k] = int32(id)
		default:
			t.special[k] = int32(id)
		}
	}
	if v.AddBOS != nil {
		t.addBOS = *v.AddBOS
	}
	if v.AddEOS != nil {
		t.addEOS = *v.AddEOS
	}
	if t.typ == modelBPE && t.pre.kind == preGemma4 && !t.addBOS {
		t.addBOS = true // llama.cpp forces BOS for Gemma 4
	}

	t.detectSpecials()
	t.buildEOG()

	// gpt-oss: always render these
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.ids[s]; ok {
			t.attrs[id] = attrUserDefined
		}
	}
	t.fixEOG()

	// special-token cache, longest first (llama.cpp's sort is unstable; ties
	// are ordered by id here)
	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.specials = append(t.specials, int32(id))
		}
	}
	slices.SortStableFunc(t.specials, func(a, b int32) int {
		return cmp.Compare(len(t.tokens[b]), len(t.tokens[a]))
	})

	t.buildPieces()
	t.stripAttrs(v)

	texts := make([]string, len(t.specials))
	for i, id := range t.specials {
		texts[i] = t.tokens[id]
	}
	t.specialTrie = newTrie(texts)

	for b := range 256 {
		t.byteTok[b] = t.lookupByte(byte(b))
	}
	t.spmCuts = t.typ == modelSPM && canCutAtSpaces(t.tokens)
	t.scratch.New = func() any { return new(encodeScratch) }
	return t, nil
}

func typeAttr(ty int32) attr {
	switch ty {
	case TypeNormal:
		return attrNormal
	case TypeUnknown:
		return attrUnknown
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDefined
	case TypeUnused:
		return attrUnused
	case TypeByte:
		return attrByte
	}
	return 0 // undefined
}

// firstByText returns the token llama.cpp's text-based detection picks
// among the candidate texts, -1 if none is in the vocabulary. llama.cpp
// scans its unordered_map and the first hit wins, an order set by the hash
// table; the highest id is our deterministic stand-in (it agrees with
// llama.cpp on Llama 3's <|eot_id|> over <|end_of_text|> and Qwen's
// <|im_end|> over <|endoftext|>).
func (t *Tokenizer) firstByText(texts []string) int32 {
	best := int32(-1)
	for _, s := range texts {
		if id, ok := t.ids[s]; ok && id > best {
			best = id
		}
	}
	return best
}

// markControl adds the control attribute, as llama.cpp does for
// control-looking tokens that are not typed control.
func (t *Tokenizer) markControl(id int32) {
	t.attrs[id] |= attrControl
}

var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepTexts = []string{"<|file_sep|>"}
	eogTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
		"<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
		"[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
		"<｜end▁of▁sentence｜>", "[e~["}
)

// detectSpecials finds EOT, EOM and FIM tokens by their text when the
// metadata does not name them.
func (t *Tokenizer) detectSpecials() {
	roles := []struct {
		k     Special
		texts []string
	}{
		{SpecialEOT, eotTexts}, {SpecialEOM, eomTexts},
		{SpecialFIMPre, fimPreTexts}, {SpecialFIMSuf, fimSufTexts}, {SpecialFIMMid, fimMidTexts},
		{SpecialFIMPad, fimPadTexts}, {SpecialFIMRep, fimRepTexts}, {SpecialFIMSep, fimSepTexts},
	}
	for _, r := range roles {
		if t.special[r.k] != -1 {
			continue
		}
		if id := t.firstByText(r.texts); id >= 0 {
			t.special[r.k] = id
			t.markControl(id)
		}
	}
	// control tokens whose text says "unused" are unused
	for id, text := range t.tokens {
		if t.attrs[id]&attrControl != 0 && strings.Contains(text, "unused") {
			t.attrs[id] |= attrUnused
		}
	}
}

// buildEOG collects the end-of-generation tokens.
func (t *Tokenizer) buildEOG() {
	t.eog = make(map[int32]bool)
	for _, k := range []Special{SpecialFIMPad, SpecialFIMRep, SpecialFIMSep} {
		if id := t.special[k]; id >= 0 {
			t.eog[id] = true
		}
	}
	for _, text := range eogTexts {
		if id, ok := t.ids[text]; ok {
			t.eog[id] = true
			t.markControl(id)
		}
	}
	for _, k := range []Special{SpecialEOS, SpecialEOT, SpecialEOM} {
		if id := t.special[k]; id >= 0 {
			t.eog[id] = true
		}
	}
}

// fixEOG applies llama.cpp's workarounds: with <|return|>/<|call|> (gpt-oss)
// or <|calls|>/<|flush|> (solar-open), <|end|> is not EOG; with
// <|tool_response> (gemma 4), </s> is not EOG.
func (t *Tokenizer) fixEOG() {
	var hasReturn, hasCall, hasFlush, hasToolResp bool
	endID, sID := int32(-1), int32(-1)
	for id := range t.eog {
		switch t.tokens[id] {
		case "<|return|>":
			hasReturn = true
		case "<|call|>", "<|calls|>":
			hasCall = true
		case "<|flush|>":
			hasFlush = true
		case "<|end|>":
			endID = id
		case "<|tool_response>":
			hasToolResp = true
		case "</s>":
			sID = id
		}
	}
	if endID >= 0 && hasCall && (hasReturn || hasFlush) {
		delete(t.eog, endID)
		t.attrs[endID] = attrUserDefined
	}
	if sID >= 0 && hasToolResp {
		delete(t.eog, sID)
		t.attrs[sID] = attrNormal
	}
}

// stripAttrs sets the lstrip/rstrip attributes llama.cpp assigns by model
// name (they make special-token matching swallow adjacent whitespace).
func (t *Tokenizer) stripAttrs(v *Vocab) {
	name := strings.ToLower(v.Name)
	containsAny := func(s string, subs ...string) bool {
		for _, x := range subs {
			if strings.Contains(s, x) {
				return true
			}
		}
		return false
	}
	set := func(text string, a attr, on bool) {
		id, ok := t.ids[text]
		if !ok {
			return
		}
		if on {
			t.attrs[id] |= a
		} else {
			t.attrs[id] &^= a
		}
	}
	switch {
	case containsAny(v.Pre, "jina-v2-de", "jina-v2-es", "jina-v2-code") || containsAny(v.Arch, "nomic-bert-moe", "jina-bert-v3"):
		set("<mask>", attrLStrip, true)
	case containsAny(name, "phi-3", "phi3"):
		for _, id := range t.specials {
			t.attrs[id] |= attrRStrip
		}
		set("</s>", attrRStrip, true)
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			set(s, attrRStrip, false)
		}
	case containsAny(name, "modern-bert"):
		set("[MASK]", attrLStrip, true)
	}
}

// canCutAtSpaces reports whether every token that holds U+2581 past its
// first byte consists of U+2581 only. Then no merged symbol can span the
// boundary between a non-U+2581 symbol and a following U+2581.
func canCutAtSpaces(tokens []string) bool {
	for _, s := range tokens {
		if i := strings.Index(s[min(1, len(s)):], "\u2581"); i >= 0 && strings.Trim(s, "\u2581") != "" {
			return false
		}
	}
	return true
}

// lookupByte finds the token Encode falls back to for a byte that no
// token covers: for SPM llama_vocab::byte_to_token (<0xXX>, else the byte
// itself); for byte-level BPE the one-byte string (llama.cpp looks up the
// raw bytes of the byte-encoded symbol, which rarely exist); for raw-UTF-8
// BPE <0xXX>.
func (t *Tokenizer) lookupByte(b byte) int32 {
	const hex = "0123456789ABCDEF"
	if t.typ == modelSPM || t.pre.kind.rawBytes() {
		if id, ok := t.ids[string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})]; ok {
			return id
		}
		if t.typ == modelBPE {
			return -1
		}
	}
	if id, ok := t.ids[string([]byte{b})]; ok {
		return id
	}
	return -1
}

// NVocab returns the number of tokens.
func (t *Tokenizer) NVocab() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence token, -1 if none.
func (t *Tokenizer) BOS() int32 { return t.special[SpecialBOS] }

// EOS returns the end-of-sequence token, -1 if none.
func (t *Tokenizer) EOS() int32 { return t.special[SpecialEOS] }

// EOT returns the end-of-turn token, -1 if none.
func (t *Tokenizer) EOT() int32 { return t.special[SpecialEOT] }

// EOM returns the end-of-message token, -1 if none.
func (t *Tokenizer) EOM() int32 { return t.special[SpecialEOM] }

// UNK returns the unknown token, -1 if none.
func (t *Tokenizer) UNK() int32 { return t.special[SpecialUNK] }

// PAD returns the padding token, -1 if none.
func (t *Tokenizer) PAD() int32 { return t.special[SpecialPAD] }

// SEP returns the separator token, -1 if none.
func (t *Tokenizer) SEP() int32 { return t.special[SpecialSEP] }

// SpecialID returns the id of any special-token role, -1 if none.
func (t *Tokenizer) SpecialID(k Special) int32 {
	if k < 0 || k >= numSpecial {
		return -1
	}
	return t.special[k]
}

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// AddSpacePrefix reports whether Encode prefixes text with a space (SPM)
// and Decode strips it again.
func (t *Tokenizer) AddSpacePrefix() bool { return t.addSpacePrefix }

// IsEOG reports whether id ends generation (EOS, EOT, EOM and the tokens
// llama.cpp recognises by text, such as <|im_end|>).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// EOGs returns the end-of-generation tokens in ascending order.
func (t *Tokenizer) EOGs() []int32 {
	out := make([]int32, 0, len(t.eog))
	for id := range t.eog {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// IsControl reports whether id is a control token (rendered empty unless
// specials are rendered). Tokens llama.cpp recognises as EOG by text count
// as control even when typed otherwise.
func (t *Tokenizer) IsControl(id int32) bool {
	return t.valid(id) && t.attrs[id]&attrControl != 0
}

// TokenType returns the token's type as llama.cpp sees it after its fix-ups
// (one of the Type constants; the attribute with the most precedence wins:
// control, user-defined, unknown, byte, unused, normal).
func (t *Tokenizer) TokenType(id int32) int {
	if !t.valid(id) {
		return TypeUndefined
	}
	a := t.attrs[id]
	switch {
	case a&attrControl != 0:
		return TypeControl
	case a&attrUserDefined != 0:
		return TypeUserDefined
	case a&attrUnknown != 0:
		return TypeUnknown
	case a&attrByte != 0:
		return TypeByte
	case a&attrUnused != 0:
		return TypeUnused
	case a&attrNormal != 0:
		return TypeNormal
	}
	return TypeUndefined
}

// Token returns the raw vocabulary text of id ("" if out of range).
func (t *Tokenizer) Token(id int32) string {
	if !t.valid(id) {
		return ""
	}
	return t.tokens[id]
}

// Score returns the SPM score of id.
func (t *Tokenizer) Score(id int32) float32 {
	if !t.valid(id) {
		return 0
	}
	return t.scores[id]
}

// Lookup finds the token whose raw vocabulary text is text.
func (t *Tokenizer) Lookup(text string) (int32, bool) {
	id, ok := t.ids[text]
	return id, ok
}

func (t *Tokenizer) valid(id int32) bool { return id >= 0 && int(id) < len(t.tokens) }
