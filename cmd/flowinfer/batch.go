// This file is `flowinfer batch`: a file of requests (OpenAI batch JSONL or
// the simple form) answered offline by the same handler `flowinfer serve`
// uses, on one engine decoding --parallel sequences per step (continuous
// batching). The work is package serve/batch; this wires the model, the
// engine, the server and a progress bar.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/serve/batch"
)

// BatchCmd runs a file of requests.
type BatchCmd struct {
	ModelFlags
	SamplingFlags
	PipelineFlags
	Input      string   `short:"i" required:"" help:"Input JSONL: OpenAI batch lines {custom_id, method, url, body} or {id, messages|prompt, ...}." type:"existingfile" placeholder:"IN.jsonl"`
	Output     string   `short:"o" required:"" help:"Output JSONL (OpenAI batch output records); an existing file is resumed. Locked while the run writes it: a second run on it fails." type:"path" placeholder:"OUT.jsonl"`
	Ordered    bool     `help:"Write records in input order (default: as they finish)."`
	Shard      string   `help:"Process only lines i, i+n, i+2n, ... (0-based), e.g. 0/4." placeholder:"i/n"`
	NPredict   int      `short:"n" name:"n-predict" default:"-1" help:"Default max tokens of a request that sets none (-1 = until end of generation or a full context)."`
	Window     int      `default:"0" help:"Requests in flight (0 = 2 × --parallel)."`
	SyncEvery  int      `name:"sync-every" default:"64" help:"fsync the output after this many records (and at least every second)."`
	NoProgress bool     `name:"no-progress" help:"No progress bar on stderr."`
	Alias      []string `name:"alias" help:"Model name(s) the input's lines may ask for (repeatable, or comma-separated), e.g. gpt-4o-mini; the first is reported (default: the file name)." sep:","`
}

// parseShard reads "i/n".
func parseShard(s string) (i, n int, err error) {
	if s == "" {
		return 0, 1, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("--shard %q: want i/n with 0 <= i < n, e.g. 0/4", s)
	}
	return i, n, nil
}

func (c *BatchCmd) apply(cfg *configs.Config) {
	applyPipeline(cfg, &c.PipelineFlags, &c.SamplingFlags, c.NPredict)
}

func (c *BatchCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shard, shards, err := parseShard(c.Shard)
	if err != nil {
		return err
	}
	cfg := &g.Config
	params, err := c.params(&cfg.Sampling)
	if err != nil {
		return err
	}
	window := c.Window
	if window <= 0 {
		window = 2 * cfg.Pipeline.Parallel
	}
	// Lock the output before the model loads: a second run on the same
	// output fails at once instead of after the load.
	out, err := batch.OpenOutput(c.Output)
	if err != nil {
		return err
	}
	defer out.Close()
	l, err := c.open(ctx, g.Log)
	if err != nil {
		return err
	}
	defer l.Close()
	p := &cfg.Pipeline
	sc := engineConfig(p, ctxSize(l, p.KVCache.CtxSize, g.Log))
	sc.StepFactor = -1               // offline: prompt chunks fill the batch (throughput, no stream to protect)
	sc.Queue = max(sc.Queue, window) // every request in flight fits: no 429s
	rg, e, err := newEngine(l, p, &c.WeightFlags, sc, nil, true, g.Log)
	if err != nil {
		return err
	}
	defer rg.Close()
	run := start(ctx, e) // an interrupt aborts it: requests in flight are not written
	srv := serve.New(serve.Config{Aliases: c.Alias, Defaults: params, Stops: c.Stop, MaxTokens: max(cfg.Sampling.MaxTokens, 0), Fingerprint: "flowinfer-" + version, Log: g.Log})
	srv.SetBackend(backend(e, rg, nil, c.Model, run))
	var bar progress
	opts := batch.Options{
		Input: c.Input, Out: out, Handler: srv.Handler(), Window: window, Ordered: c.Ordered,
		Shard: shard, Shards: shards, SyncEvery: c.SyncEvery,
	}
	if !c.NoProgress {
		opts.Progress = bar.update
	}
	st, err := batch.Run(ctx, opts)
	e.Close()
	<-run.done
	bar.finish()
	c.report(st, sc.NSeq)
	switch {
	case errors.Is(err, batch.ErrInterrupted):
		return fmt.Errorf("interrupted: %d records written to %s; run the same command again to resume", st.Written, c.Output)
	case err != nil:
		return err
	case run.err != nil && !errors.Is(run.err, context.Canceled):
		return fmt.Errorf("engine: %w", run.err)
	case st.Retryable > 0:
		return fmt.Errorf("%d requests failed with server errors and were not written; run the same command again to retry them", st.Retryable)
	}
	return nil
}

// progress is the progress bar on stderr.
type progress struct{ bar *progressbar.ProgressBar }

func (pb *progress) update(p batch.Progress) {
	if pb.bar == nil {
		pb.bar = progressbar.NewOptions(p.Total,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("batch"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }),
		)
	}
	tps := float64(p.CompletionTokens) / max(p.Elapsed.Seconds(), 1e-9)
	pb.bar.Describe(fmt.Sprintf("batch %6.1f tok/s, %d failed, %d malformed", tps, p.Failed, p.Malformed))
	pb.bar.Set(p.Done)
}

// finish ends a bar the run left unfinished (interrupted, or lines not
// written).
func (pb *progress) finish() {
	if pb.bar != nil && !pb.bar.IsFinished() {
		pb.bar.Exit()
		fmt.Fprintln(os.Stderr)
	}
}

// report prints what the run did.
func (c *BatchCmd) report(st batch.Stats, parallel int) {
	secs := max(st.Elapsed.Seconds(), 1e-9)
	fmt.Fprintf(os.Stderr, "flowinfer: batch: %d records written (%d ok, %d failed, %d malformed; %d already done) in %.2fs: %.2f requests/s, %d tokens generated, %.1f tok/s, parallel %d\n",
		st.Written, st.OK, st.Failed, st.Malformed, st.Skipped, secs, float64(st.Written)/secs, st.CompletionTokens, float64(st.CompletionTokens)/secs, parallel)
	if st.UnknownModel > 0 {
		fmt.Fprintf(os.Stderr, "flowinfer: batch: %d of the failed lines asked for a model this run does not serve; name it with --alias\n", st.UnknownModel)
	}
	if st.TornBytes > 0 {
		fmt.Fprintf(os.Stderr, "flowinfer: batch: dropped a torn last line (%d bytes) of %s\n", st.TornBytes, c.Output)
	}
}
