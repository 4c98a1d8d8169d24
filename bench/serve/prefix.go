// prefix.go: -prefix-words N: prefix caching through the OpenAI chat
// endpoint. Chat requests that share a system prompt of N words and differ
// in their user message are sent one after another (streamed, greedy,
// -n-predict tokens); each one's time to first token and the prompt
// tokens the server reports cached are printed. The first request
// computes the whole prompt; the next ones should compute only what
// follows the shared prefix.

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
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// prefixUsers are the user messages after the shared system prompt.
var prefixUsers = []string{"What is the first note about?", "Summarize the notes in one line.", "Which word comes last?"}

// prefixResult is one chat request's outcome.
type prefixResult struct {
	Server string  `json:"server"`
	N      int     `json:"request"`
	TTFTMS float64 `json:"ttft_ms"`
	Prompt int     `json:"prompt_tokens"`
	Cached int     `json:"cached_tokens"`
	Err    string  `json:"error,omitempty"`
}

// runPrefix sends the chat requests to s, one after another.
func runPrefix(ctx context.Context, client *http.Client, s *server, words, nPredict int) []prefixResult {
	system := "You are a helpful assistant. Follow these notes carefully. " + strings.TrimPrefix(longPrompt(words), "Document 1. ")
	var out []prefixResult
	for i, user := range prefixUsers {
		r := chat(ctx, client, s.url, system, user, nPredict)
		r.Server, r.N = s.name, i+1
		out = append(out, r)
	}
	return out
}

// chat sends one streaming chat completion and reads it to the end.
func chat(ctx context.Context, client *http.Client, base, system, user string, nPredict int) prefixResult {
	fields := map[string]any{"stream": true, "temperature": 0, "max_tokens": nPredict,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}}}
	if len(banned) > 0 {
		bias := map[string]any{}
		for _, t := range banned {
			bias[strconv.Itoa(int(t))] = -100
		}
		fields["logit_bias"] = bias
	}
	body, _ := json.Marshal(fields)
	fail := func(err error) prefixResult { return prefixResult{Err: err.Error()} }
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fail(fmt.Errorf("status %d: %s", resp.StatusCode, b))
	}
	var res prefixResult
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := rd.ReadString('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					Reasoning string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      *struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fail(fmt.Errorf("bad chunk %q: %w", data, err))
		}
		if res.TTFTMS == 0 && len(c.Choices) > 0 && c.Choices[0].Delta.Content+c.Choices[0].Delta.Reasoning != "" {
			res.TTFTMS = float64(time.Since(t0).Microseconds()) / 1000
		}
		if u := c.Usage; u != nil {
			res.Prompt = u.PromptTokens
			if u.Details != nil {
				res.Cached = u.Details.Cached
			}
		}
	}
	if res.TTFTMS == 0 {
		return fail(errors.New("no text in the stream"))
	}
	return res
}

func printPrefix(w *os.File, rs []prefixResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\trequest\tprompt tokens\tcached\tTTFT ms\tof the first\t")
	first := map[string]float64{}
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t%d\terror: %s\t\t\t\t\n", r.Server, r.N, r.Err)
			continue
		}
		if r.N == 1 {
			first[r.Server] = r.TTFTMS
		}
		pct := ""
		if f := first[r.Server]; f > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*r.TTFTMS/f)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%s\t\n", r.Server, r.N, r.Prompt, r.Cached, r.TTFTMS, pct)
	}
	tw.Flush()
}
