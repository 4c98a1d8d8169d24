// load.go: the load generator. Workers send streaming /v1/completions
// requests (greedy, a fixed output length, end-of-generation ignored) back
// to back; each request's time to first token and generated tokens are
// recorded, and a level's aggregate rate is all generated tokens over the
// wall time from the first request sent to the last one done.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// banned are the model's byte tokens (tokenizer.ggml.token_type 6), kept
// out of both servers' outputs by logit_bias: with random weights they
// make invalid UTF-8, and llama-server parses each output as a chat
// message and cuts the stream where that fails. Both servers get the same
// bias, so both do the same work.
var banned []int32

// request is one completion to send.
type request struct {
	Prompt    string
	MaxTokens int
	Times     bool // record each text chunk's arrival (result.Arrivals)
}

// result is what one request measured.
type result struct {
	TTFT   time.Duration // send to the first chunk with text
	Total  time.Duration
	Tokens int  // generated, from the usage chunk (chunks with text if none)
	Short  bool // fewer tokens than asked for
	Err    error
	// Arrivals are the text chunks' arrival times (request.Times).
	Arrivals []time.Time
	Prompt   int // prompt tokens, from the usage chunk (0 if none)
}

// level is one concurrency level's outcome.
type level struct {
	Server      string  `json:"server"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	Short       int     `json:"short_requests"` // ended before max_tokens
	Tokens      int     `json:"generated_tokens"`
	WallS       float64 `json:"wall_s"`
	TokPerS     float64 `json:"aggregate_tok_per_s"`
	TTFTP50MS   float64 `json:"ttft_p50_ms"`
	TTFTP99MS   float64 `json:"ttft_p99_ms"`
	// DecodeTokPerS is the mean per-stream decode rate: tokens after the
	// first over the time after the first (comparable to `flowinfer run`).
	DecodeTokPerS float64 `json:"decode_tok_per_s_per_stream"`
	FirstErr      string  `json:"first_error,omitempty"`
}

// api is how a server is asked for a completion.
type api int

const (
	apiOpenAI api = iota // /v1/completions, OpenAI chunks
	apiLlama             // llama-server's native /completion: its
	// /v1/completions parses the output as a chat message and fails on
	// random-weight text
)

// runLevel sends reqs through concurrency workers.
func runLevel(ctx context.Context, client *http.Client, base string, a api, reqs []request, concurrency int) level {
	results := make([]result, len(reqs))
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = complete(ctx, client, base, a, reqs[i])
			}
		}()
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	return summarize(results, concurrency, time.Since(start))
}

// summarize aggregates a level's results.
func summarize(results []result, concurrency int, wall time.Duration) level {
	l := level{Concurrency: concurrency, Requests: len(results), WallS: wall.Seconds()}
	var ttft []time.Duration
	var decode float64
	nDecode := 0
	for _, r := range results {
		if r.Err != nil {
			l.Errors++
			if l.FirstErr == "" {
				l.FirstErr = r.Err.Error()
			}
			l.Tokens += r.Tokens // generated before the failure: the work was done
			if r.TTFT > 0 {
				ttft = append(ttft, r.TTFT) // its first token came
			}
			continue
		}
		l.Tokens += r.Tokens
		if d := r.Total - r.TTFT; r.Tokens > 1 && d > 0 {
			decode += float64(r.Tokens-1) / d.Seconds()
			nDecode++
		}
		if r.Short {
			l.Short++
		}
		ttft = append(ttft, r.TTFT)
	}
	if wall > 0 {
		l.TokPerS = float64(l.Tokens) / wall.Seconds()
	}
	if nDecode > 0 {
		l.DecodeTokPerS = decode / float64(nDecode)
	}
	l.TTFTP50MS = percentile(ttft, 50).Seconds() * 1e3
	l.TTFTP99MS = percentile(ttft, 99).Seconds() * 1e3
	return l
}

// percentile is the nearest-rank percentile p of ds (0 if empty).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}

// complete sends one streaming completion and reads it to the end.
func complete(ctx context.Context, client *http.Client, base string, a api, r request) result {
	fields := map[string]any{"prompt": r.Prompt, "stream": true, "temperature": 0, "ignore_eos": true, "cache_prompt": false}
	path := "/v1/completions"
	if len(banned) > 0 {
		bias := map[string]any{}
		ll := make([][2]any, len(banned))
		for i, t := range banned {
			bias[strconv.Itoa(int(t))] = -100
			ll[i] = [2]any{t, false}
		}
		fields["logit_bias"] = bias
		if a == apiLlama {
			fields["logit_bias"] = ll // llama-server's form: false = never
		}
	}
	if a == apiLlama {
		path = "/completion"
		fields["n_predict"] = r.MaxTokens
		// the chunks list their tokens: a stream that ends in an error
		// still counts what it generated
		fields["return_tokens"] = true
	} else {
		fields["max_tokens"] = r.MaxTokens
		fields["stream_options"] = map[string]any{"include_usage": true}
	}
	body, _ := json.Marshal(fields)
	req, err := http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(body))
	if err != nil {
		return result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return result{Err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	var res result
	chunks := 0
	streamed := 0 // tokens listed by llama-server's chunks
	promptN := 0  // llama-server's timings.prompt_n
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := rd.ReadString('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return result{Err: err}
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
				PromptTokens     int `json:"prompt_tokens"`
			} `json:"usage"`
			Content   string  `json:"content"` // llama-server's /completion
			Stop      bool    `json:"stop"`
			Predicted int     `json:"tokens_predicted"`
			Tokens    []int32 `json:"tokens"`
			Timings   *struct {
				PromptN int `json:"prompt_n"`
			} `json:"timings"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return result{Err: fmt.Errorf("bad chunk %q: %w", data, err)}
		}
		if len(c.Error) > 0 {
			// llama-server parses each output as a chat message and fails
			// at the end of some random-weight texts (invalid UTF-8 where
			// max tokens cut a character): the tokens came and count, with
			// their first token's time; the request counts as an error
			res.Err, res.Tokens = fmt.Errorf("stream error: %s", c.Error), streamed
			res.Total = time.Since(t0)
			return res
		}
		streamed += len(c.Tokens)
		if c.Timings != nil {
			promptN = c.Timings.PromptN
		}
		text := c.Content
		if len(c.Choices) > 0 {
			text = c.Choices[0].Text
		}
		if text != "" {
			if res.TTFT == 0 {
				res.TTFT = time.Since(t0)
			}
			if r.Times {
				res.Arrivals = append(res.Arrivals, time.Now())
			}
			chunks++
		}
		if c.Usage != nil {
			res.Tokens, res.Prompt = c.Usage.CompletionTokens, c.Usage.PromptTokens
		}
		if a == apiLlama && c.Stop {
			res.Tokens = c.Predicted
			break
		}
	}
	res.Total = time.Since(t0)
	if res.Tokens == 0 {
		res.Tokens = chunks
	}
	if res.Prompt == 0 && a == apiLlama {
		res.Prompt = promptN
	}
	res.Short = res.Tokens < r.MaxTokens
	if res.TTFT == 0 {
		return result{Err: errors.New("no text in the stream")}
	}
	return res
}
