// fuzz_test.go: Encode never panics, returns valid ids, and round-trips
// through Decode and the streaming Decoder: Decode(Encode(x)) == x for valid
// UTF-8 wherever the tokenizer is lossless. Each input runs one tokenizer,
// chosen by its last argument (which, modulo the number of tokenizers, in
// the sorted order of their names), so the fuzzer mutates the choice like
// the text and every tokenizer is fuzzed; every seed is added once per
// tokenizer. Seeds: testdata/fuzz/FuzzEncode (each input kept once per
// tokenizer), llama.cpp's test inputs for the golden vocabularies and the
// golden prompts.

package tokenizer

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flowinfer/flowinfer/internal/golden"
)

// fuzzTokenizers returns hand-built SPM and BPE tokenizers, plus the golden
// stories260K and GPT-2 ones when the goldens are present.
func fuzzTokenizers(t testing.TB) map[string]*Tokenizer {
	toks := map[string]*Tokenizer{}
	build := func(name string, v *Vocab) {
		tok, err := NewFromVocab(v)
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tok
	}
	spm := spmVocab(map[string]float32{"\u2581": -1, "a": -2, "\u2581a": -1.5, "ab": -3})
	addToken(spm, "<tool>", TypeUserDefined)
	build("spm", spm)
	bpe := bpeVocab("llama-bpe", []string{"Ġ t", "h e", "Ġt he"}, "Ġt", "he", "Ġthe")
	addToken(bpe, "<|eot_id|>", TypeControl)
	build("bpe", bpe)

	wd, _ := os.Getwd()
	for dir := wd; ; dir = filepath.Dir(dir) {
		g := filepath.Join(dir, "shared", "golden")
		if _, err := os.Stat(g); err == nil {
			toks["stories260K"] = loadTokenizer(t, filepath.Join(g, "models", "stories260K.gguf"))
			toks["gpt-2"] = loadTokenizer(t, filepath.Join(g, "vocab", "ggml-vocab-gpt-2.gguf"))
			toks["falcon"] = loadTokenizer(t, filepath.Join(g, "vocab", "ggml-vocab-falcon.gguf"))
			toks["deepseek-llm"] = loadTokenizer(t, filepath.Join(g, "vocab", "ggml-vocab-deepseek-llm.gguf"))
			break
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return toks
}

// llamaText is text as llama.cpp's BPE pre-tokenizer sees it: every byte
// that does not start a complete UTF-8 sequence becomes U+FFFD.
func llamaText(s string) string {
	var b []byte
	for _, r := range appendCpts(nil, s) {
		b = appendUTF8(b, r)
	}
	return string(b)
}

// coversBytes reports whether a byte-level BPE vocabulary has a token for
// the byte image of every byte of s.
func (t *Tokenizer) coversBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if _, ok := t.ids[byteRuneUTF8[s[i]]]; !ok {
			return false
		}
	}
	return true
}

func FuzzEncode(f *testing.F) {
	toks := fuzzTokenizers(f)
	names := slices.Sorted(maps.Keys(toks))
	add := func(text string, addSpecial, parseSpecial bool) {
		for i := range names {
			f.Add(text, addSpecial, parseSpecial, uint8(i))
		}
	}
	add("Hello world", false, false)
	add("<s> x </s>", true, true)
	// llama.cpp's tokenizer test inputs (golden vocab/*.gguf.inp) and the
	// golden prompts, read at test time.
	if g := golden.Dir(f); g != "" {
		inps, _ := filepath.Glob(filepath.Join(g, "vocab", "*.gguf.inp"))
		prompts, _ := filepath.Glob(filepath.Join(g, "prompts", "*.txt"))
		for _, p := range append(inps, prompts...) {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			for _, s := range strings.Split(string(b), "\n__ggml_vocab_test__\n") {
				add(s, false, false)
			}
		}
	}
	f.Fuzz(func(t *testing.T, text string, addSpecial, parseSpecial bool, which uint8) {
		name := names[int(which)%len(names)]
		tok := toks[name]
		got := tok.Encode(text, addSpecial, parseSpecial)
		for _, id := range got {
			if id < 0 || int(id) >= tok.NVocab() {
				t.Fatalf("%s: id %d out of range", name, id)
			}
		}
		if addSpecial && tok.AddBOS() && (len(got) == 0 || got[0] != tok.BOS()) {
			t.Fatalf("%s: no BOS: %v", name, got)
		}

		// the streaming decoder emits exactly the valid-UTF-8 form of
		// the concatenated pieces
		var raw []byte
		var streamed strings.Builder
		d := tok.NewDecoder(true)
		for _, id := range got {
			raw = tok.AppendPiece(raw, id, true)
			streamed.WriteString(d.Add(id))
		}
		streamed.WriteString(d.Flush())
		if streamed.String() != validString(raw) {
			t.Fatalf("%s: streamed %q, pieces %q", name, streamed.String(), raw)
		}

		// round trip where the tokenizer is lossless
		if parseSpecial || addSpecial || strings.Contains(text, "<tool>") {
			return
		}
		ids := tok.Encode(text, false, false)
		if tok.typ == modelSPM && text != "" {
			// cutting at spaces changes nothing
			ref := tok.encodeSPMChunk(appendEscaped([]byte("\u2581"), text), nil, new(encodeScratch))
			if !slices.Equal(ids, ref) {
				t.Fatalf("%s: %q: cut %v, whole %v", name, text, ids, ref)
			}
		}
		dec := tok.Decode(ids, false)
		want := text
		switch tok.typ {
		case modelSPM:
			// U+2581 decodes as a space; with invalid UTF-8, SPM's
			// characters (by lead byte) can swallow bytes of the next
			// escaped space, which then decode as U+2581 (llama.cpp too)
			if strings.Contains(text, "\u2581") || !utf8.ValidString(text) {
				return
			}
		case modelBPE:
			want = llamaText(text)
			if !tok.coversBytes(want) {
				return // bytes without a token are dropped (llama.cpp too)
			}
			if tok.clean {
				want = string(cleanSpaces([]byte(want)))
			}
		}
		if dec != want {
			t.Fatalf("%s: Decode(Encode(%q)) = %q, want %q", name, text, dec, want)
		}
	})
}
