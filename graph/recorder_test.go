// Tests of the recorder: zero allocations when off, time attribution in the
// summary, sub-spans and counters, the event limit, and the Chrome trace.

package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestAllocs measures, from inside a running stage, the allocations of a
// Send, a Recv, a sub-span, a work span and a counter. "fast" uses a self-loop edge with
// room, so the ports never block; "slow" bounces items off an echo stage
// over synchronous edges, so every Send and Recv blocks.
func TestAllocs(t *testing.T) {
	disabled := NewRecorder(0)
	disabled.SetEnabled(false)
	recs := []struct {
		name string
		rec  *Recorder
		max  float64
	}{
		{"rec=nil", nil, 0},
		{"rec=disabled", disabled, 0},
		// On, events land in preallocated chunks: less than one allocation
		// per call on average, and AllocsPerRun rounds that down to 0.
		{"rec=on", NewRecorder(1 << 20), 0},
	}
	for _, r := range recs {
		for _, path := range []string{"fast", "slow"} {
			t.Run(r.name+"/"+path, func(t *testing.T) {
				var allocs float64
				g := New(r.rec)
				s := g.Stage("s")
				if path == "fast" {
					out, in := Connect[int](s, s, 1)
					s.Do(func(ctx context.Context) error {
						allocs = testing.AllocsPerRun(10000, func() {
							sp := r.rec.Begin(s, "layer 3 attn")
							w := r.rec.BeginWork(s, "read")
							out.Send(ctx, 1)
							in.Recv(ctx)
							r.rec.Add(s, "bytes", 64)
							w.End()
							sp.End()
						})
						return nil
					})
				} else {
					echo := g.Stage("echo")
					out, echoIn := Connect[int](s, echo, 0)
					echoOut, in := Connect[int](echo, s, 0)
					s.Do(func(ctx context.Context) error {
						allocs = testing.AllocsPerRun(10000, func() {
							out.Send(ctx, 1)
							in.Recv(ctx)
						})
						return nil
					})
					echo.Do(func(ctx context.Context) error {
						for {
							v, err := echoIn.Recv(ctx)
							if err != nil {
								return nil
							}
							if err := echoOut.Send(ctx, v); err != nil {
								return nil
							}
						}
					})
				}
				if err := g.Run(context.Background()); err != nil {
					t.Fatalf("Run: %v", err)
				}
				if allocs > r.max {
					t.Errorf("%v allocations per call, want <= %v", allocs, r.max)
				}
			})
		}
	}
}

// A slow sink keeps the source blocked on output; a slow source keeps the
// sink waiting for input. Whatever the balance, busy+waiting+blocked is the
// stage's wall time, in the summary and in the trace.
func TestSummaryAttribution(t *testing.T) {
	tests := []struct {
		name     string
		slow     string // the stage that sleeps per item
		dominant map[string]string
	}{
		{"slow sink", "sink", map[string]string{"source": "blocked", "sink": "busy"}},
		{"slow source", "source", map[string]string{"source": "busy", "sink": "waiting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := NewRecorder(0)
			p := newPipeline(rec, 4)
			work := func(stage string) {
				if stage == tt.slow {
					time.Sleep(200 * time.Microsecond)
				}
			}
			p.src.Do(func(ctx context.Context) error {
				for i := range 300 {
					work("source")
					if err := p.srcOut.Send(ctx, i); err != nil {
						return err
					}
				}
				return nil
			})
			p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
			p.sink.Do(func(ctx context.Context) error {
				return drain(ctx, p.sinkIn, func(int) error { work("sink"); return nil })
			})
			if err := p.g.Run(context.Background()); err != nil {
				t.Fatalf("Run: %v", err)
			}
			sum := rec.Summary()
			t.Logf("\n%s", sum)
			if len(sum) != 3 {
				t.Fatalf("summary has %d stages, want 3", len(sum))
			}
			for _, st := range sum {
				if st.Wall <= 0 || st.Busy < 0 || st.Waiting < 0 || st.Blocked < 0 {
					t.Errorf("%s: wall %v busy %v waiting %v blocked %v: want positive wall, no negative part",
						st.Stage, st.Wall, st.Busy, st.Waiting, st.Blocked)
				}
				if d := st.Busy + st.Waiting + st.Blocked - st.Wall; d != 0 {
					t.Errorf("%s: busy+waiting+blocked - wall = %v", st.Stage, d)
				}
				want, ok := tt.dominant[st.Stage]
				if !ok {
					continue
				}
				part := map[string]time.Duration{"busy": st.Busy, "waiting": st.Waiting, "blocked": st.Blocked}[want]
				if float64(part) < 0.5*float64(st.Wall) {
					t.Errorf("%s: %s %v of wall %v, want most of it", st.Stage, want, part, st.Wall)
				}
			}
			checkTraceTiles(t, rec, sum)
		})
	}
}

// chromeTrace is the subset of the trace-event format the tests read.
type chromeTrace struct {
	DisplayTimeUnit string `json:"displayTimeUnit"`
	TraceEvents     []struct {
		Name string          `json:"name"`
		Cat  string          `json:"cat"`
		Ph   string          `json:"ph"`
		Pid  int             `json:"pid"`
		Tid  int             `json:"tid"`
		Ts   float64         `json:"ts"`
		Dur  float64         `json:"dur"`
		Args json.RawMessage `json:"args"`
	} `json:"traceEvents"`
}

func readTrace(t *testing.T, rec *Recorder) chromeTrace {
	t.Helper()
	var buf bytes.Buffer
	if err := rec.WriteChromeTrace(&buf); err != nil {
		t.Fatalf("WriteChromeTrace: %v", err)
	}
	var tr chromeTrace
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("trace is not valid JSON: %v\n%.2000s", err, buf.String())
	}
	return tr
}

// checkTraceTiles checks that each stage's track is tiled by its busy,
// wait and blocked spans: they do not overlap and add up to its wall time.
func checkTraceTiles(t *testing.T, rec *Recorder, sum Summary) {
	t.Helper()
	tr := readTrace(t, rec)
	names := map[int]string{}
	total := map[string]float64{} // µs
	last := map[int]float64{}
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			var a struct{ Name string }
			if err := json.Unmarshal(e.Args, &a); err != nil {
				t.Fatalf("thread_name args %s: %v", e.Args, err)
			}
			names[e.Tid] = a.Name
		case e.Ph == "X" && e.Cat != "span":
			if e.Ts < last[e.Tid]-0.0015 { // printed with 3 decimals
				t.Errorf("tid %d: span %q at %.3fµs overlaps the previous one ending at %.3fµs", e.Tid, e.Name, e.Ts, last[e.Tid])
			}
			last[e.Tid] = e.Ts + e.Dur
			total[names[e.Tid]] += e.Dur
		}
	}
	for _, st := range sum {
		wall := float64(st.Wall) / 1e3
		if d := math.Abs(total[st.Stage] - wall); d > 0.01*wall+1 {
			t.Errorf("%s: trace spans add up to %.1fµs, wall is %.1fµs", st.Stage, total[st.Stage], wall)
		}
	}
}

func TestSpansAndCounters(t *testing.T) {
	rec := NewRecorder(0)
	g := New(rec)
	s := g.Stage("compute")
	layers := []string{"layer 0", "layer 1", `layer 2 "ffn" <\\>`}
	s.Do(func(ctx context.Context) error {
		for step := range 10 {
			for _, l := range layers {
				sp := rec.Begin(s, l)
				time.Sleep(10 * time.Microsecond)
				sp.End()
			}
			rec.Add(s, "bytes", 1000)
			rec.Sample(s, "queue", int64(step))
		}
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := rec.Summary()[0]
	for _, l := range layers {
		sp := st.Spans[l]
		if sp.Count != 10 || sp.Total < 100*time.Microsecond || sp.Max > sp.Total {
			t.Errorf("span %q: %+v, want 10 spans of >= 10µs", l, sp)
		}
	}
	if c := st.Counters["bytes"]; c.Count != 10 || c.Sum != 10000 {
		t.Errorf("counter bytes: %+v, want 10 adds totalling 10000", c)
	}
	if c := st.Counters["queue"]; c.Count != 10 || c.Min != 0 || c.Max != 9 || c.Last != 9 {
		t.Errorf("gauge queue: %+v, want 10 samples 0..9", c)
	}

	tr := readTrace(t, rec)
	var spans, bytesTotal, queue int
	var lastBytes int64
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "X" && e.Cat == "span":
			spans++
		case e.Ph == "C" && e.Name == "compute/bytes":
			bytesTotal++
			var a struct{ Value int64 }
			json.Unmarshal(e.Args, &a)
			lastBytes = a.Value
		case e.Ph == "C" && e.Name == "compute/queue":
			queue++
		}
	}
	if spans != 30 || bytesTotal != 10 || queue != 10 {
		t.Errorf("trace has %d sub-spans, %d bytes and %d queue counter events, want 30, 10, 10", spans, bytesTotal, queue)
	}
	if lastBytes != 10000 {
		t.Errorf("last bytes counter event = %d, want the running total 10000", lastBytes)
	}
}

// Past the event limit, events are dropped and counted, totals stay exact
// and the trace stays valid.
func TestEventLimit(t *testing.T) {
	const limit = 10
	rec := NewRecorder(limit)
	g := New(rec)
	s := g.Stage("s")
	out, in := Connect[int](s, s, 1)
	s.Do(func(ctx context.Context) error {
		for range 100 {
			rec.Begin(s, "x").End()
			out.Send(ctx, 1)
			in.Recv(ctx)
		}
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := rec.Summary()[0]
	if st.Dropped != 100-limit || st.Spans["x"].Count != limit {
		t.Errorf("dropped %d, kept %d spans; want %d dropped, %d kept", st.Dropped, st.Spans["x"].Count, 100-limit, limit)
	}
	readTrace(t, rec)
}

func TestNilRecorder(t *testing.T) {
	var rec *Recorder
	if rec.Enabled() {
		t.Error("nil recorder is enabled")
	}
	rec.SetEnabled(true)
	if len(rec.Summary()) != 0 {
		t.Error("nil recorder has a summary")
	}
	tr := readTrace(t, rec)
	if len(tr.TraceEvents) != 1 { // the process name
		t.Errorf("nil recorder's trace has %d events, want 1", len(tr.TraceEvents))
	}
}

func TestSummaryString(t *testing.T) {
	rec := NewRecorder(0)
	p := newPipeline(rec, 4)
	p.src.Do(func(ctx context.Context) error { return count(ctx, p.srcOut, 100) })
	p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
	p.sink.Do(func(ctx context.Context) error { return drain(ctx, p.sinkIn, func(int) error { return nil }) })
	if err := p.g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := rec.Summary().String()
	for _, want := range []string{"stage", "waiting", "source", "square", "sink"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// WriteChromeTrace to a failing writer reports the error.
func TestTraceWriteError(t *testing.T) {
	rec := NewRecorder(0)
	g := New(rec)
	s := g.Stage("s")
	s.Do(func(context.Context) error {
		for i := range 5000 {
			rec.Add(s, fmt.Sprint("c", i%3), 1)
		}
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := rec.WriteChromeTrace(failWriter{}); err == nil {
		t.Error("WriteChromeTrace to a failing writer = nil, want an error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestRingRecorder: a ring recorder keeps the newest events within its
// bound however many are recorded, and its totals stay exact.
func TestRingRecorder(t *testing.T) {
	r := NewRingRecorder(3 * chunkSize)
	sr := r.register("s")
	const n = 50 * chunkSize
	for i := range n {
		sr.span(evWait, "w", int64(i), int64(i)+1)
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.n > 3*chunkSize || sr.n < 2*chunkSize {
		t.Errorf("%d events kept, want between %d and %d", sr.n, 2*chunkSize, 3*chunkSize)
	}
	last := sr.chunks[len(sr.chunks)-1]
	if e := last[len(last)-1]; e.t0 != n-1 {
		t.Errorf("newest event kept is %d, want %d", e.t0, n-1)
	}
	if sr.waiting != n {
		t.Errorf("waiting total %d, want %d", sr.waiting, n)
	}
	if sr.dropped+int64(sr.n) != n {
		t.Errorf("%d dropped + %d kept != %d", sr.dropped, sr.n, n)
	}
	// a plain recorder keeps the oldest and drops the rest
	p := NewRecorder(chunkSize)
	pr := p.register("s")
	for i := range 3 * chunkSize {
		pr.span(evWait, "w", int64(i), int64(i)+1)
	}
	if pr.n != chunkSize || pr.chunks[0][0].t0 != 0 {
		t.Errorf("plain recorder: %d kept, first %d", pr.n, pr.chunks[0][0].t0)
	}
}

// TestSummaryDuringWait: a summary taken while a stage is parked in Recv
// counts the wait in progress as waiting, not busy, as /metrics reads it
// from a running server.
func TestSummaryDuringWait(t *testing.T) {
	rec := NewRecorder(0)
	g := New(rec)
	src, sink := g.Stage("source"), g.Stage("sink")
	out, in := Connect[int](src, sink, 1)
	release := make(chan struct{})
	src.Do(func(ctx context.Context) error {
		if err := out.Send(ctx, 1); err != nil {
			return err
		}
		<-release
		return out.Send(ctx, 2)
	})
	sink.Do(func(ctx context.Context) error {
		if _, err := in.Recv(ctx); err != nil {
			return err
		}
		// parked in Recv until the source sends again
		return drain(ctx, in, func(int) error { return nil })
	})
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	time.Sleep(300 * time.Millisecond)
	for _, st := range rec.Summary() {
		if st.Stage == "sink" && st.Busy > 100*time.Millisecond {
			t.Errorf("sink parked in Recv for 300 ms: busy %v, waiting %v (a wait in progress counted as busy)", st.Busy, st.Waiting)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
