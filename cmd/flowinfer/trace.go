// This file is `flowinfer trace`: it runs a generation through the stage
// engine with the recorder on and writes what happened as a Chrome trace
// (ui.perfetto.dev), an SVG timeline and a stall summary. With --overhead
// it also measures what recording costs: decode tokens per second with the
// recorder off and on, alternated.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// TraceCmd records one generation.
type TraceCmd struct {
	ModelFlags
	SamplingFlags
	PipelineFlags
	Prompt      string        `short:"p" default:"Once upon a time" help:"Prompt text."`
	NPredict    int           `short:"n" name:"n-predict" default:"64" help:"Tokens to generate per request."`
	Output      string        `short:"o" default:"trace.json" help:"Chrome trace-event JSON (open in ui.perfetto.dev)." type:"path"`
	SVG         string        `name:"svg" help:"SVG timeline [the output with .svg]; '-' for none." type:"path"`
	SVGWindow   time.Duration `name:"svg-window" help:"Draw only this long a window, from the middle of the run (0 = all)."`
	Requests    int           `name:"requests" default:"1" help:"Submit the prompt this many times at once (with --parallel: continuous batching)."`
	Chat        bool          `help:"Apply the model's chat template to the prompt."`
	IgnoreEOS   bool          `name:"ignore-eos" default:"true" negatable:"" help:"Keep generating past end-of-generation tokens (on by default: traces of a fixed length)."`
	MaxEvents   int           `name:"max-events" default:"0" help:"Events kept per stage (0 = 262144)."`
	Detail      string        `name:"detail" default:"layers" enum:"stages,layers,ops" help:"Spans inside compute: stages (none), layers (attention, FFN, experts, output; the default, within 3% of unrecorded speed) or ops (also every matrix product)."`
	QueueSample time.Duration `name:"queue-sample" default:"2ms" help:"Interval of the queue-depth counters (0 = none)."`
	NoMeasure   bool          `name:"no-measure" help:"Do not measure memory bandwidth when the profile has none."`
	Warmup      bool          `name:"warmup" help:"Run the generation once unrecorded first (page in the weights, warm the caches) so the trace shows the steady state."`
	Overhead    int           `name:"overhead" default:"0" help:"Also measure recording overhead: run N times with recording off and N times on, alternating, and print decode tok/s." placeholder:"N"`
}

func (c *TraceCmd) Run(g *Globals, cli *CLI) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := effective(cli.Config, &c.PipelineFlags, &c.SamplingFlags, &c.NPredict)
	if err != nil {
		return err
	}
	if c.Requests < 1 {
		return fmt.Errorf("--requests must be at least 1")
	}
	params, err := c.params()
	if err != nil {
		return err
	}
	l, err := c.open(ctx, g.Log)
	if err != nil {
		return err
	}
	defer l.Close()
	prompt, err := buildPrompt(l, c.Prompt, c.Chat, "")
	if err != nil {
		return err
	}
	nCtx := ctxSize(l, cfg.Pipeline.KVCache.CtxSize, g.Log)
	scfg := engineConfig(&cfg.Config, nCtx)
	be := cpu.NewBackend(cfg.Pipeline.Threads, nil)
	defer be.Close()
	wp, err := openWeights(&c.WeightFlags, l, be, weightSetup{nCtx: scfg.NSeq * nCtx, nSeq: 1, maxBatch: scfg.MaxBatch, running: scfg.NSeq}, g.Log)
	if errors.Is(err, errDryRun) {
		return nil
	}
	if err != nil {
		return err
	}
	defer wp.Close()
	scfg.Weights = wp
	job := traceJob{l: l, ops: be, scfg: scfg, prompt: prompt, params: params, n: c.NPredict, requests: c.Requests, ignoreEOS: c.IgnoreEOS}

	if c.Warmup {
		if _, err := job.run(ctx, nil, false); err != nil {
			return err
		}
	}
	job.detail = map[string]graph.Detail{"stages": graph.DetailStages, "layers": graph.DetailLayers, "ops": graph.DetailOps}[c.Detail]
	job.queueSample = c.QueueSample
	rec := job.recorder(c.MaxEvents)
	res, err := job.run(ctx, rec, true)
	if err != nil {
		return err
	}

	limit := graph.Limit{GBps: cfg.Hardware.MemBandwidth, Source: "memory bandwidth, from the profile"}
	if limit.GBps <= 0 && !c.NoMeasure {
		threads := cfg.Pipeline.Threads
		if threads <= 0 {
			threads = physicalCores()
		}
		bw, err := configs.MeasureMemory(ctx, configs.MemOptions{Threads: threads, Bytes: 128 << 20, Duration: 300 * time.Millisecond})
		if err == nil {
			limit = graph.Limit{GBps: bw, Source: fmt.Sprintf("memory bandwidth, measured now with %d threads", threads)}
		}
	}

	if wp.Plan().Streaming() && !c.NoMeasure {
		// the reader's bytes against the disk, not memory
		if bw, err := diskBandwidth(ctx, l.path, c.Slabs, time.Second); err == nil {
			limit.Counters = map[string]graph.Limit{"reader/bytes read": {GBps: bw,
				Source: fmt.Sprintf("disk bandwidth, O_DIRECT 1 MiB reads, %d in flight, measured now", c.Slabs)}}
		}
	}

	meta := map[string]string{
		"model": l.Name, "model_file": c.Model, "prompt_tokens": strconv.Itoa(len(prompt)),
		"n_predict": strconv.Itoa(c.NPredict), "requests": strconv.Itoa(c.Requests),
		"parallel": strconv.Itoa(scfg.NSeq), "ctx": strconv.Itoa(scfg.NCtx), "batch": strconv.Itoa(scfg.MaxBatch),
		"profile": cfg.Source, "flowinfer": version,
	}
	if err := writeFileAtomic(c.Output, func(w io.Writer) error {
		return rec.WriteChromeTraceOpts(w, graph.TraceOptions{Series: res.series, Metadata: meta})
	}); err != nil {
		return err
	}
	svgPath := c.SVG
	if svgPath == "" {
		svgPath = strings.TrimSuffix(c.Output, filepath.Ext(c.Output)) + ".svg"
	}
	if svgPath != "-" {
		o := graph.SVGOptions{Title: fmt.Sprintf("flowinfer trace: %s, %d×%d tokens, parallel %d", l.Name, c.Requests, c.NPredict, scfg.NSeq)}
		if c.SVGWindow > 0 && c.SVGWindow < res.wall {
			o.From = (res.wall - c.SVGWindow) / 2
			o.To = o.From + c.SVGWindow
		}
		if err := writeFileAtomic(svgPath, func(w io.Writer) error { return rec.WriteSVG(w, o) }); err != nil {
			return err
		}
	}

	out := os.Stdout
	fmt.Fprintf(out, "trace: %s (%d prompt tokens, %d×%d generated, parallel %d) -> %s", l.Name, len(prompt), c.Requests, res.generated/c.Requests, scfg.NSeq, c.Output)
	if svgPath != "-" {
		fmt.Fprintf(out, ", %s", svgPath)
	}
	fmt.Fprintf(out, "\nwall %v; decode %.1f tok/s", res.wall.Round(time.Microsecond), res.decodeTPS)
	if res.prefillTPS > 0 && c.Requests == 1 {
		fmt.Fprintf(out, "; prompt %.1f tok/s", res.prefillTPS)
	}
	fmt.Fprintf(out, "; KV prefix cache: %d of %d prompt tokens reused\n\n", res.cached, res.promptTokens)
	st := rec.Stalls()
	if err := st.Format(out, limit); err != nil {
		return err
	}
	printSpanBreakdown(out, rec.Summary())
	for _, s := range rec.Summary() {
		if s.Dropped > 0 {
			fmt.Fprintf(os.Stderr, "flowinfer: warning: stage %s dropped %d events past --max-events\n", s.Stage, s.Dropped)
		}
	}

	if c.Overhead > 0 {
		return measureOverhead(ctx, out, job, c.Overhead)
	}
	return nil
}

// printSpanBreakdown prints where compute's busy time went, by span kind
// summed over layers (attn, ffn, the matrix products, ...).
func printSpanBreakdown(w io.Writer, sum graph.Summary) {
	for _, s := range sum {
		if len(s.Spans) == 0 {
			continue
		}
		kinds := map[string]time.Duration{}
		for name, sp := range s.Spans {
			kinds[spanKind(name)] += sp.Total
		}
		names := slices.SortedFunc(func(yield func(string) bool) {
			for k := range kinds {
				if !yield(k) {
					return
				}
			}
		}, func(a, b string) int { return int(kinds[b] - kinds[a]) })
		fmt.Fprintf(w, "%s sub-spans (summed over layers, %% of the stage's wall time):", s.Stage)
		for _, k := range names {
			fmt.Fprintf(w, " %s %.1f%%", k, 100*float64(kinds[k])/float64(max(s.Wall, 1)))
		}
		fmt.Fprintln(w)
	}
}

// spanKind strips the layer suffix of a span name ("ffn_up-3" -> "ffn_up").
func spanKind(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// traceJob is one generation setup, run once per measurement.
type traceJob struct {
	l         *loaded
	ops       model.Ops
	scfg      stages.Config
	prompt    []int32
	params    sample.Params
	n         int
	requests  int
	ignoreEOS bool
	// recording settings
	detail      graph.Detail
	queueSample time.Duration
}

// recorder returns a recorder with the job's recording settings.
func (j traceJob) recorder(maxEvents int) *graph.Recorder {
	rec := graph.NewRecorder(maxEvents)
	rec.SampleQueues(j.queueSample)
	rec.SetDetail(j.detail)
	return rec
}

// traceResult is what one run measured.
type traceResult struct {
	wall                  time.Duration
	cpu                   time.Duration // process CPU time (user + system) of the run
	generated             int
	decodeTPS, prefillTPS float64
	promptTokens, cached  int
	series                []graph.Series
}

// run generates job.requests copies of the prompt through a fresh engine;
// decode tok/s is measured end to end, from each request's first token to
// its last event.
func (j traceJob) run(ctx context.Context, rec *graph.Recorder, sampleStats bool) (traceResult, error) {
	e, err := stages.NewEngine(j.l.Model, j.l.Tokenizer, j.ops, j.scfg, rec)
	if err != nil {
		return traceResult{}, err
	}
	var mu sync.Mutex
	var res traceResult
	var firstTok, lastEv time.Time
	var decodeTokens int
	var prompt time.Duration
	var active []graph.Point // requests between their first token and their end
	nActive := 0
	// Engine counters are sampled as tokens arrive (at most every ms): a
	// ticker goroutine would slow the pipeline it observes (see
	// graph/trace_queues.go).
	var stats []statsPoint
	var lastStat time.Time
	for i := range j.requests {
		var first time.Time
		n := 0
		r := &stages.Request{
			ID: uint64(i + 1), Prompt: j.prompt, Params: j.params, MaxTokens: j.n, IgnoreEOG: j.ignoreEOS,
			Emit: func(ev stages.Event) error {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if sampleStats && now.Sub(lastStat) >= time.Millisecond {
					stats = append(stats, statsPoint{now, e.Stats()})
					lastStat = now
				}
				if ev.Token >= 0 {
					n++
					if first.IsZero() {
						first = now
						nActive++
						active = append(active, graph.Point{T: now, V: float64(nActive)})
						if firstTok.IsZero() || now.Before(firstTok) {
							firstTok = now
						}
					}
				}
				if ev.Finish != stages.FinishNone {
					lastEv = now
					res.generated += ev.Usage.GeneratedTokens
					res.promptTokens += ev.Usage.PromptTokens
					res.cached += ev.Usage.CachedTokens
					decodeTokens += max(n-1, 0)
					prompt = max(prompt, ev.Timing.Prompt)
					if !first.IsZero() {
						nActive--
					}
					active = append(active, graph.Point{T: now, V: float64(nActive)})
				}
				return nil
			},
		}
		if err := e.Submit(r); err != nil {
			return res, err
		}
	}
	e.Close()
	if sampleStats {
		stats = append(stats, statsPoint{time.Now(), e.Stats()})
	}
	t0, cpu0 := time.Now(), cpuTime()
	err = e.Run(ctx)
	res.wall, res.cpu = time.Since(t0), cpuTime()-cpu0
	if sampleStats {
		stats = append(stats, statsPoint{time.Now(), e.Stats()})
	}
	if errors.Is(err, context.Canceled) {
		return res, errors.New("interrupted")
	}
	if err != nil {
		return res, err
	}
	if d := lastEv.Sub(firstTok); d > 0 && decodeTokens > 0 {
		res.decodeTPS = float64(decodeTokens) / d.Seconds()
	}
	if prompt > 0 {
		res.prefillTPS = float64(len(j.prompt)-res.cached/j.requests) / prompt.Seconds()
	}
	res.series = append(engineSeries(stats), series("engine/requests generating", active))
	return res, nil
}

// statsPoint is one sample of the engine's counters.
type statsPoint struct {
	t time.Time
	s stages.Stats
}

// engineSeries turns engine samples into counter tracks.
func engineSeries(pts []statsPoint) []graph.Series {
	defs := []struct {
		name string
		v    func(s *stages.Stats) float64
	}{
		{"engine/requests queued", func(s *stages.Stats) float64 { return float64(s.Queued) }},
		{"engine/sequences running", func(s *stages.Stats) float64 { return float64(s.Running) }},
		{"engine/KV blocks used", func(s *stages.Stats) float64 { return float64(s.KVBlocksUsed) }},
		{"engine/KV blocks cached", func(s *stages.Stats) float64 { return float64(s.KVBlocksCached) }},
		{"engine/KV prefix cache hit %", func(s *stages.Stats) float64 {
			return 100 * float64(s.CachedTokens) / float64(max(s.PromptTokens, 1))
		}},
		{"engine/preemptions", func(s *stages.Stats) float64 { return float64(s.Preemptions) }},
	}
	var out []graph.Series
	for _, d := range defs {
		pp := make([]graph.Point, len(pts))
		for i := range pts {
			pp[i] = graph.Point{T: pts[i].t, V: d.v(&pts[i].s)}
		}
		out = append(out, series(d.name, pp))
	}
	return out
}

// series turns samples into a counter track, keeping only changes.
func series(name string, pts []graph.Point) graph.Series {
	sr := graph.Series{Name: name}
	for i, p := range pts {
		if i == 0 || i == len(pts)-1 || p.V != sr.Points[len(sr.Points)-1].V {
			sr.Points = append(sr.Points, p)
		}
	}
	return sr
}

// measureOverhead alternates runs with recording off and on and prints
// the median decode tok/s of each, the median of the pairwise ratios, and
// an estimate from first principles: events recorded per generated token
// times the cost of one event.
func measureOverhead(ctx context.Context, w io.Writer, j traceJob, n int) error {
	var off, on, ratio, cpuOff, cpuOn []float64
	var events int64
	var tokens int
	if _, err := j.run(ctx, nil, false); err != nil { // warm-up, not counted
		return err
	}
	for i := range 2 * n {
		var rec *graph.Recorder
		if i%2 == 1 {
			rec = j.recorder(0)
		}
		runtime.GC()
		res, err := j.run(ctx, rec, false)
		if err != nil {
			return err
		}
		cpuPerTok := float64(res.cpu.Microseconds()) / float64(max(res.generated, 1))
		if rec == nil {
			off = append(off, res.decodeTPS)
			cpuOff = append(cpuOff, cpuPerTok)
			continue
		}
		on = append(on, res.decodeTPS)
		cpuOn = append(cpuOn, cpuPerTok)
		ratio = append(ratio, res.decodeTPS/off[len(off)-1])
		for _, s := range rec.Stalls().Stages {
			events += s.Events
		}
		tokens += res.generated
	}
	mOff, mOn := median(off), median(on)
	fmt.Fprintf(w, "\nrecording overhead, detail %d (%d runs each, alternated): median decode %.1f tok/s off, %.1f tok/s on (%+.2f%%); median of pairwise ratios %+.2f%%\n",
		j.detail, n, mOff, mOn, 100*(mOn-mOff)/mOff, 100*(median(ratio)-1))
	fmt.Fprintf(w, "  off: %s\n  on:  %s\n", fmtFloats(off), fmtFloats(on))
	mcOff, mcOn := median(cpuOff), median(cpuOn)
	fmt.Fprintf(w, "  process CPU time per generated token (insensitive to other processes' load): median %.1f µs off, %.1f µs on (%+.2f%%)\n",
		mcOff, mcOn, 100*(mcOn-mcOff)/mcOff)
	perEvent := eventCost()
	perTok := float64(events) / float64(max(tokens, 1))
	cost := time.Duration(perTok * float64(perEvent))
	fmt.Fprintf(w, "  estimate: %.0f events per generated token × %v per event = %v per token = %.2f%% of the %v a token takes with recording off\n",
		perTok, perEvent, cost.Round(10*time.Nanosecond), 100*float64(cost)*mOff/1e9, time.Duration(1e9/mOff).Round(time.Microsecond))
	return nil
}

// eventCost measures what recording one sub-span costs (two clock reads,
// a lock, an append), in a throwaway graph.
func eventCost() time.Duration {
	rec := graph.NewRecorder(1 << 20)
	g := graph.New(rec)
	s := g.Stage("bench")
	var per time.Duration
	s.Do(func(context.Context) error {
		const n = 200000
		t0 := time.Now()
		for range n {
			rec.Begin(s, "x").End()
		}
		per = time.Since(t0) / n
		return nil
	})
	g.Run(context.Background())
	return per
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, " ")
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// physicalCores counts this machine's physical cores from /proc/cpuinfo.
func physicalCores() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 1
	}
	defer f.Close()
	return max(configs.ParseCPUInfo(f).Cores, 1)
}

// writeFileAtomic writes path through a temporary file and a rename, so a
// failed or interrupted write never leaves a truncated file.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
