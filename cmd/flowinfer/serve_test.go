package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedLog is a log that a reader goroutine appends to.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs `flowinfer serve` on a free loopback port and returns
// its base URL once the model is loaded.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string, *lockedLog) {
	t.Helper()
	model, _ := goldenModel(t, "stories260K.gguf")
	return startServeModel(t, model, args...)
}

// startServeModel is startServe on another model file.
func startServeModel(t *testing.T, model string, args ...string) (*exec.Cmd, string, *lockedLog) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"serve", "-m", model, "--port", "0", "--temp", "0", "-c", "256"}, args...)...)
	cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	log := &lockedLog{}
	ready := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`serving .* on (http://[^ ]+) `)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.add(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
		}
		close(ready)
	}()
	select {
	case url, ok := <-ready:
		if !ok {
			t.Fatalf("server exited:\n%s", log)
		}
		return cmd, url, log
	case <-time.After(30 * time.Second):
		t.Fatalf("server not ready:\n%s", log)
	}
	return nil, "", nil
}

// TestServe: the command serves, honours --api-key and --alias, and on
// SIGTERM finishes the stream in flight before exiting cleanly.
func TestServe(t *testing.T) {
	cmd, url, log := startServe(t, "--api-key", "k", "--alias", "tiny", "--parallel", "2")
	get := func(path string, auth bool) (int, string) {
		req, _ := http.NewRequest("GET", url+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer k")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("/health", false); st != 200 {
		t.Errorf("/health: %d", st)
	}
	if st, body := get("/v1/models", false); st != 200 || !strings.Contains(body, `"id":"tiny"`) {
		t.Errorf("/v1/models: %d %s", st, body)
	}
	if st, _ := get("/metrics", false); st != 401 {
		t.Errorf("/metrics without key: %d", st)
	}
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"Once upon a time","max_tokens":200,"stream":true,"stream_options":{"include_usage":true},"logit_bias":{"2":-100}}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil {
		t.Fatalf("first line %q: %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(rd)
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"completion_tokens":200,`) {
		t.Errorf("stream cut by SIGTERM:\n%s", rest)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, log)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", log)
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Errorf("log:\n%s", log)
	}
}

// TestServePoolingFlag: --pooling takes mean, cls or last; anything else
// is one error line naming the flag, before the server listens.
func TestServePoolingFlag(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	_, errOut, err := flowinfer(t, "serve", "-m", m, "--port", "0", "--pooling", "rank")
	if err == nil || strings.TrimSpace(errOut) != `flowinfer: error: --pooling: pooling "rank" is not one of mean, cls, last` {
		t.Errorf("--pooling rank: %v\n%s", err, errOut)
	}
}

// TestServeCheckpointFlags: a hybrid model's startup line says how many
// recurrent-state checkpoints the KV cache holds and what chose them (the
// default byte budget, --ctx-checkpoint-budget, --ctx-checkpoints); setting
// both flags, or a budget that is not a byte size, is an error naming them.
func TestServeCheckpointFlags(t *testing.T) {
	m := filepath.Join(t.TempDir(), "qwen35.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "qwen35-small", "--type", "F32", "-o", m); err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `; 64 recurrent-state checkpoints of \S+, \S+ \(the default budget of 512MiB, at most 64\);`},
		{[]string{"--ctx-checkpoint-budget", "1MiB"}, `; (\d+) recurrent-state checkpoints of \S+, \S+ \(--ctx-checkpoint-budget 1MiB\);`},
		{[]string{"--ctx-checkpoints", "3"}, `; 3 recurrent-state checkpoints of \S+, \S+ \(--ctx-checkpoints 3\);`},
		{[]string{"--ctx-checkpoints=-1"}, `; 0 recurrent-state checkpoints of \S+, 0 \(--ctx-checkpoints -1\);`},
	} {
		cmd, _, log := startServeModel(t, m, tc.args...)
		line := regexp.MustCompile(`serving .*`).FindString(log.String())
		if !regexp.MustCompile(tc.want).MatchString(line) {
			t.Errorf("%v: startup line %q, want %s", tc.args, line, tc.want)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ctx-checkpoints", "4", "--ctx-checkpoint-budget", "1GiB"}, "--ctx-checkpoints 4 and --ctx-checkpoint-budget 1GiB both size"},
		{[]string{"--ctx-checkpoint-budget", "lots"}, "--ctx-checkpoint-budget"},
		{[]string{"--ctx-checkpoint-budget=-1MiB"}, "--ctx-checkpoint-budget"},
	} {
		_, errOut, err := flowinfer(t, append([]string{"serve", "-m", m, "--port", "0"}, tc.args...)...)
		if err == nil || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %v\n%s (want an error with %q)", tc.args, err, errOut, tc.want)
		}
	}
}

// TestServeWindowCheckpoints: a sliding-window model's startup line says
// how many window checkpoints the KV cache holds (gemma3-small, steps of 32:
// rings of 160 rows in a context of 256); with --swa-full the window layers
// are full-size and there are none; with --kv-recent rows there are none
// by default, the line says why, and asking for some is an error naming
// --kv-recent.
func TestServeWindowCheckpoints(t *testing.T) {
	m := filepath.Join(t.TempDir(), "gemma3.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "gemma3-small", "--type", "F32", "-o", m); err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{nil, `; (\d+) sliding-window checkpoints of \S+, \S+ \(the default budget of 512MiB(, at most 64)?\);`, `full-size`},
		{[]string{"--ctx-checkpoints", "3"}, `; 3 sliding-window checkpoints of \S+, \S+ \(--ctx-checkpoints 3\);`, `full-size`},
		{[]string{"--swa-full"}, `f16/f16 \(full-size sliding-window layers\)`, `checkpoints`},
		{[]string{"-ctk", "q8_0", "--kv-recent", "8"}, `; no prefix checkpoints: .*--kv-recent`, `sliding-window checkpoints of`},
	} {
		cmd, _, log := startServeModel(t, m, append([]string{"-b", "32"}, tc.args...)...)
		line := regexp.MustCompile(`serving .*`).FindString(log.String())
		if !regexp.MustCompile(tc.want).MatchString(line) || strings.Contains(line, tc.not) {
			t.Errorf("%v: startup line %q, want %s and no %q", tc.args, line, tc.want, tc.not)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	_, errOut, err := flowinfer(t, "serve", "-m", m, "--port", "0", "-c", "256", "-b", "32", "-ctk", "q8_0", "--kv-recent", "8", "--ctx-checkpoints", "2")
	if err == nil || !strings.Contains(errOut, "kv-recent") {
		t.Errorf("--ctx-checkpoints 2 with --kv-recent rows: %v\n%s (want an error naming --kv-recent)", err, errOut)
	}
}
