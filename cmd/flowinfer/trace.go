// This file is `flowinfer trace`: it runs a generation through the stage
// engine with the recorder on and writes what happened as a Chrome trace
// (ui.perfetto.dev), an SVG timeline and a stall summary. With --overhead
// it also measures what recording costs: decode tokens per second with the
// recorder off and on, alternated.

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/stages"
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

func (c *TraceCmd) apply(cfg *configs.Config) {
	applyPipeline(cfg, &c.PipelineFlags, &c.SamplingFlags, c.NPredict)
}

func (c *TraceCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.Requests < 1 {
		return fmt.Errorf("--requests must be at least 1")
	}
	cfg := &g.Config
	params, err := c.params(&cfg.Sampling)
	if err != nil {
		return err
	}
	l, prompt, err := c.openPrompt(ctx, g.Log, c.Prompt, c.Chat, "")
	if err != nil {
		return err
	}
	defer l.Close()
	p := &cfg.Pipeline
	sc := engineConfig(p, ctxSize(l, p.KVCache.CtxSize, g.Log))
	rg, err := newRig(l, p, &c.WeightFlags, stages.EngineFootprint(sc), true, g.Log)
	if err != nil {
		return err
	}
	defer rg.Close()
	job := traceJob{r: rg, scfg: sc, prompt: prompt, params: params, n: cfg.Sampling.MaxTokens, requests: c.Requests, ignoreEOS: c.IgnoreEOS}
	if c.Warmup {
		if _, err := job.run(ctx, nil, false); err != nil {
			return err
		}
	}
	job.detail = map[string]graph.Detail{"stages": graph.DetailStages, "layers": graph.DetailLayers, "ops": graph.DetailOps}[c.Detail]
	job.queueSample = c.QueueSample
	rec := job.recorder(c.MaxEvents)
	if rg.wp != nil {
		rg.wp.ResetStats() // the weight path's counters describe the recorded run
	}
	res, err := job.run(ctx, rec, true)
	if err != nil {
		return err
	}
	limit := c.limit(ctx, cfg, rg)
	svgPath, err := c.write(rec, res, job, cfg.Source)
	if err != nil {
		return err
	}
	if err := c.report(os.Stdout, rec, res, job, svgPath, limit); err != nil {
		return err
	}
	if c.Overhead > 0 {
		return measureOverhead(ctx, os.Stdout, job, c.Overhead)
	}
	return nil
}

// limit is what the stall summary compares transfers with: the profile's
// memory bandwidth, or one measured now; and with a weight path that
// streams, the reader's bytes against the disk's bandwidth (the profile's
// hardware.disk_read_gbps, or one measured now).
func (c *TraceCmd) limit(ctx context.Context, cfg *configs.Loaded, r *rig) graph.Limit {
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
	switch {
	case !r.streaming():
	case cfg.Hardware.DiskRead > 0:
		limit.Counters = map[string]graph.Limit{"reader/bytes read": {GBps: cfg.Hardware.DiskRead, Source: "disk bandwidth, from the profile"}}
	case !c.NoMeasure:
		slabs := cfg.Pipeline.Edges.Slabs
		if bw, err := diskBandwidth(ctx, r.path, slabs, time.Second); err == nil {
			limit.Counters = map[string]graph.Limit{"reader/bytes read": {GBps: bw,
				Source: fmt.Sprintf("disk bandwidth, O_DIRECT 1 MiB reads, %d in flight, measured now", slabs)}}
		}
	}
	return limit
}

// write writes the Chrome trace and the SVG timeline, and returns the
// SVG's path ("-": none).
func (c *TraceCmd) write(rec *graph.Recorder, res traceResult, j traceJob, profile string) (string, error) {
	sc := &j.scfg
	meta := map[string]string{
		"model": j.r.Name, "model_file": c.Model, "prompt_tokens": strconv.Itoa(len(j.prompt)),
		"n_predict": strconv.Itoa(j.n), "requests": strconv.Itoa(j.requests),
		"parallel": strconv.Itoa(sc.NSeq), "ctx": strconv.Itoa(sc.NCtx), "batch": strconv.Itoa(sc.MaxBatch),
		"profile": profile, "flowinfer": version,
	}
	if err := writeFileAtomic(c.Output, func(w io.Writer) error {
		return rec.WriteChromeTraceOpts(w, graph.TraceOptions{Series: res.series, Metadata: meta})
	}); err != nil {
		return "", err
	}
	svgPath := c.SVG
	if svgPath == "" {
		svgPath = strings.TrimSuffix(c.Output, filepath.Ext(c.Output)) + ".svg"
	}
	if svgPath == "-" {
		return svgPath, nil
	}
	o := graph.SVGOptions{Title: fmt.Sprintf("flowinfer trace: %s, %d×%d tokens, parallel %d", j.r.Name, j.requests, j.n, sc.NSeq)}
	if c.SVGWindow > 0 && c.SVGWindow < res.wall {
		o.From = (res.wall - c.SVGWindow) / 2
		o.To = o.From + c.SVGWindow
	}
	return svgPath, writeFileAtomic(svgPath, func(w io.Writer) error { return rec.WriteSVG(w, o) })
}

// report prints the run's figures, the stall summary against limit and
// where compute's time went.
func (c *TraceCmd) report(out io.Writer, rec *graph.Recorder, res traceResult, j traceJob, svgPath string, limit graph.Limit) error {
	fmt.Fprintf(out, "trace: %s (%d prompt tokens, %d×%d generated, parallel %d) -> %s", j.r.Name, len(j.prompt), j.requests, res.generated/j.requests, j.scfg.NSeq, c.Output)
	if svgPath != "-" {
		fmt.Fprintf(out, ", %s", svgPath)
	}
	fmt.Fprintf(out, "\nwall %v; decode %.1f tok/s", res.wall.Round(time.Microsecond), res.decodeTPS)
	if res.prefillTPS > 0 && j.requests == 1 {
		fmt.Fprintf(out, "; prompt %.1f tok/s", res.prefillTPS)
	}
	fmt.Fprintf(out, "; KV prefix cache: %d of %d prompt tokens reused\n\n", res.cached, res.promptTokens)
	st := rec.Stalls()
	if err := st.Format(out, limit); err != nil {
		return err
	}
	printSpanBreakdown(out, rec.Summary())
	if j.r.gpu != nil {
		printDeviceSpans(out, j.r.gpu, rec.Summary(), j.detail)
	}
	if j.r.streaming() {
		formatWeightStats(out, j.r.wp.Stats(), j.r.wp.Plan().Experts > 0, res.generated)
	}
	printExpertTiers(out, rec.Summary())
	for _, s := range rec.Summary() {
		if s.Dropped > 0 {
			fmt.Fprintf(os.Stderr, "flowinfer: warning: stage %s dropped %d events past --max-events\n", s.Stage, s.Dropped)
		}
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
