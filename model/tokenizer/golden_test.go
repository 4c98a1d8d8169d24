// golden_test.go: llama.cpp's tokenizer test vectors and the stories260K
// prompts and generations from the golden set (../../shared/golden).

package tokenizer

import (
	"encoding/hex"
	"encoding/json"
	"github.com/flowinfer/flowinfer/internal/golden"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// goldenDir finds shared/golden by walking up from the working directory.
// Missing goldens fail the test under CI=true and skip it otherwise.
func goldenDir(t testing.TB) string {
	t.Helper()
	return golden.Dir(t)
}

// loadTokenizer opens a GGUF file and builds its tokenizer.
func loadTokenizer(t testing.TB, path string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := New(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tok
}

type vocabCase struct {
	text string
	want []int32
}

// readVocabCases parses X.gguf.inp / X.gguf.out like llama.cpp's
// tests/test-tokenizer-0.cpp.
func readVocabCases(t testing.TB, path string) []vocabCase {
	t.Helper()
	inp, err := os.ReadFile(path + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(path + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	var texts []string
	for s := string(inp); s != ""; {
		i := strings.Index(s, sep)
		if i < 0 {
			texts = append(texts, s)
			break
		}
		texts = append(texts, s[:i])
		s = s[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d inputs, %d outputs", path, len(texts), len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i, line := range lines {
		cases[i].text = texts[i]
		for _, f := range strings.Fields(line) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", path, i+1, err)
			}
			cases[i].want = append(cases[i].want, int32(id))
		}
	}
	return cases
}

func TestVocabVectors(t *testing.T) {
	dir := filepath.Join(goldenDir(t), "vocab")
	files, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vocab files in %s (%v)", dir, err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		t.Run(name, func(t *testing.T) {
			tok := loadTokenizer(t, path)
			cases := readVocabCases(t, path)
			pass := 0
			for i, c := range cases {
				got := tok.Encode(c.text, false, false)
				if !equalIDs(got, c.want) {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, c.text, got, c.want)
					continue
				}
				pass++
				// round trip: the pieces give back the text, up to what
				// the vocabulary's detokenizer cleans up
				want := c.text
				if tok.clean {
					want = string(cleanSpaces([]byte(want)))
				}
				if dec := tok.Decode(got, false); dec != want {
					t.Errorf("case %d: Decode(Encode(%q)) = %q", i, c.text, dec)
				}
			}
			t.Logf("%s: %d/%d vectors match", name, pass, len(cases))
		})
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type manifest struct {
	Prompts map[string]struct {
		File     string   `json:"file"`
		TokenIDs []int32  `json:"token_ids"`
		Pieces   []string `json:"pieces_hex"`
	} `json:"prompts"`
	Cases []struct {
		ID         string   `json:"id"`
		Model      string   `json:"model"`
		PromptIDs  []int32  `json:"prompt_token_ids"`
		PromptFile string   `json:"prompt_file"`
		GenIDs     []int32  `json:"gen_token_ids"`
		GenPieces  []string `json:"gen_pieces_hex"`
		GenText    string   `json:"gen_text"`
		GenTextHex string   `json:"gen_text_hex"`
	} `json:"cases"`
}

func readManifest(t testing.TB, dir string) *manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func TestStoriesPrompts(t *testing.T) {
	dir := goldenDir(t)
	tok := loadTokenizer(t, filepath.Join(dir, "models", "stories260K.gguf"))
	m := readManifest(t, dir)
	if len(m.Prompts) != 3 {
		t.Fatalf("manifest has %d prompts, want 3", len(m.Prompts))
	}
	for id, p := range m.Prompts {
		t.Run(id, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(dir, p.File))
			if err != nil {
				t.Fatal(err)
			}
			got := tok.Encode(string(text), true, true)
			if !equalIDs(got, p.TokenIDs) {
				t.Fatalf("Encode:\n got %v\nwant %v", got, p.TokenIDs)
			}
			for i, id := range got {
				// the manifest renders specials (BOS as "<s>")
				if h := hex.EncodeToString(tok.Piece(id, true)); h != p.Pieces[i] {
					t.Errorf("Piece(%d) = %s, want %s", id, h, p.Pieces[i])
				}
			}
			// Decode keeps the space after BOS, drops it without BOS
			if dec := tok.Decode(got, false); dec != " "+string(text) {
				t.Errorf("Decode = %q", dec)
			}
			if dec := tok.Decode(got[1:], false); dec != string(text) {
				t.Errorf("Decode without BOS = %q", dec)
			}
		})
	}
}

func TestGoldenCases(t *testing.T) {
	dir := goldenDir(t)
	m := readManifest(t, dir)
	toks := map[string]*Tokenizer{}
	for _, c := range m.Cases {
		t.Run(c.ID, func(t *testing.T) {
			tok := toks[c.Model]
			if tok == nil {
				tok = loadTokenizer(t, filepath.Join(dir, c.Model))
				toks[c.Model] = tok
			}
			text, err := os.ReadFile(filepath.Join(dir, c.PromptFile))
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Encode(string(text), true, true); !equalIDs(got, c.PromptIDs) {
				t.Errorf("prompt ids:\n got %v\nwant %v", got, c.PromptIDs)
			}
			var all []byte
			dec := tok.NewDecoder(false)
			var streamed strings.Builder
			for i, id := range c.GenIDs {
				p := tok.Piece(id, false)
				if h := hex.EncodeToString(p); h != c.GenPieces[i] {
					t.Errorf("step %d: Piece(%d) = %s, want %s", i, id, h, c.GenPieces[i])
				}
				all = append(all, p...)
				streamed.WriteString(dec.Add(id))
			}
			streamed.WriteString(dec.Flush())
			if h := hex.EncodeToString(all); h != c.GenTextHex {
				t.Errorf("generated bytes %s, want %s", h, c.GenTextHex)
			}
			if streamed.String() != c.GenText {
				t.Errorf("streamed text %q, want %q", streamed.String(), c.GenText)
			}
		})
	}
}
