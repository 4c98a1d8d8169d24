// Tests of work spans and of the bounding rule: recordings built by hand
// at fixed times (a disk-bound weight path, a compute-bound engine, waits
// that overlap work), the rule over hand-made stall tables (chains,
// cycles, a source outside the graph), and a live graph whose reader's
// workers are a slow disk.

package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// synthEv is one event of a hand-made recording, times in µs.
type synthEv struct {
	kind   evKind
	name   string
	t0, t1 int64
}

// synthStage is one stage of a hand-made recording, times in µs.
type synthStage struct {
	name       string
	begin, end int64
	events     []synthEv
}

// synthRec records stages by hand: no goroutines, no clock, so the
// report of the recording is known exactly.
func synthRec(stages ...synthStage) *Recorder {
	rec := NewRecorder(0)
	us := int64(time.Microsecond)
	for _, s := range stages {
		sr := rec.register(s.name)
		sr.begin, sr.end = s.begin*us, s.end*us
		for _, e := range s.events {
			sr.span(e.kind, e.name, e.t0*us, e.t1*us)
		}
	}
	return rec
}

// steps repeats events every period µs, n times.
func steps(n int, period int64, evs ...synthEv) []synthEv {
	var out []synthEv
	for k := range int64(n) {
		for _, e := range evs {
			out = append(out, synthEv{e.kind, e.name, e.t0 + k*period, e.t1 + k*period})
		}
	}
	return out
}

// diskBound is a streamed run whose disk is the limit, by construction,
// over 10 steps of 1000 µs: compute works 200 µs a step and waits for the
// uploader the rest; the uploader works 100 µs and waits for the reader;
// the reader's goroutine hands out reads in 50 µs and then waits for a
// free slab from the pool, while its workers' reads (four a step,
// overlapping) keep the disk busy from 20 to 990 µs of each step. By busy
// time alone compute (20%) would look like the limit: the reader's
// goroutine is busy 5%.
func diskBound() *Recorder {
	const n, p = 10, 1000
	return synthRec(
		synthStage{"scheduler", 0, n * p, []synthEv{{evWait, "wait <- sampler", 0, n * p}}},
		synthStage{"compute", 0, n * p, steps(n, p, synthEv{evWait, "wait <- uploader", 200, 1000})},
		synthStage{"sampler", 0, n * p, steps(n, p, synthEv{evWait, "wait <- compute", 0, 950})},
		synthStage{"reader", 0, n * p, steps(n, p,
			synthEv{evWait, "wait <- pool", 50, 1000},
			synthEv{evWork, "read", 20, 500}, synthEv{evWork, "read", 100, 600},
			synthEv{evWork, "read", 500, 990}, synthEv{evWork, "read", 600, 990})},
		synthStage{"pool", 0, n * p, []synthEv{{evWait, "wait <- uploader", 0, n * p}}},
		synthStage{"uploader", 0, n * p, steps(n, p, synthEv{evWait, "wait <- reader", 100, 1000})},
	)
}

// TestBoundDiskByConstruction: in a disk-bound recording the reader is
// busy whenever its goroutine works or a read is in flight (99%, the union
// of the reads and its own work, not the 186% their durations sum to), and
// it is the bounding stage, reached by following the waits from the
// scheduler; the report says how the reader's busy time was counted.
func TestBoundDiskByConstruction(t *testing.T) {
	st := diskBound().Stalls()
	var rd StageStall
	for _, s := range st.Stages {
		if s.Busy+s.Starved+s.Blocked != s.Wall {
			t.Errorf("%s: busy %v + starved %v + blocked %v != wall %v", s.Stage, s.Busy, s.Starved, s.Blocked, s.Wall)
		}
		if s.Stage == "reader" {
			rd = s
		}
	}
	us := time.Microsecond
	if rd.Busy != 9900*us || rd.Starved != 100*us || rd.StarvedOn["pool"] != 100*us || rd.Blocked != 0 {
		t.Errorf("reader: busy %v, starved %v (%v), blocked %v; want 9.9ms, 100µs on pool, 0", rd.Busy, rd.Starved, rd.StarvedOn, rd.Blocked)
	}
	if w := rd.Work["read"]; w.Count != 40 || w.InFlight != 9700*us || w.Sum != 18600*us || w.Max != 500*us {
		t.Errorf("reader reads: %+v; want 40, in flight 9.7ms, summed 18.6ms, max 500µs", w)
	}
	if st.Bounding != "reader" || !slices.Equal(st.Chain, []string{"scheduler", "sampler", "compute", "uploader", "reader"}) {
		t.Errorf("bounding %q by %v; want reader by scheduler -> sampler -> compute -> uploader -> reader", st.Bounding, st.Chain)
	}
	var out strings.Builder
	if err := st.Format(&out, Limit{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"reader busy counts the time at least one read was in flight: 97.0% of its wall time (the union of 40 read intervals; their durations sum to 186.0%)",
		"bounding stage: reader (busy 99.0% of the 10ms run; waits followed: scheduler -> sampler -> compute -> uploader -> reader)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// the summary keeps the goroutine's exact totals, and the reads
	sum := diskBound().Summary()
	for _, s := range sum {
		if s.Stage == "reader" && (s.Waiting != 9500*us || s.Work["read"].InFlight != 9700*us || len(s.Spans) != 0) {
			t.Errorf("reader summary: waiting %v, work %+v, spans %v", s.Waiting, s.Work, s.Spans)
		}
	}
}

// TestBoundComputeByConstruction: with every weight resident, compute
// works 90% of each step and the others wait on it: compute bounds.
func TestBoundComputeByConstruction(t *testing.T) {
	const n, p = 10, 1000
	st := synthRec(
		synthStage{"scheduler", 0, n * p, steps(n, p, synthEv{evWait, "wait <- sampler", 20, 1000})},
		synthStage{"compute", 0, n * p, steps(n, p, synthEv{evWait, "wait <- scheduler", 0, 100})},
		synthStage{"sampler", 0, n * p, steps(n, p, synthEv{evWait, "wait <- compute", 0, 980})},
		synthStage{"streamer", 0, n * p, steps(n, p, synthEv{evWait, "wait <- sampler", 0, 990})},
	).Stalls()
	if st.Bounding != "compute" || !slices.Equal(st.Chain, []string{"scheduler", "sampler", "compute"}) {
		t.Errorf("bounding %q by %v; want compute by scheduler -> sampler -> compute", st.Bounding, st.Chain)
	}
}

// TestWorkSplitOverlaps: the wall time of a stage with work spans is split
// once however its goroutines' waits overlap: blocked output before
// starved input, work before both; the per-edge times add up to the
// totals.
func TestWorkSplitOverlaps(t *testing.T) {
	st := synthRec(synthStage{"reader", 0, 100, []synthEv{
		{evWait, "wait <- pool", 0, 100},           // the stage's goroutine, all along
		{evBlocked, "blocked -> uploader", 20, 60}, // a worker, on its output
		{evBlocked, "blocked -> uploader", 30, 50}, // another, at the same time
		{evWork, "read", 40, 80},                   // a third worker, reading
		{evWork, "read", 70, 85},
	}}).Stalls()
	s := st.Stages[0]
	us := time.Microsecond
	if s.Busy != 45*us || s.Blocked != 20*us || s.Starved != 35*us ||
		s.BlockedOn["uploader"] != 20*us || s.StarvedOn["pool"] != 35*us || s.Work["read"].InFlight != 45*us || s.Work["read"].Sum != 55*us {
		t.Errorf("busy %v, blocked %v %v, starved %v %v, work %+v; want 45µs, 20µs on uploader, 35µs on pool, 45µs in flight of 55µs",
			s.Busy, s.Blocked, s.BlockedOn, s.Starved, s.StarvedOn, s.Work)
	}
}

// TestBoundRule: the rule over hand-made stall tables.
func TestBoundRule(t *testing.T) {
	ms := time.Millisecond
	stall := func(name string, busy time.Duration, starvedOn, blockedOn map[string]time.Duration) StageStall {
		s := StageStall{Stage: name, Wall: 10 * ms, Busy: busy, StarvedOn: starvedOn, BlockedOn: blockedOn}
		for _, d := range starvedOn {
			s.Starved += d
		}
		for _, d := range blockedOn {
			s.Blocked += d
		}
		return s
	}
	on := func(stage string, d time.Duration) map[string]time.Duration {
		return map[string]time.Duration{stage: d}
	}
	for _, tc := range []struct {
		name   string
		stages []StageStall
		want   string
		chain  []string
	}{
		{"the busiest stage waits on another", []StageStall{
			stall("compute", 3*ms, on("uploader", 7*ms), nil),
			stall("uploader", 1*ms, on("reader", 9*ms), nil),
			stall("reader", 9*ms, on("pool", 1*ms), nil),
		}, "reader", []string{"compute", "uploader", "reader"}},
		{"blocked on a slow consumer", []StageStall{
			stall("source", 2*ms, nil, on("sink", 8*ms)),
			stall("sink", 10*ms, nil, nil),
		}, "sink", []string{"source", "sink"}},
		{"a cycle of waits: its busiest stage", []StageStall{
			stall("reader", 2*ms, on("pool", 8*ms), nil),
			stall("pool", 0, on("uploader", 10*ms), nil),
			stall("uploader", 4*ms, on("reader", 6*ms), nil),
			stall("compute", 1*ms, on("uploader", 9*ms), nil),
		}, "uploader", []string{"reader", "pool", "uploader"}},
		{"everyone waits for input from outside", []StageStall{
			stall("admit", 0, on("queue", 10*ms), nil),
			stall("compute", 1*ms, on("admit", 9*ms), nil),
		}, "queue", []string{"compute", "admit", "queue"}},
		{"two ends: the one more time leads to", []StageStall{
			stall("a", 6*ms, on("b", 4*ms), nil),
			stall("b", 1*ms, on("c", 9*ms), nil),
			stall("c", 10*ms, nil, nil),
			stall("d", 5*ms, nil, nil),
		}, "c", []string{"b", "c"}},
		{"no waits at all", []StageStall{stall("only", 10*ms, nil, nil)}, "only", []string{"only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, chain := bound(tc.stages)
			if got != tc.want || !slices.Equal(chain, tc.chain) {
				t.Errorf("bound = %q by %v, want %q by %v", got, chain, tc.want, tc.chain)
			}
		})
	}
}

// TestBoundDiskLive: a live graph shaped like the weight path, whose disk
// is slow by construction: the reader's goroutine takes a free slab from
// the pool and hands the read to one of four workers, which sleep 2 ms per
// read (the disk); compute takes each read (a few µs) and gives the slab
// back. The reader's goroutine spends its time waiting for slabs, compute
// for reads: the reader is named, busy at least 80% of its wall time
// (reads in flight), and the Chrome trace draws its reads on lanes of
// their own, one per worker at most, none overlapping on a lane.
func TestBoundDiskLive(t *testing.T) {
	noLeak(t)
	rec := NewRecorder(0)
	g := New(rec)
	reader, pool, compute := g.Stage("reader"), g.Stage("pool"), g.Stage("compute")
	const slabs, workers, reads = 4, 4, 40
	free, freeIn := Connect[int](pool, reader, slabs)
	read, readIn := Connect[int](reader, compute, slabs)
	ret, retIn := Connect[int](compute, pool, slabs)
	pool.Do(func(ctx context.Context) error {
		for i := range slabs {
			if err := free.Send(ctx, i); err != nil {
				return err
			}
		}
		return drain(ctx, retIn, func(v int) error { return free.Send(ctx, v) })
	})
	reader.Do(func(ctx context.Context) error {
		work := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for slab := range work {
					sp := rec.BeginWork(reader, "read")
					time.Sleep(2 * time.Millisecond)
					sp.End()
					if read.Send(ctx, slab) != nil {
						return
					}
				}
			})
		}
		defer wg.Wait()
		defer close(work)
		for range reads {
			slab, err := freeIn.Recv(ctx)
			if err != nil {
				return err
			}
			select {
			case work <- slab:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	compute.Do(func(ctx context.Context) error {
		for range reads {
			slab, err := readIn.Recv(ctx)
			if err != nil {
				return err
			}
			spin(5 * time.Microsecond)
			if err := ret.Send(ctx, slab); err != nil {
				return err
			}
		}
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := rec.Stalls()
	var out strings.Builder
	st.Format(&out, Limit{})
	for _, s := range st.Stages {
		if s.Stage == "reader" && (s.Busy < s.Wall*8/10 || s.Work["read"].Count != reads) {
			t.Errorf("reader busy %v of %v, %d reads:\n%s", s.Busy, s.Wall, s.Work["read"].Count, out.String())
		}
	}
	if st.Bounding != "reader" {
		t.Errorf("bounding %q, want reader:\n%s", st.Bounding, out.String())
	}

	var buf bytes.Buffer
	if err := rec.WriteChromeTrace(&buf); err != nil {
		t.Fatal(err)
	}
	var tr fullTrace
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	lanes := map[int]string{}
	ends := map[int]float64{}
	n := 0
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			var a struct{ Name string }
			json.Unmarshal(e.Args, &a)
			if strings.HasPrefix(a.Name, "reader: read ") {
				lanes[e.Tid] = a.Name
			}
		}
		if e.Ph == "X" && e.Cat == "work" {
			n++
			if _, ok := lanes[e.Tid]; !ok {
				t.Errorf("read at %.3f on tid %d, not a lane", e.Ts, e.Tid)
			}
			if e.Ts < ends[e.Tid]-0.001 {
				t.Errorf("%s: read at %.3f overlaps the previous one ending %.3f", lanes[e.Tid], e.Ts, ends[e.Tid])
			}
			ends[e.Tid] = e.Ts + e.Dur
		}
	}
	if n != reads || len(lanes) < 1 || len(lanes) > workers {
		t.Errorf("%d reads on %d lanes (%v), want %d on 1 to %d", n, len(lanes), lanes, reads, workers)
	}
}
