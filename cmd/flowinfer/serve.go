package main

// serve.go: the `serve` command. It listens first (so /health answers 503
// while the model loads), loads the model, starts the stage engine, and on
// SIGTERM or SIGINT drains: no new requests, in-flight streams finish (up
// to --drain-timeout), then the engine stops.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// ServeCmd runs the HTTP server (OpenAI, Anthropic and Ollama APIs).
type ServeCmd struct {
	ModelFlags
	SamplingFlags
	WeightFlags
	Host         string           `default:"127.0.0.1" help:"Address to listen on (loopback by default)."`
	Port         int              `default:"8080" help:"Port to listen on (0 = any free port; the address is printed)."`
	Parallel     int              `name:"parallel" short:"P" default:"4" help:"Sequences generated together (continuous batching)."`
	CtxSize      int              `short:"c" name:"ctx-size" default:"0" help:"Context per sequence in tokens (0 = the model's, at most 4096). Unlike llama-server's -c, not divided by --parallel."`
	KVTokens     int              `name:"kv-tokens" default:"0" help:"KV cache pool in tokens, shared by all sequences (0 = parallel × ctx-size, or what --kv-budget holds). Smaller pools preempt sequences when full."`
	KVBudget     configs.ByteSize `name:"kv-budget" default:"0" help:"KV cache pool in bytes (e.g. 2GiB): as many tokens as fit in the K and V types chosen (-ctk/-ctv), so smaller types admit more context. Exclusive with --kv-tokens."`
	KVBlock      int              `name:"kv-block" default:"16" help:"Tokens per KV cache block (a power of two); prefixes are shared in whole blocks."`
	BatchSize    int              `short:"b" name:"batch-size" default:"512" help:"Tokens per forward step (prompt chunks share it with decode tokens)."`
	Threads      int              `short:"t" default:"0" help:"Compute threads (0 = physical cores)."`
	Queue        int              `default:"64" help:"Requests waiting for a free sequence before the server answers 429."`
	StepFactor   float64          `name:"step-factor" default:"2" help:"While sequences decode, prompt tokens are added to their steps (sized from measured step times) so that those steps take on average this many times a decode-only step, so a long prompt does not freeze running streams; more than 1 (0 or negative: prompt chunks fill the batch, most prompt throughput)."`
	EdgeTokens   int              `name:"edge-tokens" default:"64" help:"Capacity of the sampler->streamer edge (token events buffered ahead of the output)."`
	NPredict     int              `short:"n" name:"n-predict" default:"-1" help:"Default max tokens per request (-1 = until end of generation or a full context)."`
	APIKey       string           `name:"api-key" env:"FLOWINFER_API_KEY" help:"Require this key (Authorization: Bearer KEY or x-api-key)."`
	Alias        []string         `name:"alias" help:"Model name(s) clients use; the first is reported (default: the file name)." sep:","`
	MaxBody      int              `name:"max-body" default:"16777216" help:"Largest request body in bytes."`
	Heartbeat    time.Duration    `default:"2s" help:"SSE comment interval while a stream has nothing to send (e.g. during prefill)."`
	DrainTimeout time.Duration    `name:"drain-timeout" default:"60s" help:"On SIGTERM, how long in-flight requests may run before they are cut."`
	ReadTimeout  time.Duration    `name:"read-timeout" default:"30s" help:"Longest time a request's headers and body may take to arrive; slower clients get 408 and are cut (responses and streams are not limited)."`
	MaxConns     int              `name:"max-conns" default:"1024" help:"Most concurrent connections; one more gets 503 and is closed."`
	MaxHeader    int              `name:"max-header-bytes" default:"16384" help:"Largest request line and headers in bytes; a larger head gets 431."`
	CORSOrigin   []string         `name:"cors-origin" help:"Browser origin allowed to call the API (repeatable; e.g. http://localhost:3000, or * for any). Default: none (no CORS headers)."`
	Pooling      string           `name:"pooling" default:"" help:"Embedding pooling: mean, cls or last (default: the GGUF's <arch>.pooling_type, last when it has none)."`
}

// serveTraceEvents bounds each stage's events in the server's recorder.
const serveTraceEvents = 1 << 14

func (c *ServeCmd) Run(g *Globals) error {
	switch {
	case c.ReadTimeout <= 0:
		return fmt.Errorf("--read-timeout %v: must be positive", c.ReadTimeout)
	case c.MaxConns <= 0:
		return fmt.Errorf("--max-conns %d: must be positive", c.MaxConns)
	case c.MaxHeader < 1024:
		return fmt.Errorf("--max-header-bytes %d: must be at least 1024", c.MaxHeader)
	case c.StepFactor > 0 && c.StepFactor <= 1:
		return fmt.Errorf("--step-factor %g: must be more than 1 (steps that decode may take that many times a decode-only step), or 0 or negative to turn pacing off", c.StepFactor)
	case badOrigin(c.CORSOrigin) != "":
		return fmt.Errorf("--cors-origin %q: not an origin (scheme://host[:port], no path, or *)", badOrigin(c.CORSOrigin))
	}
	var pooling stages.Pooling
	if c.Pooling != "" {
		p, err := stages.ParsePooling(c.Pooling)
		if err != nil {
			return fmt.Errorf("--pooling: %w", err)
		}
		pooling = p
	}
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	log := g.Log
	params, err := c.params()
	if err != nil {
		return err
	}
	if c.Parallel < 1 {
		return fmt.Errorf("--parallel must be at least 1, got %d", c.Parallel)
	}
	srv := serve.New(serve.Config{
		Aliases: c.Alias, APIKey: c.APIKey, Defaults: params, MaxTokens: max(c.NPredict, 0), Stops: c.Stop,
		MaxBodyBytes: c.MaxBody, Heartbeat: c.Heartbeat, Fingerprint: "flowinfer-" + version, Log: log,
		ReadTimeout: c.ReadTimeout, MaxConns: c.MaxConns, MaxHeaderBytes: c.MaxHeader, CORSOrigins: trimSlashes(c.CORSOrigin),
		Pooling: pooling,
	})
	ln, err := net.Listen("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "flowinfer: listening on http://%s (loading the model)\n", ln.Addr())

	path, demo, err := c.resolve(sigCtx, log)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	if demo {
		fmt.Fprint(os.Stderr, demoBanner)
	}
	be := cpu.NewBackend(c.Threads, nil)
	defer be.Close()
	b, err := model.Open(path, be.Supports, log)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	defer b.Close()
	l := &loaded{Bundle: b, demo: demo, path: path}
	nCtx := ctxSize(l, c.CtxSize, log)
	if c.KVBudget > 0 {
		if c.KVTokens > 0 {
			srv.Shutdown(context.Background())
			return fmt.Errorf("--kv-tokens %d and --kv-budget %v both size the KV pool: set one", c.KVTokens, c.KVBudget)
		}
		per, err := model.KVBytesPerToken(&l.Model.Hyper, c.kvTypes())
		if err != nil {
			srv.Shutdown(context.Background())
			return err
		}
		// the budget holds --kv-recent's f16 windows too
		win := model.KVRecentReserve(&l.Model.Hyper, c.kvTypes(), c.Parallel, c.BatchSize, c.KVBlock, int(int64(c.KVBudget)/int64(per)))
		if c.KVTokens = int(max(int64(c.KVBudget)-win, 0) / int64(per)); c.KVTokens < nCtx {
			srv.Shutdown(context.Background())
			return fmt.Errorf("--kv-budget %v holds %d tokens of %s KV (%d bytes each, after %d bytes of f16 windows); one context needs %d", c.KVBudget, c.KVTokens, c.kvTypes(), per, win, nCtx)
		}
	}
	kvTok := c.KVTokens
	if kvTok <= 0 {
		kvTok = c.Parallel * nCtx
	}
	// while /health says loading
	wp, err := openWeights(&c.WeightFlags, l, be, weightSetup{nCtx: kvTok, nSeq: 1, maxBatch: c.BatchSize, running: c.Parallel, blockSize: c.KVBlock}, log)
	if err != nil {
		srv.Shutdown(context.Background())
		if errors.Is(err, errDryRun) {
			return nil
		}
		return err
	}
	defer wp.Close()
	// always on for /metrics and /debug/trace, so a ring: bounded memory
	// (~6 MiB for 8 stages), the latest events kept
	rec := graph.NewRingRecorder(serveTraceEvents)
	e, err := stages.NewEngine(l.Model, l.Tokenizer, be, stages.Config{
		NCtx: nCtx, NSeq: c.Parallel, MaxBatch: c.BatchSize, Queue: c.Queue, EdgeCap: c.EdgeTokens, StepFactor: stepFactor(c.StepFactor), BlockSize: c.KVBlock, KVTokens: c.KVTokens, Weights: wp, KVTypes: c.kvTypes(),
	}, rec)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	runCtx, abort := context.WithCancel(context.Background())
	defer abort()
	engineDone := make(chan struct{})
	var runErr error
	go func() {
		runErr = e.Run(runCtx)
		close(engineDone)
	}()
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	srv.SetBackend(&serve.Backend{Engine: e, Bundle: l.Bundle, Recorder: rec, Path: path, Size: size, Done: engineDone})
	cfg := e.Config()
	layout := "contiguous per sequence, shared prefixes copied"
	if e.PagedKV() {
		layout = "paged, shared prefixes by reference"
	}
	fmt.Fprintf(os.Stderr, "flowinfer: serving %s on http://%s (%d parallel × %d context; KV cache %d blocks of %d tokens, %s, %s: %s; %d threads)\n",
		l.Name, ln.Addr(), cfg.NSeq, cfg.NCtx, cfg.KVTokens/cfg.BlockSize, cfg.BlockSize, cfg.KVTypes, configs.ByteSize(e.KVBytes()), layout, be.Threads())

	select {
	case <-sigCtx.Done():
		fmt.Fprintln(os.Stderr, "flowinfer: shutting down: finishing in-flight requests")
	case err := <-serveErr:
		abort()
		<-engineDone
		return fmt.Errorf("server: %w", err)
	case <-engineDone:
		srv.Shutdown(context.Background())
		if runErr == nil {
			runErr = errors.New("the engine stopped")
		}
		return fmt.Errorf("engine: %w", runErr)
	}
	stopSignals() // a second signal kills the process
	drainCtx, cancel := context.WithTimeout(context.Background(), c.DrainTimeout)
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil {
		log.Warn("drain timed out; cutting the remaining requests", zap.Error(err))
	}
	e.Close()
	select {
	case <-engineDone:
	case <-drainCtx.Done():
		abort()
		<-engineDone
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return fmt.Errorf("engine: %w", runErr)
	}
	fmt.Fprintln(os.Stderr, "flowinfer: stopped")
	return nil
}

// badOrigin returns the first of origins that is not "*" or an origin as
// browsers send it (scheme://host[:port]), or "".
func badOrigin(origins []string) string {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return o
		}
	}
	return ""
}

// trimSlashes drops a trailing "/" from each origin: browsers send none.
func trimSlashes(origins []string) []string {
	out := make([]string, len(origins))
	for i, o := range origins {
		out[i] = strings.TrimSuffix(o, "/")
	}
	return out
}

// stepFactor maps the flag (0 or negative: off) onto stages.Config's
// (negative: off; 0 would mean the default).
func stepFactor(f float64) float64 {
	if f <= 0 {
		return -1
	}
	return f
}
