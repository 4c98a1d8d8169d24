// tokenizer_test.go: unit tests on hand-built vocabularies.

package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// spmVocab builds an SPM vocabulary: <unk> <s> </s>, the 256 byte tokens
// (ids 3..258), then extra (sorted by text) as normal tokens.
func spmVocab(extra map[string]float32) *Vocab {
	v := &Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>"}, Types: []int32{TypeUnknown, TypeControl, TypeControl}}
	v.Scores = []float32{0, 0, 0}
	for b := range 256 {
		v.Tokens = append(v.Tokens, fmt.Sprintf("<0x%02X>", b))
		v.Types = append(v.Types, TypeByte)
		v.Scores = append(v.Scores, 0)
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v.Tokens = append(v.Tokens, k)
		v.Types = append(v.Types, TypeNormal)
		v.Scores = append(v.Scores, extra[k])
	}
	return v
}

// addToken appends a token of the given type and returns its id.
func addToken(v *Vocab, text string, ty int32) int32 {
	v.Tokens = append(v.Tokens, text)
	v.Types = append(v.Types, ty)
	if v.Scores != nil {
		v.Scores = append(v.Scores, 0)
	}
	return int32(len(v.Tokens) - 1)
}

func mustNew(t *testing.T, v *Vocab) *Tokenizer {
	t.Helper()
	tok, err := NewFromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ids maps token texts to ids.
func ids(t *testing.T, tok *Tokenizer, texts ...string) []int32 {
	t.Helper()
	out := []int32{}
	for _, s := range texts {
		id, ok := tok.Lookup(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		out = append(out, id)
	}
	return out
}

func boolp(b bool) *bool { return &b }

func TestSPMMerges(t *testing.T) {
	const sp = "\u2581"
	tests := []struct {
		name   string
		vocab  map[string]float32
		noPre  bool
		text   string
		tokens []string
	}{
		{"higher score merges first", map[string]float32{sp: -1, "a": -1, "b": -1, sp + "a": -2, "ab": -3}, false, "ab", []string{sp + "a", "b"}},
		{"score decides", map[string]float32{sp: -1, "a": -1, "b": -1, sp + "a": -2, "ab": -1.5}, false, "ab", []string{sp, "ab"}},
		{"tie: leftmost first", map[string]float32{sp: -1, "a": -1, "b": -1, sp + "a": -2, "ab": -2}, false, "ab", []string{sp + "a", "b"}},
		{"chain to longest", map[string]float32{sp: -1, "a": -1, "b": -1, sp + "a": -2, "ab": -1.5, sp + "ab": -5}, false, "ab", []string{sp + "ab"}},
		{"no space prefix", map[string]float32{"a": -1, "b": -1, sp + "a": -2, "ab": -3}, true, "ab", []string{"ab"}},
		{"spaces escaped", map[string]float32{sp: -1, "a": -1, sp + "a": -2}, false, "a a", []string{sp + "a", sp + "a"}},
		{"byte fallback", map[string]float32{sp: -1, "a": -1}, false, "aé", []string{sp, "a", "<0xC3>", "<0xA9>"}},
		{"invalid utf-8 bytes", map[string]float32{sp: -1}, false, "\xff\xc3", []string{sp, "<0xFF>", "<0xC3>"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := spmVocab(tc.vocab)
			if tc.noPre {
				v.AddSpacePrefix = boolp(false)
			}
			tok := mustNew(t, v)
			got := tok.Encode(tc.text, false, false)
			if want := ids(t, tok, tc.tokens...); !slices.Equal(got, want) {
				t.Errorf("Encode(%q) = %v, want %v %q", tc.text, got, want, tc.tokens)
			}
		})
	}
}

func TestSPMSpecials(t *testing.T) {
	const sp = "\u2581"
	v := spmVocab(map[string]float32{sp: -1, "a": -1, sp + "a": -2})
	tool := addToken(v, "<tool>", TypeUserDefined)
	tok := mustNew(t, v)
	A := ids(t, tok, sp+"a")[0]
	a := ids(t, tok, "a")[0]
	tests := []struct {
		name                 string
		text                 string
		addSpecial, parseSpc bool
		want                 []int32
	}{
		{"bos added", "a", true, false, []int32{1, A}},
		{"empty with bos", "", true, false, []int32{1}},
		{"empty", "", false, false, []int32{}},
		{"control parsed", "<s>a</s>a", false, true, []int32{1, A, 2, A}},
		{"user-defined always parsed, space prefix after it", "a<tool>a", false, false, []int32{A, tool, A}},
		{"adjacent specials", "<s></s>", false, true, []int32{1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tok.Encode(tc.text, tc.addSpecial, tc.parseSpc)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q, %v, %v) = %v, want %v", tc.text, tc.addSpecial, tc.parseSpc, got, tc.want)
			}
		})
	}
	if got := tok.Encode("<s>", false, false); slices.Contains(got, 1) {
		t.Errorf("control token parsed without parseSpecial: %v", got)
	}
	_ = a
}

func TestSpecialStrip(t *testing.T) {
	const sp = "\u2581"
	v := spmVocab(map[string]float32{sp: -1, "a": -1, "b": -1, sp + "a": -2, sp + "b": -2})
	end := addToken(v, "<|end|>", TypeControl)
	v.Name = "Phi3 mini"
	tok := mustNew(t, v)
	// phi-3 models: special tokens swallow the whitespace after them
	got := tok.Encode("a<|end|> \n b", false, true)
	if want := append(ids(t, tok, sp+"a"), append([]int32{end}, ids(t, tok, sp+"b")...)...); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// ... except <s>
	got = tok.Encode("<s> a", false, true)
	if want := append([]int32{1}, ids(t, tok, sp, sp+"a")...); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestLongestSpecialFirst(t *testing.T) {
	v := spmVocab(map[string]float32{"\u2581": -1, "x": -1})
	short := addToken(v, "<a", TypeControl)
	long := addToken(v, "<ab>", TypeControl)
	tok := mustNew(t, v)
	got := tok.Encode("<ab><a", false, true)
	if want := []int32{long, short}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// bpeVocab builds a byte-level BPE vocabulary: the 256 byte characters
// (ids 0..255 in byte order), then extra tokens.
func bpeVocab(pre string, merges []string, extra ...string) *Vocab {
	v := &Vocab{Model: "gpt2", Pre: pre, Merges: append([]string{}, merges...)}
	for b := range 256 {
		v.Tokens = append(v.Tokens, byteRuneUTF8[b])
		v.Types = append(v.Types, TypeNormal)
	}
	for _, e := range extra {
		v.Tokens = append(v.Tokens, e)
		v.Types = append(v.Types, TypeNormal)
	}
	return v
}

func TestBPEMerges(t *testing.T) {
	tests := []struct {
		name   string
		pre    string
		merges []string
		extra  []string
		text   string
		tokens []string
	}{
		{"rank order", "gpt-2", []string{"a b", "b c"}, []string{"ab", "bc"}, "abc", []string{"ab", "c"}},
		{"rank order reversed", "gpt-2", []string{"b c", "a b"}, []string{"ab", "bc"}, "abc", []string{"a", "bc"}},
		{"chained", "gpt-2", []string{"Ġ t", "h e", "Ġt he"}, []string{"Ġt", "he", "Ġthe"}, " the", []string{"Ġthe"}},
		{"words split first", "gpt-2", []string{"a Ġ"}, []string{"aĠ"}, "a b", []string{"a", "Ġ", "b"}},
		{"ignore_merges (llama3)", "llama-bpe", nil, []string{"abc"}, "abc", []string{"abc"}},
		{"no ignore_merges (gpt2)", "gpt-2", nil, []string{"abc"}, "abc", []string{"a", "b", "c"}},
		{"non-ascii bytes", "gpt-2", nil, nil, "é", []string{"Ã", "©"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := mustNew(t, bpeVocab(tc.pre, tc.merges, tc.extra...))
			got := tok.Encode(tc.text, false, false)
			if want := ids(t, tok, tc.tokens...); !slices.Equal(got, want) {
				t.Errorf("Encode(%q) = %v, want %v %q", tc.text, got, want, tc.tokens)
			}
			if dec := tok.Decode(got, false); dec != tc.text {
				t.Errorf("Decode = %q, want %q", dec, tc.text)
			}
		})
	}
}

func TestSpecialIDs(t *testing.T) {
	v := spmVocab(nil)
	v.IDs = map[Special]uint64{SpecialBOS: 4294967295, SpecialPAD: 4294967295, SpecialEOS: 2}
	tok := mustNew(t, v)
	if tok.BOS() != 1 || tok.EOS() != 2 || tok.PAD() != -1 || tok.SEP() != -1 || tok.UNK() != 0 {
		t.Errorf("BOS %d EOS %d PAD %d SEP %d UNK %d", tok.BOS(), tok.EOS(), tok.PAD(), tok.SEP(), tok.UNK())
	}
	if !tok.AddBOS() || tok.AddEOS() || !tok.AddSpacePrefix() {
		t.Errorf("SPM defaults: AddBOS %v AddEOS %v AddSpacePrefix %v", tok.AddBOS(), tok.AddEOS(), tok.AddSpacePrefix())
	}

	// defaults outside a tiny vocabulary are dropped
	tiny := mustNew(t, &Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>"}})
	if tiny.BOS() != 1 || tiny.EOS() != -1 {
		t.Errorf("tiny: BOS %d EOS %d", tiny.BOS(), tiny.EOS())
	}
	if got := tiny.Encode("", true, false); !slices.Equal(got, []int32{1}) {
		t.Errorf("tiny Encode = %v", got)
	}

	// gpt2 defaults: BOS = EOS = 11, add_bos per pre-tokenizer and metadata
	g := mustNew(t, bpeVocab("gpt-2", nil))
	if g.BOS() != 11 || g.EOS() != 11 || g.AddBOS() || g.AddSpacePrefix() {
		t.Errorf("gpt2: BOS %d EOS %d AddBOS %v", g.BOS(), g.EOS(), g.AddBOS())
	}
	if !mustNew(t, bpeVocab("llama-bpe", nil)).AddBOS() {
		t.Error("llama-bpe: AddBOS false")
	}
	gv := bpeVocab("llama-bpe", nil)
	gv.AddBOS = boolp(false)
	if mustNew(t, gv).AddBOS() {
		t.Error("metadata add_bos_token=false ignored")
	}
}

func TestEOG(t *testing.T) {
	v := bpeVocab("qwen2", nil)
	eot := addToken(v, "<|endoftext|>", TypeControl)
	imEnd := addToken(v, "<|im_end|>", TypeNormal) // mistyped: llama.cpp makes it control
	imStart := addToken(v, "<|im_start|>", TypeControl)
	pad := addToken(v, "<|fim_pad|>", TypeControl)
	eom := addToken(v, "<|eom_id|>", TypeControl)
	v.IDs = map[Special]uint64{SpecialEOS: uint64(eot)}
	tok := mustNew(t, v)
	if tok.EOT() != imEnd {
		t.Errorf("EOT = %d, want %d", tok.EOT(), imEnd)
	}
	if tok.EOM() != eom {
		t.Errorf("EOM = %d, want %d", tok.EOM(), eom)
	}
	for _, id := range []int32{eot, imEnd, pad, eom} {
		if !tok.IsEOG(id) {
			t.Errorf("IsEOG(%q) false", tok.Token(id))
		}
	}
	if tok.IsEOG(imStart) || tok.IsEOG(-1) || tok.IsEOG(1<<30) {
		t.Error("IsEOG true for a non-EOG id")
	}
	if !tok.IsControl(imEnd) || tok.TokenType(imEnd) != TypeControl {
		t.Error("<|im_end|> not made control")
	}
	if want := []int32{eot, imEnd, pad, eom}; !slices.Equal(tok.EOGs(), want) {
		t.Errorf("EOGs = %v, want %v", tok.EOGs(), want)
	}
	// control tokens are only parsed on request, and render empty
	if got := tok.Encode("<|im_end|>", false, true); !slices.Equal(got, []int32{imEnd}) {
		t.Errorf("parse special: %v", got)
	}
	if len(tok.Piece(imEnd, false)) != 0 || string(tok.Piece(imEnd, true)) != "<|im_end|>" {
		t.Error("control piece rendering")
	}

	// gpt-oss: <|end|> is not EOG when <|return|> and <|call|> exist
	h := bpeVocab("gpt-4o", nil)
	end := addToken(h, "<|end|>", TypeControl)
	addToken(h, "<|return|>", TypeControl)
	addToken(h, "<|call|>", TypeControl)
	ht := mustNew(t, h)
	if ht.IsEOG(end) || ht.TokenType(end) != TypeUserDefined {
		t.Errorf("<|end|>: IsEOG %v type %d", ht.IsEOG(end), ht.TokenType(end))
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name        string
		v           *Vocab
		unsupported bool
	}{
		{"no model", &Vocab{Tokens: []string{"a"}}, false},
		{"unknown model", &Vocab{Model: "bert", Tokens: []string{"a"}}, true},
		{"unknown pre", &Vocab{Model: "gpt2", Pre: "nope", Tokens: []string{"a"}, Merges: []string{}}, true},
		{"custom pre", &Vocab{Model: "gpt2", Pre: "kimi-k2", Tokens: []string{"a"}, Merges: []string{}}, true},
		{"no merges", &Vocab{Model: "gpt2", Pre: "gpt-2", Tokens: []string{"a"}}, false},
		{"empty", &Vocab{Model: "llama"}, false},
		{"duplicate", &Vocab{Model: "llama", Tokens: []string{"a", "a"}}, false},
		{"short scores", &Vocab{Model: "llama", Tokens: []string{"a", "b"}, Scores: []float32{1}}, false},
		{"short types", &Vocab{Model: "llama", Tokens: []string{"a", "b"}, Types: []int32{1}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFromVocab(tc.v)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrUnsupported) != tc.unsupported {
				t.Errorf("errors.Is(%v, ErrUnsupported) = %v", err, !tc.unsupported)
			}
		})
	}
}

func TestPreTokenizersCompile(t *testing.T) {
	names := []string{"default", "llama3", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3", "youtu",
		"falcon", "mpt", "starcoder", "gpt-2", "jais-2", "gemma4", "sarvam-moe", "roberta-bpe", "whitespace", "refact",
		"command-r", "qwen2", "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "viking", "jais",
		"tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "exaone-moe", "chameleon",
		"minerva-7b", "megrez", "gpt-4o", "granite-embed-multi-97m", "superbpe", "trillion", "granite-docling",
		"bailingmoe", "seed-coder", "hunyuan", "hunyuan-dense", "joyai-llm", "grok-2", "laguna", "minimax-m2",
		"solar-open", "mellum2", "minicpm5"}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tok := mustNew(t, bpeVocab(name, nil))
			if tok.pre.kind.rawBytes() {
				return // this vocabulary lacks <0xXX> tokens
			}
			// every byte of the text comes back (up to clean-up)
			const text = "Hello world 123 \n\n ünï 中文 ' , x"
			want := text
			if tok.clean {
				want = string(cleanSpaces([]byte(text)))
			}
			if got := tok.Decode(tok.Encode(text, false, false), false); got != want {
				t.Errorf("round trip %q", got)
			}
		})
	}
}

func TestCleanSpaces(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"a , b . c ! d ?", "a, b. c! d?"},
		{"a ' b", "a'b"},
		{"it 's I 'm we 're you 've", "it's I'm we're you've"},
		{"don 't I 'd we 'll", "don 't I 'd we 'll"},
		{" ,", ","},
	}
	for _, tc := range tests {
		if got := string(cleanSpaces([]byte(tc.in))); got != tc.want {
			t.Errorf("cleanSpaces(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDecoder(t *testing.T) {
	tok := mustNew(t, spmVocab(map[string]float32{"\u2581": -1, "a": -1, "\u2581a": -2}))
	byteTok := func(b byte) int32 { return int32(3 + int(b)) }
	A := ids(t, tok, "\u2581a")[0]
	tests := []struct {
		name string
		ids  []int32
		want []string // output of each Add, then Flush
	}{
		{"ascii", []int32{A, A}, []string{" a", " a", ""}},
		{"two-byte split", []int32{byteTok(0xC3), byteTok(0xA9)}, []string{"", "é", ""}},
		{"four-byte split", []int32{byteTok(0xF0), byteTok(0x9F), byteTok(0x98), byteTok(0x80), A}, []string{"", "", "", "😀", " a", ""}},
		{"invalid byte", []int32{byteTok(0xFF), A}, []string{"\uFFFD", " a", ""}},
		{"truncated then ascii", []int32{byteTok(0xE2), byteTok(0x82), A}, []string{"", "", "\uFFFD\uFFFD a", ""}},
		{"held back at flush", []int32{A, byteTok(0xE2), byteTok(0x82)}, []string{" a", "", "", "\uFFFD\uFFFD"}},
		{"surrogate lead", []int32{byteTok(0xED), byteTok(0xA0)}, []string{"", "\uFFFD\uFFFD", ""}},
		{"control hidden", []int32{1, A, 2}, []string{"", " a", "", ""}},
		{"preserved control", []int32{1, A, 2, 1}, []string{"", " a", "</s>", "", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tok.NewDecoder(false)
			if tc.name == "preserved control" {
				d.Preserve([]int32{2})
			}
			var got []string
			for _, id := range tc.ids {
				got = append(got, d.Add(id))
			}
			got = append(got, d.Flush())
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	tok := mustNew(t, spmVocab(map[string]float32{"\u2581": -1, "a": -1, "\u2581a": -2}))
	A := ids(t, tok, "\u2581a")[0]
	tests := []struct {
		ids     []int32
		special bool
		want    string
	}{
		{[]int32{A, A}, false, "a a"},
		{[]int32{1, A, A}, false, " a a"},
		{[]int32{1, A, 2}, true, "<s> a</s>"},
		{[]int32{3 + 0xC3, 3 + 0xA9}, false, "é"},
		{[]int32{-1, 1 << 20}, false, ""},
	}
	for _, tc := range tests {
		if got := tok.Decode(tc.ids, tc.special); got != tc.want {
			t.Errorf("Decode(%v, %v) = %q, want %q", tc.ids, tc.special, got, tc.want)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := mustNew(t, bpeVocab("falcon", []string{"Ġ t", "h e", "Ġt he"}, "Ġt", "he", "Ġthe"))
	const text = "the cat, 12345 the dog!! \n\n x"
	want := tok.Encode(text, false, false)
	done := make(chan []int32)
	for range 4 {
		go func() {
			var got []int32
			for range 50 {
				got = tok.Encode(text, false, false)
			}
			done <- got
		}()
	}
	for range 4 {
		if got := <-done; !slices.Equal(got, want) {
			t.Errorf("concurrent Encode = %v, want %v", got, want)
		}
	}
}

// TestSpecialIDOutOfVocab: a special token id inside the uint32 range but
// outside the vocabulary refuses the tokenizer, naming the key, rather than
// keeping the default silently; "none" (0xFFFFFFFF) keeps the default.
func TestSpecialIDOutOfVocab(t *testing.T) {
	for k, key := range specialKeys {
		v := spmVocab(nil)
		v.IDs = map[Special]uint64{Special(k): 70000}
		_, err := NewFromVocab(v)
		if err == nil || !strings.Contains(err.Error(), "tokenizer.ggml."+key) || !strings.Contains(err.Error(), "outside the vocabulary") {
			t.Errorf("%s = 70000: %v", key, err)
		}
	}
}
