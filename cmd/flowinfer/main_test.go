package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/internal/golden"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flowinfer-cli")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "flowinfer")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// flowinfer runs the binary with a private cache dir and returns stdout and
// stderr.
func flowinfer(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func goldenModel(t *testing.T, name string) (string, *golden.Manifest) {
	dir, man := golden.Load(t)
	return filepath.Join(dir, "models", name), man
}

func findCase(man *golden.Manifest, id string) golden.Case {
	for _, c := range man.Cases {
		if c.ID == id {
			return c
		}
	}
	return golden.Case{}
}

// TestRunStory: `run` with greedy sampling prints the prompt and llama.cpp's
// continuation, then llama.cpp-style timings and stage lines on stderr.
func TestRunStory(t *testing.T) {
	m, man := goldenModel(t, "stories260K.gguf")
	c := findCase(man, "stories260K__P1")
	out, errOut, err := flowinfer(t, "run", "-m", m, "-p", "Once upon a time", "-n", "48", "--temp", "0", "--ignore-eos")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if want := " Once upon a time" + c.GenText + "\n"; out != want {
		t.Errorf("stdout:\n%q\nwant\n%q", out, want)
	}
	for _, s := range []string{"load time", "prompt eval time", "/     5 tokens", "eval time", "/    47 runs", "stage compute", "stage sampler"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut)
		}
	}
}

// TestTokenize: ids of the golden prompts, without BOS unless asked.
func TestTokenize(t *testing.T) {
	m, man := goldenModel(t, "stories260K.gguf")
	p := man.Prompts["P2"]
	ids := func(toks []int32) string {
		s := make([]string, len(toks))
		for i, x := range toks {
			s[i] = strconv.Itoa(int(x))
		}
		return "[" + strings.Join(s, ", ") + "]\n"
	}
	out, errOut, err := flowinfer(t, "tokenize", "-m", m, "-p", p.Text, "--add-bos")
	if err != nil || out != ids(p.TokenIDs) {
		t.Errorf("with --add-bos: %q (%v %s), want %q", out, err, errOut, ids(p.TokenIDs))
	}
	out, _, _ = flowinfer(t, "tokenize", "-m", m, "-p", p.Text)
	if out != ids(p.TokenIDs[1:]) {
		t.Errorf("without BOS: %q", out)
	}
}

// TestPerplexityCommand prints llama-perplexity's figure for stories260K
// with an F32 KV cache (-ctk f32 -ctv f32, as the golden was made).
func TestPerplexityCommand(t *testing.T) {
	m, man := goldenModel(t, "stories260K.gguf")
	dir, _ := golden.Load(t)
	out, errOut, err := flowinfer(t, "perplexity", "-m", m, "-f", filepath.Join(dir, man.Perplexity.Text), "-c", "128", "-ctk", "f32", "-ctv", "f32")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(out, "Final estimate: PPL = 6.0079 +/- 0.30432") {
		t.Errorf("output:\n%s", out)
	}
}

// TestPerplexityKLDCommand: --kl-divergence-base saves llama-perplexity's
// base file while printing the same perplexity; --kl-divergence against it
// prints llama-perplexity's per-chunk lines and statistics; a base that does
// not fit the run is an error naming why.
func TestPerplexityKLDCommand(t *testing.T) {
	m, man := goldenModel(t, "stories260K.gguf")
	dir, _ := golden.Load(t)
	text := filepath.Join(dir, man.Perplexity.Text)
	base := filepath.Join(t.TempDir(), "base.kld")
	out, errOut, err := flowinfer(t, "perplexity", "-m", m, "-f", text, "-c", "128", "--kl-divergence-base", base, "-ctk", "f32", "-ctv", "f32")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(out, "Final estimate: PPL = 6.0079 +/- 0.30432") {
		t.Errorf("output while saving the base:\n%s", out)
	}
	if st, err := os.Stat(base); err != nil || st.Size() != 8+12+4*25*128+25*63*(512+4)*2 {
		t.Fatalf("base: %v %v", st, err)
	}
	q8 := filepath.Join(dir, "models", "stories260K-q8_0.gguf")
	out, errOut, err = flowinfer(t, "perplexity", "-m", q8, "-f", text, "--kl-divergence-base", base, "--kl-divergence", "-ctk", "f32", "-ctv", "f32")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for _, want := range []string{
		"\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n   1       4.6",
		"\n  25       6.01",
		"\n====== Perplexity statistics ======\nMean PPL(Q)                   :   6.01",
		"\nMean PPL(base)                :   6.00789",
		"\n====== KL divergence statistics ======\nMean    KLD:   0.0008",
		"\n====== Token probability statistics ======\n",
		"\nSame top p: 98.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--kl-divergence output lacks %q:\n%s", want, out)
		}
	}
	trunc := filepath.Join(t.TempDir(), "cut.kld")
	b, _ := os.ReadFile(base)
	if err := os.WriteFile(trunc, b[:len(b)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.txt")
	if err := os.WriteFile(other, []byte("Once upon a time there was a cat."), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kl-divergence"}, "--kl-divergence needs --kl-divergence-base"},
		{[]string{"--kl-divergence", "--kl-divergence-base", base, "-c", "64"}, "computed with n_ctx 128"},
		{[]string{"--kl-divergence", "--kl-divergence-base", trunc}, "truncated"},
		{[]string{"--kl-divergence", "--kl-divergence-base", text}, "does not start with"},
		{[]string{"--kl-divergence", "--kl-divergence-base", base, "-f", other}, "the text has"},
		{[]string{"--chunks", "0", "-f", text}, "--chunks 0"},
		{nil, "-f FILE is required"},
	} {
		_, errOut, err := flowinfer(t, append([]string{"perplexity", "-m", q8}, c.args...)...)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %v, stderr %q, want %q", c.args, err, errOut, c.want)
		}
	}
}

// TestLogitsOut: --logits-out writes one row per prompt position, then one
// per generated token fed back, matching the goldens' rows (made with an
// F32 KV cache).
func TestLogitsOut(t *testing.T) {
	m, man := goldenModel(t, "stories260K.gguf")
	dir, _ := golden.Load(t)
	c := findCase(man, "stories260K__P1")
	path := filepath.Join(t.TempDir(), "logits.f32")
	if _, errOut, err := flowinfer(t, "run", "-m", m, "-p", c.PromptText, "-n", "4", "--temp", "0", "--logits-out", path, "-ctk", "f32", "-ctv", "f32"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	got, err := golden.ReadF32(path)
	if err != nil {
		t.Fatal(err)
	}
	V := c.NVocab
	n := len(c.PromptTokens)
	if len(got) != (n+3)*V {
		t.Fatalf("%d rows, want %d prompt + 3 decode rows", len(got)/V, n)
	}
	want, _ := golden.ReadF32(filepath.Join(dir, c.PromptLogits))
	wantGen, _ := golden.ReadF32(filepath.Join(dir, c.GenLogits))
	want = append(want, wantGen[V:4*V]...)
	maxd := 0.0
	for i := range got {
		maxd = math.Max(maxd, math.Abs(float64(got[i]-want[i])))
	}
	if maxd > 2e-4 {
		t.Errorf("max |Δ| %.3g against the goldens", maxd)
	}
}

// TestBadModelOneLine: a missing or broken model is one clear error line.
func TestBadModelOneLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00garbage"), 0o644)
	for _, path := range []string{filepath.Join(t.TempDir(), "missing.gguf"), bad} {
		_, errOut, err := flowinfer(t, "run", "-m", path, "-p", "x")
		if err == nil {
			t.Errorf("%s: no error", path)
		}
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "flowinfer: error: ") || strings.Contains(errOut, "goroutine") {
			t.Errorf("%s: stderr is not one error line:\n%s", path, errOut)
		}
	}
}

// TestHFDownload: --hf fetches from a hub (a local server here), verifies
// the sha256 and runs the model; a second run uses the cache.
func TestHFDownload(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	data, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/karpathy/tinyllamas/resolve/main/stories260K.gguf" {
			http.NotFound(w, r)
			return
		}
		hits++
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		http.ServeContent(w, r, "", timeLess, bytes.NewReader(data))
	}))
	defer srv.Close()
	cache := t.TempDir()
	run := func() (string, string, error) {
		cmd := exec.Command(binPath, "run", "--hf", "karpathy/tinyllamas:stories260K.gguf", "--hf-endpoint", srv.URL, "-p", "Once upon a time", "-n", "8", "--temp", "0")
		cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+cache)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	for i := range 2 {
		out, errOut, err := run()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, errOut)
		}
		if !strings.HasPrefix(out, " Once upon a time, there was a little girl") {
			t.Errorf("run %d: %q", i, out)
		}
	}
	if hits != 1 {
		t.Errorf("%d downloads, want 1 (second run from the cache)", hits)
	}
	_, errOut, err := flowinfer(t, "run", "--hf", "karpathy/tinyllamas:missing.gguf", "--hf-endpoint", srv.URL, "-p", "x")
	if err == nil || !strings.Contains(errOut, "flowinfer: error:") {
		t.Errorf("missing file: %v %s", err, errOut)
	}
}

var timeLess = time.Time{}

// TestDemoWithoutModel: with no -m, run builds the deterministic demo model
// into the cache, labels it as random weights and generates.
func TestDemoWithoutModel(t *testing.T) {
	out, errOut, err := flowinfer(t, "run", "-p", "Once upon a time", "-n", "8", "--temp", "0")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "RANDOM") || !strings.Contains(errOut, "--hf") {
		t.Errorf("demo not labelled:\n%s", errOut)
	}
	if !strings.HasPrefix(out, " Once upon a time") || len(out) <= len(" Once upon a time\n") {
		t.Errorf("stdout %q", out)
	}
}

// TestChatREPL: turns, /reset and /exit through stdin. With -c 512 three
// turns fit; with the model's own 128-token context the second turn does
// not, which is reported and the session goes on after /reset.
func TestChatREPL(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	chatRun := func(args ...string) (string, string) {
		cmd := exec.Command(binPath, append([]string{"chat", "-m", m, "--temp", "0", "-n", "12", "--system", "Tell a story."}, args...)...)
		cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
		cmd.Stdin = strings.NewReader("Once upon a time\nThe end\n/reset\nHello\n/exit\n")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, errb.String())
		}
		return out.String(), errb.String()
	}
	out, errOut := chatRun("-c", "512")
	if !strings.Contains(errOut, "no chat template; using ChatML") || !strings.Contains(errOut, "(conversation reset)") {
		t.Errorf("stderr:\n%s", errOut)
	}
	if lines := strings.Count(out, "\n"); lines != 3 {
		t.Errorf("expected three replies, stdout:\n%s", out)
	}
	out, errOut = chatRun()
	if !strings.Contains(errOut, "does not fit in the context of 128") || !strings.Contains(errOut, "/reset to start over") {
		t.Errorf("overflow not reported:\n%s", errOut)
	}
	if lines := strings.Count(out, "\n"); lines != 2 {
		t.Errorf("expected two replies (turn 2 overflows), stdout:\n%s", out)
	}
}

// TestTokenizeVocabOnly: `tokenize` needs only the tokenizer, so llama.cpp's
// vocab-only test files (no tensors, architectures we do not run) tokenize,
// matching their test vectors.
func TestTokenizeVocabOnly(t *testing.T) {
	dir, _ := golden.Load(t)
	files, _ := filepath.Glob(filepath.Join(dir, "vocab", "*.gguf"))
	if len(files) == 0 {
		t.Skip("no vocab files")
	}
	n := 0
	for _, f := range files {
		inp, err1 := os.ReadFile(f + ".inp")
		out, err2 := os.ReadFile(f + ".out")
		if err1 != nil || err2 != nil {
			continue
		}
		cases := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
		want := strings.Split(string(out), "\n")
		for i, c := range cases {
			if c != "Hello world" || i >= len(want) {
				continue
			}
			n++
			got, errOut, err := runEnv(t, nil, "tokenize", "-m", f, "--prompt", c)
			if err != nil {
				t.Errorf("%s: %v\n%s", filepath.Base(f), err, errOut)
				continue
			}
			g := strings.NewReplacer("[", "", "]", "", ",", "").Replace(strings.TrimSpace(got))
			if g != strings.TrimSpace(want[i]) {
				t.Errorf("%s: %q -> %s, want %s", filepath.Base(f), c, g, want[i])
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d vocab files have a \"Hello world\" case", n)
	}
	t.Logf("%d vocab files", n)
}
