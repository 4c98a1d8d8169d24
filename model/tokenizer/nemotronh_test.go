// nemotronh_test.go: Nemotron-H's pre-tokenizer against llama-tokenize.

package tokenizer

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// nemotronHWrite, when set, makes TestNemotronHPreTokenizer write its
// vocabulary and one file per input to that directory (the inputs of
// llama-tokenize in testdata/nemotronh/README.md) instead of testing.
var nemotronHWrite = flag.String("nemotronh-write", "", "write the Nemotron-H pre-tokenizer golden's vocabulary and inputs to this directory and skip the test")

// nemotronHPre is the tokenizer.ggml.pre of the Nemotron-H GGUFs
// (Nemotron 3 Nano 30B-A3B among them): convert_hf_to_gguf's hash of
// their tokenizer is pixtral-12b's, and llama.cpp's vocabulary loader maps
// "pixtral" to LLAMA_VOCAB_PRE_TYPE_LLAMA3 (the Llama 3 regex, digits in
// runs of up to three, ignore_merges, BOS added by default).
const nemotronHPre = "pixtral"

// nemotronHVocab writes GPT-2's vocabulary (byte-level BPE, as Nemotron-H's
// 131072-token one; the golden set's ggml-vocab-gpt-2.gguf) with
// tokenizer.ggml.pre set to nemotronHPre, every other key as it is.
func nemotronHVocab(t *testing.T, path string) { preVocab(t, path, nemotronHPre) }

// preVocab writes the golden set's ggml-vocab-gpt-2.gguf with
// tokenizer.ggml.pre set to pre, every other key as it is.
func preVocab(t *testing.T, path, pre string) {
	t.Helper()
	src, err := gguf.Open(filepath.Join(goldenDir(t), "vocab", "ggml-vocab-gpt-2.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := gguf.NewWriter()
	w.CopyKVs(src, nil)
	w.Set("tokenizer.ggml.pre", gguf.String(pre))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNemotronHPreTokenizer: Nemotron-H's pre-tokenizer ("pixtral") on
// GPT-2's vocabulary gives llama-tokenize's ids, BOS included, for every
// input of testdata/nemotronh/inputs.json (contractions in both cases,
// digit runs, non-ASCII digits and letters, combining marks, emoji,
// whitespace runs, CRLF, Unicode spaces, code); see the README for how
// ids.txt was made. Under each pre-tokenizer it could be mistaken for,
// some of the same inputs give other ids.
func TestNemotronHPreTokenizer(t *testing.T) {
	dir := filepath.Join("testdata", "nemotronh")
	raw, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	if err := json.Unmarshal(raw, &inputs); err != nil {
		t.Fatalf("inputs.json: %v", err)
	}
	if *nemotronHWrite != "" {
		out := *nemotronHWrite
		nemotronHVocab(t, filepath.Join(out, "ggml-vocab-nemotronh.gguf"))
		for i, s := range inputs {
			if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("case-%02d.txt", i)), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Skipf("wrote the vocabulary and %d inputs to %s", len(inputs), out)
	}
	want := readIDLines(t, filepath.Join(dir, "ids.txt"))
	if len(want) != len(inputs) {
		t.Fatalf("ids.txt has %d lines for %d inputs", len(want), len(inputs))
	}
	path := filepath.Join(t.TempDir(), "ggml-vocab-nemotronh.gguf")
	nemotronHVocab(t, path)
	tok := loadTokenizer(t, path)
	if tok.pre.kind != preLlama3 || !tok.pre.ignoreMerges {
		t.Errorf("%q: pre-tokenizer kind %d, ignore_merges %v; want llama.cpp's LLAMA3 with ignore_merges", nemotronHPre, tok.pre.kind, tok.pre.ignoreMerges)
	}
	for i, s := range inputs {
		if got := tok.Encode(s, true, false); !equalIDs(got, want[i]) {
			t.Errorf("input %d %q:\n got %v\nwant %v", i, s, got, want[i])
		}
		if len(want[i]) == 0 || want[i][0] != tok.BOS() {
			t.Errorf("input %d: llama-tokenize's ids %v do not start with BOS %d", i, want[i], tok.BOS())
		}
	}
	// the inputs tell the Llama 3 regex from the ones it could be mistaken
	// for: GPT-2's (a name llama.cpp does not know falls back to its
	// default, not this), tekken's (the regex of Nemotron-H's own
	// tokenizer.json: llama.cpp does not use it for "pixtral"), Qwen 2's
	// (single digits) and GPT-4o's (words split at case changes)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, pre := range []string{"gpt-2", "tekken", "qwen2", "gpt-4o"} {
		v, err := ReadVocab(f)
		if err != nil {
			t.Fatal(err)
		}
		v.Pre = pre
		other := mustNew(t, v)
		var differ []int
		for i, s := range inputs {
			if len(want[i]) > 0 && !equalIDs(other.Encode(s, false, false), want[i][1:]) {
				differ = append(differ, i)
			}
		}
		t.Logf("%q gives other ids (without BOS) on inputs %v", pre, differ)
		if len(differ) == 0 {
			t.Errorf("%q gives llama-tokenize's ids on every input: the inputs do not tell it from %q", pre, nemotronHPre)
		}
	}
}

// readIDLines reads one line of space-separated token ids per input.
func readIDLines(t *testing.T, path string) [][]int32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var all [][]int32
	for n, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		ids := []int32{}
		for _, f := range strings.Fields(line) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s line %d: %v", path, n+1, err)
			}
			ids = append(ids, int32(id))
		}
		all = append(all, ids)
	}
	return all
}

// qwen35Write, when set, makes TestQwen35PreTokenizer write its vocabulary
// and one file per input to that directory instead of testing.
var qwen35Write = flag.String("qwen35-write", "", "write the qwen35 pre-tokenizer golden's vocabulary and inputs to this directory and skip the test")

// TestQwen35PreTokenizer: Qwen 3.5's pre-tokenizer ("qwen35": llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_QWEN35, letters with their combining marks, single
// digits) on GPT-2's vocabulary gives llama-tokenize's ids for every input
// of testdata/nemotronh/inputs.json and testdata/qwen35/marks.json;
// testdata/qwen35/README.md says how its ids.txt was made.
func TestQwen35PreTokenizer(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "nemotronh", "inputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inputs, marks []string
	if err := json.Unmarshal(raw, &inputs); err != nil {
		t.Fatalf("inputs.json: %v", err)
	}
	// letters followed by combining marks: where qwen35's regex and
	// Qwen 2's split differently
	raw, err = os.ReadFile(filepath.Join("testdata", "qwen35", "marks.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &marks); err != nil {
		t.Fatalf("marks.json: %v", err)
	}
	inputs = append(inputs, marks...)
	if *qwen35Write != "" {
		out := *qwen35Write
		preVocab(t, filepath.Join(out, "ggml-vocab-qwen35.gguf"), "qwen35")
		for i, s := range inputs {
			if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("case-%02d.txt", i)), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Skipf("wrote the vocabulary and %d inputs to %s", len(inputs), out)
	}
	want := readIDLines(t, filepath.Join("testdata", "qwen35", "ids.txt"))
	if len(want) != len(inputs) {
		t.Fatalf("ids.txt has %d lines for %d inputs", len(want), len(inputs))
	}
	path := filepath.Join(t.TempDir(), "ggml-vocab-qwen35.gguf")
	preVocab(t, path, "qwen35")
	tok := loadTokenizer(t, path)
	if tok.pre.kind != preQwen35 {
		t.Errorf("qwen35: pre-tokenizer kind %d, want preQwen35", tok.pre.kind)
	}
	for i, s := range inputs {
		if got := tok.Encode(s, true, false); !equalIDs(got, want[i]) {
			t.Errorf("input %d %q:\n got %v\nwant %v", i, s, got, want[i])
		}
	}
	// Qwen 2's regex splits letters from their combining marks where
	// qwen35's keeps them together, but GPT-2's merges never join a letter
	// to a mark's bytes, so on this vocabulary both give the same ids
	// (llama-tokenize too, with tokenizer.ggml.pre = qwen2: checked on
	// marks.json); the splits themselves are checked against the regex,
	// which is llama.cpp's character for character, in TestSplitCustomMatchesRegex.
}
