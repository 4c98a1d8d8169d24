// This file holds the trace recorder: per-stage event buffers fed by the
// ports (waiting, blocked), by stages themselves (sub-spans, counters), and
// the per-stage Summary. The Chrome trace exporter lives in trace.go.
//
// Each stage writes into its own buffer under its own mutex, which is
// uncontended when, as intended, one goroutine uses the stage's ports; no
// lock is shared between stages on the hot path. Events go into chunks of
// chunkSize preallocated as a block, so steady-state recording allocates
// nothing per event. Waiting and blocked totals are kept exactly even after
// a stage's event limit is reached; later events are counted as dropped.

package graph

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// DefaultMaxEvents is the per-stage event limit NewRecorder uses for a
// non-positive limit (about 10 MiB of events per stage).
const DefaultMaxEvents = 1 << 18

const chunkSize = 4096

// Recorder records where each stage of a graph spends its time. A nil
// *Recorder is valid and records nothing. Pass it to New; it may be shared by
// several graphs (each run adds its stages as new tracks).
type Recorder struct {
	epoch      time.Time
	max        int
	ring       bool // drop the oldest events, not the newest (NewRingRecorder)
	enabled    atomic.Bool
	queueEvery atomic.Int64 // queue sampling interval in ns; 0 = off (trace_queues.go)
	detail     atomic.Int32 // Detail of sub-spans stages record (trace_extra.go)

	mu     sync.Mutex // guards stages; never taken on the hot path
	stages []*stageRec
}

// NewRecorder returns an enabled recorder that keeps at most maxEvents
// events per stage (DefaultMaxEvents if maxEvents <= 0).
func NewRecorder(maxEvents int) *Recorder {
	if maxEvents <= 0 {
		maxEvents = DefaultMaxEvents
	}
	r := &Recorder{epoch: time.Now(), max: maxEvents}
	r.enabled.Store(true)
	return r
}

// NewRingRecorder returns an enabled recorder that keeps the most recent
// events of each stage, about maxEvents of them (at least two chunks of
// 4096): when a stage's buffer is full its oldest chunk is dropped. For
// always-on recording (a server's /metrics and /debug/trace): its memory
// stays bounded however long it runs, and the latest window is kept.
func NewRingRecorder(maxEvents int) *Recorder {
	r := NewRecorder(max(maxEvents, 2*chunkSize))
	r.ring = true
	return r
}

// Enabled reports whether r records. A nil recorder does not.
func (r *Recorder) Enabled() bool { return r != nil && r.enabled.Load() }

// SetEnabled turns recording on or off for graphs started afterwards; a
// running graph keeps the setting it started with.
// A nil recorder stays off.
func (r *Recorder) SetEnabled(on bool) {
	if r != nil {
		r.enabled.Store(on)
	}
}

type evKind uint8

const (
	evWait    evKind = iota // blocked in Recv
	evBlocked               // blocked in Send
	evSpan                  // sub-span opened with Begin
	evWork                  // work span opened with BeginWork (may overlap others)
	evAdd                   // counter increment
	evSample                // gauge sample
)

// event is one recorded fact, 40 bytes.
type event struct {
	kind evKind
	name string
	t0   int64 // ns since the recorder's epoch
	t1   int64 // span end (ns since epoch), or counter value
}

// stageRec is one stage's track.
type stageRec struct {
	name  string
	tid   int
	epoch time.Time

	mu      sync.Mutex
	chunks  [][]event // full chunks, then the current one
	n       int       // events stored
	max     int
	ring    bool
	dropped int64

	begin, end       int64 // wall interval; end < 0 while running
	waiting, blocked int64 // exact totals, ns
	// the start (+1; 0 = none) of a wait or a block still in progress, so
	// that a snapshot taken during it counts it as waiting or blocked, not
	// busy: a stage parked in Recv for seconds is not busy for seconds
	waitFrom, blockFrom atomic.Int64
}

// register adds a track for a stage about to run.
func (r *Recorder) register(name string) *stageRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	sr := &stageRec{
		name:   name,
		tid:    len(r.stages) + 1,
		epoch:  r.epoch,
		max:    r.max,
		ring:   r.ring,
		end:    -1,
		chunks: [][]event{make([]event, 0, min(chunkSize, r.max))},
	}
	r.stages = append(r.stages, sr)
	return sr
}

func (sr *stageRec) now() int64 { return int64(time.Since(sr.epoch)) }

func (sr *stageRec) start() {
	t := sr.now()
	sr.mu.Lock()
	sr.begin, sr.end = t, -1
	sr.mu.Unlock()
}

func (sr *stageRec) stop() {
	t := sr.now()
	sr.mu.Lock()
	sr.end = t
	sr.mu.Unlock()
}

// span records an interval; waiting and blocked intervals also add to the
// stage's totals.
func (sr *stageRec) span(k evKind, name string, t0, t1 int64) {
	sr.mu.Lock()
	switch k {
	case evWait:
		sr.waiting += t1 - t0
		sr.waitFrom.Store(0)
	case evBlocked:
		sr.blocked += t1 - t0
		sr.blockFrom.Store(0)
	}
	sr.add(event{kind: k, name: name, t0: t0, t1: t1})
	sr.mu.Unlock()
}

// waitBegins marks the start t0 of a wait in progress (k: evWait or
// evBlocked) until its span is recorded.
func (sr *stageRec) waitBegins(k evKind, t0 int64) {
	if k == evWait {
		sr.waitFrom.Store(t0 + 1)
	} else {
		sr.blockFrom.Store(t0 + 1)
	}
}

func (sr *stageRec) counter(k evKind, name string, v int64) {
	t := sr.now()
	sr.mu.Lock()
	sr.add(event{kind: k, name: name, t0: t, t1: v})
	sr.mu.Unlock()
}

// add appends e; sr.mu must be held.
func (sr *stageRec) add(e event) {
	cur := &sr.chunks[len(sr.chunks)-1]
	if len(*cur) == cap(*cur) {
		if sr.n >= sr.max && (!sr.ring || len(sr.chunks) < 2) {
			sr.dropped++
			return
		}
		if sr.n >= sr.max {
			// ring: forget the oldest chunk (a new one is allocated: stored
			// events are never rewritten, snapshots may still hold them)
			sr.n -= len(sr.chunks[0])
			sr.dropped += int64(len(sr.chunks[0]))
			sr.chunks[0] = nil
			sr.chunks = sr.chunks[1:]
		}
		sr.chunks = append(sr.chunks, make([]event, 0, min(chunkSize, max(sr.max-sr.n, 1))))
		cur = &sr.chunks[len(sr.chunks)-1]
	}
	*cur = append(*cur, e)
	sr.n++
}

// snapshot is a consistent copy of a track's state; its chunks share the
// stored events, which are never modified once written.
type snapshot struct {
	name             string
	tid              int
	begin, end       int64
	waiting, blocked int64
	dropped          int64
	chunks           [][]event
}

func (sr *stageRec) snapshot() snapshot {
	now := sr.now()
	sr.mu.Lock()
	defer sr.mu.Unlock()
	s := snapshot{
		name: sr.name, tid: sr.tid,
		begin: sr.begin, end: sr.end,
		waiting: sr.waiting, blocked: sr.blocked,
		dropped: sr.dropped,
		chunks:  slices.Clone(sr.chunks),
	}
	if s.end < 0 { // still running
		s.end = now
		if t := sr.waitFrom.Load(); t > 0 && t-1 <= now {
			s.waiting += now - (t - 1)
		}
		if t := sr.blockFrom.Load(); t > 0 && t-1 <= now {
			s.blocked += now - (t - 1)
		}
	}
	return s
}

func (r *Recorder) snapshots() []snapshot {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	stages := slices.Clone(r.stages)
	r.mu.Unlock()
	out := make([]snapshot, len(stages))
	for i, sr := range stages {
		out[i] = sr.snapshot()
	}
	return out
}

// Span is a named interval inside a stage, opened with Recorder.Begin. The
// zero Span (from a nil or disabled recorder) does nothing.
type Span struct {
	sr   *stageRec
	name string
	t0   int64
	kind evKind
}

// Begin opens a sub-span named name on stage s's track, for work a stage
// wants to see inside its busy time (per-layer spans inside compute). It
// records only if r is non-nil and s's graph is running with recording on.
// Build names once (not with fmt per call) to keep recording allocation-free.
// Sub-spans should nest inside busy time: one that contains a blocking Recv
// or Send overlaps the waiting span in the trace.
func (r *Recorder) Begin(s *Stage, name string) Span {
	if r == nil || s == nil || s.rec == nil {
		return Span{}
	}
	return Span{sr: s.rec, name: name, t0: s.rec.now(), kind: evSpan}
}

// BeginWork opens a span of work done for stage s on a goroutine of its
// own (one of a reader's workers, each with a read in flight), which may
// overlap the stage's waits and other work spans. The stall report counts
// the stage busy whenever at least one work span is open (the union of
// their intervals, not their sum), whatever its own goroutine is waiting
// for: a stage that hands its work to workers is busy while they work.
// The Chrome trace draws work spans on lanes of their own beside the
// stage's track. Like Begin, it records only while s's graph is recording.
func (r *Recorder) BeginWork(s *Stage, name string) Span {
	if r == nil || s == nil || s.rec == nil {
		return Span{}
	}
	return Span{sr: s.rec, name: name, t0: s.rec.now(), kind: evWork}
}

// SpanAt records a sub-span of stage s that ran from start to end on the
// host clock, measured elsewhere (a device's own timing of its work, a
// wait timed by a backend): Begin and End for an interval already over.
func (r *Recorder) SpanAt(s *Stage, name string, start, end time.Time) {
	r.at(s, evSpan, name, start, end)
}

// WorkAt records a work span (as BeginWork) that ran from start to end:
// work done for s elsewhere, such as on a GPU while s waits for it.
func (r *Recorder) WorkAt(s *Stage, name string, start, end time.Time) {
	r.at(s, evWork, name, start, end)
}

func (r *Recorder) at(s *Stage, k evKind, name string, start, end time.Time) {
	if r == nil || s == nil || s.rec == nil || end.Before(start) {
		return
	}
	s.rec.span(k, name, int64(start.Sub(s.rec.epoch)), int64(end.Sub(s.rec.epoch)))
}

// End closes the span.
func (sp Span) End() {
	if sp.sr == nil {
		return
	}
	sp.sr.span(sp.kind, sp.name, sp.t0, sp.sr.now())
}

// Add adds delta to stage s's running counter name (bytes moved, cache
// hits). Like Begin, it records only while s's graph is recording.
func (r *Recorder) Add(s *Stage, name string, delta int64) {
	if r == nil || s == nil || s.rec == nil {
		return
	}
	s.rec.counter(evAdd, name, delta)
}

// Sample records value as the current level of stage s's gauge name (queue
// depth, bytes resident).
func (r *Recorder) Sample(s *Stage, name string, value int64) {
	if r == nil || s == nil || s.rec == nil {
		return
	}
	s.rec.counter(evSample, name, value)
}

// StageSummary is where one stage spent its wall time. Busy is Wall minus
// Waiting (blocked in Recv) minus Blocked (blocked in Send); those three are
// exact, and count the waits of every goroutine that used the stage's
// ports (Stalls splits the wall time of a stage with work spans instead).
// Spans, Work and Counters are computed from stored events, so they miss
// Dropped events.
type StageSummary struct {
	Stage                        string
	Wall, Busy, Waiting, Blocked time.Duration
	Spans                        map[string]SpanStats
	Work                         map[string]WorkStats // BeginWork spans; nil: none
	Counters                     map[string]CounterStats
	Dropped                      int64
}

// SpanStats totals the sub-spans of one name.
type SpanStats struct {
	Count      int64
	Total, Max time.Duration
}

// CounterStats summarizes one counter: for Add counters Sum is the total;
// for Sample gauges Sum/Count is the mean.
type CounterStats struct {
	Count               int64
	Sum, Min, Max, Last int64
}

// Summary is the per-stage totals of every stage recorded so far, in the
// order stages started.
type Summary []StageSummary

// Summary returns per-stage totals. During a run, running stages count
// their wall time up to now.
func (r *Recorder) Summary() Summary {
	snaps := r.snapshots()
	out := make(Summary, 0, len(snaps))
	for _, s := range snaps {
		ss := StageSummary{
			Stage:    s.name,
			Wall:     time.Duration(s.end - s.begin),
			Waiting:  time.Duration(s.waiting),
			Blocked:  time.Duration(s.blocked),
			Spans:    map[string]SpanStats{},
			Counters: map[string]CounterStats{},
			Dropped:  s.dropped,
		}
		ss.Busy = ss.Wall - ss.Waiting - ss.Blocked
		ss.Work = workStats(s, false)
		for _, c := range s.chunks {
			for _, e := range c {
				switch e.kind {
				case evSpan:
					st := ss.Spans[e.name]
					d := time.Duration(e.t1 - e.t0)
					st.Count++
					st.Total += d
					st.Max = max(st.Max, d)
					ss.Spans[e.name] = st
				case evAdd, evSample:
					st := ss.Counters[e.name]
					if st.Count == 0 {
						st.Min, st.Max = e.t1, e.t1
					}
					st.Count++
					st.Sum += e.t1
					st.Min = min(st.Min, e.t1)
					st.Max = max(st.Max, e.t1)
					st.Last = e.t1
					ss.Counters[e.name] = st
				}
			}
		}
		out = append(out, ss)
	}
	return out
}

// String formats the summary as a table, one stage per line.
func (s Summary) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\twall\tbusy\twaiting\tblocked\t")
	pct := func(d, wall time.Duration) string {
		if wall <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(wall))
	}
	for _, st := range s {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t\n", st.Stage, st.Wall.Round(time.Microsecond),
			pct(st.Busy, st.Wall), pct(st.Waiting, st.Wall), pct(st.Blocked, st.Wall))
	}
	tw.Flush()
	return b.String()
}
