package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// servedModel is a `flowinfer serve` process of the test.
type servedModel struct {
	cmd  *exec.Cmd
	url  string
	exit chan error // the process's Wait
	log  *strings.Builder
}

// serveModel starts `flowinfer serve` on path with args and waits for its
// address.
func serveModel(t *testing.T, path string, args ...string) *servedModel {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"serve", "-m", path, "--port", "0", "--parallel", "2", "-t", "1", "-c", "128",
		"--alias", "tiny-moe", "--watch-interval", "100ms", "--drain-timeout", "5s"}, args...)...)
	cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &servedModel{cmd: cmd, exit: make(chan error, 1), log: &strings.Builder{}}
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`serving .* on (http://\S+)`)
	for s.url == "" && sc.Scan() {
		s.log.WriteString(sc.Text() + "\n")
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			s.url = m[1]
		}
	}
	go func() {
		for sc.Scan() {
			s.log.WriteString(sc.Text() + "\n")
		}
		s.exit <- cmd.Wait()
	}()
	if s.url == "" {
		cmd.Process.Kill()
		t.Fatalf("serve did not report its address:\n%s", s.log)
	}
	return s
}

// alive fails t when the process has exited.
func (s *servedModel) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-s.exit:
		t.Fatalf("%s: the server died: %v\n%s", when, err, s.log)
	default:
	}
}

// stop sends SIGTERM and checks the process exits cleanly.
func (s *servedModel) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exit:
		if err != nil {
			t.Errorf("serve exited with %v\n%s", err, s.log)
		}
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		t.Errorf("serve did not stop on SIGTERM")
	}
}

// complete asks for a greedy completion and returns the status and the
// text (200) or the body (an error).
func (s *servedModel) complete(t *testing.T) (int, string) {
	t.Helper()
	code, text, err := s.try()
	if err != nil {
		t.Fatal(err)
	}
	return code, text
}

// try is complete for any goroutine: it returns what complete would fail on.
func (s *servedModel) try() (int, string, error) {
	resp, err := http.Post(s.url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":10,"temperature":0}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return resp.StatusCode, string(raw), nil
	}
	var out struct{ Choices []struct{ Text string } }
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		return 0, "", fmt.Errorf("answer %s: %v", raw, err)
	}
	return 200, out.Choices[0].Text, nil
}

// health returns /health's status and body.
func (s *servedModel) health(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get(s.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// waitHealth waits until /health answers status, and checks a failed
// model's answer names it.
func (s *servedModel) waitHealth(t *testing.T, status int, when string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, body := s.health(t)
		if st == status {
			if st != 200 && !strings.Contains(body, `"model":"tiny-moe"`) {
				t.Errorf("%s: /health %d %s does not name the model", when, st, body)
			}
			return
		}
		s.alive(t, when)
		if time.Now().After(deadline) {
			t.Fatalf("%s: /health still %d %s, want %d\n%s", when, st, body, status, s.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reverseExperts returns the model file data with the experts of every
// routed-expert tensor in reverse order: a valid model of the same size
// whose resident weights are the same and whose experts are not.
func reverseExperts(t *testing.T, path string, data []byte) []byte {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := append([]byte(nil), data...)
	for _, tn := range f.Tensors {
		if !strings.Contains(tn.Name, "_exps.") {
			continue
		}
		n := tn.Dims[2]
		per := tn.Size / n
		off := f.DataOffset + tn.Offset
		for e := range n {
			copy(out[off+e*per:off+(e+1)*per], data[off+(n-1-e)*per:off+(n-e)*per])
		}
	}
	return out
}

// coldBudget is the RAM budget that caches one token's experts of the
// model at path, for engine.
func coldBudget(t *testing.T, path string) int64 {
	t.Helper()
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	b, err := model.Open(path, be.Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wp, err := stages.NewWeightPath(b.Model, path, be, stages.WeightConfig{PlanOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	p := wp.Plan()
	return p.Resident + p.Staging + int64(b.Model.NExpertUsed)*p.SlotBytes
}

// rewrite replaces the contents of path in place (same inode) with data
// and gives it back the modification time mtime (as `cat new > f; touch
// -r old f`).
func rewrite(t *testing.T, path string, data []byte, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// TestServeModelFileChanged: `flowinfer serve` of a small MoE model, with
// each I/O engine, experts streamed (cold, a one-token cache) or all in
// memory, while its file is rewritten in place (experts reordered, size and
// modification time restored), truncated to its header, and restored. The
// process never dies; no answer is ever the output of a mix of the two
// files (each 200 is the old model's or, after the reload, the new one's);
// every request that fails gets a 503 naming the model's alias; /health
// reports the model failed, naming it, and ok once it is reloaded.
func TestServeModelFileChanged(t *testing.T) {
	m, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	orig, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ref := filepath.Join(dir, "other.gguf")
	other := reverseExperts(t, m, orig)
	if err := os.WriteFile(ref, other, 0o644); err != nil {
		t.Fatal(err)
	}
	// the reordered model's answer, from a server of its own
	rs := serveModel(t, ref)
	_, wantOther := rs.complete(t)
	rs.stop(t)
	cold := coldBudget(t, m)

	uring := true
	if r, err := nvme.Open(m, nvme.Options{Engine: configs.EngineIOUring}); errors.Is(err, nvme.ErrNoURing) {
		uring = false
		t.Logf("io_uring not tested: %v", err)
	} else if err == nil {
		r.Close()
	}
	for _, c := range []struct {
		engine string
		cold   bool
	}{{"pread", true}, {"pread", false}, {"io_uring", true}, {"io_uring", false}, {"mmap", false}} {
		t.Run(fmt.Sprintf("%s/cold=%v", c.engine, c.cold), func(t *testing.T) {
			if c.engine == "io_uring" && !uring {
				t.Skip("the kernel refuses io_uring")
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := os.WriteFile(path, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			st, _ := os.Stat(path)
			args := []string{"--io-engine", c.engine}
			if c.cold {
				args = append(args, "--ram-budget", fmt.Sprint(cold))
			}
			s := serveModel(t, path, args...)
			defer func() {
				if t.Failed() {
					t.Logf("server log:\n%s", s.log)
				}
			}()
			_, want := s.complete(t)
			if want == wantOther {
				t.Fatalf("the reordered model answers as the original (%q): the test cannot tell them apart", want)
			}
			// check is one answer while the file changes under the server:
			// the model as loaded, or a 503 naming it
			check := func(when, loaded string) {
				t.Helper()
				code, got := s.complete(t)
				switch {
				case code == 200 && got != loaded:
					t.Errorf("%s: answer %q, neither the loaded model's %q nor an error", when, got, loaded)
				case code != 200 && (code != 503 || !strings.Contains(got, "tiny-moe")):
					t.Errorf("%s: %d %s, want 503 naming the model", when, code, got)
				case code != 200 && (strings.Contains(got, path) || strings.Contains(got, "range [")):
					t.Errorf("%s: %s shows the server's path or offsets", when, got)
				case c.cold && code == 200:
					t.Errorf("%s: a cold expert cache answered without reading the changed file", when)
				}
				s.alive(t, when)
			}

			// under runs change while four clients send requests back to
			// back (the last ones in flight as the file changes): every
			// answer is the model as loaded, or a 503 naming it
			under := func(when, loaded string, change func()) {
				t.Helper()
				type answer struct {
					code int
					text string
					err  error
				}
				var mu sync.Mutex
				var answers []answer
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							code, text, err := s.try()
							mu.Lock()
							answers = append(answers, answer{code, text, err})
							mu.Unlock()
							select {
							case <-stop:
								return
							default:
							}
						}
					}()
				}
				time.Sleep(100 * time.Millisecond)
				change()
				time.Sleep(100 * time.Millisecond)
				close(stop)
				wg.Wait()
				failed := 0
				for _, a := range answers {
					switch {
					case a.err != nil:
						t.Errorf("%s, 4 clients: %v", when, a.err)
					case a.code == 200 && a.text != loaded:
						t.Errorf("%s, 4 clients: answer %q, neither the loaded model's %q nor an error", when, a.text, loaded)
					case a.code != 200 && (a.code != 503 || !strings.Contains(a.text, "tiny-moe")):
						t.Errorf("%s, 4 clients: %d %s, want 503 naming the model", when, a.code, a.text)
					case a.code != 200:
						failed++
					}
				}
				t.Logf("%s under 4 clients: %d answers, %d of them 503", when, len(answers), failed)
				s.alive(t, when)
			}

			time.Sleep(20 * time.Millisecond) // a new tick of the kernel's clock: a new ctime
			under("rewritten", want, func() { rewrite(t, path, other, st.ModTime()) })
			check("rewritten", want)
			s.waitHealth(t, 503, "rewritten")
			s.waitHealth(t, 200, "reloading the rewritten file")
			if code, got := s.complete(t); code != 200 || got != wantOther {
				t.Errorf("after reloading the rewritten file: %d %q, want %q", code, got, wantOther)
			}

			under("truncated", wantOther, func() {
				if err := os.Truncate(path, 4096); err != nil {
					t.Fatal(err)
				}
			})
			check("truncated", wantOther)
			s.waitHealth(t, 503, "truncated")
			time.Sleep(500 * time.Millisecond) // several checks: a truncated file does not load
			if st, body := s.health(t); st != 503 {
				t.Errorf("truncated file, after some checks: /health %d %s", st, body)
			}
			check("truncated, a while later", wantOther)

			rewrite(t, path, orig, st.ModTime())
			s.waitHealth(t, 200, "restoring the original file")
			if code, got := s.complete(t); code != 200 || got != want {
				t.Errorf("after restoring the original file: %d %q, want %q", code, got, want)
			}
			s.alive(t, "the end")
			s.stop(t)
		})
	}
}
