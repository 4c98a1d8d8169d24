package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
	"github.com/valyala/fasthttp/fasthttputil"
)

// testServer is a server on a loopback port with stories260K loaded.
type testServer struct {
	url    string
	srv    *serve.Server
	engine *stages.Engine
	bundle *model.Bundle
	done   chan struct{}
	// stopped is closed once the test's cleanup has shut everything down.
	stopped chan struct{}
	// dial connects to an in-memory listener (startInmem), else nil.
	dial func() (net.Conn, error)
}

func greedy() sample.Params { return sample.Params{Temperature: 0, RepeatPenalty: 1, TopP: 1} }

func modelPath(t testing.TB) string {
	return filepath.Join(golden.Dir(t), "models", "stories260K.gguf")
}

// slowOps delays each forward step, so that tests can act mid-generation.
type slowOps struct {
	model.Ops
	delay time.Duration
}

func (s slowOps) Embed(out []float32, w *model.Weight, ids []int32) {
	time.Sleep(s.delay)
	s.Ops.Embed(out, w, ids)
}

// start runs an engine and a server; both stop at the end of the test.
func start(t testing.TB, cfg serve.Config, ecfg stages.Config) *testServer {
	t.Helper()
	return startSlow(t, cfg, ecfg, 0)
}

// startSlow is start with every forward step delayed.
func startSlow(t testing.TB, cfg serve.Config, ecfg stages.Config, delay time.Duration) *testServer {
	t.Helper()
	return startModel(t, modelPath(t), cfg, ecfg, delay)
}

// startModel is startSlow with the model at path.
func startModel(t testing.TB, path string, cfg serve.Config, ecfg stages.Config, delay time.Duration) *testServer {
	t.Helper()
	var ops model.Ops = cpu.NewRef()
	if delay > 0 {
		ops = slowOps{ops, delay}
	}
	return startOn(t, path, cfg, ecfg, ops, false)
}

// startInmem is start on an in-memory listener (fasthttputil) instead of
// a loopback port, and with the SIMD backend on one thread (what `flowinfer
// serve` runs) instead of cpu.Ref: the same server and handlers, with no
// TCP and faster forward passes; reach it through ts.client().
func startInmem(t testing.TB, cfg serve.Config, ecfg stages.Config) *testServer {
	t.Helper()
	be := cpu.NewBackend(1, nil)
	t.Cleanup(be.Close) // after the server's cleanup (cleanups run last first)
	return startOn(t, modelPath(t), cfg, ecfg, be, true)
}

// client returns an HTTP client of the server (dialling its in-memory
// listener if it has one) with the given timeout.
func (ts *testServer) client(timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if ts.dial != nil {
		c.Transport = &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ts.dial() }}
	}
	return c
}

// startOn runs an engine on ops with the model at path and a server, on
// an in-memory listener if inmem, else on a loopback port.
func startOn(t testing.TB, path string, cfg serve.Config, ecfg stages.Config, ops model.Ops, inmem bool) *testServer {
	t.Helper()
	b, err := model.Open(path, cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ecfg.NCtx == 0 {
		ecfg.NCtx = 256
	}
	if ecfg.NSeq == 0 {
		ecfg.NSeq = 4
	}
	if reflect.DeepEqual(cfg.Defaults, sample.Params{}) {
		cfg.Defaults = greedy()
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 50 * time.Millisecond
	}
	srv := serve.New(cfg)
	if ecfg.Observer == nil {
		ecfg.Observer = srv.Observer()
	}
	rec := graph.NewRecorder(0)
	e, err := stages.NewEngine(b.Model, b.Tokenizer, ops, ecfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{engine: e, bundle: b, done: make(chan struct{}), srv: srv}
	ts.stopped = make(chan struct{})
	runCtx, abort := context.WithCancel(context.Background())
	go func() {
		if err := e.Run(runCtx); err != nil && runCtx.Err() == nil {
			t.Errorf("engine: %v", err)
		}
		close(ts.done)
	}()
	st, _ := os.Stat(path)
	ts.srv.SetBackend(&serve.Backend{Engine: e, Bundle: b, Recorder: rec, Path: path, Size: st.Size(), Done: ts.done})
	var ln net.Listener
	if inmem {
		mln := fasthttputil.NewInmemoryListener()
		ln, ts.dial = mln, mln.Dial
		ts.url = "http://inmemory"
	} else {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		ts.url = "http://" + ln.Addr().String()
	}
	served := make(chan struct{})
	go func() { ts.srv.Serve(ln); close(served) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ts.srv.Shutdown(ctx)
		<-served
		e.Close()
		select {
		case <-ts.done:
		case <-time.After(10 * time.Second):
			abort()
			<-ts.done
		}
		abort()
		b.Close()
		close(ts.stopped)
	})
	return ts
}

// response is an HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

func (ts *testServer) do(t testing.TB, method, path string, body any, header ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, data}
}

func (ts *testServer) post(t testing.TB, path string, body any, header ...string) response {
	t.Helper()
	return ts.do(t, "POST", path, body, header...)
}

// sseEvent is one SSE event; comment counts the comment lines before it.
type sseEvent struct {
	event, data string
	comments    int
}

// parseSSE splits an SSE body into events (and comments).
func parseSSE(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.event != "" {
				out = append(out, cur)
				cur = sseEvent{}
			}
		case strings.HasPrefix(line, ":"):
			cur.comments++
		case strings.HasPrefix(line, "event: "):
			cur.event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[len("data: "):]
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if cur.data != "" {
		t.Fatalf("SSE body does not end with a blank line: %q", body)
	}
	return out
}

func decodeJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	return m
}

// path reads a nested field: "choices.0.delta.content".
func path(v any, p string) any {
	for _, k := range strings.Split(p, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i := 0
			for _, c := range k {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGoroutines waits until at most n goroutines run.
func waitGoroutines(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > n {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left, want ≤ %d\n%s", g, n, buf[:runtime.Stack(buf, true)])
	}
}

// openStream sends a streaming request on a raw connection and returns the
// connection once the first SSE data line has arrived.
func (ts *testServer) openStream(t testing.TB, path, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	rd := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			c.Close()
			t.Fatalf("reading the stream: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			return c
		}
	}
}

// longStream is a completion that never ends by itself (EOS banned).
const longStream = `{"prompt":"Once upon a time","stream":true,"logit_bias":{"2":-100}}`
