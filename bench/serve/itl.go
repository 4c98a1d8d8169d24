// itl.go: -itl-words N measures a running stream's inter-token latency
// while a long prompt is admitted (issue 20). One stream decodes short
// requests back to back (greedy, end of generation ignored); after an idle
// phase a prompt of N words is sent with max_tokens 1. The gaps between the
// stream's text chunks are split into idle (ending before the long prompt
// was sent) and during (ending after it was sent and starting before its
// first token came back: a stream frozen through the whole prefill shows
// as one gap as long as it). Gaps between two requests of the stream are
// not counted.

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// itlResult is one server's ITL measurement.
type itlResult struct {
	Server       string  `json:"server"`
	PromptTokens int     `json:"long_prompt_tokens"`
	PromptS      float64 `json:"long_prompt_s"` // send to first token
	IdleN        int     `json:"idle_gaps"`
	IdleP50MS    float64 `json:"idle_p50_ms"`
	IdleP99MS    float64 `json:"idle_p99_ms"`
	IdleMaxMS    float64 `json:"idle_max_ms"`
	DuringN      int     `json:"during_gaps"`
	DuringP50MS  float64 `json:"during_p50_ms"`
	DuringP99MS  float64 `json:"during_p99_ms"`
	DuringMaxMS  float64 `json:"during_max_ms"`
	Err          string  `json:"error,omitempty"`
}

// longPrompt is a prompt of n words from storyText, with a distinct first
// token.
func longPrompt(n int) string {
	words := strings.Fields(storyText)
	var b strings.Builder
	b.WriteString("Document 1.")
	for j := range n {
		b.WriteByte(' ')
		b.WriteString(words[j%len(words)])
	}
	return b.String()
}

// runITL measures one server: idle for the given time, then the long prompt.
func runITL(ctx context.Context, client *http.Client, s *server, a api, words, nPredict int, idle time.Duration) itlResult {
	out := itlResult{Server: s.name}
	type gap struct {
		end time.Time
		d   time.Duration
	}
	var (
		mu   sync.Mutex
		gaps []gap
		wg   sync.WaitGroup
	)
	// The stream's request in flight when the long prompt is answered
	// runs to its end (its gaps span the prefill); no new one starts.
	var stopping atomic.Bool
	streamErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stopping.Load() && ctx.Err() == nil; i++ {
			r := complete(ctx, client, s.url, a, request{Prompt: prompts(1, []int{24}, nPredict, 900+i)[0].Prompt, MaxTokens: nPredict, Times: true})
			if r.Err != nil {
				streamErr <- r.Err
				return
			}
			mu.Lock()
			for j := 1; j < len(r.Arrivals); j++ {
				gaps = append(gaps, gap{r.Arrivals[j], r.Arrivals[j].Sub(r.Arrivals[j-1])})
			}
			mu.Unlock()
		}
	}()
	select {
	case <-time.After(idle):
	case err := <-streamErr:
		out.Err = err.Error()
		return out
	case <-ctx.Done():
		out.Err = ctx.Err().Error()
		return out
	}
	fmt.Fprintf(os.Stderr, "bench/serve: %s: idle phase done, sending the long prompt (%d words)\n", s.name, words)
	t0 := time.Now()
	long := complete(ctx, client, s.url, a, request{Prompt: longPrompt(words), MaxTokens: 1})
	t1 := t0.Add(long.TTFT)
	stopping.Store(true)
	wg.Wait()
	if long.Err != nil {
		out.Err = "long prompt: " + long.Err.Error()
		return out
	}
	select {
	case err := <-streamErr:
		out.Err = "stream: " + err.Error()
		return out
	default:
	}
	out.PromptTokens, out.PromptS = long.Prompt, long.TTFT.Seconds()
	var idleD, during []time.Duration
	mu.Lock()
	for _, g := range gaps {
		switch {
		case g.end.Before(t0):
			idleD = append(idleD, g.d)
		case g.end.Add(-g.d).Before(t1):
			during = append(during, g.d) // overlaps the prefill
		}
	}
	mu.Unlock()
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	out.IdleN, out.DuringN = len(idleD), len(during)
	out.IdleP50MS, out.IdleP99MS, out.IdleMaxMS = ms(percentile(idleD, 50)), ms(percentile(idleD, 99)), ms(percentile(idleD, 100))
	out.DuringP50MS, out.DuringP99MS, out.DuringMaxMS = ms(percentile(during, 50)), ms(percentile(during, 99)), ms(percentile(during, 100))
	return out
}

// printITL prints the ITL results.
func printITL(w *os.File, rs []itlResult) {
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Server, r.Err)
			continue
		}
		fmt.Fprintf(w, "%s: long prompt %d tokens, first token after %.1f s (%.1f prompt t/s)\n", r.Server, r.PromptTokens, r.PromptS, float64(r.PromptTokens)/r.PromptS)
		fmt.Fprintf(w, "  stream ITL idle:   p50 %6.1f ms  p99 %6.1f ms  max %7.1f ms  (%d gaps)\n", r.IdleP50MS, r.IdleP99MS, r.IdleMaxMS, r.IdleN)
		fmt.Fprintf(w, "  stream ITL during: p50 %6.1f ms  p99 %6.1f ms  max %7.1f ms  (%d gaps)  = x%.2f / x%.2f idle\n", r.DuringP50MS, r.DuringP99MS, r.DuringMaxMS, r.DuringN, r.DuringP50MS/r.IdleP50MS, r.DuringP99MS/r.IdleP99MS)
	}
}
