// Benchmarks of a 3-stage pipeline (source -> square -> sink, edges of
// capacity 64): plain typed channels with a select on ctx.Done() as the
// baseline (DESIGN.md's 157 ns/element), then the graph with recording off
// and on, with edges of capacity 64 (few blocking events) and 1 (about one
// per element). Each loop iteration pushes benchItems elements through a
// fresh graph; read ns/elem and cpu-ns/elem.
//
// Measured on the shared 2-core VM while other jobs kept its load average at
// 4 to 12 (so absolute numbers are 2-3x those of an idle machine; a bare
// buffered send+receive took 60-90 ns instead of ~25): cap=64: chan+select
// 470-800 ns/elem, graph off 310-490, graph on 300-450 (0.047 events/elem,
// no measurable cost); cap=1: chan 1000-1200 cpu-ns/elem, graph off
// 1090-1240, graph on 1300-1540 (1.2 events/elem).

package graph

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

const benchItems = 1 << 14

func BenchmarkPipeline(b *testing.B) {
	for _, capacity := range []int{1, 64} {
		b.Run(fmt.Sprintf("impl=chan/cap=%d", capacity), func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				chanPipeline(capacity, benchItems)
			}
			perElem(b, cpu0)
		})
		for _, mode := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("impl=graph/rec=%s/cap=%d", mode, capacity), func(b *testing.B) {
				var rec *Recorder
				cpu0 := cpuTime()
				for b.Loop() {
					if mode == "on" {
						rec = NewRecorder(0)
					}
					graphPipeline(rec, capacity, benchItems)
				}
				perElem(b, cpu0)
				if rec != nil {
					events := 0
					for _, sn := range rec.snapshots() {
						for _, c := range sn.chunks {
							events += len(c)
						}
					}
					b.ReportMetric(float64(events)/benchItems, "events/elem")
					for _, st := range rec.Summary() {
						b.Logf("%s: %d%% busy, %d%% waiting, %d%% blocked", st.Stage,
							100*st.Busy/st.Wall, 100*st.Waiting/st.Wall, 100*st.Blocked/st.Wall)
					}
				}
			})
		}
	}
}

// perElem reports wall time and CPU time (user+system, all threads) per
// element. On a shared machine the CPU time is the steadier of the two.
func perElem(b *testing.B, cpu0 time.Duration) {
	n := float64(b.N * benchItems)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/elem")
	b.ReportMetric(float64(cpuTime()-cpu0)/n, "cpu-ns/elem")
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func graphPipeline(rec *Recorder, capacity, n int) {
	p := newPipeline(rec, capacity)
	p.src.Do(func(ctx context.Context) error { return count(ctx, p.srcOut, n) })
	p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
	sum := 0
	p.sink.Do(func(ctx context.Context) error {
		return drain(ctx, p.sinkIn, func(v int) error { sum += v; return nil })
	})
	if err := p.g.Run(context.Background()); err != nil {
		panic(err)
	}
}

// chanPipeline is the same pipeline on bare channels, every send and
// receive in a select with ctx.Done().
func chanPipeline(capacity, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, c := make(chan int, capacity), make(chan int, capacity)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(a)
		for i := range n {
			select {
			case a <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	wg.Go(func() {
		defer close(c)
		for {
			select {
			case v, ok := <-a:
				if !ok {
					return
				}
				select {
				case c <- v * v:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	})
	sum := 0
	wg.Go(func() {
		for {
			select {
			case v, ok := <-c:
				if !ok {
					return
				}
				sum += v
			case <-ctx.Done():
				return
			}
		}
	})
	wg.Wait()
}

// BenchmarkPorts is one Send and one Recv on a self-loop edge with room, from
// inside a running stage: the non-blocking fast path, free of scheduler noise.
// "span" adds a Begin/End pair and a counter Add.
func BenchmarkPorts(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		for _, span := range []bool{false, true} {
			b.Run(fmt.Sprintf("rec=%s/span=%v", mode, span), func(b *testing.B) {
				var rec *Recorder
				if mode == "on" {
					rec = NewRecorder(0)
				}
				g := New(rec)
				s := g.Stage("s")
				out, in := Connect[int](s, s, 1)
				s.Do(func(ctx context.Context) error {
					for b.Loop() {
						sp := rec.Begin(s, "x")
						if span {
							rec.Add(s, "n", 1)
							sp.End()
						}
						out.Send(ctx, 1)
						in.Recv(ctx)
					}
					return nil
				})
				if err := g.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
