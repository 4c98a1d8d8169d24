// This file runs trace's generations: one setup (traceJob) run once per
// measurement through a fresh engine, the engine's counters as trace
// series, and --overhead's alternation of runs with the recorder off and
// on.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// traceJob is one generation setup, run once per measurement.
type traceJob struct {
	r         *rig
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
	e, err := j.r.engine(j.scfg, rec)
	if err != nil {
		return traceResult{}, err
	}
	t := &tally{e: e, sampleStats: sampleStats}
	for i := range j.requests {
		r := &stages.Request{ID: uint64(i + 1), Prompt: j.prompt, Params: j.params, MaxTokens: j.n, IgnoreEOG: j.ignoreEOS, Emit: t.emit()}
		if err := e.Submit(r); err != nil {
			return t.res, err
		}
	}
	e.Close()
	t.sample()
	t0, cpu0 := time.Now(), cpuTime()
	err = e.Run(ctx)
	t.res.wall, t.res.cpu = time.Since(t0), cpuTime()-cpu0
	t.sample()
	if errors.Is(err, context.Canceled) {
		return t.res, errors.New("interrupted")
	}
	if err != nil {
		return t.res, err
	}
	return t.result(len(j.prompt), j.requests), nil
}

// tally accumulates a run's events, from every request's Emit.
type tally struct {
	e           *stages.Engine
	sampleStats bool

	mu               sync.Mutex
	res              traceResult
	firstTok, lastEv time.Time
	decodeTokens     int
	prompt           time.Duration
	active           []graph.Point // requests between their first token and their end
	nActive          int
	// Engine counters are sampled as tokens arrive (at most every ms): a
	// ticker goroutine would slow the pipeline it observes (see
	// graph/trace_queues.go).
	stats    []statsPoint
	lastStat time.Time
}

// emit returns one request's Emit.
func (t *tally) emit() func(stages.Event) error {
	var first time.Time
	n := 0
	return func(ev stages.Event) error {
		now := time.Now()
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.sampleStats && now.Sub(t.lastStat) >= time.Millisecond {
			t.stats = append(t.stats, statsPoint{now, t.e.Stats()})
			t.lastStat = now
		}
		if ev.Token >= 0 {
			n++
			if first.IsZero() {
				first = now
				t.nActive++
				t.active = append(t.active, graph.Point{T: now, V: float64(t.nActive)})
				if t.firstTok.IsZero() || now.Before(t.firstTok) {
					t.firstTok = now
				}
			}
		}
		if ev.Finish != stages.FinishNone {
			t.lastEv = now
			t.res.generated += ev.Usage.GeneratedTokens
			t.res.promptTokens += ev.Usage.PromptTokens
			t.res.cached += ev.Usage.CachedTokens
			t.decodeTokens += max(n-1, 0)
			t.prompt = max(t.prompt, ev.Timing.Prompt)
			if !first.IsZero() {
				t.nActive--
			}
			t.active = append(t.active, graph.Point{T: now, V: float64(t.nActive)})
		}
		return nil
	}
}

// sample samples the engine's counters, when the run samples them.
func (t *tally) sample() {
	if t.sampleStats {
		t.stats = append(t.stats, statsPoint{time.Now(), t.e.Stats()})
	}
}

// result completes the run's result: the rates and the counter tracks.
func (t *tally) result(promptLen, requests int) traceResult {
	res := t.res
	if d := t.lastEv.Sub(t.firstTok); d > 0 && t.decodeTokens > 0 {
		res.decodeTPS = float64(t.decodeTokens) / d.Seconds()
	}
	if t.prompt > 0 {
		res.prefillTPS = float64(promptLen-res.cached/requests) / t.prompt.Seconds()
	}
	res.series = append(engineSeries(t.stats), series("engine/requests generating", t.active))
	return res
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
