// This file holds what WriteChromeTraceOpts adds to a plain trace: counter
// series sampled outside the graph (an engine's cache statistics), derived
// bandwidth tracks for byte counters, and their writers.

package graph

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceOptions are additions to a Chrome trace.
type TraceOptions struct {
	// RateWindow turns every Add counter whose name begins with "bytes"
	// into a second counter track, "stage/counter GB/s", averaged over
	// windows of this length (0: 10 ms, or longer so that a trace has at
	// most 4000 windows per track; negative: no rate tracks).
	RateWindow time.Duration
	// Series are extra counter tracks (values sampled by the caller).
	Series []Series
	// Metadata goes into the trace's "otherData" object (model, config,
	// machine), which ui.perfetto.dev shows as trace metadata.
	Metadata map[string]string
	// From and To, when set, keep only what happened between them (spans
	// are clipped): a window of a long-running recording, e.g. the last N
	// seconds of a live server.
	From, To time.Time
}

// in reports whether t is inside the window.
func (tw *traceWriter) in(t int64) bool { return t >= tw.from && t <= tw.to }

// Forget drops stored events that ended before t, a chunk (a few thousand
// events) at a time, so that a long-running recorder keeps recording
// within its event limit; export windows that start at or after t. The
// summary's wall, waiting and blocked totals stay exact since the start;
// its spans and counters then cover only the events kept.
func (r *Recorder) Forget(t time.Time) {
	if r == nil {
		return
	}
	cut := int64(t.Sub(r.epoch))
	r.mu.Lock()
	stages := slices.Clone(r.stages)
	r.mu.Unlock()
	for _, sr := range stages {
		sr.mu.Lock()
		k := 0
		for k < len(sr.chunks)-1 && chunkEnd(sr.chunks[k]) < cut {
			sr.n -= len(sr.chunks[k])
			k++
		}
		if k > 0 {
			sr.chunks = slices.Delete(sr.chunks, 0, k)
		}
		sr.mu.Unlock()
	}
}

// chunkEnd is the latest time an event of c covers.
func chunkEnd(c []event) int64 {
	var end int64 = math.MinInt64
	for _, e := range c {
		end = max(end, e.t0)
		if e.kind <= evWork {
			end = max(end, e.t1)
		}
	}
	return end
}

// Series is a counter track sampled outside the graph.
type Series struct {
	Name   string
	Points []Point
}

// Point is one sample of a Series.
type Point struct {
	T time.Time
	V float64
}

// IsByteCounter reports whether an Add counter name counts bytes (and so
// gets a bandwidth track and a line in the stall report).
func IsByteCounter(name string) bool { return strings.HasPrefix(name, "bytes") }

// rates writes the bandwidth track of each byte counter of s.
func (tw *traceWriter) rates(s snapshot, window time.Duration) {
	type ev struct{ t, v int64 }
	byName := map[string][]ev{}
	var order []string
	for _, c := range s.chunks {
		for _, e := range c {
			if e.kind != evAdd || !IsByteCounter(e.name) {
				continue
			}
			if _, ok := byName[e.name]; !ok {
				order = append(order, e.name)
			}
			byName[e.name] = append(byName[e.name], ev{e.t0, e.t1})
		}
	}
	w := int64(window)
	if w <= 0 {
		w = int64(10 * time.Millisecond)
	}
	w = max(w, (s.end-s.begin)/4000, 1)
	for _, name := range order {
		evs := byName[name]
		q := jsonString(s.name + "/" + name + " GB/s")
		start := s.begin + (evs[0].t-s.begin)/w*w
		var sum int64
		for _, e := range evs {
			for e.t >= start+w {
				tw.counterF(q, start, float64(sum)/float64(w)) // bytes per ns = GB/s
				start += w
				sum = 0
			}
			sum += e.v
		}
		tw.counterF(q, start, float64(sum)/float64(w))
		tw.counterF(q, start+w, 0)
	}
}

// counterF writes a counter event with a float value on an already quoted
// track name.
func (tw *traceWriter) counterF(quotedName []byte, t int64, v float64) {
	if !tw.in(t) {
		return
	}
	tw.sep()
	b := append(tw.buf[:0], `{"ph":"C","pid":1,"tid":0,"ts":`...)
	b = appendMicros(b, t)
	b = append(b, `,"name":`...)
	b = append(b, quotedName...)
	b = append(b, `,"args":{"value":`...)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	b = strconv.AppendFloat(b, v, 'g', 6, 64)
	b = append(b, "}}"...)
	tw.w.Write(b)
	tw.buf = b
}

// WaitSpan is an interval a stage spent waiting for input that does not
// come through one of its ports, opened with Recorder.BeginWait.
type WaitSpan struct {
	sr   *stageRec
	name string
	t0   int64
}

// BeginWait opens a wait on something other than a port (a channel the
// stage selects on, a socket): its End counts the interval as waiting for
// input, like a blocking Recv, instead of busy time. name should read like
// a port's, "wait <- source". Like Begin, it records only while s's graph
// is recording, and allocates nothing.
func (r *Recorder) BeginWait(s *Stage, name string) WaitSpan {
	if r == nil || s == nil || s.rec == nil {
		return WaitSpan{}
	}
	t0 := s.rec.now()
	s.rec.waitBegins(evWait, t0)
	return WaitSpan{sr: s.rec, name: name, t0: t0}
}

// End closes the wait.
func (w WaitSpan) End() {
	if w.sr != nil {
		w.sr.span(evWait, w.name, w.t0, w.sr.now())
	}
}

// Detail is how much a stage that offers levels (compute) records inside
// its busy time. Finer levels cost a few clock reads per span: a trace asks
// for them; a recorder kept on for metrics leaves them off.
type Detail int32

// Detail levels.
const (
	DetailStages Detail = iota // ports, counters and coarse spans only (the default)
	DetailLayers               // + per-layer spans: attention, FFN, experts, output
	DetailOps                  // + every matrix product and attention core
)

// SetDetail sets the level of sub-spans for graphs started afterwards.
func (r *Recorder) SetDetail(d Detail) {
	if r != nil {
		r.detail.Store(int32(d))
	}
}

// Detail returns the level of sub-spans; a nil or disabled recorder
// records none.
func (r *Recorder) Detail() Detail {
	if !r.Enabled() {
		return DetailStages
	}
	return Detail(r.detail.Load())
}
