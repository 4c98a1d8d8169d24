package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/flowinfer/flowinfer/configs"
)

// runEnv runs the binary with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir()), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func writeProfile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigPrecedence: flag > config file > environment > default, for a
// pipeline key (threads), a sampling key of another command's flag set
// (top-k) and a `flags:` entry; `config show` names each value's source.
func TestConfigPrecedence(t *testing.T) {
	file := writeProfile(t, "pipeline:\n  threads: 3\nsampling:\n  top_k: 7\n")
	flagsFile := writeProfile(t, "flags:\n  top-k: 9\n")
	tests := []struct {
		name        string
		env, args   []string
		threads     int
		threadsSrc  string
		topK        int
		topKComment string
	}{
		{"default", nil, nil, 0, "", 40, ""},
		{"environment", []string{"FLOWINFER_THREADS=5"}, nil, 5, "env FLOWINFER_THREADS", 40, ""},
		{"file", nil, []string{"--config", file}, 3, "file", 7, "file"},
		{"file beats environment", []string{"FLOWINFER_THREADS=5"}, []string{"--config", file}, 3, "file", 7, "file"},
		{"flag beats file and environment", []string{"FLOWINFER_THREADS=5"}, []string{"--config", file, "--threads", "6", "--top-k", "8"}, 6, "flag --threads", 8, "flag --top-k"},
		{"flags section", nil, []string{"--config", flagsFile}, 0, "", 9, "file (flags.top-k)"},
		{"builtin profile", nil, []string{"--config", "builtin:cpu-2core"}, 2, "file", 40, "file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runEnv(t, tc.env, append([]string{"config", "show"}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			var c configs.Config
			if err := yaml.Unmarshal([]byte(out), &c); err != nil {
				t.Fatalf("output is not a profile: %v\n%s", err, out)
			}
			if c.Pipeline.Threads != tc.threads || c.Sampling.TopK != tc.topK {
				t.Errorf("threads %d, top_k %d; want %d, %d\n%s", c.Pipeline.Threads, c.Sampling.TopK, tc.threads, tc.topK, out)
			}
			comment := func(key string) string {
				for _, line := range strings.Split(out, "\n") {
					if k, rest, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == key {
						_, c, _ := strings.Cut(rest, "# ")
						return c
					}
				}
				return "?"
			}
			if got := comment("threads"); got != tc.threadsSrc {
				t.Errorf("threads source %q, want %q", got, tc.threadsSrc)
			}
			if got := comment("top_k"); got != tc.topKComment {
				t.Errorf("top_k source %q, want %q", got, tc.topKComment)
			}
			// The printed configuration is itself a valid profile.
			if _, err := configs.Load(strings.NewReader(out)); err != nil {
				t.Errorf("config show output does not load: %v", err)
			}
		})
	}
}

// TestConfigErrors: unknown keys and unknown flag names are errors with a
// clear one-line message.
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, profile string
		want          []string
	}{
		{"unknown key", "pipeline:\n  treads: 2\n", []string{"line 2", "treads"}},
		{"unknown flag", "flags:\n  no-such-flag: 1\n", []string{"no command has a flag --no-such-flag"}},
		{"flag twice", "pipeline:\n  threads: 2\nflags:\n  threads: 3\n", []string{"flags.threads: also set as pipeline.threads"}},
		{"bad value", "pipeline:\n  io_engine: aio\n", []string{"pipeline.io_engine"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeProfile(t, tc.profile)
			_, errOut, err := runEnv(t, nil, "config", "show", "--config", p)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(errOut, "goroutine") {
				t.Errorf("stack trace on stderr:\n%s", errOut)
			}
		})
	}
	if _, errOut, err := runEnv(t, nil, "config", "show", "--config", "builtin:nope"); err == nil || !strings.Contains(errOut, "cpu-2core") {
		t.Errorf("unknown builtin: %v %s", err, errOut)
	}
}

// TestProfileDrivesRun: a profile's sampling section sets `run`'s flags:
// greedy with a token limit reproduces llama.cpp's continuation.
func TestProfileDrivesRun(t *testing.T) {
	m, man := goldenModel(t, "stories260K.gguf")
	c := findCase(man, "stories260K__P1")
	p := writeProfile(t, "sampling:\n  temperature: 0\n  max_tokens: 12\nflags:\n  ignore-eos: true\n  no-display-prompt: true\n")
	out, errOut, err := runEnv(t, nil, "run", "--config", p, "-m", m, "-p", c.PromptText)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.HasPrefix(c.GenText, strings.TrimSuffix(out, "\n")) || len(out) < 20 {
		t.Errorf("run with profile printed %q, want a prefix of %q", out, c.GenText)
	}
	if !strings.Contains(errOut, "/    11 runs") {
		t.Errorf("not 12 tokens:\n%s", errOut)
	}
}

// TestConfigDetect writes a profile that loads and describes this machine
// (measurements skipped: they are tested in package configs).
func TestConfigDetect(t *testing.T) {
	p := filepath.Join(t.TempDir(), "me.yaml")
	_, errOut, err := runEnv(t, nil, "config", "detect", "--no-measure", "-o", p)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	l, err := configs.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if l.Hardware.Cores < 1 || l.Hardware.RAM <= 0 || l.Pipeline.Threads != l.Hardware.Cores {
		t.Errorf("detected %+v", l.Hardware)
	}
	// Vulkan devices are listed through gpu/vk, or the note says why none.
	if !strings.Contains(errOut, "flowinfer: vulkan: GPU0: ") && !strings.Contains(errOut, "no Vulkan devices: vk: ") {
		t.Errorf("no Vulkan device line nor a reason for none:\n%s", errOut)
	}
	out, _, err := runEnv(t, nil, "config", "list")
	if err != nil || !strings.Contains(out, "builtin:laptop-8gb") {
		t.Errorf("config list: %v\n%s", err, out)
	}
}

// TestConfigShowPlan: `config show -m FILE` also prints the placement plan
// of the file's weights under the effective settings (a profile's
// ram_pool included), and allocates nothing (as --dry-run).
func TestConfigShowPlan(t *testing.T) {
	model, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	file := writeProfile(t, "pipeline:\n  ram_pool: 3300KiB\n")
	_, errOut, err := runEnv(t, nil, "config", "show", "--config", file, "-m", model)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "weights: budget 3.22MiB") || !strings.Contains(errOut, "expert cache") {
		t.Errorf("no plan for the profile's budget:\n%s", errOut)
	}
}
