package main

// serve.go: the `serve` command. It listens first (so /health answers 503
// while the model loads), loads the model, starts the stage engine, and on
// SIGTERM or SIGINT drains: no new requests, in-flight streams finish (up
// to --drain-timeout), then the engine stops.
//
// While it serves, it watches the model file (every --watch-interval: its
// device, inode, size, modification and status-change time, io/fileid).
// When the file changed (truncated, rewritten in place even with its
// modification time restored, replaced, removed) the model is marked
// failed: /health answers 503 naming the model and the reason, new requests
// get 503 naming the model. Requests in flight go on with the weights in
// memory: those that need a read from the changed file end with a 503
// naming the model (the reader checks the file's identity at every read,
// so no bytes of the new file are used). Once the path holds a file that
// has not changed for one interval, the old engine is drained (up to
// --drain-timeout), the model is loaded from it again, and the server
// serves it; a file that does not load (not a valid GGUF yet) is retried
// when it changes again. The process does not exit for a changed file.

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
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/io/fileid"
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
	Checkpoints  int              `name:"ctx-checkpoints" default:"0" help:"Hybrid models (recurrent layers) and sliding-window models (Gemma 3/4, GPT-OSS): how many prefix checkpoints are kept so that a request reuses a cached prompt prefix, each one sequence's recurrent state or the window of its sliding-window layers' rows, counted in the KV cache (0 = as many as --ctx-checkpoint-budget holds; negative: none, and a prompt whose state no sequence still holds is prefilled whole). With --swa-full a sliding-window model needs none."`
	CkptBudget   configs.ByteSize `name:"ctx-checkpoint-budget" default:"0" help:"The prefix checkpoints' bytes (--ctx-checkpoints), as many as fit, at most 64 (0 = 512MiB: ten of Qwen3.5-9B's 50 MiB states, four of Gemma-3-4B's 118 MiB f16 windows). Exclusive with --ctx-checkpoints."`
	BatchSize    int              `short:"b" name:"batch-size" default:"512" help:"Tokens per forward step (prompt chunks share it with decode tokens)."`
	Threads      int              `short:"t" default:"0" help:"Compute threads (0 = physical cores)."`
	Queue        int              `default:"64" help:"Requests waiting for a free sequence before the server answers 429."`
	LongPrefill  int              `name:"long-prefill" default:"1024" help:"Prompts with more tokens to compute than this are long: while sequences decode, their chunks are paced by --step-factor. Shorter prompts fill the batch (oldest first) at full speed. 0 or negative: every prompt is paced."`
	StepFactor   float64          `name:"step-factor" default:"2" help:"While sequences decode, a long prompt's tokens (--long-prefill) are added to their steps (sized from measured step times) so that those steps take on average this many times a decode-only step, so a long prompt does not freeze running streams; more than 1 (0 or negative: prompt chunks fill the batch, most prompt throughput)."`
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
	WatchEvery   time.Duration    `name:"watch-interval" default:"1s" help:"How often the model file is checked for changes (size, times, inode). A changed file marks the model failed (/health 503) until the file has been stable for one interval and loads again."`
}

// serveTraceEvents bounds each stage's events in the server's recorder.
const serveTraceEvents = 1 << 14

func (c *ServeCmd) apply(cfg *configs.Config) {
	ownFlags{c.Threads, c.CtxSize, c.BatchSize, c.EdgeTokens, c.NPredict}.apply(cfg, &c.WeightFlags, &c.SamplingFlags)
	cfg.Pipeline.Parallel, cfg.Pipeline.Queue = c.Parallel, c.Queue
	cfg.Server.Host, cfg.Server.Port = c.Host, c.Port
}

func (c *ServeCmd) Run(g *Globals) error {
	pooling, err := c.checkFlags()
	if err != nil {
		return err
	}
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	cfg := &g.Config
	params, err := c.params(&cfg.Sampling)
	if err != nil {
		return err
	}
	s := &serving{srv: serve.New(serve.Config{
		Aliases: c.Alias, APIKey: c.APIKey, Defaults: params, MaxTokens: max(cfg.Sampling.MaxTokens, 0), Stops: c.Stop,
		MaxBodyBytes: c.MaxBody, Heartbeat: c.Heartbeat, Fingerprint: "flowinfer-" + version, Log: g.Log,
		ReadTimeout: c.ReadTimeout, MaxConns: c.MaxConns, MaxHeaderBytes: c.MaxHeader, CORSOrigins: trimSlashes(c.CORSOrigin),
		Pooling: pooling,
	}), serveErr: make(chan error, 1)}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port)))
	if err != nil {
		return err
	}
	go func() { s.serveErr <- s.srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "flowinfer: listening on http://%s (loading the model)\n", ln.Addr())

	// always on for /metrics and /debug/trace, so a ring: bounded memory
	// (~6 MiB for 8 stages), the latest events kept
	rec := graph.NewRingRecorder(serveTraceEvents)
	rg, e, err := c.load(sigCtx, g, rec, s.srv.Observer()) // while /health says loading
	if err != nil {
		s.srv.Shutdown(context.Background())
		return err
	}
	s.addr, s.rec = ln.Addr(), rec
	s.begin(rg, e)
	defer s.end()
	return c.drain(sigCtx, stopSignals, s, g)
}

// checkFlags checks the server's flags that no key covers, and returns the
// embedding pooling asked for.
func (c *ServeCmd) checkFlags() (stages.Pooling, error) {
	var pooling stages.Pooling
	switch {
	case c.ReadTimeout <= 0:
		return pooling, fmt.Errorf("--read-timeout %v: must be positive", c.ReadTimeout)
	case c.MaxConns <= 0:
		return pooling, fmt.Errorf("--max-conns %d: must be positive", c.MaxConns)
	case c.MaxHeader < 1024:
		return pooling, fmt.Errorf("--max-header-bytes %d: must be at least 1024", c.MaxHeader)
	case c.StepFactor > 0 && c.StepFactor <= 1:
		return pooling, fmt.Errorf("--step-factor %g: must be more than 1 (steps that decode may take that many times a decode-only step), or 0 or negative to turn pacing off", c.StepFactor)
	case badOrigin(c.CORSOrigin) != "":
		return pooling, fmt.Errorf("--cors-origin %q: not an origin (scheme://host[:port], no path, or *)", badOrigin(c.CORSOrigin))
	case c.WatchEvery <= 0:
		return pooling, fmt.Errorf("--watch-interval %v: must be positive", c.WatchEvery)
	case c.Checkpoints != 0 && c.CkptBudget != 0:
		return pooling, fmt.Errorf("--ctx-checkpoints %d and --ctx-checkpoint-budget %v both size the prefix checkpoints: set one", c.Checkpoints, c.CkptBudget)
	case c.Pooling == "":
		return pooling, nil
	}
	p, err := stages.ParsePooling(c.Pooling)
	if err != nil {
		return pooling, fmt.Errorf("--pooling: %w", err)
	}
	return p, nil
}

// load opens the model, sizes the KV cache and the weights, and makes the
// engine, which reports its steps and admissions to obs.
func (c *ServeCmd) load(ctx context.Context, g *Globals, rec *graph.Recorder, obs stages.Observer) (*rig, *stages.Engine, error) {
	l, err := c.open(ctx, g.Log)
	if err != nil {
		return nil, nil, err
	}
	p := &g.Config.Pipeline
	sc := engineConfig(p, ctxSize(l, p.KVCache.CtxSize, g.Log))
	sc.StepFactor, sc.BlockSize = stepFactor(c.StepFactor), c.KVBlock
	sc.LongPrefill, sc.Observer = longPrefill(c.LongPrefill), obs
	sc.StateCheckpoints, sc.StateCheckpointBytes = c.Checkpoints, int64(c.CkptBudget)
	if sc.KVTokens, err = c.kvTokens(&l.Model.Hyper, sc); err != nil {
		l.Close()
		return nil, nil, err
	}
	r, e, err := newEngine(l, p, &c.WeightFlags, sc, rec, true, g.Log)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return r, e, nil
}

// kvTokens returns the KV cache's size in tokens: --kv-tokens, or what
// --kv-budget holds (0: the engine's, NSeq × NCtx).
func (c *ServeCmd) kvTokens(h *model.Hyper, sc stages.Config) (int, error) {
	if c.KVBudget <= 0 {
		return c.KVTokens, nil
	}
	if c.KVTokens > 0 {
		return 0, fmt.Errorf("--kv-tokens %d and --kv-budget %v both size the KV cache: set one", c.KVTokens, c.KVBudget)
	}
	kc, err := stages.KVCapacityFor(h, sc.KVTypes, int64(c.KVBudget), sc.NSeq, sc.NCtx, sc.MaxBatch, sc.BlockSize, sc.Checkpoints(h))
	if err != nil {
		return 0, err
	}
	if kc.Tokens < sc.NCtx {
		return 0, fmt.Errorf("--kv-budget %v holds %d tokens of %s KV (%d bytes each, after %d bytes of f16 windows and %d of sliding-window rings, recurrent state and prefix checkpoints); one context needs %d",
			c.KVBudget, kc.Tokens, sc.KVTypes, kc.PerToken, kc.Windows, kc.Rings, sc.NCtx)
	}
	return kc.Tokens, nil
}

// printServing says what the server serves, and how.
func printServing(e *stages.Engine, r *rig, addr net.Addr) {
	cfg := e.Config()
	layout := "contiguous per sequence, shared prefixes copied"
	if e.PagedKV() {
		layout = "paged, shared prefixes by reference"
	}
	if r.gpu != nil {
		layout = "in device memory, " + layout // KVBytes counts the host's rows only
	}
	fmt.Fprintf(os.Stderr, "flowinfer: serving %s on http://%s (%d parallel × %d context; KV cache %d blocks of %d tokens, %s, %s: %s%s; %d threads)\n",
		r.Name, addr, cfg.NSeq, cfg.NCtx, cfg.KVTokens/cfg.BlockSize, cfg.BlockSize, cfg.KVTypes, configs.ByteSize(e.KVBytes()), layout,
		checkpointNote(cfg, &r.Model.Hyper), r.be.Threads())
}

// checkpointNote says, for a model whose cached prefixes need prefix
// checkpoints (a hybrid model's recurrent state, a sliding-window model's
// ring windows), how many the KV cache holds, their bytes, and what chose
// that number, or why it holds none ("" for the other models).
func checkpointNote(cfg stages.Config, h *model.Hyper) string {
	per, err := cfg.CheckpointBytes(h)
	if err != nil {
		return "; no prefix checkpoints: " + err.Error()
	}
	if per == 0 {
		return ""
	}
	n := int64(cfg.Checkpoints(h))
	what := "sliding-window"
	if h.Hybrid() {
		what = "recurrent-state"
	}
	why := fmt.Sprintf("--ctx-checkpoints %d", cfg.StateCheckpoints)
	if cfg.StateCheckpoints == 0 {
		budget := cfg.StateCheckpointBytes
		why = "--ctx-checkpoint-budget " + configs.ByteSize(budget).String()
		if budget == 0 {
			why = "the default budget of " + configs.ByteSize(stages.DefaultStateCheckpointBytes).String()
		}
		if n == stages.MaxStateCheckpoints {
			why += fmt.Sprintf(", at most %d", stages.MaxStateCheckpoints)
		}
	}
	return fmt.Sprintf("; %d %s checkpoints of %v, %v (%s)", n, what, configs.ByteSize(per), configs.ByteSize(n*per), why)
}

// serving is the server with its engine running (none while a changed
// model file does not load).
type serving struct {
	srv      *serve.Server
	serveErr chan error // srv.Serve's return
	addr     net.Addr
	rec      *graph.Recorder
	path     string // the model file
	rg       *rig   // nil: no model loaded
	e        *stages.Engine
	run      *running
	abort    context.CancelFunc // cancels the engine's Run
	watch    fileWatch
}

// fileWatch is what the watcher knows of the model file.
type fileWatch struct {
	id     fileid.ID // the file the loaded model was read from
	failed bool      // the file changed since: the model is marked failed
	// while failed: the identity seen at the previous check (seen: the
	// file was there), and the one the last reload failed on (tried)
	last, bad   fileid.ID
	seen, tried bool
}

// reasonChanged is what clients and /health are told of a changed file.
const reasonChanged = "its file changed since it was loaded; it is served again once the file is a valid model"

// begin starts the engine e of the loaded rig rg and serves it.
func (s *serving) begin(rg *rig, e *stages.Engine) {
	runCtx, abort := context.WithCancel(context.Background())
	s.rg, s.e, s.run, s.abort, s.path = rg, e, start(runCtx, e), abort, rg.path
	s.watch = fileWatch{}
	s.watch.id, _ = rg.File.ID()
	s.srv.SetBackend(backend(e, rg, s.rec, rg.path, s.run))
	printServing(e, rg, s.addr)
}

// stop drains the engine (the requests in it finish, up to timeout, then
// are cut) and releases the model.
func (s *serving) stop(timeout time.Duration) {
	if s.rg == nil {
		return
	}
	s.e.Close()
	select {
	case <-s.run.done:
	case <-time.After(timeout):
		s.abort()
		<-s.run.done
	}
	s.end()
}

// end stops the engine at once and releases the model.
func (s *serving) end() {
	if s.rg == nil {
		return
	}
	s.abort()
	<-s.run.done
	s.rg.Close()
	s.rg.loaded.Close()
	s.rg, s.e = nil, nil
}

// engineDone is closed when the running engine's Run returned (nil: no
// engine runs, so never).
func (s *serving) engineDone() <-chan struct{} {
	if s.run == nil || s.rg == nil {
		return nil
	}
	return s.run.done
}

// check looks at the model file once: a change marks the model failed; a
// changed file that stayed the same since the previous check is loaded
// again (unless loading it already failed).
func (c *ServeCmd) check(ctx context.Context, s *serving, g *Globals) {
	w := &s.watch
	path := s.path
	now, err := fileid.Path(path)
	if !w.failed {
		if err == nil {
			err = w.id.Check(now)
		}
		if err == nil {
			return
		}
		g.Log.Error("model file changed: model marked failed until the file loads again", zap.String("path", path), zap.Error(err))
		w.failed = true
		w.last, w.seen = now, false
		s.srv.SetModelFailed(reasonChanged)
		return
	}
	stable := err == nil && w.seen && w.last.Check(now) == nil
	w.last, w.seen = now, err == nil
	if !stable || w.tried && w.bad.Check(now) == nil {
		return
	}
	g.Log.Info("model file stable: reloading the model", zap.String("path", path))
	s.stop(c.DrainTimeout)
	rg, e, err := c.load(ctx, g, s.rec, s.srv.Observer())
	if err != nil {
		g.Log.Error("reloading the model failed; retried when the file changes", zap.String("path", path), zap.Error(err))
		w.bad, w.tried = now, true
		return
	}
	s.begin(rg, e)
	s.srv.SetModelFailed("")
	g.Log.Info("model reloaded", zap.String("path", path))
}

// drain serves (checking the model file every --watch-interval) until a
// signal, then takes no new requests, lets those in flight finish (up to
// --drain-timeout) and stops the engine; or it returns the server's or the
// engine's error.
func (c *ServeCmd) drain(sigCtx context.Context, stopSignals func(), s *serving, g *Globals) error {
	log := g.Log
	tick := time.NewTicker(c.WatchEvery)
	defer tick.Stop()
wait:
	for {
		select {
		case <-sigCtx.Done():
			fmt.Fprintln(os.Stderr, "flowinfer: shutting down: finishing in-flight requests")
			break wait
		case <-tick.C:
			c.check(sigCtx, s, g)
		case err := <-s.serveErr:
			s.end()
			return fmt.Errorf("server: %w", err)
		case <-s.engineDone():
			s.srv.Shutdown(context.Background())
			if s.run.err == nil {
				return errors.New("engine: the engine stopped")
			}
			return fmt.Errorf("engine: %w", s.run.err)
		}
	}
	stopSignals() // a second signal kills the process
	drainCtx, cancel := context.WithTimeout(context.Background(), c.DrainTimeout)
	defer cancel()
	if err := s.srv.Shutdown(drainCtx); err != nil {
		log.Warn("drain timed out; cutting the remaining requests", zap.Error(err))
	}
	if s.rg == nil {
		fmt.Fprintln(os.Stderr, "flowinfer: stopped")
		return nil
	}
	s.e.Close()
	select {
	case <-s.run.done:
	case <-drainCtx.Done():
		s.abort()
		<-s.run.done
	}
	if s.run.err != nil && !errors.Is(s.run.err, context.Canceled) {
		return fmt.Errorf("engine: %w", s.run.err)
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

// longPrefill maps the flag (0 or negative: every prompt is long) onto
// stages.Config's (negative: every prompt; 0 would mean the default).
func longPrefill(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// stepFactor maps the flag (0 or negative: off) onto stages.Config's
// (negative: off; 0 would mean the default).
func stepFactor(f float64) float64 {
	if f <= 0 {
		return -1
	}
	return f
}
