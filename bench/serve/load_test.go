package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, c := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(5), 99, 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 99, 4 * time.Millisecond},
		{ms(10, 20, 30, 40, 50, 60, 70, 80, 90, 100), 90, 90 * time.Millisecond},
	} {
		if got := percentile(c.in, c.p); got != c.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.in, c.p, got, c.want)
		}
	}
}

// TestRunLevel drives a fake SSE server (loopback) and checks what a level
// counts: tokens from the usage chunk, TTFT at the first text, errors.
func TestRunLevel(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": ping\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		for range 3 {
			fmt.Fprint(w, `data: {"choices":[{"text":"ab"}]}`+"\n\n")
		}
		fmt.Fprint(w, `data: {"choices":[],"usage":{"completion_tokens":5}}`+"\n\ndata: [DONE]\n\n")
	})
	mux.HandleFunc("/completion", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `data: {"content":"a","stop":false}`+"\n\n"+`data: {"content":"","stop":true,"tokens_predicted":4}`+"\n\n")
	})
	mux.HandleFunc("/bad/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"busy"}`, 429)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	l := runLevel(context.Background(), http.DefaultClient, base, apiOpenAI, prompts(6, []int{3, 5}, 5, 1), 3)
	if l.Requests != 6 || l.Errors != 0 || l.Tokens != 30 || l.TTFTP50MS < 20 || l.TokPerS <= 0 {
		t.Errorf("level %+v", l)
	}
	l = runLevel(context.Background(), http.DefaultClient, base+"/bad", apiOpenAI, prompts(2, []int{3}, 5, 1), 2)
	if l.Errors != 2 || l.Tokens != 0 || l.FirstErr == "" {
		t.Errorf("failing level %+v", l)
	}
	// llama-server's native endpoint.
	l = runLevel(context.Background(), http.DefaultClient, base, apiLlama, prompts(2, []int{3}, 5, 1), 2)
	if l.Errors != 0 || l.Tokens != 8 || l.Short != 2 {
		t.Errorf("native level %+v", l)
	}
}

func TestPromptsDistinct(t *testing.T) {
	ps := prompts(8, []int{2, 4}, 7, 3)
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.Prompt] || p.MaxTokens != 7 {
			t.Errorf("prompt %q repeated or wrong length", p.Prompt)
		}
		seen[p.Prompt] = true
	}
}
