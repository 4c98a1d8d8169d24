// This file exports a recording as Chrome trace-event JSON, the format
// ui.perfetto.dev and chrome://tracing open: one track (tid) per stage with
// "X" complete events for busy, waiting, blocked and sub-spans, and "C"
// counter events. It writes the JSON by hand (no reflection) so a trace of a
// few million events exports quickly.

package graph

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// traceSpan is one "X" event before it is written.
type traceSpan struct {
	name, cat string
	t0, t1    int64
}

// WriteChromeTrace writes everything recorded so far as Chrome trace-event
// JSON (the object form, {"traceEvents": [...]}). Each stage is one thread
// track named after it, ordered as the stages started; its wall time is
// tiled by "busy", "wait <- producer" and "blocked -> consumer" spans, with
// sub-spans (category "span") nested in the busy ones. Counters become
// process counter tracks named "stage/counter"; Add counters show their
// running total. Timestamps are microseconds since NewRecorder.
func (r *Recorder) WriteChromeTrace(w io.Writer) error {
	return r.WriteChromeTraceOpts(w, TraceOptions{RateWindow: -1})
}

// WriteChromeTraceOpts is WriteChromeTrace with additions: derived
// bandwidth tracks, counter series sampled outside the graph, and
// metadata (see TraceOptions).
func (r *Recorder) WriteChromeTraceOpts(w io.Writer, o TraceOptions) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	tw := traceWriter{w: bw, first: true, from: math.MinInt64, to: math.MaxInt64}
	var epoch time.Time
	if r != nil {
		epoch = r.epoch
	}
	if !o.From.IsZero() {
		tw.from = int64(o.From.Sub(epoch))
	}
	if !o.To.IsZero() {
		tw.to = int64(o.To.Sub(epoch))
	}
	bw.WriteString(`{"displayTimeUnit":"ns",`)
	if len(o.Metadata) > 0 {
		bw.WriteString(`"otherData":{`)
		keys := make([]string, 0, len(o.Metadata))
		for k := range o.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				bw.WriteByte(',')
			}
			bw.Write(jsonString(k))
			bw.WriteByte(':')
			bw.Write(jsonString(o.Metadata[k]))
		}
		bw.WriteString(`},`)
	}
	bw.WriteString(`"traceEvents":[`)
	tw.meta("process_name", 0, `{"name":"flowinfer graph"}`)
	snaps := r.snapshots()
	for _, s := range snaps {
		tw.stage(s)
	}
	if o.RateWindow >= 0 {
		for _, s := range snaps {
			tw.rates(s, o.RateWindow)
		}
	}
	for _, sr := range o.Series {
		q := jsonString(sr.Name)
		for _, p := range sr.Points {
			tw.counterF(q, int64(p.T.Sub(epoch)), p.V)
		}
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

type traceWriter struct {
	w        *bufio.Writer
	first    bool
	from, to int64 // window (ns since the epoch)
	buf      []byte
	names    map[string][]byte    // JSON-quoted names, cached
	ctrs     map[[2]string][]byte // JSON-quoted "stage/counter" names, cached
}

func (tw *traceWriter) stage(s snapshot) {
	tw.meta("thread_name", s.tid, `{"name":`+string(tw.quote(s.name))+`}`)
	tw.meta("thread_sort_index", s.tid, `{"sort_index":`+strconv.Itoa(s.tid*laneTids)+`}`)

	var spans, work []traceSpan
	cursor, last := s.begin, s.begin // busy runs from cursor to the next wait/blocked span
	totals := map[string]int64{}
	for _, c := range s.chunks {
		for _, e := range c {
			switch e.kind {
			case evWait, evBlocked:
				if e.t0 > cursor {
					spans = append(spans, traceSpan{"busy", "busy", cursor, e.t0})
				}
				cat := "wait"
				if e.kind == evBlocked {
					cat = "blocked"
				}
				spans = append(spans, traceSpan{e.name, cat, e.t0, e.t1})
				cursor = max(cursor, e.t1)
			case evSpan:
				spans = append(spans, traceSpan{e.name, "span", e.t0, e.t1})
			case evWork:
				work = append(work, traceSpan{e.name, "work", e.t0, e.t1})
			case evAdd:
				totals[e.name] += e.t1
				if tw.in(e.t0) {
					tw.counter(s.tid, s.name, e.name, e.t0, totals[e.name])
				}
			case evSample:
				if tw.in(e.t0) {
					tw.counter(s.tid, s.name, e.name, e.t0, e.t1)
				}
			}
			if e.kind <= evWork { // counters keep their value in t1
				last = max(last, e.t0, e.t1)
			} else {
				last = max(last, e.t0)
			}
		}
	}
	// With dropped events the tail is unknown: stop at the last stored one.
	end := s.end
	if s.dropped > 0 {
		end = min(end, last)
	}
	if end > cursor {
		spans = append(spans, traceSpan{"busy", "busy", cursor, end})
	}
	// Sorted by start, longer first on ties, so that viewers nest
	// sub-spans inside the busy span that contains them.
	slices.SortStableFunc(spans, func(a, b traceSpan) int {
		return cmp.Or(cmp.Compare(a.t0, b.t0), cmp.Compare(b.t1, a.t1))
	})
	for _, sp := range spans {
		tw.clipped(s.tid, sp)
	}
	tw.lanes(s, work)
}

// laneTids is the room in thread ids and sort indices after each stage's
// for the lanes of its work spans.
const laneTids = 1024

// lanes draws a stage's work spans (BeginWork), which overlap, on tracks of
// their own just below the stage's, "stage: name 1", "stage: name 2", ...:
// each span goes to the first lane free when it starts, so there are as
// many lanes as spans were ever open at once (at most laneTids-1; more
// share the last one).
func (tw *traceWriter) lanes(s snapshot, work []traceSpan) {
	slices.SortStableFunc(work, func(a, b traceSpan) int { return cmp.Compare(a.t0, b.t0) })
	var ends []int64 // per lane, the end of its last span
	for _, sp := range work {
		lane := slices.IndexFunc(ends, func(end int64) bool { return end <= sp.t0 })
		if lane < 0 {
			lane = min(len(ends), laneTids-2)
			if lane == len(ends) {
				ends = append(ends, 0)
				tid := laneTid(s.tid, lane)
				tw.meta("thread_name", tid, `{"name":`+string(tw.quote(s.name+": "+sp.name+" "+strconv.Itoa(lane+1)))+`}`)
				tw.meta("thread_sort_index", tid, `{"sort_index":`+strconv.Itoa(s.tid*laneTids+1+lane)+`}`)
			}
		}
		ends[lane] = max(ends[lane], sp.t1)
		tw.clipped(laneTid(s.tid, lane), sp)
	}
}

// laneTid is the thread id of a stage's work lane: above every stage's.
func laneTid(tid, lane int) int { return 1<<20 + tid*laneTids + lane }

// clipped writes sp clipped to the window, if it overlaps it.
func (tw *traceWriter) clipped(tid int, sp traceSpan) {
	if sp.t1 < tw.from || sp.t0 > tw.to {
		return
	}
	sp.t0, sp.t1 = max(sp.t0, tw.from), min(sp.t1, tw.to)
	tw.complete(tid, sp)
}

func (tw *traceWriter) sep() {
	if !tw.first {
		tw.w.WriteString(",\n")
	}
	tw.first = false
}

func (tw *traceWriter) meta(name string, tid int, args string) {
	tw.sep()
	b := append(tw.buf[:0], `{"ph":"M","pid":1,"tid":`...)
	b = strconv.AppendInt(b, int64(tid), 10)
	b = append(b, `,"name":"`...)
	b = append(b, name...)
	b = append(b, `","args":`...)
	b = append(b, args...)
	b = append(b, '}')
	tw.w.Write(b)
	tw.buf = b
}

func (tw *traceWriter) complete(tid int, sp traceSpan) {
	tw.sep()
	b := append(tw.buf[:0], `{"ph":"X","pid":1,"tid":`...)
	b = strconv.AppendInt(b, int64(tid), 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, sp.t0)
	b = append(b, `,"dur":`...)
	b = appendMicros(b, sp.t1-sp.t0)
	b = append(b, `,"cat":"`...)
	b = append(b, sp.cat...)
	b = append(b, `","name":`...)
	b = append(b, tw.quote(sp.name)...)
	b = append(b, '}')
	tw.w.Write(b)
	tw.buf = b
}

func (tw *traceWriter) counter(tid int, stage, name string, t, v int64) {
	tw.sep()
	b := append(tw.buf[:0], `{"ph":"C","pid":1,"tid":`...)
	b = strconv.AppendInt(b, int64(tid), 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, t)
	b = append(b, `,"name":`...)
	b = append(b, tw.counterName(stage, name)...)
	b = append(b, `,"args":{"value":`...)
	b = strconv.AppendInt(b, v, 10)
	b = append(b, "}}"...)
	tw.w.Write(b)
	tw.buf = b
}

// quote returns s as a JSON string literal.
func (tw *traceWriter) quote(s string) []byte {
	if q, ok := tw.names[s]; ok {
		return q
	}
	q := jsonString(s)
	if tw.names == nil {
		tw.names = map[string][]byte{}
	}
	tw.names[s] = q
	return q
}

func (tw *traceWriter) counterName(stage, name string) []byte {
	k := [2]string{stage, name}
	if q, ok := tw.ctrs[k]; ok {
		return q
	}
	q := jsonString(stage + "/" + name)
	if tw.ctrs == nil {
		tw.ctrs = map[[2]string][]byte{}
	}
	tw.ctrs[k] = q
	return q
}

// jsonString returns s as a JSON string literal, leaving <, > and & as they
// are (they are only escaped by default for HTML).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// appendMicros appends ns as microseconds with three decimals.
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}
