// Command serve (bench/serve) measures flowinfer serve against llama-server
// under concurrent load, in one run on the same GGUF: aggregate generated
// tokens per second and time to first token (p50, p99) at each number of
// concurrent streams (1, 4, 16 by default), with fixed prompts of mixed
// length, greedy sampling and a fixed output length (end of generation
// ignored). Both servers get the same sequence slots (--parallel N vs
// -np N, continuous batching on) and threads. Optionally it also times
// `flowinfer run` on the short prompt, the single-stream reference.
//
//	go run ./bench/serve -model models/llama-1b-Q4_K_M.gguf \
//	    -llama-server ../llama.cpp/build/bin/llama-server
//
// (or LLAMA_SERVER=... in the environment; without either, llama-server is
// skipped and says so)
//
// With -itl-words N it measures instead one stream's inter-token latency
// (p50, p99, max) idle and while a prompt of N words is admitted (itl.go):
//
//	go run ./bench/serve -model llama-1b-q4km.gguf -itl-words 12500 -ctx 16640 -n-predict 256
//
// With -prefix-words N it measures instead prefix caching through the chat
// endpoint: requests sharing a system prompt of N words, one after another,
// each one's time to first token and cached prompt tokens (prefix.go):
//
//	go run ./bench/serve -model qwen35-mid.gguf -prefix-words 580 -ctx 4096 -n-predict 4
//
// Everything listens on 127.0.0.1. Results print as a table and, with
// -json, as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flowinfer/flowinfer/io/gguf"
)

func main() {
	model := flag.String("model", "", "GGUF model both servers load (required)")
	flowinfer := flag.String("flowinfer", "", "flowinfer binary (default: go build ./cmd/flowinfer)")
	llama := flag.String("llama-server", os.Getenv("LLAMA_SERVER"), "llama-server binary [$LLAMA_SERVER] (skipped, with a message, if not given)")
	levels := flag.String("concurrency", "1,4,16", "concurrent streams per level")
	perLevel := flag.Int("requests", 0, "requests per level (0: 2 × streams, at least 4)")
	nPredict := flag.Int("n-predict", 64, "tokens generated per request")
	words := flag.String("prompt-words", "24,96,288", "prompt lengths in words, cycled over the requests")
	ctxPer := flag.Int("ctx", 1024, "context per sequence")
	threads := flag.Int("threads", 0, "compute threads for both servers (0: physical cores)")
	runBase := flag.Bool("run-baseline", true, "also time `flowinfer run` on the short prompt")
	jsonOut := flag.String("json", "", "write the results as JSON to this file")
	itlWords := flag.Int("itl-words", 0, "instead of the load levels: one stream's inter-token latency while a prompt of this many words is admitted (2 sequence slots; set -ctx to hold it)")
	itlIdle := flag.Duration("itl-idle", 20*time.Second, "with -itl-words: how long the stream runs alone first")
	prefixWords := flag.Int("prefix-words", 0, "instead of the load levels: chat requests sharing a system prompt of this many words, one after another (prefix caching: time to first token, cached tokens)")
	serveArgs := flag.String("serve-args", "", "extra arguments for flowinfer serve, space-separated (for example \"--step-factor 0\")")
	flag.Parse()
	if *model == "" {
		fmt.Fprintln(os.Stderr, "bench/serve: -model is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{model: *model, flowinfer: *flowinfer, llama: *llama, levels: *levels, perLevel: *perLevel,
		nPredict: *nPredict, words: *words, ctx: *ctxPer, threads: *threads, runBase: *runBase, jsonOut: *jsonOut,
		itlWords: *itlWords, itlIdle: *itlIdle, prefixWords: *prefixWords, serveArgs: strings.Fields(*serveArgs)}); err != nil {
		fmt.Fprintln(os.Stderr, "bench/serve:", err)
		os.Exit(1)
	}
}

type config struct {
	model, flowinfer, llama, levels, words, jsonOut string
	perLevel, nPredict, ctx, threads                int
	runBase                                         bool
	itlWords, prefixWords                           int
	itlIdle                                         time.Duration
	serveArgs                                       []string
}

// report is the JSON output.
type report struct {
	Model      string  `json:"model"`
	NPredict   int     `json:"n_predict"`
	Threads    int     `json:"threads"`
	Levels     []level `json:"levels"`
	RunTokPerS float64 `json:"flowinfer_run_tok_per_s,omitempty"`
}

func run(ctx context.Context, c config) error {
	var counts []int
	for _, f := range strings.Split(c.levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -concurrency %q", c.levels)
		}
		counts = append(counts, n)
	}
	var lengths []int
	for _, f := range strings.Split(c.words, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -prompt-words %q", c.words)
		}
		lengths = append(lengths, n)
	}
	var err error
	if banned, err = byteTokens(c.model); err != nil {
		return err
	}
	maxC := slices.Max(counts)
	if c.itlWords > 0 {
		maxC = 2 // the stream and the long prompt
	}
	if c.prefixWords > 0 {
		maxC = 1 // one request at a time
	}
	tmp, err := os.MkdirTemp("", "bench-serve")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench/serve: logs in %s\n", tmp)
	if c.flowinfer == "" {
		c.flowinfer = filepath.Join(tmp, "flowinfer")
		build := exec.Command("go", "build", "-o", c.flowinfer, "./cmd/flowinfer")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building flowinfer (run from the repository root or pass -flowinfer): %w", err)
		}
	}
	type target struct {
		name, bin string
		args      []string
		api       api
	}
	th := strconv.Itoa(c.threads)
	targets := []target{{"flowinfer", c.flowinfer, []string{"serve", "-m", c.model, "--parallel", strconv.Itoa(maxC), "-c", strconv.Itoa(c.ctx), "-t", th, "--queue", "1024", "--log-level", "warn"}, apiOpenAI}}
	targets[0].args = append(targets[0].args, c.serveArgs...)
	if c.llama == "" {
		fmt.Fprintln(os.Stderr, "bench/serve: no -llama-server (or $LLAMA_SERVER) given: measuring flowinfer only")
	} else if _, err := os.Stat(c.llama); err == nil {
		args := []string{"-m", c.model, "-np", strconv.Itoa(maxC), "-c", strconv.Itoa(maxC * c.ctx), "--cont-batching", "--no-webui"}
		// llama-server caps a slot's context at the training context;
		// flowinfer serves the -c asked for: both get -ctx
		if arch, train, err := trainContext(c.model); err != nil {
			return err
		} else if c.ctx > train {
			args = append(args, "--override-kv", fmt.Sprintf("%s.context_length=int:%d", arch, c.ctx))
			fmt.Fprintf(os.Stderr, "bench/serve: -ctx %d is beyond the model's training context %d: llama-server gets --override-kv %s.context_length=int:%d\n", c.ctx, train, arch, c.ctx)
		}
		if c.threads > 0 {
			args = append(args, "-t", th)
		}
		targets = append(targets, target{"llama-server", c.llama, args, apiLlama})
	} else {
		fmt.Fprintf(os.Stderr, "bench/serve: no llama-server at %s: measuring flowinfer only\n", c.llama)
	}

	// A connection per request: llama-server closes idle keep-alive
	// connections, which a client may not notice before it writes.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	rep := report{Model: c.model, NPredict: c.nPredict, Threads: c.threads}
	servers := make([]*server, len(targets))
	apis := make([]api, len(targets))
	for i, t := range targets {
		apis[i] = t.api
		s, err := startServer(ctx, t.name, t.bin, t.args, tmp)
		if err != nil {
			return err
		}
		defer s.stop()
		servers[i] = s
		// Warm up (page in the weights, JIT-free but caches cold).
		runLevel(ctx, client, s.url, t.api, prompts(1, lengths[:1], 8, 1000), 1)
	}
	if c.prefixWords > 0 {
		var rs []prefixResult
		for _, s := range servers {
			rs = append(rs, runPrefix(ctx, client, s, c.prefixWords, c.nPredict)...)
			s.stop() // the next server measures alone
		}
		printPrefix(os.Stdout, rs)
		if c.jsonOut != "" {
			b, _ := json.MarshalIndent(rs, "", "  ")
			return os.WriteFile(c.jsonOut, append(b, '\n'), 0o644)
		}
		return nil
	}
	if c.itlWords > 0 {
		var rs []itlResult
		for i, s := range servers {
			rs = append(rs, runITL(ctx, client, s, apis[i], c.itlWords, c.nPredict, c.itlIdle))
			s.stop() // the next server measures alone
		}
		printITL(os.Stdout, rs)
		if c.jsonOut != "" {
			b, _ := json.MarshalIndent(rs, "", "  ")
			return os.WriteFile(c.jsonOut, append(b, '\n'), 0o644)
		}
		return nil
	}
	for _, n := range counts {
		reqs := c.perLevel
		if reqs <= 0 {
			reqs = max(2*n, 4)
		}
		for i, s := range servers {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Distinct prompts per request and per level: no prefix-cache hits.
			l := runLevel(ctx, client, s.url, apis[i], prompts(reqs, lengths, c.nPredict, 100*n+10*i), n)
			l.Server = s.name
			rep.Levels = append(rep.Levels, l)
			fmt.Fprintf(os.Stderr, "bench/serve: %-12s %2d streams: %7.1f tok/s, TTFT p50 %7.0f ms p99 %7.0f ms (%d errors)\n",
				s.name, n, l.TokPerS, l.TTFTP50MS, l.TTFTP99MS, l.Errors)
		}
	}
	for _, s := range servers {
		s.stop()
	}
	if c.runBase {
		tps, err := runBaseline(ctx, c, prompts(1, lengths[:1], c.nPredict, 0)[0].Prompt)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/serve: flowinfer run:", err)
		}
		rep.RunTokPerS = tps
	}
	printTable(os.Stdout, rep)
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		return os.WriteFile(c.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// prompts makes n distinct prompts, cycling over the word lengths; seed
// makes them differ between levels and servers.
// trainContext returns the model's architecture and training context.
func trainContext(path string) (string, int, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	arch, _ := f.GetString("general.architecture")
	n, _ := f.GetUint(arch + ".context_length")
	return arch, int(n), nil
}

// byteTokens returns the ids of the model's byte tokens (type 6 in
// tokenizer.ggml.token_type: SentencePiece's byte fallback), none for a
// vocabulary without them.
func byteTokens(path string) ([]int32, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, ok := f.Get("tokenizer.ggml.token_type")
	if !ok {
		return nil, nil
	}
	types, ok := v.Int32s()
	if !ok {
		return nil, fmt.Errorf("%s: tokenizer.ggml.token_type is not an array of int32", path)
	}
	var ids []int32
	for i, t := range types {
		if t == 6 {
			ids = append(ids, int32(i))
		}
	}
	return ids, nil
}

func prompts(n int, lengths []int, nPredict, seed int) []request {
	words := strings.Fields(storyText)
	out := make([]request, n)
	for i := range out {
		w := lengths[i%len(lengths)]
		var b strings.Builder
		fmt.Fprintf(&b, "Story %d.", seed*1000+i) // a distinct first token: no shared prefix
		for j := range w {
			b.WriteByte(' ')
			b.WriteString(words[(i*7+j)%len(words)])
		}
		out[i] = request{Prompt: b.String(), MaxTokens: nPredict}
	}
	return out
}

// runBaseline times `flowinfer run` generating nPredict tokens after the
// prompt and returns its decode rate.
func runBaseline(ctx context.Context, c config, prompt string) (float64, error) {
	cmd := exec.CommandContext(ctx, c.flowinfer, "run", "-m", c.model, "-p", prompt, "-n", strconv.Itoa(c.nPredict), "--ignore-eos", "--temp", "0", "-t", strconv.Itoa(c.threads), "-c", strconv.Itoa(c.ctx), "--no-display-prompt")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	m := regexp.MustCompile(`eval time = .*runs .*?([0-9.]+) tokens per second`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no eval rate in:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// printTable prints the levels side by side with flowinfer/llama-server
// ratios.
func printTable(w *os.File, rep report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tstreams\trequests\terrors\tshort\tgen tokens\twall s\tagg tok/s\tTTFT p50 ms\tTTFT p99 ms\tdecode tok/s/stream\t")
	by := map[string]map[int]level{}
	for _, l := range rep.Levels {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.1f\t%.0f\t%.0f\t%.1f\t\n", l.Server, l.Concurrency, l.Requests, l.Errors, l.Short, l.Tokens, l.WallS, l.TokPerS, l.TTFTP50MS, l.TTFTP99MS, l.DecodeTokPerS)
		if by[l.Server] == nil {
			by[l.Server] = map[int]level{}
		}
		by[l.Server][l.Concurrency] = l
	}
	tw.Flush()
	if f, ok := by["flowinfer"]; ok && by["llama-server"] != nil {
		fmt.Fprintln(w, "\nflowinfer / llama-server:")
		for _, l := range rep.Levels {
			if l.Server != "flowinfer" {
				continue
			}
			r := by["llama-server"][l.Concurrency]
			if r.TokPerS > 0 && r.TTFTP99MS > 0 {
				fmt.Fprintf(w, "  %2d streams: tok/s x%.2f, TTFT p50 x%.2f, p99 x%.2f\n", l.Concurrency, f[l.Concurrency].TokPerS/r.TokPerS, l.TTFTP50MS/r.TTFTP50MS, l.TTFTP99MS/r.TTFTP99MS)
			}
		}
	}
	if rep.RunTokPerS > 0 {
		fmt.Fprintf(w, "\nflowinfer run, 1 stream: %.1f tok/s (decode)\n", rep.RunTokPerS)
	}
}

// storyText is the prompt material (any text works: the lengths matter).
const storyText = `Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she saw a big, red ball in the park. She ran to it and picked it up. It was very shiny and new. Lily wanted to play with the ball, but it was not hers. She looked around and saw a boy named Tom. He was sad because he lost his ball. Lily gave the ball back to Tom and he was very happy. They played together all day and became good friends. The sun went down and the sky turned orange and pink. Lily went home and told her mom about her new friend. Her mom smiled and gave her a big hug.`
