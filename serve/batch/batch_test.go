package batch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"
)

// fake is a handler that answers like an OpenAI endpoint: it echoes the
// prompt (or the last message), sleeps "delay_ms", answers 400 to
// {"bad": true}, 503 to {"fail": true}, and 429 to the first try of
// {"busy": true}.
type fake struct {
	calls atomic.Int64
	busy  atomic.Int64
	seen  chan []byte // bodies, if set
}

func (f *fake) handle(ctx *fasthttp.RequestCtx) {
	f.calls.Add(1)
	var req struct {
		Prompt   string `json:"prompt"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		DelayMS int  `json:"delay_ms"`
		Bad     bool `json:"bad"`
		Fail    bool `json:"fail"`
		Busy    bool `json:"busy"`
	}
	if f.seen != nil {
		f.seen <- append([]byte(nil), ctx.PostBody()...)
	}
	ctx.SetContentType("application/json")
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.Bad {
		ctx.SetStatusCode(400)
		ctx.SetBodyString(`{"error":{"message":"bad request","type":"invalid_request_error"}}`)
		return
	}
	if req.Fail {
		ctx.SetStatusCode(503)
		ctx.SetBodyString(`{"error":{"message":"engine down"}}`)
		return
	}
	if req.Busy && f.busy.Add(1) == 1 {
		ctx.SetStatusCode(429)
		ctx.SetBodyString(`{"error":{"message":"queue full"}}`)
		return
	}
	time.Sleep(time.Duration(req.DelayMS) * time.Millisecond)
	text := req.Prompt
	if n := len(req.Messages); n > 0 {
		text = req.Messages[n-1].Content
	}
	body, _ := json.Marshal(map[string]any{
		"id": "cmpl-" + string(ctx.Path()), "object": "text_completion", "echo": text,
		"usage": map[string]int{"prompt_tokens": 3, "completion_tokens": len(text)},
	})
	ctx.SetBody(body)
}

func writeInput(t *testing.T, lines []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// outRecord is an output line as a client reads it.
type outRecord struct {
	ID       string  `json:"id"`
	CustomID *string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code, Message string
	} `json:"error"`
}

// readOutput parses every line of an output file, failing on a bad one.
func readOutput(t *testing.T, path string) []outRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("output does not end with a newline: %q", data[max(0, len(data)-80):])
	}
	var recs []outRecord
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r outRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad output line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

func cid(r outRecord) string {
	if r.CustomID == nil {
		return "<nil>"
	}
	return *r.CustomID
}

// TestFormats: OpenAI and simple lines run; malformed lines become error
// records; 4xx answers are written with their body; 429 is retried.
func TestFormats(t *testing.T) {
	lines := []string{
		`{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "hi"}]}}`,
		`{"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"prompt": "once", "stream": true}}`,
		`{"id": "c", "prompt": "simple"}`,
		`{"id": 7, "messages": [{"role": "user", "content": "num id"}]}`,
		`not json at all`,
		`{"custom_id": "e", "method": "GET", "url": "/v1/completions", "body": {}}`,
		`{"custom_id": "f", "method": "POST", "url": "/v1/embeddings", "body": {}}`,
		`{"custom_id": "g", "method": "POST", "url": "/v1/completions", "body": {"bad": true}}`,
		`{"custom_id": "a2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "dup"}}`,
		`{"id": "h"}`,
		`   `,
		`{"custom_id": "i", "method": "POST", "url": "/v1/completions", "body": {"prompt": "busy", "busy": true}}`,
		`{"custom_id": 5, "method": "POST", "url": "/v1/completions", "body": {}}`,
	}
	f := &fake{}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	st, err := Run(context.Background(), Options{Input: writeInput(t, lines), Output: out, Handler: f.handle, Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	recs := readOutput(t, out)
	type want struct {
		id, cid string
		status  int
		errHas  string
	}
	wants := []want{
		{"batch_req_1", "a", 200, ""},
		{"batch_req_2", "b", 200, ""},
		{"batch_req_3", "c", 200, ""},
		{"batch_req_4", "7", 200, ""},
		{"batch_req_5", "<nil>", 0, "line 5: not a JSON object"},
		{"batch_req_6", "e", 0, `method must be "POST"`},
		{"batch_req_7", "f", 0, `url "/v1/embeddings" is not one of`},
		{"batch_req_8", "g", 400, ""},
		{"batch_req_9", "a2", 200, ""},
		{"batch_req_10", "h", 0, `want "messages" (chat) or "prompt"`},
		{"batch_req_12", "i", 200, ""},
		{"batch_req_13", "<nil>", 0, "custom_id must be a non-empty string"},
	}
	if len(recs) != len(wants) {
		t.Fatalf("%d records, want %d", len(recs), len(wants))
	}
	for i, w := range wants {
		r := recs[i]
		t.Run(w.id, func(t *testing.T) {
			if r.ID != w.id || cid(r) != w.cid {
				t.Errorf("id %s custom_id %s, want %s %s", r.ID, cid(r), w.id, w.cid)
			}
			switch {
			case w.errHas != "":
				if r.Error == nil || r.Response != nil || !strings.Contains(r.Error.Message, w.errHas) || r.Error.Code != "invalid_request" {
					t.Errorf("want error %q, got %+v / %+v", w.errHas, r.Error, r.Response)
				}
			default:
				if r.Response == nil || r.Error != nil || r.Response.StatusCode != w.status {
					t.Fatalf("want status %d, got %+v / %+v", w.status, r.Response, r.Error)
				}
				if w.status == 200 && r.Response.RequestID == "" {
					t.Errorf("no request_id")
				}
			}
		})
	}
	// The body is the handler's answer, byte for byte.
	if got := string(recs[2].Response.Body); !strings.Contains(got, `"echo":"simple"`) {
		t.Errorf("body %s", got)
	}
	if st.OK != 6 || st.Failed != 1 || st.Malformed != 5 || st.Written != 12 || st.Lines != 12 || st.CompletionTokens == 0 {
		t.Errorf("stats %+v", st)
	}
	if f.busy.Load() != 2 {
		t.Errorf("the 429 was not retried (%d tries)", f.busy.Load())
	}
}

// TestStreamStripped: a body asking for a stream is sent without it; a
// body without one is sent exactly as written.
func TestStreamStripped(t *testing.T) {
	f := &fake{seen: make(chan []byte, 4)}
	lines := []string{
		`{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "stream": true, "stream_options": {"include_usage": true}}}`,
		`{"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"prompt":"y",   "max_tokens": 3}}`,
	}
	if _, err := Run(context.Background(), Options{Input: writeInput(t, lines), Output: filepath.Join(t.TempDir(), "o"), Handler: f.handle, Window: 1, Ordered: true}); err != nil {
		t.Fatal(err)
	}
	if a := string(<-f.seen); strings.Contains(a, "stream") {
		t.Errorf("streaming fields sent: %s", a)
	}
	if b := string(<-f.seen); b != `{"prompt":"y",   "max_tokens": 3}` {
		t.Errorf("body rewritten: %s", b)
	}
}

// manyLines returns n simple lines with random delays.
func manyLines(n int, maxDelay int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"id": "r%d", "prompt": "p%d", "delay_ms": %d}`, i, i, r.IntN(maxDelay+1))
	}
	return lines
}

func TestOrdering(t *testing.T) {
	lines := manyLines(60, 6)
	want := make([]string, len(lines))
	for i := range want {
		want[i] = "r" + strconv.Itoa(i)
	}
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			f := &fake{}
			out := filepath.Join(t.TempDir(), "out.jsonl")
			if _, err := Run(context.Background(), Options{Input: writeInput(t, lines), Output: out, Handler: f.handle, Window: 8, Ordered: ordered}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range readOutput(t, out) {
				got = append(got, cid(r))
			}
			if ordered {
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("order (-want +got):\n%s", d)
				}
				return
			}
			if slices.Equal(got, want) {
				t.Log("unordered run happened to finish in input order")
			}
			slices.SortFunc(got, func(a, b string) int { x, _ := strconv.Atoi(a[1:]); y, _ := strconv.Atoi(b[1:]); return x - y })
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("records (-want +got):\n%s", d)
			}
		})
	}
}

// TestShards: three shards write disjoint outputs covering every line.
func TestShards(t *testing.T) {
	lines := manyLines(31, 0)
	in := writeInput(t, lines)
	dir := t.TempDir()
	seen := map[string]int{}
	for i := range 3 {
		out := filepath.Join(dir, fmt.Sprintf("out-%d.jsonl", i))
		st, err := Run(context.Background(), Options{Input: in, Output: out, Handler: (&fake{}).handle, Shard: i, Shards: 3})
		if err != nil {
			t.Fatal(err)
		}
		if st.Lines != 31 || st.InShard != (31-i+2)/3 {
			t.Errorf("shard %d: %+v", i, st)
		}
		for _, r := range readOutput(t, out) {
			n, _ := strconv.Atoi(cid(r)[1:])
			if n%3 != i {
				t.Errorf("shard %d/3 has line index %d", i, n)
			}
			seen[cid(r)]++
		}
	}
	if len(seen) != 31 {
		t.Errorf("%d distinct records, want 31", len(seen))
	}
	for k, v := range seen {
		if v != 1 {
			t.Errorf("%s written %d times", k, v)
		}
	}
	if _, err := Run(context.Background(), Options{Input: in, Output: filepath.Join(dir, "x"), Handler: (&fake{}).handle, Shard: 3, Shards: 3}); err == nil {
		t.Error("shard 3/3 accepted")
	}
}

// TestResume: an interrupted run, resumed, ends with every line exactly
// once, and the resumed run does not redo finished lines. A torn last line
// is dropped; a foreign file is refused.
func TestResume(t *testing.T) {
	lines := append(manyLines(40, 3), `broken {`)
	in := writeInput(t, lines)
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.jsonl")
			ctx, cancel := context.WithCancel(context.Background())
			f1 := &fake{}
			st1, err := Run(ctx, Options{Input: in, Output: out, Handler: f1.handle, Window: 6, Ordered: ordered,
				Progress: func(p Progress) {
					if p.Done == 15 {
						cancel()
					}
				}})
			if !errors.Is(err, ErrInterrupted) {
				t.Fatalf("interrupted run: %v (%+v)", err, st1)
			}
			first := readOutput(t, out)
			if len(first) < 15 || len(first) > 40 {
				t.Fatalf("%d records after the interrupt", len(first))
			}
			// Tear the last line, as a power cut might.
			data, _ := os.ReadFile(out)
			os.WriteFile(out, append(data, []byte(`{"id":"batch_req_99","custom_id":"r3`)...), 0o644)

			f2 := &fake{}
			st2, err := Run(context.Background(), Options{Input: in, Output: out, Handler: f2.handle, Window: 6, Ordered: ordered})
			if err != nil {
				t.Fatal(err)
			}
			if st2.TornBytes == 0 || st2.Skipped != len(first) || st2.Written != 41-len(first) {
				t.Errorf("resumed run: %+v (first run wrote %d)", st2, len(first))
			}
			if int(f2.calls.Load()) != 40-countOK(first) {
				t.Errorf("resumed run made %d calls, want %d", f2.calls.Load(), 40-countOK(first))
			}
			all := readOutput(t, out)
			ids := map[string]int{}
			for _, r := range all {
				ids[r.ID]++
			}
			if len(all) != 41 || len(ids) != 41 {
				t.Errorf("%d records, %d distinct ids; want 41", len(all), len(ids))
			}
			if ordered {
				for i, r := range all {
					if r.ID != "batch_req_"+strconv.Itoa(i+1) {
						t.Fatalf("record %d is %s: resumed ordered output is out of order", i, r.ID)
					}
				}
			}
			// A third run has nothing to do.
			st3, err := Run(context.Background(), Options{Input: in, Output: out, Handler: (&fake{}).handle})
			if err != nil || st3.Written != 0 || st3.Skipped != 41 {
				t.Errorf("third run: %+v %v", st3, err)
			}
		})
	}
	foreign := filepath.Join(t.TempDir(), "foreign.jsonl")
	os.WriteFile(foreign, []byte("hello\n"), 0o644)
	if _, err := Run(context.Background(), Options{Input: in, Output: foreign, Handler: (&fake{}).handle}); err == nil || !strings.Contains(err.Error(), "not a batch output record") {
		t.Errorf("foreign output: %v", err)
	}
}

func countOK(recs []outRecord) int {
	n := 0
	for _, r := range recs {
		if r.Response != nil {
			n++
		}
	}
	return n
}

// TestServerErrorsNotWritten: a 5xx answer is not written (the next run
// retries it), and the run says so.
func TestServerErrorsNotWritten(t *testing.T) {
	lines := []string{`{"id": "a", "prompt": "x"}`, `{"id": "b", "prompt": "x", "fail": true}`, `{"id": "c", "prompt": "x"}`}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	st, err := Run(context.Background(), Options{Input: writeInput(t, lines), Output: out, Handler: (&fake{}).handle})
	if err != nil {
		t.Fatal(err)
	}
	if st.Retryable != 1 || st.Written != 2 || len(readOutput(t, out)) != 2 {
		t.Errorf("stats %+v", st)
	}
}

// The interrupt test runs Run in a child process (this test binary with
// BATCH_HELPER set) on a slow handler, kills it mid-run, and checks that
// every line written is whole and that a resumed run completes the file
// with each request exactly once.
func TestMain(m *testing.M) {
	if os.Getenv("BATCH_HELPER") != "" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

func helper() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f := &fake{}
	_, err := Run(ctx, Options{Input: os.Getenv("BATCH_IN"), Output: os.Getenv("BATCH_OUT"), Handler: f.handle, Window: 8, SyncEvery: 1})
	if errors.Is(err, ErrInterrupted) {
		return 130
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestInterruptSafety(t *testing.T) {
	// Long lines (a few KB each) make torn writes likely if writes were
	// not whole.
	pad := strings.Repeat("x", 4000)
	lines := make([]string, 400)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"id": "r%d", "prompt": "%s%d", "delay_ms": 2}`, i, pad, i)
	}
	in := writeInput(t, lines)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.jsonl")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "BATCH_HELPER=1", "BATCH_IN="+in, "BATCH_OUT="+out)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Let it write some records, then signal it mid-run.
			deadline := time.Now().Add(20 * time.Second)
			for {
				if fi, err := os.Stat(out); err == nil && fi.Size() > 40*4000 {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatal("the helper wrote nothing")
				}
				time.Sleep(2 * time.Millisecond)
			}
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			switch {
			case sig == syscall.SIGINT && (err == nil || errors.As(err, &ee) && ee.ExitCode() == 130):
			case sig == syscall.SIGKILL && err != nil:
			default:
				t.Fatalf("helper exit after %v: %v", sig, err)
			}
			// Every line written is a whole record (SIGKILL may leave no
			// torn line either: each record is one write).
			data, _ := os.ReadFile(out)
			n := strings.Count(string(data), "\n")
			if sig == syscall.SIGINT && (len(data) == 0 || data[len(data)-1] != '\n') {
				t.Errorf("SIGINT left a torn line")
			}
			if n >= 400 {
				t.Skip("the helper finished before the signal")
			}
			t.Logf("%v after %d records", sig, n)
			// Resume to completion.
			st, err := Run(context.Background(), Options{Input: in, Output: out, Handler: (&fake{}).handle, Window: 8})
			if err != nil {
				t.Fatal(err)
			}
			recs := readOutput(t, out)
			ids := map[string]bool{}
			for _, r := range recs {
				if ids[cid(r)] {
					t.Errorf("%s written twice", cid(r))
				}
				ids[cid(r)] = true
			}
			if len(recs) != 400 || len(ids) != 400 {
				t.Errorf("%d records (%d distinct) after resuming; want 400 (%+v)", len(recs), len(ids), st)
			}
		})
	}
}

// TestDuplicateCustomID: two lines with one custom_id (in different shards
// too) refuse the file before any line runs, naming both lines.
func TestDuplicateCustomID(t *testing.T) {
	lines := []string{
		`{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "one"}}`,
		`{"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"prompt": "two"}}`,
		`{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "three"}}`,
	}
	in := writeInput(t, lines)
	for shard := range 2 {
		f := &fake{}
		out := filepath.Join(t.TempDir(), "out.jsonl")
		_, err := Run(context.Background(), Options{Input: in, Output: out, Handler: f.handle, Shards: 2, Shard: shard})
		if !errors.Is(err, ErrDuplicateCustomID) || !strings.Contains(err.Error(), "lines 1 and 3") {
			t.Errorf("shard %d: %v, want ErrDuplicateCustomID naming lines 1 and 3", shard, err)
		}
		if recs := readOutput(t, out); len(recs) != 0 {
			t.Errorf("shard %d: %d records written", shard, len(recs))
		}
	}
}

// TestOutputLock: a second run on an output another process is writing (a
// resume started too early) fails at once, naming the file, and answers
// nothing; the first run then completes the file with every request once,
// and once it has ended the lock is gone (a resume runs).
func TestOutputLock(t *testing.T) {
	lines := make([]string, 40)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"custom_id": "c%d", "method": "POST", "url": "/v1/completions", "body": {"prompt": "p%d", "delay_ms": 200}}`, i, i)
	}
	in := writeInput(t, lines)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BATCH_HELPER=1", "BATCH_IN="+in, "BATCH_OUT="+out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(out); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the first run wrote nothing")
		}
		time.Sleep(2 * time.Millisecond)
	}

	f := &fake{}
	_, err := Run(context.Background(), Options{Input: in, Output: out, Handler: f.handle, Window: 8})
	if !errors.Is(err, ErrOutputBusy) || !strings.Contains(err.Error(), out) || !strings.Contains(err.Error(), "another batch is writing it") {
		t.Errorf("second run: %v, want ErrOutputBusy naming %s", err, out)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("second run answered %d requests", n)
	}
	if o, err := OpenOutput(out); !errors.Is(err, ErrOutputBusy) {
		t.Errorf("OpenOutput during the first run: %v", err)
		if o != nil {
			o.Close()
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, stderr.String())
	}
	recs := readOutput(t, out)
	seen := map[string]int{}
	for _, r := range recs {
		seen[cid(r)]++
	}
	for i := range lines {
		if n := seen[fmt.Sprint("c", i)]; n != 1 {
			t.Errorf("c%d written %d times", i, n)
		}
	}
	if len(recs) != len(lines) {
		t.Errorf("%d records, want %d", len(recs), len(lines))
	}

	// The lock ends with the run that held it, on every return.
	st, err := Run(context.Background(), Options{Input: in, Output: out, Handler: f.handle})
	if err != nil || st.Skipped != len(lines) || st.Written != 0 {
		t.Errorf("resume after the first run: %+v %v", st, err)
	}
	o, err := OpenOutput(out)
	if err != nil {
		t.Fatalf("OpenOutput after a finished run: %v", err)
	}
	if _, err := Run(context.Background(), Options{Out: o, Handler: f.handle}); err == nil {
		t.Error("a run without input succeeded")
	}
	o2, err := OpenOutput(out)
	if err != nil {
		t.Fatalf("the failed run kept the lock: %v", err)
	}
	o2.Close()
	o.Close() // closed by Run already: harmless
}
