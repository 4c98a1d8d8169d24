package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// TestGemma3Commands: gen writes the gemma3-small preset, bench measures it
// (llama-bench's model label "gemma3 ?B"/size from the layers), run
// generates greedily on it, and gen's rope flags replace a preset's
// scaling only when given.
func TestGemma3Commands(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "g3.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "gemma3-small", "--type", "Q4_K_M", "-o", out); err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	stdout, stderr, err := flowinfer(t, "bench", "-m", out, "-p", "160", "-n", "2", "-r", "1", "-t", "2")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "gemma3 ?B Q4_K - Medium") || !strings.Contains(stdout, "pp160") || !strings.Contains(stdout, "tg2") {
		t.Errorf("bench output:\n%s", stdout)
	}
	// a prompt longer than the window of 128, then greedy decoding
	prompt := strings.Repeat("the cat sat on the mat and ", 30)
	gen, stderr, err := flowinfer(t, "run", "-m", out, "-p", prompt, "-n", "8", "--temp", "0", "--no-display-prompt")
	if err != nil || gen == "" {
		t.Fatalf("run: %q %v\n%s", gen, err, stderr)
	}
	again, _, err := flowinfer(t, "run", "-m", out, "-p", prompt, "-n", "8", "--temp", "0", "--no-display-prompt")
	if err != nil || again != gen {
		t.Errorf("greedy runs differ: %q, %q (%v)", gen, again, err)
	}
	scaled := filepath.Join(dir, "scaled.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "gemma3-small", "--type", "F32", "--pure", "-o", scaled,
		"--rope-scaling", "linear", "--rope-factor", "2"); err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	for _, c := range []struct {
		path, want string
	}{{scaled, "2"}, {out, ""}} {
		f, err := gguf.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := f.Get("gemma3.rope.scaling.factor")
		f.Close()
		if got := map[bool]string{true: v.String(), false: ""}[ok]; got != c.want {
			t.Errorf("%s: rope.scaling.factor %q, want %q", filepath.Base(c.path), got, c.want)
		}
	}
}
