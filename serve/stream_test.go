package serve_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestDisconnectCancels: a client that leaves mid-stream has its sequence
// cancelled (KV blocks freed) within a few steps, and the server goes on.
func TestDisconnectCancels(t *testing.T) {
	ts := startSlow(t, serve.Config{}, stages.Config{NCtx: 1024}, 5*time.Millisecond)
	c := ts.openStream(t, "/v1/completions", longStream)
	// the stream opens (headers, a heartbeat) before the sequence has its
	// blocks: wait for them
	waitFor(t, "the sequence to run", func() bool {
		st := ts.engine.Stats()
		return st.Running == 1 && st.KVBlocksUsed > 0
	})
	c.Close()
	// ~1000 tokens at ≥5 ms would take 5 s; the cancel must come sooner.
	start := time.Now()
	waitFor(t, "the sequence to be cancelled", func() bool {
		st := ts.engine.Stats()
		return st.Running == 0 && st.KVBlocksUsed == 0
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel took %v", d)
	}
	if r := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 2}); r.status != 200 {
		t.Errorf("after a disconnect: %d %s", r.status, r.body)
	}
}

// TestDisconnectNonStream: a client that leaves while its non-streamed
// answer is being generated has its sequence cancelled too (the server
// peeks at the connection), and a client that stays gets its answer.
func TestDisconnectNonStream(t *testing.T) {
	// the client leaves after the read timeout has passed: the watcher
	// must still see it (it lifts the request's read deadline)
	ts := startSlow(t, serve.Config{ReadTimeout: 200 * time.Millisecond}, stages.Config{NCtx: 1024}, 5*time.Millisecond)
	for _, path := range []string{"/v1/completions", "/v1/messages", "/api/generate"} {
		body := `{"prompt":"Once upon a time","logit_bias":{"2":-100},"stream":false}`
		switch path {
		case "/v1/messages":
			body = `{"model":"stories260K","max_tokens":900,"messages":[{"role":"user","content":"Once upon a time"}]}`
		case "/api/generate":
			body = `{"model":"stories260K","prompt":"Once upon a time","stream":false,"options":{"num_predict":900}}`
		}
		c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
		waitFor(t, path+": the request to start", func() bool { return ts.engine.Stats().Running == 1 })
		time.Sleep(400 * time.Millisecond)
		c.Close()
		start := time.Now()
		waitFor(t, path+": the sequence to be cancelled", func() bool {
			st := ts.engine.Stats()
			return st.Running == 0 && st.KVBlocksUsed == 0
		})
		// hundreds of tokens at ≥5 ms each would take seconds; the check runs every 200 ms
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: cancel took %v", path, d)
		}
		// cancelled, not finished: the request is counted as 499
		want := fmt.Sprintf(`flowinfer_requests_total{endpoint=%q,status="499"} 1`, path)
		waitFor(t, path+": "+want, func() bool {
			return strings.Contains(string(ts.do(t, "GET", "/metrics", nil).body), want)
		})
	}
	if r := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 3}); r.status != 200 {
		t.Errorf("a client that stays: %d %s", r.status, r.body)
	}
}

// TestHeartbeat: a stream waiting behind another (one sequence slot) gets
// SSE comments until its first token, which the SDK parsers skip.
func TestHeartbeat(t *testing.T) {
	ts := startSlow(t, serve.Config{Heartbeat: 5 * time.Millisecond}, stages.Config{NSeq: 1}, 10*time.Millisecond)
	first := ts.openStream(t, "/v1/completions", `{"prompt":"Once upon a time","stream":true,"max_tokens":20}`)
	defer first.Close()
	r := ts.post(t, "/v1/chat/completions", map[string]any{"messages": chatMsgs, "max_tokens": 2, "stream": true})
	evs := parseSSE(t, r.body)
	if len(evs) == 0 || evs[0].comments < 3 {
		t.Errorf("heartbeats before the first chunk: %+v", evs)
	}
	if evs[len(evs)-1].data != "[DONE]" {
		t.Errorf("stream did not finish: %+v", evs)
	}
}

// TestQueueFull: beyond the admission queue, requests get 429 with
// Retry-After in their API's shape; the queued ones complete later.
func TestQueueFull(t *testing.T) {
	ts := startSlow(t, serve.Config{}, stages.Config{NSeq: 1, Queue: 1, NCtx: 1024}, 5*time.Millisecond)
	blocker := ts.openStream(t, "/v1/completions", longStream)
	defer blocker.Close()
	statuses := make(chan int, 16)
	var wg sync.WaitGroup
	queued := 0
	for ; queued < 10; queued++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- ts.post(t, "/v1/completions", `{"prompt":"Once","max_tokens":1}`).status
		}()
		select {
		case st := <-statuses:
			if st != 429 {
				t.Fatalf("request %d answered %d while the engine is busy", queued, st)
			}
		case <-time.After(100 * time.Millisecond):
			continue // queued
		}
		break
	}
	if queued == 10 {
		t.Fatal("no 429 after 10 waiting requests")
	}
	for _, c := range []struct{ api, path, body string }{
		{"openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`},
		{"anthropic", "/v1/messages", `{"model":"stories260K","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"ollama", "/api/generate", `{"model":"stories260K","prompt":"hi","stream":false}`},
	} {
		r := ts.post(t, c.path, c.body)
		if r.status != 429 || r.header.Get("Retry-After") == "" {
			t.Errorf("%s: status %d, Retry-After %q", c.path, r.status, r.header.Get("Retry-After"))
		}
		checkShape(t, c.api, r)
	}
	blocker.Close()
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Errorf("a queued request ended with %d", st)
		}
	}
}

// TestShutdownDrains: Shutdown lets a running stream finish, then stops.
func TestShutdownDrains(t *testing.T) {
	ts := startSlow(t, serve.Config{}, stages.Config{}, 10*time.Millisecond)
	resp, err := http.Post(ts.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","stream":true,"max_tokens":30}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for line, _ := rd.ReadString('\n'); !strings.HasPrefix(line, "data: "); line, _ = rd.ReadString('\n') {
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- ts.srv.Shutdown(ctx)
	}()
	n, done := 1, false
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
		done = done || line == "data: [DONE]\n"
	}
	if !done || n < 30 {
		t.Errorf("stream cut during drain: %d chunks, [DONE] %v", n, done)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(ts.url, "http://"), time.Second); err == nil {
		t.Error("still accepting connections after Shutdown")
	}
}

// TestHealthWhileLoading: before SetBackend, /health and the generation
// endpoints answer 503 in their shapes.
func TestHealthWhileLoading(t *testing.T) {
	srv := serve.New(serve.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	url := "http://" + ln.Addr().String()
	for _, c := range []struct{ api, method, path string }{
		{"openai", "GET", "/health"}, {"openai", "POST", "/v1/chat/completions"}, {"anthropic", "POST", "/v1/messages"}, {"ollama", "POST", "/api/chat"},
	} {
		req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&body)
		resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Errorf("%s while loading: %d", c.path, resp.StatusCode)
		}
		checkShape(t, c.api, response{status: resp.StatusCode, body: []byte(body.String())})
	}
	ts := start(t, serve.Config{}, stages.Config{})
	if r := ts.do(t, "GET", "/health", nil); r.status != 200 || string(r.body) != `{"status":"ok"}` {
		t.Errorf("ready: %d %s", r.status, r.body)
	}
}

// TestMetrics: /metrics exposes every family the issue lists.
func TestMetrics(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	for range 2 {
		ts.post(t, "/v1/chat/completions", map[string]any{"messages": chatMsgs, "max_tokens": 4, "stream": true})
	}
	ts.post(t, "/v1/chat/completions", `{`)
	// A stream ends before its last step is back at the scheduler.
	waitFor(t, "the engine to go idle", func() bool { return ts.engine.Stats().Running == 0 })
	r := ts.do(t, "GET", "/metrics", nil)
	body := string(r.body)
	for _, want := range []string{
		`flowinfer_requests_total{endpoint="/v1/chat/completions",status="200"} 2`,
		`flowinfer_requests_total{endpoint="/v1/chat/completions",status="400"} 1`,
		"flowinfer_prompt_tokens_total ", "flowinfer_generated_tokens_total 8",
		"flowinfer_time_to_first_token_seconds_count 2", "flowinfer_inter_token_latency_seconds_count 6",
		"flowinfer_queue_depth 0", "flowinfer_running_sequences 0", "flowinfer_kv_blocks_used 0", "flowinfer_kv_blocks_total 64",
		"flowinfer_prefix_cache_hit_ratio ", `flowinfer_stage_seconds_total{stage="compute",state="busy"}`,
		`flowinfer_stage_seconds_total{stage="sampler",state="waiting"}`,
		"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_resident_memory_bytes ",
		// the scheduler's: each request's prompt in one step (prefill),
		// then 3 decode-only steps (a mixed step would carry both)
		`flowinfer_steps_total{kind="prefill"} 2`, `flowinfer_steps_total{kind="decode"} 6`,
		`flowinfer_step_tokens_count{kind="decode"} 8`, `flowinfer_step_tokens_bucket{kind="decode",le="0"} 2`,
		"flowinfer_step_seconds_count 8", "flowinfer_queue_wait_seconds_count 2",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// TestConcurrentMatchesSolo: 32 concurrent greedy streams (batched 8 at a
// time) each produce exactly the text of the same request alone.
func TestConcurrentMatchesSolo(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NSeq: 8, NCtx: 128, MaxBatch: 32})
	prompts := []string{"Once upon a time", "The cat", "Lily and Max went to the park. They", "One day", "Tom had a big red ball.", "The sun"}
	req := func(i int) map[string]any {
		return map[string]any{"prompt": prompts[i%len(prompts)] + strings.Repeat(" and", i/len(prompts)), "max_tokens": 24, "logit_bias": map[string]any{"2": -100}}
	}
	const n = 32
	solo := make([]string, n)
	for i := range n {
		solo[i] = path(ts.post(t, "/v1/completions", req(i)).json(t), "choices.0.text").(string)
	}
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req(i)
			r["stream"] = true
			var b strings.Builder
			for _, ev := range parseSSE(t, ts.post(t, "/v1/completions", r).body) {
				if ev.data != "[DONE]" {
					s, _ := path(decodeJSON(t, ev.data), "choices.0.text").(string)
					b.WriteString(s)
				}
			}
			got[i] = b.String()
		}()
	}
	wg.Wait()
	for i := range n {
		if got[i] != solo[i] {
			t.Errorf("stream %d together: %q\nalone: %q", i, got[i], solo[i])
		}
	}
}

// TestAbortedStreamsLeaveNothing: 200 streams dropped mid-generation leave
// no running sequence, no KV block and, after shutdown, no goroutine.
func TestAbortedStreamsLeaveNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("200 streams")
	}
	before := runtime.NumGoroutine()
	t.Run("server", func(t *testing.T) {
		ts := startSlow(t, serve.Config{}, stages.Config{NSeq: 8, NCtx: 512}, time.Millisecond)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range 200 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				body := fmt.Sprintf(`{"prompt":"Once upon a time %d","stream":true,"logit_bias":{"2":-100}}`, i)
				path := "/v1/completions"
				if i%3 == 1 {
					path, body = "/v1/messages", fmt.Sprintf(`{"model":"stories260K","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"Story %d"}]}`, i)
				}
				c := ts.openStream(t, path, body)
				c.Close()
			}()
		}
		wg.Wait()
		waitFor(t, "every sequence to end", func() bool {
			st := ts.engine.Stats()
			return st.Running == 0 && st.KVBlocksUsed == 0 && st.Queued == 0
		})
		if r := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 2}); r.status != 200 {
			t.Errorf("after 200 aborts: %d %s", r.status, r.body)
		}
	})
	http.DefaultClient.CloseIdleConnections()
	waitGoroutines(t, before)
}
