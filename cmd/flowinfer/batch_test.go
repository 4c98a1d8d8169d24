package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// batchInput writes n requests alternating the two formats, greedy.
func batchInput(t *testing.T, n, maxTokens int) string {
	t.Helper()
	var b strings.Builder
	subjects := []string{"a cat", "a dog", "a little girl", "a big tree", "the sun"}
	for i := range n {
		s := subjects[i%len(subjects)]
		var line []byte
		if i%2 == 0 {
			line, _ = json.Marshal(map[string]any{"custom_id": fmt.Sprint("req-", i), "method": "POST", "url": "/v1/completions",
				"body": map[string]any{"prompt": "Once upon a time there was " + s, "max_tokens": maxTokens, "temperature": 0}})
		} else {
			line, _ = json.Marshal(map[string]any{"id": fmt.Sprint("s-", i), "messages": []map[string]string{{"role": "user", "content": "Tell me about " + s}},
				"max_tokens": maxTokens, "temperature": 0})
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type batchRec struct {
	ID       string  `json:"id"`
	CustomID *string `json:"custom_id"`
	Response *struct {
		StatusCode int            `json:"status_code"`
		Body       map[string]any `json:"body"`
	} `json:"response"`
	Error any `json:"error"`
}

func readBatch(t *testing.T, path string) []batchRec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatal("output ends with a torn line")
	}
	var recs []batchRec
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var r batchRec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestBatchCommand: 40 mixed requests on 4 parallel sequences, ordered;
// then two shards of the same file cover it exactly; stderr reports the
// throughput.
func TestBatchCommand(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	in := batchInput(t, 40, 16)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	_, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out, "--parallel", "4", "--ordered", "-t", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	recs := readBatch(t, out)
	if len(recs) != 40 {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		if r.ID != fmt.Sprint("batch_req_", i+1) || r.Response == nil || r.Response.StatusCode != 200 || r.Error != nil {
			t.Fatalf("record %d: %+v", i, r)
		}
		obj := r.Response.Body["object"]
		if (i%2 == 0) != (obj == "text_completion") {
			t.Errorf("record %d: object %v", i, obj)
		}
	}
	if !regexp.MustCompile(`batch: 40 records written \(40 ok, 0 failed, 0 malformed; 0 already done\) in [\d.]+s: [\d.]+ requests/s, 640 tokens generated`).MatchString(errOut) {
		t.Errorf("summary line missing:\n%s", errOut)
	}
	// Greedy: the same prompt gives the same text in every record.
	texts := map[string]string{}
	for i, r := range recs {
		if i%2 != 0 {
			continue
		}
		text := r.Response.Body["choices"].([]any)[0].(map[string]any)["text"].(string)
		key := fmt.Sprint(i % 10)
		if prev, ok := texts[key]; ok && prev != text {
			t.Errorf("record %d: greedy text differs between identical requests:\n%q\n%q", i, prev, text)
		}
		texts[key] = text
	}

	dir := t.TempDir()
	seen := map[string]int{}
	for i := range 2 {
		o := filepath.Join(dir, fmt.Sprint("shard", i))
		if _, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", o, "--shard", fmt.Sprintf("%d/2", i), "--no-progress"); err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		for _, r := range readBatch(t, o) {
			seen[r.ID]++
		}
	}
	if len(seen) != 40 {
		t.Errorf("shards cover %d lines, want 40", len(seen))
	}
	if _, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out, "--shard", "2/2"); err == nil || !strings.Contains(errOut, "want i/n") {
		t.Errorf("bad shard: %v %s", err, errOut)
	}
}

// TestBatchMatchesServe: a batch record's body is what `flowinfer serve`
// answers over HTTP for the same request, apart from the fields that
// differ between any two answers (id, created, timings).
func TestBatchMatchesServe(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	in := batchInput(t, 2, 24)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	if _, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out, "--window", "1", "--no-progress"); err != nil { // one at a time, as the HTTP requests below
		t.Fatalf("%v\n%s", err, errOut)
	}
	recs := readBatch(t, out)

	cmd := exec.Command(binPath, "serve", "-m", m, "--port", "0", "--parallel", "1")
	cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	addr := ""
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`serving .* on (http://\S+)`)
	for addr == "" && sc.Scan() {
		if mm := re.FindStringSubmatch(sc.Text()); mm != nil {
			addr = mm[1]
		}
	}
	if addr == "" {
		t.Fatal("serve did not report its address")
	}
	go io.Copy(io.Discard, stderr)

	lines, _ := os.ReadFile(in)
	for i, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var req struct {
			URL  string          `json:"url"`
			Body json.RawMessage `json:"body"`
		}
		json.Unmarshal([]byte(line), &req)
		if req.URL == "" { // simple form: the body is the line without its id
			var obj map[string]any
			json.Unmarshal([]byte(line), &obj)
			delete(obj, "id")
			req.URL = "/v1/chat/completions"
			req.Body, _ = json.Marshal(obj)
		}
		resp, err := http.Post(addr+req.URL, "application/json", bytes.NewReader(req.Body))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		want := recs[i].Response.Body
		for _, k := range []string{"id", "created", "timings"} {
			if _, ok := got[k]; !ok {
				t.Errorf("serve's answer lacks %q", k)
			}
			delete(got, k)
			delete(want, k)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("request %d:\nserve: %s\nbatch: %s", i, g, w)
		}
	}
}

// TestBatchInterrupt: SIGINT or SIGKILL in the middle of a run leaves only
// whole records; running the same command again finishes the file with
// each request exactly once.
func TestBatchInterrupt(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	const n = 120
	in := batchInput(t, n, 32)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.jsonl")
			cmd, errb := startBatch(t, m, in, out, 2, 10)
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Logf("the run finished before the signal (%v)", err)
			}
			if sig == syscall.SIGINT && err != nil && !strings.Contains(errb.String(), "run the same command again to resume") {
				t.Errorf("SIGINT message:\n%s", errb.String())
			}
			first := readBatch(t, out)
			t.Logf("%v after %d records", sig, len(first))
			if _, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out, "--parallel", "4", "--no-progress"); err != nil {
				t.Fatalf("resume: %v\n%s", err, errOut)
			} else if !strings.Contains(errOut, fmt.Sprintf("%d already done", len(first))) {
				t.Errorf("resume did not skip the %d finished records:\n%s", len(first), errOut)
			}
			ids := map[string]int{}
			for _, r := range readBatch(t, out) {
				ids[r.ID]++
				if r.Response == nil || r.Response.StatusCode != 200 {
					t.Errorf("record %s: %+v", r.ID, r)
				}
			}
			if len(ids) != n {
				t.Errorf("%d distinct records after resuming, want %d", len(ids), n)
			}
			for id, n := range ids {
				if n != 1 {
					t.Errorf("%s written %d times", id, n)
				}
			}
		})
	}
}

// TestBatchAlias: lines naming a model (as OpenAI batch files do) fail with
// 404 and are counted as such in the summary, until --alias names it.
func TestBatchAlias(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	in := filepath.Join(t.TempDir(), "in.jsonl")
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf(`{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":2}}`, i))
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	_, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out, "--no-progress")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "(0 ok, 3 failed, 0 malformed") || !strings.Contains(errOut, "3 of the failed lines asked for a model this run does not serve") {
		t.Errorf("summary without the unknown model:\n%s", errOut)
	}
	out2 := filepath.Join(t.TempDir(), "out.jsonl")
	_, errOut, err = runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out2, "--no-progress", "--alias", "gpt-4o-mini")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for _, r := range readBatch(t, out2) {
		if r.Response == nil || r.Response.StatusCode != 200 || r.Response.Body["model"] != "gpt-4o-mini" {
			t.Errorf("with --alias: %+v", r)
		}
	}
}

// TestBatchOutputLocked: a second `flowinfer batch` on an output a running
// one is writing fails before it loads its model (its -m is not even a
// GGUF file), naming the file; the first run completes the file with every
// record once.
func TestBatchOutputLocked(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	// about 2 s of work on one sequence: the second run starts within
	// milliseconds of the first record
	const n = 200
	in := batchInput(t, n, 64)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cmd, errb := startBatch(t, m, in, out, 1, 1)
	notModel := filepath.Join(t.TempDir(), "not.gguf")
	os.WriteFile(notModel, []byte("not a model"), 0o644)
	_, errOut, err := runEnv(t, nil, "batch", "-m", notModel, "-i", in, "-o", out, "--no-progress")
	if err == nil || !strings.Contains(errOut, out) || !strings.Contains(errOut, "another batch is writing it") {
		t.Errorf("second run: %v\n%s", err, errOut)
	}
	if data, _ := os.ReadFile(out); bytes.Count(data, []byte("\n")) == n {
		t.Log("the first run had finished before the second began: the lock was not tested")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, errb.String())
	}
	ids := map[string]int{}
	for _, r := range readBatch(t, out) {
		ids[r.ID]++
	}
	if len(ids) != n {
		t.Errorf("%d distinct records, want %d", len(ids), n)
	}
	for id, k := range ids {
		if k != 1 {
			t.Errorf("%s written %d times", id, k)
		}
	}
}

// startBatch starts `flowinfer batch` of in into out on parallel
// sequences and one thread, syncing every record, and returns once it has
// written records lines (failing the test after 60 s), with its stderr.
func startBatch(t *testing.T, m, in, out string, parallel, records int) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binPath, "batch", "-m", m, "-i", in, "-o", out, "--parallel", strconv.Itoa(parallel), "-t", "1", "--sync-every", "1", "--no-progress")
	cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
	errb := &bytes.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if data, _ := os.ReadFile(out); bytes.Count(data, []byte("\n")) >= records {
			return cmd, errb
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress:\n%s", errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
